"""NDCG@k against a NumPy reference and hand-computed values; top-k overlap."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from memlane.predictor.metrics import dcg_at_k, mean_ndcg_at_k, ndcg_at_k, topk_overlap
from memlane.predictor.padding import PADDED_Y_VALUE as PAD


def _t(x) -> torch.Tensor:
    return torch.tensor(np.asarray(x), dtype=torch.float32)


def np_ndcg(y_pred: np.ndarray, y_true: np.ndarray, k: int, filler: float = 1.0) -> np.ndarray:
    """Reference NDCG@k, linear gains clipped at 0 (Järvelin & Kekäläinen 2002)."""
    out = []
    for p, y in zip(y_pred, y_true):
        real = y != PAD
        p, g = p[real], np.clip(y[real], 0.0, None)
        disc = 1.0 / np.log2(np.arange(len(g)) + 2.0)
        kk = min(k, len(g))
        dcg = (g[np.argsort(-p, kind="stable")][:kk] * disc[:kk]).sum()
        idcg = (np.sort(g)[::-1][:kk] * disc[:kk]).sum()
        out.append(dcg / idcg if idcg > 0 else filler)
    return np.array(out)


def test_hand_computed_wikipedia_example():
    # Wikipedia's DCG example: relevances 3,2,3,0,1,2 in ranked order give DCG6 = 6.861.
    # The ideal order of these six is 3,3,2,2,1,0: IDCG6 = 3 + 3/log2(3) + 2/2 + 2/log2(5)
    # + 1/log2(6) = 7.141, so NDCG6 = 0.961 (Wikipedia's 0.785 also counts unretrieved items).
    y_true = _t([[3, 2, 3, 0, 1, 2]])
    y_pred = _t([[6, 5, 4, 3, 2, 1]])
    assert float(dcg_at_k(y_pred, y_true, 6)) == pytest.approx(6.861, abs=1e-3)
    ideal = 3 + 3 / math.log2(3) + 1 + 2 / math.log2(5) + 1 / math.log2(6)
    assert ideal == pytest.approx(7.141, abs=1e-3)
    assert float(ndcg_at_k(y_pred, y_true, 6)) == pytest.approx(6.861 / 7.141, abs=1e-3)
    # Ranked ideally, NDCG is 1.
    assert float(ndcg_at_k(y_true, y_true, 6)) == pytest.approx(1.0)


def test_hand_computed_negative_labels_padding_and_cutoff():
    # Negative gain counts as 0: the relevant item at rank 2 gives 1/log2(3).
    assert float(ndcg_at_k(_t([[2.0, 1.0]]), _t([[-0.3, 1.0]]))) == pytest.approx(1 / math.log2(3), rel=1e-6)
    # A padded slot with the best score takes no rank.
    assert float(ndcg_at_k(_t([[9.0, 1.0, 0.0]]), _t([[PAD, 1.0, 0.0]]))) == pytest.approx(1.0)
    # k=1: only the first position counts.
    assert float(ndcg_at_k(_t([[1.0, 2.0]]), _t([[1.0, 0.5]]), k=1)) == pytest.approx(0.5)
    # No positive gain: the filler value.
    no_gain = ndcg_at_k(_t([[1.0, 2.0], [1.0, 2.0]]), _t([[0.0, -0.5], [PAD, PAD]]), filler_value=0.25)
    assert no_gain.tolist() == [0.25, 0.25]
    # Ties break by slate position.
    assert float(ndcg_at_k(_t([[1.0, 1.0]]), _t([[0.0, 1.0]]))) == pytest.approx(1 / math.log2(3), rel=1e-6)


def test_random_batches_match_reference():
    rng = np.random.default_rng(1)
    for _ in range(30):
        b, n = rng.integers(1, 6), rng.integers(1, 25)
        y_pred = rng.normal(size=(b, n)).astype(np.float32)
        y_pred[:, : n // 3] = np.round(y_pred[:, : n // 3])  # some ties
        y_true = np.round(rng.uniform(-0.5, 1.0, size=(b, n)), 1).astype(np.float32)
        for i in range(b):
            y_true[i, rng.integers(1, n + 1) :] = PAD
        for k in (1, 5, 10, 30):
            got = ndcg_at_k(_t(y_pred), _t(y_true), k).numpy()
            np.testing.assert_allclose(got, np_ndcg(y_pred, y_true, k), rtol=1e-5, atol=1e-6)


def test_mean_ndcg_uses_informative_sessions_only():
    y_pred = _t([[2.0, 1.0], [1.0, 2.0], [1.0, 2.0]])
    y_true = _t([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    expected = (1.0 + 1 / math.log2(3)) / 2
    assert mean_ndcg_at_k(y_pred, y_true) == pytest.approx(expected, rel=1e-6)
    assert math.isnan(mean_ndcg_at_k(y_pred[2:], y_true[2:]))
    with pytest.raises(ValueError):
        ndcg_at_k(y_pred, y_true, k=0)


def test_topk_overlap_hand_cases():
    a = _t([[5, 4, 3, 2, 1, 0]])
    mask = torch.ones(1, 6, dtype=torch.bool)
    assert topk_overlap(a, a, mask).tolist() == [1.0]
    assert topk_overlap(a, a.flip(-1), mask).tolist() == [pytest.approx(0.8)]  # {0..4} vs {1..5}
    assert topk_overlap(a, a.flip(-1), mask, k=2).tolist() == [0.0]
    # Three real candidates: the top-5 is all of them, padding never counts.
    short = torch.tensor([[True, True, True, False, False, False]])
    assert topk_overlap(a, a.flip(-1), short).tolist() == [1.0]
    assert topk_overlap(a, a, torch.zeros(1, 6, dtype=torch.bool)).tolist() == [1.0]
