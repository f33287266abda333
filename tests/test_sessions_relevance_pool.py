"""``ranking="relevance"`` session-start pools: the seed's two pre-filter paths.

predictive-memory-scorer.md "Candidate Pre-Filtering": the pool is the union of a relevance
path and an effectiveScore path. A relevance pool takes the hybrid-recall hits of the context
first (the baseline's own ranking, unchanged) and then the project's top memories by
effectiveScore that the recall did not return, ranked after the hits with baseline score 0
and no recall legs. Real SQLite store, real local embedder, real recall; the expected
effectiveScore path is computed independently from the inputs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from memlane.config import SessionSettings
from memlane.config.predictor import PredictorSettings
from memlane.predictor.dataset import build_session
from memlane.predictor.features import FEATURE_INDEX
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.services.predictor_service import PredictorService
from memlane.sessions import ranking
from memlane.sessions.inputs import StartInput
from memlane.sessions.service import SessionService
from memlane.storage import sessions as sess_sql

NOW = "2026-03-01T12:00:00.000Z"
NOW_DT = datetime(2026, 3, 1, 12, tzinfo=UTC)
NOW_EPOCH = NOW_DT.timestamp()

DEPLOY = [
    "The deploy script pushes the Docker image to the staging registry.",
    "Deploys go out with make release to fly.io after the smoke tests pass.",
    "Rollback of a bad deploy: fly releases rollback to the previous image.",
    "The deploy pipeline waits for the database migrations before switching traffic.",
    "Staging deploys run on every merge to main; production deploys are tagged.",
    "The deploy job needs the FLY_API_TOKEN secret from the CI settings.",
]
OTHER = [  # unrelated to the context, recent and important: the effectiveScore path's material
    ("The user prefers small commits with imperative subject lines.", 0.95, 0.5),
    ("Type hints are required on every public function.", 0.9, 1.0),
    ("Write the failing test first, then the fix.", 0.85, 1.5),
    ("The office coffee machine is descaled on Fridays.", 0.8, 2.0),
    ("Quarterly planning happens in the second week of January.", 0.75, 3.0),
    ("Plan the change in a short list before editing code.", 0.7, 4.0),
    ("An old note about the team offsite in Lisbon.", 0.3, 60.0),
]


def ago(days: float) -> str:
    return (NOW_DT - timedelta(days=days)).isoformat().replace("+00:00", "Z")


def fill(c) -> dict[str, tuple[float, float]]:
    """Remember the corpus; returns ``{id: (importance, age_days)}``."""
    items = [(t, 0.5, 5.0 + i) for i, t in enumerate(DEPLOY)] + OTHER
    res = c.memories.remember_many(
        [RememberInput(content=t, importance=imp, project="web", created_at=ago(d)) for t, imp, d in items]
    )
    return {r.id: (imp, d) for r, (_, imp, d) in zip(res, items)}


def pool_rows(c, key: str) -> list[sess_sql.SessionMemory]:
    return sorted(c.db.read(lambda conn: sess_sql.session_memories(conn, key)), key=lambda r: r.baseline_rank)


def test_relevance_pool_appends_the_effective_path_after_the_recall_hits(open_store) -> None:
    c = open_store(embedding="local")
    info = fill(c)
    context = "Fixing the deploy pipeline and the staging registry push"
    s = SessionSettings(candidate_pool_size=9, similarity_top=4, effective_top=6, min_effective=0.1)
    svc = SessionService(c.memories, c.recall, s)
    try:
        svc.start(StartInput("rel-1", project="web", context=context, ranking="relevance", now=NOW))
    finally:
        svc.close()
    got = pool_rows(c, "rel-1")
    hits = c.recall.recall(
        RecallQuery(
            query=context, limit=4, project="web", include_global=True, exclude_superseded=True, now=NOW, touch=False
        )
    ).hits
    hit_ids = [h.memory.id for h in hits]
    assert len(hit_ids) == 4
    # the recall's hits first, in the recall's order (the baseline ranking of the top is the recall's)
    assert [r.memory_id for r in got[:4]] == hit_ids
    # then the top effective_top by importance x 0.95^days that the recall missed, best first,
    # cut at candidate_pool_size
    eff = {m: imp * 0.95**d for m, (imp, d) in info.items()}
    top = sorted((m for m in eff if eff[m] >= 0.1), key=lambda m: -eff[m])[:6]
    expected_tail = [m for m in top if m not in hit_ids][: 9 - 4]
    assert len(expected_tail) >= 3
    assert [r.memory_id for r in got[4:]] == expected_tail
    assert [r.baseline_rank for r in got] == list(range(1, len(got) + 1))
    for r in got[4:]:
        assert abs(r.effective_score - eff[r.memory_id]) < 1e-3
        assert r.similarity is not None and -1.0 <= r.similarity <= 1.0
    # the low-importance, old note is below min_effective: never in the effective path
    lisbon = next(m for m, (imp, d) in info.items() if d == 60.0)
    assert lisbon not in {r.memory_id for r in got[4:]}


def test_relevance_pool_top_of_baseline_unchanged_by_the_extension(open_store) -> None:
    """The baseline order of the recall hits is the same with and without the second path."""
    c = open_store(embedding="local")
    fill(c)
    context = "How do we roll back a deploy on fly.io?"
    only = SessionService(c.memories, c.recall, SessionSettings(candidate_pool_size=5, similarity_top=5))
    wide = SessionService(
        c.memories, c.recall, SessionSettings(candidate_pool_size=12, similarity_top=5, effective_top=7)
    )
    try:
        only.start(StartInput("only", project="web", context=context, ranking="relevance", now=NOW))
        wide.start(StartInput("wide", project="web", context=context, ranking="relevance", now=NOW))
    finally:
        only.close()
        wide.close()
    a, b = pool_rows(c, "only"), pool_rows(c, "wide")
    assert len(a) == 5 and len(b) > 5
    assert [(r.memory_id, r.baseline_rank) for r in a] == [(r.memory_id, r.baseline_rank) for r in b[:5]]
    assert {r.memory_id for r in b[5:]}.isdisjoint({r.memory_id for r in a})


def test_relevance_pool_features_of_the_effective_path_have_no_recall_legs(open_store) -> None:
    """The predictor's raw signals and feature rows for candidates the recall did not rank."""
    c = open_store(embedding="local")
    fill(c)
    context = "Fixing the deploy pipeline and the staging registry push"
    s = SessionSettings(candidate_pool_size=10, similarity_top=4, effective_top=8)
    cv = c.sessions.contexts.get(context)
    assert cv is not None
    pool, legs = ranking.relevance_pool(
        c.recall, c.memories.index, context=context, project="web", cv=cv, s=s, now=NOW, now_epoch=NOW_EPOCH
    )
    assert len(pool) > 4 and set(legs) == {p.memory_id for p in pool[:4]}
    members = ranking.pool_members(pool, legs)
    svc = PredictorService(c.db, c.memories.index, None, PredictorSettings())
    try:
        raw = svc.candidate_signals(members, NOW_EPOCH, "web")
    finally:
        svc.close()
    for m in members[4:]:
        r = raw[m.memory_id]
        assert r["bm25_score"] is None and r["vector_score"] is None and r["baseline_score"] == 0.0
        assert r["baseline_rank"] == m.baseline_rank - 1 >= 4
    vecs, has = c.memories.index.vectors_of([m.seq for m in members])
    sess = build_session(
        candidates=[raw[m.memory_id] for m in members],
        session_time=NOW_DT.replace(tzinfo=None),
        session_gap_hours=1.0,
        candidate_vectors=[v if h else None for v, h in zip(vecs, has)],
        candidate_texts=[""] * len(members),
        context_vector=cv,
        context_text=context,
        project="web",
        native_dim=len(cv),
    )
    f = sess.features
    assert np.all(np.isfinite(f))
    tail = f[4:]
    assert np.all(tail[:, FEATURE_INDEX["bm25_score"]] == 0.0) and np.all(tail[:, FEATURE_INDEX["vector_score"]] == 0.0)
    assert np.all(tail[:, FEATURE_INDEX["baseline_score"]] == 0.0)
    # ranked after the hits: a smaller inverse rank than any hit's
    assert tail[:, FEATURE_INDEX["baseline_rank_inv"]].max() < f[:4, FEATURE_INDEX["baseline_rank_inv"]].min()
    # the cosine to the context is there for every embedded candidate
    assert np.all(tail[:, FEATURE_INDEX["context_similarity"]] != 0.0)
