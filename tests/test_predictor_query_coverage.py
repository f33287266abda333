"""Feature schema v6: ``query_coverage`` (:mod:`memlane.predictor.coverage`).

* The coverage itself: stemmed by the tokenizer ``memories_fts`` indexes with (read back from a
  real store's schema), stop words out, any string a valid query.
* The daemon logs it with every candidate and sends it in the ``score`` request
  (:class:`~memlane.services.predictor_service.PredictorService` on a real store).
* Training reads the logged value, and computes it for sessions logged before v6 from the
  session's stored context, the value the daemon would have logged (real SQLite store).
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from memlane.config.predictor import PredictorSettings
from memlane.predictor.coverage import FTS_TOKENIZE, QueryCoverage, query_coverage
from memlane.predictor.dataset import load_sessions, with_query_coverage
from memlane.predictor.features import FEATURE_INDEX
from memlane.predictor.rpc_params import parse_score_params
from memlane.services.inputs import RememberInput
from memlane.services.predictor_service import PredictorService
from memlane.services.predictor_types import PoolMember
from memlane.storage import predictor as pred_sql
from memlane.storage.db import Database, open_readonly
from memlane.storage.fts_stats import tokenizer_option
from memlane.storage.migrations import migrate
from predictor_store_helpers import insert_memory, insert_scored_session

COV = FEATURE_INDEX["query_coverage"]
DIM = 8
MODEL_ID = "test-8"


def test_the_tokenizer_is_the_one_memories_fts_indexes_with(tmp_path):
    db = Database(tmp_path / "m.db")
    migrate(db)
    sql = db.read(lambda c: c.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'").fetchone()[0])
    db.close()
    assert tokenizer_option(sql) == FTS_TOKENIZE


def test_coverage_is_the_share_of_stemmed_query_terms_in_the_text():
    texts = ["Deploys go out via the deploy script.", "The script runs nightly.", "", "Lunch at noon."]
    # query terms: deploy, script, run ("how", "does", "the" are stop words)
    got = query_coverage("How does the deploy script run?", texts)
    assert got == pytest.approx([2 / 3, 2 / 3, 0.0, 0.0])  # "runs" -> run, "deploys" -> deploy


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "?!",
        "the of and",
        '"unterminated NEAR( OR AND *',
        "'; DROP TABLE memories; --",
        "日本語のクエリ",
        "x" * 100_000,
    ],
)
def test_any_string_is_a_valid_query(query):
    got = query_coverage(query, ["The deploy script", "the of and"])
    assert len(got) == 2 and all(0.0 <= g <= 1.0 for g in got)


def test_a_query_of_stop_words_only_counts_them():
    # fts.query_tokens keeps stop words when they are all there is (the recall searches them)
    assert query_coverage("the of", ["the cat", "none here"]) == [0.5, 0.0]


def test_the_cache_is_bounded_and_evicted_texts_are_recomputed():
    cov = QueryCoverage(max_cached=2)
    texts = ["alpha beta", "beta gamma", "gamma delta"]
    first = cov.coverage("beta gamma", texts)
    assert first == [0.5, 1.0, 0.5] and len(cov._terms) == 2
    assert cov.coverage("beta gamma", texts) == first  # the evicted text is tokenised again
    cov.close()


def _store_with_memories(open_store, texts):
    c = open_store()
    ids = [c.memories.remember(RememberInput(content=t)).id for t in texts]
    seq = dict(c.db.read(lambda conn: conn.execute("SELECT id, seq FROM memories").fetchall()))
    return c, ids, [PoolMember(m, seq[m], 0.5, i + 1, None) for i, m in enumerate(ids)]


def test_the_daemon_logs_and_sends_the_coverage_of_its_session_context(open_store):
    texts = [
        "The billing service deploys with make release.",
        "Billing logs go to Loki.",
        "Lunch is at noon on Fridays.",
    ]
    c, ids, pool = _store_with_memories(open_store, texts)
    svc = PredictorService(c.db, c.memories.index, None, PredictorSettings())
    signals = svc.candidate_signals(pool, 0.0, None, "deploying the billing service")
    # terms: deploy, bill, servic (porter)
    assert [signals[m]["query_coverage"] for m in ids] == pytest.approx([1.0, 1 / 3, 0.0])
    assert all(f["query_coverage"] == 0.0 for f in svc.candidate_signals(pool, 0.0, None, "").values())
    decision = svc.prepare(
        pool=pool,
        context_vector=None,
        context_text="deploying the billing service",
        project=None,
        now="2026-02-01T08:00:00.000Z",
        last_start=None,
    )
    assert [f["query_coverage"] for f in decision.features.values()] == pytest.approx([1.0, 1 / 3, 0.0])
    c.close()


@pytest.fixture()
def store(tmp_path):
    path = tmp_path / "memories.db"
    db = Database(path)
    migrate(db)
    texts = [
        "The billing service deploys with make release.",
        "Billing logs go to Loki.",
        "Lunch is at noon on Fridays.",
        "Search reindexes every night.",
    ]
    ids = [f"m{i}" for i in range(len(texts))]
    rng = np.random.default_rng(0)
    ctx = rng.normal(size=DIM).astype(np.float32)
    at = "2026-02-01T08:00:00.000Z"

    def write(conn: sqlite3.Connection) -> None:
        for m, t in zip(ids, texts):
            insert_memory(conn, m, t, rng.normal(size=DIM).astype(np.float32), model=MODEL_ID, at=at)
        for key, logged in (("old", False), ("new", True)):
            insert_scored_session(
                conn,
                key,
                None,
                at,
                ids,
                local_time="2026-02-01T09:00:00+01:00",
                ctx=ctx,
                model=MODEL_ID,
                raw=lambda i, logged=logged: _raw(i, texts, logged),
            )
        conn.execute("UPDATE sessions SET context = 'deploying the billing service'")

    db.write(write)
    db.close()
    return path, ids, texts, ctx


def _raw(i: int, texts: list[str], logged: bool) -> dict:
    raw = {
        "age_days": 1.0 + i,
        "importance": 0.5,
        "access_count": i,
        "is_embedded": True,
        "baseline_score": 1.0 - 0.1 * i,
        "baseline_rank": i,
    }
    if logged:  # as a v6 daemon logs it; 0.25 stands for a value the memory's text no longer gives
        raw["query_coverage"] = 0.25 if i == 3 else query_coverage("deploying the billing service", [texts[i]])[0]
    return raw


def test_training_backfills_sessions_logged_before_v6_and_keeps_logged_values(store):
    path, ids, texts, ctx = store
    conn = open_readonly(path)
    got = {s.session_id: s for s in load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM, min_confidence=0.6)}
    assert got["old"].features[:, COV].tolist() == pytest.approx([1.0, 1 / 3, 0.0, 0.0])
    assert got["new"].features[:, COV].tolist() == pytest.approx([1.0, 1 / 3, 0.0, 0.25])
    # every other column is the same in both sessions
    other = [j for j in range(got["old"].features.shape[1]) if j != COV]
    np.testing.assert_array_equal(got["old"].features[:, other], got["new"].features[:, other])
    # the sidecar, served the logged signals of "new", builds the matrix training reads
    lookup = lambda m: {k: (c, b) for k, (c, b, _) in pred_sql.memory_rows(conn, m, MODEL_ID).items()}  # noqa: E731
    params = {
        "candidate_ids": ids,
        "candidates": [_raw(i, texts, True) for i in range(len(ids))],
        "session_time": "2026-02-01T09:00:00+01:00",
        "session_gap_hours": 2.0,
        "context_embedding": ctx.tolist(),
    }
    _, served = parse_score_params(params, native_dim=DIM, lookup=lookup)
    np.testing.assert_array_equal(served.features, got["new"].features)
    conn.close()


def test_with_query_coverage_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        with_query_coverage([{}], "q", [])
    assert with_query_coverage([{"query_coverage": 0.5}], "deploy", ["deploy"]) == [{"query_coverage": 0.5}]
