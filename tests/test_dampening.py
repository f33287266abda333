"""Post-fusion dampening (memory-pipeline-v2.md "Post-Fusion Dampening"): each formula against
hand-computed values, the hub statistics on a real SQLite file, stage isolation, and the recall
integration (pool growth keeps the ranking exact)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane.config.pipeline import DampeningSettings
from memlane.recall.dampening import (
    Dampener,
    HubStats,
    content_tokens,
    gravity_factors,
    has_temporal_anchor,
    hub_factors,
    hub_threshold,
    max_gain,
    resolution_factors,
)
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.storage import hubs as hubs_sql

NO_BOOSTS = {"rehearsal_weight": 0.0, "recency_weight": 0.0}
ALL_OFF = {"gravity_enabled": False, "hub_enabled": False, "resolution_enabled": False}


def pipeline(dampening: dict | None = None, rerank: bool = False) -> dict:
    return {"pipeline_v2": {"dampening": dampening or {}, "reranker": {"enabled": rerank}}}


# ------------------------------------------------------------------------------ stage 1
def test_content_tokens_lowercase_without_stop_words() -> None:
    assert content_tokens("The Postgres database is on THE server, isn't it?") == {"postgres", "database", "server"}


def test_gravity_hand_computed() -> None:
    q = content_tokens("which database do we use")  # {"database", "use"}
    contents = [
        "We use Postgres.",  # overlap "use" -> 1
        "Coffee machine is broken.",  # no overlap, semantic, 0.8 > 0.3 -> 0.5
        "Coffee machine is broken.",  # no overlap but lexical (a BM25/hint match) -> 1
        "Coffee machine is broken.",  # no overlap, semantic, 0.3 is not above 0.3 -> 1
        "Coffee machine is broken.",
    ]  # no overlap, semantic, 0.31 -> 0.5
    scores = np.array([0.9, 0.8, 0.8, 0.3, 0.31])
    lexical = np.array([False, False, True, False, False])
    got = gravity_factors(q, contents, scores, lexical, 0.5)
    assert got.tolist() == [1.0, 0.5, 1.0, 1.0, 0.5]
    assert gravity_factors(q, contents, scores, lexical, 0.25).tolist() == [1.0, 0.25, 1.0, 1.0, 0.25]
    assert gravity_factors(set(), contents, scores, lexical, 0.5).tolist() == [1.0] * 5  # no query tokens


# ------------------------------------------------------------------------------ stage 2
def test_hub_threshold_is_the_value_at_floor_n_p() -> None:
    assert hub_threshold(np.arange(1, 11), 0.9) == 10.0  # sorted [1..10], index floor(9.0) = 9
    assert hub_threshold(np.array([5, 1, 3, 2, 4]), 0.5) == 3.0  # sorted [1..5], index 2
    assert hub_threshold(np.array([7, 7]), 1.0) == 7.0  # index clamped to n - 1
    assert hub_threshold(np.array([]), 0.9) == math.inf


def test_hub_factors_all_linked_entities_above_threshold() -> None:
    degrees = {"hub1": 50, "hub2": 40, "niche": 2}
    got = hub_factors([{"hub1", "hub2"}, {"hub1", "niche"}, set(), {"hub2"}, {"unknown"}], degrees, 10.0, 0.7)
    assert got.tolist() == [0.7, 1.0, 1.0, 0.7, 1.0]
    assert hub_factors([{"hub1"}], degrees, 50.0, 0.7).tolist() == [1.0]  # equal is not above


def _memories(c, n: int, prefix: str) -> list[str]:
    """ids of ``n`` new memories (the graph tables reference real memories)."""
    return [r.id for r in c.memories.remember_many([RememberInput(f"{prefix} filler {i}") for i in range(n)])]


def _mention(c, memory_id: str, *entities: str) -> None:
    """Link ``memory_id`` to each entity (created on first use) in the graph migration's tables."""
    at = "2025-01-01T00:00:00.000Z"

    def job(conn) -> None:
        for e in entities:
            conn.execute(
                "INSERT OR IGNORE INTO entities(id, name, canonical_name, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (e, e, e, at, at),
            )
            conn.execute(
                "INSERT INTO memory_entity_mentions(memory_id, entity_id, created_at) VALUES (?, ?, ?)",
                (memory_id, e, at),
            )

    c.db.write(job)


def test_hub_stats_on_sqlite(open_store) -> None:
    c = open_store()
    assert HubStats(c.db).factors(["a", "b"], 0.9, 0.7).tolist() == [1.0, 1.0]  # no mentions yet
    hubs, others = _memories(c, 12, "hub"), _memories(c, 9, "other")
    # entity "hub" mentioned 12 times, e1..e9 once each: counts sorted [1 x9, 12], P90 index 9 -> 12
    for m in hubs:
        _mention(c, m, "hub")
    for i, m in enumerate(others, 1):
        _mention(c, m, f"e{i}")
    assert c.db.read(hubs_sql.entity_degrees)["hub"] == 12
    stats = HubStats(c.db)
    assert stats.factors([hubs[0], others[0]], 0.9, 0.7).tolist() == [1.0, 1.0]  # 12 is not above 12
    # P50: sorted [1 x9, 12] index 5 -> 1: "hub" (12) is above, e1 (1) is not
    assert stats.factors([hubs[0], others[0], "no-such-memory"], 0.5, 0.7).tolist() == [0.7, 1.0, 1.0]
    _mention(c, hubs[0], "e1")  # now also links a non-hub entity (cached degrees: e1 still 1)
    assert stats.factors([hubs[0]], 0.5, 0.7).tolist() == [1.0]


def test_hub_stats_without_graph_table(open_store) -> None:
    c = open_store()
    c.db.write(lambda conn: conn.execute("DROP TABLE memory_entity_mentions"))
    assert not c.db.read(hubs_sql.has_mentions)
    assert HubStats(c.db).factors(["a"], 0.9, 0.7).tolist() == [1.0]


def test_hub_stats_cache_refreshes_after_ttl(open_store) -> None:
    c = open_store()
    a, b = _memories(c, 2, "ttl")
    now = [0.0]
    stats = HubStats(c.db, clock=lambda: now[0])
    _mention(c, a, "x")
    assert stats.degrees()[0] == {"x": 1}
    _mention(c, b, "x")
    assert stats.degrees()[0] == {"x": 1}  # cached
    now[0] = 61.0
    assert stats.degrees()[0] == {"x": 2}


# ------------------------------------------------------------------------------ stage 3
@pytest.mark.parametrize(
    ("text", "anchored"),
    [
        ("Released on 2025-03-14 after the freeze", True),
        ("We moved the launch to September", True),
        ("Planned for May 2024", True),
        ("due 3 May", True),
        ("You may want to restart the server first", False),
        ("version 2025-3-1 is not an ISO date", False),
        ("Marching band practice", False),
    ],
)
def test_temporal_anchor(text: str, anchored: bool) -> None:
    assert has_temporal_anchor(text) is anchored


def test_resolution_hand_computed() -> None:
    long = "x" * 50
    types = ["constraint", "decision", "fact", "fact", "constraint", "fact"]
    contents = [
        long,
        long,
        "Deploy freeze starts on 2025-12-20 for everyone ok",
        long,
        "short constraint",
        "short 2025-01-01",
    ]
    assert resolution_factors(types, contents, 1.2).tolist() == pytest.approx([1.2, 1.2, 1.1, 1.0, 1.0, 1.0])
    assert resolution_factors(types, contents, 1.5).tolist() == pytest.approx([1.5, 1.5, 1.25, 1.0, 1.0, 1.0])
    assert len("x" * 49) < 50 and resolution_factors(["decision"], ["x" * 49], 1.2).tolist() == [1.0]


def test_max_gain() -> None:
    assert max_gain(DampeningSettings()) == 1.2
    assert max_gain(DampeningSettings(resolution_enabled=False)) == 1.0
    assert max_gain(DampeningSettings(resolution_boost=0.8)) == 1.0


# ------------------------------------------------------------------------------ all three
def test_dampener_multiplies_the_enabled_stages(open_store) -> None:
    c = open_store()
    r = c.memories.remember_many(
        [
            RememberInput("The payment service must never log card numbers in any environment.", type="constraint"),
            RememberInput("Coffee beans arrive every week from the roaster downtown, usually fresh."),
        ]
    )
    mems = [c.memories.get(x.id) for x in r]
    for i, m in enumerate(_memories(c, 9, "other")):
        _mention(c, m, f"e{i}")
    for m in _memories(c, 5, "hubby"):
        _mention(c, m, "hub")
    _mention(c, mems[0].id, "hub")  # counts sorted [1 x9, 6]; P50: index 5 -> threshold 1
    scores = np.array([0.8, 0.8])
    lexical = np.array([False, False])
    cfg = DampeningSettings(hub_percentile=0.5, hub_enabled=True)
    got = Dampener(c.db).factors("payment card logging", mems, scores, lexical, cfg)
    # memory 0: overlap ("payment", "card") -> 1; hub-only (6 > 1) -> 0.7; constraint >= 50 chars -> 1.2
    # memory 1: no overlap, semantic, 0.8 > 0.3 -> 0.5; no entities; no anchor -> 1
    assert got.tolist() == pytest.approx([0.7 * 1.2, 0.5])
    off = DampeningSettings(**ALL_OFF)
    assert Dampener(c.db).factors("payment", mems, scores, lexical, off).tolist() == [1.0, 1.0]


def test_a_failing_stage_is_skipped(open_store) -> None:
    c = open_store()
    m = c.memories.get(
        c.memories.remember(
            RememberInput("Decision: we standardise on Postgres for all services going forward.", type="decision")
        ).id
    )

    class BrokenHubs(HubStats):
        def factors(self, *a, **k):
            raise RuntimeError("graph tables unreadable")

    d = Dampener(c.db, hub_stats=BrokenHubs(c.db))
    got = d.factors("postgres", [m], np.array([0.9]), np.array([True]), DampeningSettings())
    assert got.tolist() == pytest.approx([1.2])  # hub skipped, resolution still applied


# ------------------------------------------------------------------------------ in recall
def test_recall_resolution_reorders_and_flags_toggle_at_call_time(open_store) -> None:
    c = open_store(recall=NO_BOOSTS, memory=pipeline(ALL_OFF))
    fact = c.memories.remember(RememberInput("The staging database runs on a small shared host machine."))
    dec = c.memories.remember(
        RememberInput("The staging database runs on a large dedicated host box.", type="decision")
    )
    q = RecallQuery("staging database host", touch=False)
    base = c.recall.recall(q)
    assert {h.memory.id for h in base.hits} == {dec.id, fact.id}
    base_score = {h.memory.id: h.score for h in base.hits}
    c.settings.memory.pipeline_v2 = c.settings.memory.pipeline_v2.model_copy(
        update={"dampening": DampeningSettings(**{**ALL_OFF, "resolution_enabled": True})}
    )
    res = c.recall.recall(q)
    assert res.hits[0].memory.id == dec.id
    assert res.hits[0].score == pytest.approx(base_score[dec.id] * 1.2)
    assert {h.memory.id: h.score for h in res.hits}[fact.id] == pytest.approx(base_score[fact.id])


def test_recall_pool_grows_until_exact(open_store) -> None:
    """Equal BM25 scores (same length, same match): ties go to the newest, so the oldest memory
    ranks last, far below the first pool; it alone is not a hub memory and must come first."""
    c = open_store(
        recall=NO_BOOSTS, memory=pipeline({"gravity_enabled": False, "resolution_enabled": False, "hub_enabled": True})
    )
    res = c.memories.remember_many([RememberInput(f"kiwi note n{i:02d}") for i in range(40)])
    ids = [r.id for r in res]
    for i in range(1, 40):  # all but the oldest link only the hub entity (40 < 50 BM25 candidates)
        _mention(c, ids[i], "hub")
    for i, m in enumerate(_memories(c, 30, "other")):
        _mention(c, m, f"e{i}")
    q = RecallQuery("kiwi", limit=5, touch=False)
    got = c.recall.recall(q)
    # brute force: every candidate's score x its factor, sorted
    c.settings.memory.pipeline_v2 = c.settings.memory.pipeline_v2.model_copy(
        update={"dampening": DampeningSettings(**ALL_OFF)}
    )
    plain = c.recall.recall(RecallQuery("kiwi", limit=40, touch=False))
    assert len(plain.hits) == 40
    assert plain.hits[-1].memory.id == ids[0]
    expected = sorted(
        ((h.score * (1.0 if h.memory.id == ids[0] else 0.7), h.memory.id) for h in plain.hits), key=lambda t: -t[0]
    )[:5]
    assert [h.memory.id for h in got.hits] == [i for _, i in expected]
    assert got.hits[0].memory.id == ids[0]
    assert [h.score for h in got.hits] == pytest.approx([s for s, _ in expected])


def test_dampener_with_links_read_ahead_equals_reading_them(open_store) -> None:
    c = open_store()
    mems = [c.memories.get(i) for i in _memories(c, 6, "linked")]
    for m in mems[:4]:
        _mention(c, m.id, "hub")
    _mention(c, mems[4].id, "niche")
    cfg = DampeningSettings(hub_percentile=0.0, hub_enabled=True)
    scores, lexical = np.full(6, 0.8), np.zeros(6, dtype=bool)
    links = c.db.read(lambda conn: hubs_sql.entities_of(conn, [m.id for m in mems]))
    a = Dampener(c.db).factors("linked filler", mems, scores, lexical, cfg)
    b = Dampener(c.db).factors("linked filler", mems, scores, lexical, cfg, links=links)
    assert a.tolist() == b.tolist() and 0.7 in a.tolist()


def test_content_features_match_the_stage_functions() -> None:
    from memlane.recall.dampening import ContentFeatures

    feats = ContentFeatures(max_entries=3)
    texts = [
        "Released on 2025-03-14 after the freeze, which took a long time to plan.",
        "short May 3",
        "You may want to restart the server first before the long deploy finishes tonight.",
        "Über café naïve tokens_with_underscores and CAPS, and a date of 3 May in the middle.",
    ]
    for _ in range(2):  # the second round is partly cached, partly re-computed (max 3 entries)
        for t in texts:
            long, anchored = feats.get(t)
            assert long == (len(t) >= 50) and anchored == (long and has_temporal_anchor(t))


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("abcAB Éé_-.ßİ1²日本 \n")), max_size=40),
    st.text(alphabet=st.sampled_from(list("abcAB Éé_-.ßİ1²日本 \n")), max_size=40),
)
def test_gravity_with_cached_tokens_equals_the_stage_function(query: str, content: str) -> None:
    """Dampener's stage 1 (cached token sets) == gravity_factors (tokenises every content)."""
    from memlane.recall.dampening import ContentFeatures

    feats = ContentFeatures(max_entries=2)
    assert feats.tokens(content) == content_tokens(content) == feats.tokens(content)
    cfg = DampeningSettings(gravity_enabled=True, hub_enabled=False, resolution_enabled=False)
    mems = [SimpleNamespace(id=str(i), type="fact", content=t) for i, t in enumerate([content, query, content + " x"])]
    scores, lexical = np.full(3, 0.8), np.zeros(3, dtype=bool)
    want = gravity_factors(content_tokens(query), [m.content for m in mems], scores, lexical, cfg.gravity_penalty)
    assert Dampener(None).factors(query, mems, scores, lexical, cfg).tolist() == want.tolist()


def test_content_tokens_cache_is_bounded() -> None:
    from memlane.recall.dampening import ContentFeatures

    feats = ContentFeatures(max_entries=3)
    for i in range(10):
        assert feats.tokens(f"the catalog {i} of cats") == {"catalog", str(i), "cats"}
        assert len(feats._tokens) <= 3


def test_recall_with_rows_read_ahead_equals_reading_them_in_the_stage(open_store) -> None:
    c = open_store(recall=NO_BOOSTS, memory=pipeline({"hub_enabled": True, "hub_percentile": 0.0}, rerank=True))
    words = ["staging", "database", "host", "deploy", "review", "schema", "release", "branch", "coffee"]
    ids = [
        r.id
        for r in c.memories.remember_many(
            [
                RememberInput(
                    " ".join(words[(i + k) % len(words)] for k in range(1 + i % 5)) + f" note {i} " + "x" * (i % 60),
                    type="decision" if i % 7 == 0 else "fact",
                )
                for i in range(80)
            ]
        )
    ]
    for i, m in enumerate(ids):
        _mention(c, m, "hub" if i % 2 else f"e{i % 5}")
    stages = c.recall.stages
    for query in ("staging database", "deploy review", "coffee", "release branch schema"):
        q = RecallQuery(query, limit=5, touch=False)
        ahead = [(h.memory.id, h.score) for h in c.recall.recall(q).hits]
        real = stages.prefetch_rows
        stages.prefetch_rows = lambda seqs, links=False: None  # no rows read ahead: the stages and graph read them
        try:
            inline = [(h.memory.id, h.score) for h in c.recall.recall(q).hits]
        finally:
            stages.prefetch_rows = real
        assert ahead == inline and ahead
