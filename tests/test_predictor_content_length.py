"""Feature schema v7: ``log_content_chars``, the length of a memory's text.

* :func:`memlane.predictor.dataset.build_session` counts it from the candidate texts, on the
  scoring path and the training path alike (the equality of both paths on a real store is in
  ``test_predictor_engine.py::test_scoring_path_builds_the_same_session_as_training``); a
  logged value cannot disagree with the text, a candidate whose text is gone counts 0.
* The linear stage learns from it: on sessions where only the longer memories are relevant,
  a trained model ranks them first.
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pytest
import torch

from memlane.predictor.dataset import build_session
from memlane.predictor.engine import PredictorEngine
from memlane.predictor.features import CONTENT_CHARS_LOG_SCALE, FEATURE_INDEX, NUM_FEATURES
from memlane.predictor.metrics import ndcg_at_k
from memlane.predictor.rpc_params import parse_score_params

COL = FEATURE_INDEX["log_content_chars"]
WHEN = datetime(2026, 3, 4, 18, 0)


def signals(i: int, **over) -> dict:
    base = {
        "age_days": 1.0 + i,
        "importance": 0.5,
        "access_count": 0,
        "baseline_score": 1.0 / (i + 1),
        "baseline_rank": i,
    }
    return {**base, **over}


def session_of(texts: list[str], labels: list[float] | None = None, raw: list[dict] | None = None):
    return build_session(
        candidates=raw or [signals(i) for i in range(len(texts))],
        session_time=WHEN,
        session_gap_hours=1.0,
        candidate_vectors=[None] * len(texts),
        candidate_texts=texts,
        context_vector=None,
        context_text="deploy the api",
        project=None,
        native_dim=8,
        labels=labels,
    )


def test_the_column_is_the_log_length_of_each_text():
    texts = ["ok", "Deploys go out via make release to fly.io after the staging smoke test passes.", "", "é" * 399]
    got = session_of(texts).features[:, COL]
    want = [math.log1p(len(t)) / CONTENT_CHARS_LOG_SCALE for t in texts]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[2] == 0.0 and got[3] == pytest.approx(1.0, abs=0.01)  # 399 characters (not bytes) -> ~1.0


def test_a_logged_value_cannot_disagree_with_the_text():
    texts = ["short", "a much longer memory text than the first one"]
    raw = [signals(0, content_chars=10_000), signals(1, content_chars=-5)]
    np.testing.assert_array_equal(session_of(texts, raw=raw).features, session_of(texts).features)


def test_a_huge_text_stays_finite():
    f = session_of(["x" * 2_000_000, "y"]).features
    assert f.shape == (2, NUM_FEATURES) and np.isfinite(f).all()
    assert f[0, COL] == pytest.approx(math.log1p(2_000_000) / CONTENT_CHARS_LOG_SCALE, rel=1e-6)


def test_a_candidate_whose_text_is_gone_counts_zero():
    """The sidecar reads the texts by id (read-only); a memory deleted since counts 0 chars."""
    params = {
        "candidate_ids": ["kept", "gone"],
        "candidates": [signals(0), signals(1)],
        "session_time": "2026-03-04T18:00:00",
        "session_gap_hours": 1.0,
    }
    stored = {"kept": ("Deploys go out via make release.", None)}
    _, session = parse_score_params(params, native_dim=8, lookup=lambda ids: {m: stored[m] for m in ids if m in stored})
    assert session.features[0, COL] == pytest.approx(math.log1p(32) / CONTENT_CHARS_LOG_SCALE, rel=1e-6)
    assert session.features[1, COL] == 0.0


def _sessions(rng: np.random.Generator, n: int) -> list:
    out = []
    for _ in range(n):
        lengths = rng.integers(3, 400, size=10)
        texts = ["w" * int(k) for k in lengths]
        top = set(np.argsort(-lengths)[:2].tolist())
        # every other signal is noise: baseline order random, the same age and importance
        raw = [signals(0, baseline_rank=int(r), baseline_score=float(rng.random())) for r in rng.permutation(10)]
        out.append(session_of(texts, labels=[1.0 if i in top else 0.0 for i in range(10)], raw=raw))
    return out


def test_the_linear_stage_learns_that_longer_memories_help(tmp_path):
    rng = np.random.default_rng(7)
    train, test = _sessions(rng, 60), _sessions(rng, 20)
    engine = PredictorEngine(tmp_path, embedding_model_id="test-embedder", native_dim=8)

    def mean_ndcg() -> float:
        return float(
            np.mean(
                [ndcg_at_k(torch.as_tensor(engine.score(s))[None], torch.as_tensor(s.labels)[None], 10) for s in test]
            )
        )

    before = mean_ndcg()
    report = engine.train(train, save=False, stage="linear")
    assert report.accepted, report
    after = mean_ndcg()
    assert after > 0.9 and after > before + 0.2, (before, after)
    weight = float(engine.model.feature_weights()[COL])
    assert weight > 0
