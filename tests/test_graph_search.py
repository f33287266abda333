"""Graph-augmented search (memory-pipeline-v2.md "Graph-Augmented Search"): the one-hop boost
changes the ranking of linked memories, respects its deadline (a zero budget or a clock that
jumps past it gives the unboosted ranking: no wall-clock thresholds), is additive only, and
never breaks recall. Real SQLite files, BM25-only stores."""

from __future__ import annotations

from typing import Any

import pytest

from memlane.graph import persist_extraction
from memlane.graph.search import GraphBooster, apply_boost, graph_linked_seqs
from memlane.services.inputs import RecallQuery, RememberInput

AT = "2026-01-01T00:00:00.000Z"
QUERY = "Postgres tuning checklist"

#: Only the graph boost moves scores: no recency/rehearsal boosts, no dampening or reranking; the
#: boost at the seed's weight (0.15; memlane ships it at 0, docs/benchmarks.md "Graph boost").
QUIET = {
    "recall": {"recency_weight": 0.0, "rehearsal_weight": 0.0},
    "memory": {
        "pipelineV2": {
            "reranker": {"enabled": False},
            "graph": {"boost_weight": 0.15},
            "dampening": {"gravity_enabled": False, "hub_enabled": False, "resolution_enabled": False},
        }
    },
}


def set_graph(c, **values: Any) -> None:
    """Swap in graph settings the way POST /api/config applies hot keys (a validated copy)."""
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"graph": p.graph.model_copy(update=values)})


def seed_graph(c) -> dict[str, str]:
    """Memories: ``plain`` matches the query best by BM25 and names no entity; ``linked`` matches
    less well and mentions Billing, one hop from Postgres; ``other`` mentions an unrelated entity."""
    ids = {
        "plain": c.memories.remember(
            RememberInput(content="postgres tuning checklist: work mem and shared buffers")
        ).id,
        "linked": c.memories.remember(RememberInput(content="Billing nightly job tuning checklist")).id,
        "other": c.memories.remember(RememberInput(content="Grafana dashboard tuning checklist")).id,
        "source": c.memories.remember(RememberInput(content="the billing service stores invoices in a database")).id,
    }
    c.db.write(
        lambda conn: persist_extraction(
            conn,
            memory_id=ids["source"],
            entities=[],
            at=AT,
            relations=[{"source": "Billing", "target": "Postgres", "relation": "stores data in", "confidence": 0.9}],
        )
    )
    return ids


def ranking(c, query: str = QUERY) -> list[tuple[str, float]]:
    res = c.recall.recall(RecallQuery(query=query, limit=10, touch=False))
    return [(h.memory.id, h.score) for h in res.hits]


@pytest.fixture
def store(open_store):
    c = open_store(**QUIET)
    return c, seed_graph(c)


def test_boost_lifts_one_hop_linked_memories_by_the_weight(store) -> None:
    c, ids = store
    boosted = dict(ranking(c))
    set_graph(c, enabled=False)
    plain = ranking(c)
    base = dict(plain)
    assert plain[0][0] == ids["plain"]  # BM25 alone: the plain memory first
    assert base[ids["linked"]] < base[ids["plain"]]
    assert boosted[ids["linked"]] == pytest.approx(base[ids["linked"]] + 0.15)
    assert boosted[ids["plain"]] == pytest.approx(base[ids["plain"]])  # mentions no entity
    assert boosted[ids["other"]] == pytest.approx(base[ids["other"]])  # unrelated entity


def test_boost_changes_the_ranking(open_store) -> None:
    c = open_store(**QUIET)
    ids = seed_graph(c)
    set_graph(c, boost_weight=1.0)
    order = [m for m, _ in ranking(c)]
    assert order.index(ids["linked"]) < order.index(ids["plain"])
    set_graph(c, enabled=False)
    order = [m for m, _ in ranking(c)]
    assert order.index(ids["plain"]) < order.index(ids["linked"])


def test_boost_weight_zero_is_unboosted(store) -> None:
    c, ids = store
    set_graph(c, boost_weight=0.0)
    boosted = ranking(c)
    set_graph(c, enabled=False)
    assert boosted == ranking(c)


def merged_for(c) -> dict[int, tuple[float, Any]]:
    seqs = c.db.read(lambda conn: [r[0] for r in conn.execute("SELECT seq FROM memories ORDER BY seq")])
    return {s: (0.5, None) for s in seqs}


def test_zero_deadline_returns_the_merged_pool_unchanged(store) -> None:
    c, _ = store
    booster = GraphBooster(c.db, lambda: c.settings.memory.pipeline_v2.graph)
    merged = merged_for(c)
    assert booster.boost(QUERY, merged, timeout_ms=0) == merged
    assert booster.telemetry()["timeouts"] == 1
    assert booster.boost(QUERY, merged) != merged  # the default budget finds the link


def test_a_clock_that_jumps_past_the_deadline_after_step_one_gives_no_boost(store) -> None:
    c, _ = store
    calls = []

    def blocking_clock() -> float:  # as if step 1 had blocked for an hour
        calls.append(1)
        return 0.0 if len(calls) <= 2 else 3600.0

    booster = GraphBooster(c.db, lambda: c.settings.memory.pipeline_v2.graph, clock=blocking_clock)
    merged = merged_for(c)
    assert booster.boost(QUERY, merged) == merged
    assert booster.telemetry() == {"calls": 1, "boosted": 0, "timeouts": 1, "errors": 0}


def test_timeout_after_the_last_step_keeps_what_was_found(store) -> None:
    c, ids = store
    ticks = iter([0.0, 0.0, 0.0, 99.0])  # start, after step 1, after step 2: in time; after 3: late
    found = c.db.read(
        lambda conn: graph_linked_seqs(conn, QUERY, list(merged_for(c)), deadline=1.0, clock=lambda: next(ticks))
    )
    assert found.timed_out and len(found.seqs) == 2  # linked + source (both mention Billing/Postgres)


def test_a_query_without_known_entities_stops_after_one_lookup(store) -> None:
    c, _ = store
    found = c.db.read(
        lambda conn: graph_linked_seqs(conn, "nothing known here", list(merged_for(c)), deadline=float("inf"))
    )
    assert found.entity_ids == [] and found.neighbour_ids == [] and found.seqs == set()


def test_errors_give_the_unboosted_ranking(store) -> None:
    c, _ = store
    before = ranking(c)
    c.db.write(lambda conn: conn.execute("DROP TABLE relations"))
    after = ranking(c)
    assert [m for m, _ in after] and c.recall.graph_boost.telemetry()["errors"] == 1
    set_graph(c, enabled=False)
    assert after == ranking(c) and after != before

    def broken_settings() -> Any:
        raise RuntimeError("settings exploded")

    merged = merged_for(c)
    assert GraphBooster(c.db, broken_settings).boost(QUERY, merged) == merged


def test_deleted_memories_are_not_boosted(store) -> None:
    c, ids = store
    c.memories.delete(ids["linked"])
    found = c.db.read(lambda conn: graph_linked_seqs(conn, QUERY, list(merged_for(c)), deadline=float("inf")))
    linked_seq = c.memories.get(ids["linked"]).seq
    assert linked_seq not in found.seqs


def test_apply_boost_is_additive_and_copies() -> None:
    merged = {1: (0.2, "a"), 2: (0.4, "b")}
    out = apply_boost(merged, {1, 3}, 0.15)
    assert out == {1: (pytest.approx(0.35), "a"), 2: (0.4, "b")} and merged[1] == (0.2, "a")
    assert apply_boost(merged, set(), 0.15) is merged


def test_steps_one_and_two_ahead_give_the_same_boost(store) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from memlane.graph.search import graph_entities

    c, _ = store
    booster = GraphBooster(c.db, lambda: c.settings.memory.pipeline_v2.graph)
    merged = merged_for(c)
    with ThreadPoolExecutor(1) as pool:
        ahead = booster.boost(QUERY, merged, prepared=booster.submit(pool, QUERY))
        none = booster.boost("nothing known here", merged, prepared=booster.submit(pool, "nothing known here"))
    assert ahead == booster.boost(QUERY, merged) != merged
    assert none == merged
    ents = c.db.read(lambda conn: graph_entities(conn, QUERY, deadline=float("inf")))
    assert ents.entity_ids and ents.seqs == set()
    late = c.db.read(lambda conn: graph_linked_seqs(conn, QUERY, list(merged), deadline=0.0, entities=ents))
    assert late.timed_out and late.seqs == set()  # the deadline still bounds step 3
    set_graph(c, enabled=False)
    with ThreadPoolExecutor(1) as pool:
        assert booster.submit(pool, QUERY) is None


def test_step_three_from_links_read_ahead_equals_the_sql(store) -> None:
    from memlane.graph.search import graph_entities, linked_from
    from memlane.recall.stages import read_candidates

    c, ids = store
    c.memories.delete(ids["source"])  # deleted: never boosted, by either path
    merged = merged_for(c)
    ents = c.db.read(lambda conn: graph_entities(conn, QUERY, deadline=float("inf")))
    ahead = c.db.read(lambda conn: read_candidates(conn, list(merged), True))
    fast = linked_from(ents, list(merged), ahead.seq_links(), deadline=float("inf"))
    sql = c.db.read(lambda conn: graph_linked_seqs(conn, QUERY, list(merged), deadline=float("inf")))
    assert fast.seqs == sql.seqs and len(fast.seqs) == 1
    booster = GraphBooster(c.db, lambda: c.settings.memory.pipeline_v2.graph)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        assert booster.boost(
            QUERY, merged, prepared=booster.submit(pool, QUERY), links=ahead.seq_links()
        ) == booster.boost(QUERY, merged)
