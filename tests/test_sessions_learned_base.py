"""Relevance starts with the shipped learned ranker (``sessions.relevance_ranker: learned``), the
base the per-user predictor starts from (issue 39, item 3; docs/predictor.md "Starting from the
shipped base"): the predictor's first-stage signals are the base's, the baseline it is fused
with and earns alpha against is the heuristic recall. Real SQLite store, the real embedding
model, the shipped LightGBM model, real recall and relevance pools; the untrained predictor's
scores come from its prior over the logged signals, as the daemon computes them.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks.predictor_locomo import PredictorBenchConfig, ranker_model_for
from memlane.config import SessionSettings
from memlane.config.predictor import PredictorSettings
from memlane.predictor.prior import untrained_scores
from memlane.ranker.model import SHIPPED_MODEL, header_for, read_header
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.services.predictor_service import PredictorService
from memlane.sessions import ranking
from memlane.sessions.ranking import baseline_score

NOW = "2023-06-01T12:00:00.000Z"
NOW_EPOCH = datetime(2023, 6, 1, 12, tzinfo=UTC).timestamp()
TURNS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was powerful",
    "Melanie: that sounds amazing, I painted a sunrise over the lake last week",
    "Caroline: I am researching adoption agencies for my future family",
    "Melanie: my kids loved the pottery workshop we did on Saturday",
    "Caroline: the transgender stories at the meetup were so inspiring",
    "Melanie: we went camping in the mountains in June",
    "Caroline: I want to become a counselor for trans youth",
    "Melanie: playing the violin is my favourite way to relax",
]
#: The learned stage reorders pools of at least 50 candidates (memlane.ranker.stage.MIN_POOL).
FILLER = [
    f"{who}: {what} on day {i}"
    for i in range(14)
    for who, what in (
        ("Caroline", "groceries and the weather were fine"),
        ("Melanie", "the kids had school and a nap"),
        ("Caroline", "I read a book about gardens"),
        ("Melanie", "we cooked pasta for dinner"),
    )
]
QUESTIONS = ["What did Melanie paint?", "What is Caroline researching?", "What instrument does Melanie play?"]


@pytest.fixture
def chat(vstore):
    turns = TURNS + FILLER
    vstore.memories.remember_many(
        [
            RememberInput(
                content=t,
                created_at=f"2023-05-{1 + i // 10:02d}T10:00:{i % 10:02d}.000Z",
                context=turns[i - 1] if i else None,
            )
            for i, t in enumerate(turns)
        ]
    )
    return vstore


def predictor_inputs(c, question: str, ranker: str) -> list[dict]:
    """A relevance pool's candidates as the predictor receives them (raw signals, baseline order)."""
    s = SessionSettings(candidate_pool_size=70, similarity_top=50, effective_top=20, relevance_ranker=ranker)
    cv = c.sessions.contexts.get(question)
    pool, legs = ranking.relevance_pool(
        c.recall, c.memories.index, context=question, project=None, cv=cv, s=s, now=NOW, now_epoch=NOW_EPOCH
    )
    members = ranking.pool_members(pool, legs)
    svc = PredictorService(c.db, c.memories.index, None, PredictorSettings())
    try:
        raw = svc.candidate_signals(members, NOW_EPOCH, None)
    finally:
        svc.close()
    return [{"id": m.memory_id, **raw[m.memory_id]} for m in members]


def test_baseline_score_is_the_logistic_of_the_learned_score() -> None:
    assert baseline_score(0.42, None) == 0.42  # heuristic: the recall score itself
    assert baseline_score(0.42, 0.0) == 0.5
    assert baseline_score(0.0, 2.0) == pytest.approx(1 / (1 + math.exp(-2.0)))
    values = [baseline_score(0.0, x) for x in (-1e9, -5.0, -0.1, 0.3, 7.0, 1e9)]
    assert values == sorted(values) and all(0.0 <= v <= 1.0 for v in values)
    assert baseline_score(0.0, -30.0) > 0.0  # every hit stays above the effectiveScore path (score 0)


def recall_of(c, q: str, ranker: str, limit: int = 50):
    return c.recall.recall(
        RecallQuery(
            query=q, limit=limit, include_global=True, exclude_superseded=True, now=NOW, touch=False, ranker=ranker
        )
    )


def test_learned_hits_carry_the_heuristic_score_and_rank(chat) -> None:
    for q in QUESTIONS:
        learned, heuristic = recall_of(chat, q, "learned"), recall_of(chat, q, "heuristic", limit=100)
        assert learned.ranker == "learned"
        assert all(h.heuristic_rank is not None and h.heuristic_score is not None for h in learned.hits)
        for h in learned.hits:  # the heuristic's own position and score of the same memory
            assert heuristic.hits[h.heuristic_rank - 1].memory.id == h.memory.id
            assert heuristic.hits[h.heuristic_rank - 1].score == pytest.approx(h.heuristic_score)
        assert all(h.heuristic_rank is None and h.heuristic_score is None for h in heuristic.hits)


def test_a_learned_relevance_start_is_fused_with_the_heuristic_and_the_predictor_starts_from_the_base(chat) -> None:
    for q in QUESTIONS:
        learned = recall_of(chat, q, "learned")
        heuristic = recall_of(chat, q, "heuristic")
        assert [h.memory.id for h in learned.hits] != [h.memory.id for h in heuristic.hits]

        rows = predictor_inputs(chat, q, "learned")
        hits = rows[: len(learned.hits)]
        # The pool holds the base's top hits in the heuristic's order: the baseline the
        # predictor is fused with and earns alpha against is the heuristic recall.
        heuristic_rank = {h.memory.id: h.heuristic_rank for h in learned.hits}
        assert {r["id"] for r in hits} == set(heuristic_rank)
        assert [heuristic_rank[r["id"]] for r in hits] == sorted(heuristic_rank.values())
        in_both = [r["id"] for r in hits if r["id"] in {h.memory.id for h in heuristic.hits}]
        assert in_both == [h.memory.id for h in heuristic.hits if h.memory.id in set(in_both)]
        assert len(rows) > len(hits)

        # The predictor's first-stage signals are the base's: its logistic score and 0-based rank
        learned_rank = {h.memory.id: (h.rank_score, r) for r, h in enumerate(learned.hits)}
        for r in hits:
            score, rank = learned_rank[r["id"]]
            assert r["baseline_score"] == pytest.approx(1 / (1 + math.exp(-score)))
            assert r["baseline_rank"] == rank
        assert all(r["baseline_score"] == 0.0 for r in rows[len(hits) :])  # the effectiveScore path
        assert [r["baseline_rank"] for r in rows[len(hits) :]] == list(range(len(hits), len(rows)))

        # The per-user predictor starts from the base: untrained, its prior over the logged
        # signals ranks the hits as the base does (equal model scores, e.g. of look-alike
        # filler turns, keep the base's order), then the effectiveScore path.
        prior = untrained_scores(rows)
        by_prior = [r["id"] for _, r in sorted(zip(prior, rows), key=lambda t: -t[0])]
        assert by_prior[: len(hits)] == [h.memory.id for h in learned.hits]
        assert by_prior[len(hits) :] == [r["id"] for r in rows[len(hits) :]]

        rows_h = predictor_inputs(chat, q, "heuristic")  # the heuristic start: one ranking for both
        heuristic_score = {h.memory.id: h.score for h in heuristic.hits}
        assert [r["id"] for r in rows_h[: len(heuristic.hits)]] == [h.memory.id for h in heuristic.hits]
        assert [r["baseline_score"] for r in rows_h[: len(heuristic.hits)]] == pytest.approx(
            [heuristic_score[r["id"]] for r in rows_h[: len(heuristic.hits)]]
        )
        assert [r["baseline_rank"] for r in rows_h] == list(range(len(rows_h)))


def test_a_learned_start_serves_and_records_the_heuristic_order_until_the_predictor_earns_influence(chat) -> None:
    """Without influence (no predictor here: alpha is 1) the start serves the heuristic's order
    and records the heuristic's ranks as the baseline ranks session-end compares against."""
    from memlane.sessions.inputs import StartInput
    from memlane.sessions.service import SessionService
    from memlane.storage import sessions as sess_sql

    s = SessionSettings(candidate_pool_size=70, similarity_top=50, effective_top=20, relevance_ranker="learned")
    svc = SessionService(chat.memories, chat.recall, s)
    try:
        for i, q in enumerate(QUESTIONS):
            key = f"learned-start-{i}"
            svc.start(StartInput(session_key=key, context=q, ranking="relevance", now=NOW))
            rows = chat.db.read(lambda conn: sess_sql.session_memories(conn, key))
            by_baseline = [r.memory_id for r in sorted(rows, key=lambda r: r.baseline_rank)]
            learned = recall_of(chat, q, "learned")
            heuristic_rank = {h.memory.id: h.heuristic_rank for h in learned.hits}
            n = len(learned.hits)
            assert [heuristic_rank[m] for m in by_baseline[:n]] == sorted(heuristic_rank.values())
            assert by_baseline[:n] != [h.memory.id for h in learned.hits]
            injected = [r.memory_id for r in sorted(rows, key=lambda r: r.rank) if r.was_injected]
            assert injected and set(injected) <= set(by_baseline[:n])
    finally:
        svc.close()


def test_a_learned_start_without_the_models_features_keeps_the_heuristic_order(chat) -> None:
    chat.settings.recall.ranker_model = "/nonexistent/model.lgb.gz"  # refused: the heuristic answers
    q = QUESTIONS[0]
    heuristic = chat.recall.recall(
        RecallQuery(
            query=q, limit=50, include_global=True, exclude_superseded=True, now=NOW, touch=False, ranker="heuristic"
        )
    )
    rows = predictor_inputs(chat, q, "learned")
    heuristic_score = {h.memory.id: h.score for h in heuristic.hits}
    assert {r["id"] for r in rows[: len(heuristic.hits)]} == set(heuristic_score)
    assert [r["baseline_score"] for r in rows[: len(heuristic.hits)]] == pytest.approx(
        [heuristic_score[r["id"]] for r in rows[: len(heuristic.hits)]]
    )


def test_the_bench_refuses_a_base_trained_on_the_conversation_under_test(tmp_path: Path) -> None:
    from memlane.ranker.model import save

    assert ranker_model_for(PredictorBenchConfig(), "conv-26") == ""
    cfg = PredictorBenchConfig(ranker_models=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="ranker-without-conv-26"):
        ranker_model_for(cfg, "conv-26")
    shipped = read_header(SHIPPED_MODEL)
    assert "conv-26" in shipped["trained_on"]
    import gzip

    import lightgbm as lgb

    # the shipped booster saved under other headers
    booster = lgb.Booster(model_str=gzip.decompress(SHIPPED_MODEL.read_bytes()).decode("utf-8").split("\n", 1)[1])
    for trained_on, ok in ((["conv-30", "conv-41"], True), (["conv-26", "conv-30"], False)):
        save(
            tmp_path / "ranker-without-conv-26.lgb.gz",
            booster,
            header_for(trained_on=trained_on, embedding_model=shipped["embedding_model"], params={}),
        )
        if ok:
            assert ranker_model_for(cfg, "conv-26") == str(tmp_path / "ranker-without-conv-26.lgb.gz")
        else:
            with pytest.raises(ValueError, match="not a base for conv-26"):
                ranker_model_for(cfg, "conv-26")


def test_prompt_submit_recall_is_ordered_by_the_same_learned_ranker(chat) -> None:
    """A prompt's recall (the memories it matched, in order) is the learned ranker's: the per-user
    predictor's base at session-start and prompt recall are one model."""
    from memlane.sessions.inputs import PromptInput
    from memlane.sessions.service import SessionService
    from memlane.storage import sessions as sess_sql

    s = SessionSettings(prompt_min_score=0.0, prompt_limit=5)
    svc = SessionService(chat.memories, chat.recall, s)
    differs = False
    try:
        for i, q in enumerate(QUESTIONS):
            key = f"prompt-{i}"
            svc.prompt(PromptInput(session_key=key, prompt=q, now=NOW))
            got = [
                r.memory_id
                for r in sorted(chat.db.read(lambda conn: sess_sql.session_memories(conn, key)), key=lambda r: r.rank)
            ]
            args = dict(
                query=q, limit=10, include_global=True, exclude_superseded=True, now=NOW, touch=False, min_score=0.0
            )
            learned = chat.recall.recall(RecallQuery(**args, ranker="learned"))
            heuristic = chat.recall.recall(RecallQuery(**args, ranker="heuristic"))
            assert learned.ranker == "learned"
            assert got == [h.memory.id for h in learned.hits]
            differs |= got != [h.memory.id for h in heuristic.hits]
    finally:
        svc.close()
    assert differs  # the two rankers disagree here, so the check above tells them apart
