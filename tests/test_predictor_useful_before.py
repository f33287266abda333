"""Feature schema v8: ``useful_before``, a memory labelled useful in an earlier session.

* Only labels of sessions that *ended* before the session started count, and only labels above
  :data:`memlane.storage.predictor.USEFUL_LABEL` (agent feedback of 1.0 gives ~0.7; 0.5 gives
  ~0.35): a session's own labels and later ones never leak into its features.
* The signal is derived from the database by :func:`memlane.predictor.dataset.derived_signals`
  on both paths; the scoring path and the training path build the same matrix.
* The read goes through the partial index of migration 0012 (only the useful rows).
* Through the daemon: a memory the agent rated 1.0 in one session is ``useful_before`` for the
  next session, with or without a project.
* The linear stage learns from it.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

import numpy as np
import pytest

from memlane.config import load_settings
from memlane.container import open_container
from memlane.predictor.dataset import derived_signals, load_sessions
from memlane.predictor.engine import PredictorEngine
from memlane.predictor.features import FEATURE_INDEX, NUM_FEATURES
from memlane.predictor.data import Session
from memlane.predictor.rpc_params import parse_score_params
from memlane.predictor.sidecar import open_readonly
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import EndInput, StartInput
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database
from memlane.storage.migrations import migrate
from predictor_store_helpers import insert_memory

DIM = 8
MODEL_ID = "test-8"
AT = "2026-02-01T08:00:00.000Z"
COL = FEATURE_INDEX["useful_before"]
IDS = ["a", "b", "c", "d", "e"]


def _raw(i: int) -> dict:
    return {"age_days": 1.0 + i, "importance": 0.5, "access_count": 0, "is_embedded": True,
            "baseline_score": 1.0 / (i + 1), "baseline_rank": i, "context_similarity": 0.1 * i}


def _session(conn: sqlite3.Connection, key: str, started_at: str, labels: dict[str, float], *,
             ended_at: str | None, ctx: np.ndarray, project: str | None = "/src/atlas",
             local_time: str | None = None) -> None:
    """A scored session over IDS whose candidates got ``labels`` (others 0), ended at ``ended_at``."""
    sess_sql.insert_session(conn, key=key, project=project, harness="test", cwd=None, context="ctx",
                            started_at=started_at, predictor_state="collecting")
    sess_sql.record_candidates(conn, key, [sess_sql.CandidateRow(memory_id=m, source="effective", final_score=1.0,
                                                                 rank=i, was_injected=i < 2)
                                           for i, m in enumerate(IDS)], started_at)
    pred_sql.set_session_inputs(conn, key, context_vector=ctx, context_model=MODEL_ID,
                                signals={"session_time": local_time or started_at, "session_gap_hours": 2.0})
    pred_sql.set_candidate_features(conn, key, {m: _raw(i) for i, m in enumerate(IDS)})
    rid = dict(conn.execute("SELECT memory_id, id FROM session_memories WHERE session_key = ?", (key,)).fetchall())
    sess_sql.write_labels(conn, [(rid[m], labels.get(m, 0.0), labels.get(m, 0.0), ["test"]) for m in IDS])
    sess_sql.write_score(conn, key, score=0.8, confidence=0.9, memories_recalled=2, memories_used=1,
                         novel_context_count=0, reasoning=None, scorer="llm", model=None, at=started_at)
    if ended_at is not None:
        sess_sql.end_session(conn, key, ended_at)


@pytest.fixture()
def labelled_db(tmp_path):
    """Day 1: "early" (a: 0.7, b: 0.35) ended 09:30; "late" (c: 0.7) started 09:00, ended 12:00;
    "open" (d: 0.9) never ended; "next" (e: 0.7) started 10:00 and ended 10:30."""
    rng = np.random.default_rng(3)
    path = tmp_path / "memlane.db"
    db = Database(path)
    migrate(db)
    ctx = rng.normal(size=DIM).astype(np.float32)

    def fill(conn: sqlite3.Connection) -> None:
        for m in IDS:
            insert_memory(conn, m, f"memory {m} text", rng.normal(size=DIM).astype(np.float32), model=MODEL_ID, at=AT)
        _session(conn, "early", "2026-02-01T09:00:00.000Z", {"a": 0.7, "b": 0.35}, ended_at="2026-02-01T09:30:00.000Z",
                 ctx=ctx)
        _session(conn, "late", "2026-02-01T09:05:00.000Z", {"c": 0.7}, ended_at="2026-02-01T12:00:00.000Z", ctx=ctx)
        _session(conn, "open", "2026-02-01T09:10:00.000Z", {"d": 0.9}, ended_at=None, ctx=ctx)
        _session(conn, "next", "2026-02-01T10:00:00.000Z", {"e": 0.7}, ended_at="2026-02-01T10:30:00.000Z",
                 ctx=ctx, local_time="2026-02-01T11:00:00+01:00")

    db.write(fill)
    db.close()
    return path, ctx


def _useful(conn: sqlite3.Connection, when: datetime, project: str | None = "/src/atlas") -> list[str]:
    return sorted(m for m, d in derived_signals(conn, IDS, project=project, session_time=when).items()
                  if d["useful_before"])


def test_only_useful_labels_of_sessions_ended_before_count(labelled_db):
    path, _ = labelled_db
    conn = open_readonly(path)
    ten = datetime(2026, 2, 1, 10, 0, tzinfo=timezone.utc)
    # at 10:00: "early" ended (a counts, b's 0.35 does not); "late" had not ended; "open" never did;
    # "next" is the session itself
    assert _useful(conn, ten) == ["a"]
    assert _useful(conn, ten, project=None) == ["a"]  # no project needed
    assert _useful(conn, datetime(2026, 2, 1, 9, 30, tzinfo=timezone.utc)) == []  # ended at, not before
    assert _useful(conn, datetime(2026, 2, 1, 13, 0, tzinfo=timezone.utc)) == ["a", "c", "e"]
    assert pred_sql.useful_before(conn, [], before="2026-02-02T00:00:00.000Z") == set()
    assert pred_sql.useful_before(conn, ["unknown"], before="2026-02-02T00:00:00.000Z") == set()


def test_the_read_uses_the_partial_index_of_useful_rows(labelled_db):
    path, _ = labelled_db
    conn = open_readonly(path)
    plan = " ".join(str(r) for r in conn.execute(
        """EXPLAIN QUERY PLAN SELECT DISTINCT sm.memory_id FROM session_memories sm
           JOIN sessions s ON s.session_key = sm.session_key
           WHERE sm.memory_id IN (?, ?) AND sm.label > 0.5 AND s.ended_at IS NOT NULL AND s.ended_at < ?""",
        ["a", "b", "2026-02-02T00:00:00.000Z"]))
    assert "idx_session_memories_useful" in plan, plan
    assert pred_sql.USEFUL_LABEL == 0.5  # the literal of the index's WHERE and of the query


def test_scoring_and_training_build_the_same_v8_matrix(labelled_db):
    path, ctx = labelled_db
    conn = open_readonly(path)
    stored = {s.session_id: s for s in load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM,
                                                     min_confidence=0.6)}
    assert set(stored) == {"early", "late", "open", "next"}
    assert stored["next"].features[:, COL].tolist() == [1, 0, 0, 0, 0]   # a, from "early" only
    assert stored["early"].features[:, COL].tolist() == [0, 0, 0, 0, 0]  # nothing ended before it
    derive = lambda m, project, when: derived_signals(conn, m, project=project, session_time=when)  # noqa: E731
    lookup = lambda m: {k: (c, b) for k, (c, b, _) in pred_sql.memory_rows(conn, m, MODEL_ID).items()}  # noqa: E731
    params = {"candidate_ids": IDS, "candidates": [_raw(i) for i in range(len(IDS))],
              "session_time": "2026-02-01T11:00:00+01:00", "session_gap_hours": 2.0, "project": "/src/atlas",
              "context_embedding": np.asarray(ctx, dtype=np.float32).tolist()}
    _, served = parse_score_params(params, native_dim=DIM, lookup=lookup, derive=derive)
    np.testing.assert_array_equal(served.features, stored["next"].features)
    # a value sent by a client is overridden by the database's
    params["candidates"] = [{**_raw(i), "useful_before": True} for i in range(len(IDS))]
    _, forged = parse_score_params(params, native_dim=DIM, lookup=lookup, derive=derive)
    assert forged.features[:, COL].tolist() == [1, 0, 0, 0, 0]


def test_a_memory_rated_useful_through_the_daemon_is_useful_before_the_next_session(tmp_path, shared_embedder):
    settings = load_settings(home=tmp_path / "home", sessions={"inject_limit": 3})
    c = open_container(settings, embedder=shared_embedder, predictor=False)
    try:
        c.memories.remember_many([RememberInput(content=text) for text in (
            "Deploys go out via make release to fly.io.", "The billing service logs to Loki.",
            "Migrations live under db/migrations.", "Use pnpm, never npm, in the web app.")])
        first = c.sessions.start(StartInput("s-1", context="how do we deploy?", now="2026-03-01T09:00:00.000Z"))
        rated, other = first.injected[0]["id"], first.injected[1]["id"]
        c.sessions.feedback("s-1", {rated: 1.0, other: 0.5})
        c.sessions.end(EndInput("s-1", now="2026-03-01T09:30:00.000Z"), wait=True)
        c.sessions.start(StartInput("s-2", context="deploying again", now="2026-03-01T10:00:00.000Z"))
        ids = [r.memory_id for r in c.db.read(lambda conn: sess_sql.session_memories(conn, "s-2"))]
        assert rated in ids and other in ids
        useful = c.db.read(lambda conn: derived_signals(conn, ids, project=None,
                                                        session_time=datetime(2026, 3, 1, 10, tzinfo=timezone.utc)))
        # rated 1.0 -> label ~0.7 counts; rated 0.5 -> label ~0.35 does not
        assert {m for m, d in useful.items() if d["useful_before"]} == {rated}
    finally:
        c.embedder = None
        c.close()


def _learning_sessions(rng: np.random.Generator, n: int) -> list[Session]:
    out = []
    for _ in range(n):
        f = np.zeros((10, NUM_FEATURES), dtype=np.float32)
        f[:, FEATURE_INDEX["baseline_rank_inv"]] = 1.0 / (1.0 + rng.permutation(10))  # a baseline of noise
        f[:, FEATURE_INDEX["importance"]] = 0.5
        useful = rng.choice(10, size=2, replace=False)
        f[useful, COL] = 1.0
        labels = np.zeros(10, dtype=np.float32)
        labels[useful] = 0.7
        out.append(Session(features=f, labels=labels, candidate_texts=[f"memory {i}" for i in range(10)],
                           context_text="deploy", confidence=0.9))
    return out


def test_the_linear_stage_learns_to_rank_what_helped_before_first(tmp_path):
    rng = np.random.default_rng(0)
    engine = PredictorEngine(tmp_path, embedding_model_id=MODEL_ID, native_dim=DIM, seed=0)
    report = engine.train(_learning_sessions(rng, 40), save=False, influential=False)
    assert report.accepted and report.stage == "linear"
    held_out = _learning_sessions(rng, 20)
    top2 = [set(np.argsort(-engine.score(s))[:2].tolist()) == set(np.flatnonzero(s.labels).tolist())
            for s in held_out]
    assert all(top2)
    assert float(engine.model.feature_weights()[COL]) > 0
