"""ListNet loss against a NumPy reference, gradient check and numerical stability."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memlane.predictor.losses import listnet_loss, listnet_per_session
from memlane.predictor.losses.listnet import masked_log_softmax
from memlane.predictor.padding import PADDED_Y_VALUE as PAD

torch.set_num_threads(1)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def np_listnet(y_pred: np.ndarray, y_true: np.ndarray, weights=None, t=0.5, t_sharp=0.3, low=0.1):
    """Reference: per session KL(softmax(true/T) || softmax(pred/T)), weighted mean (Cao et al. 2007)."""
    losses, ws = [], []
    for i, (p, y) in enumerate(zip(y_pred.astype(np.float64), y_true.astype(np.float64))):
        real = y != PAD
        p, y = p[real], y[real]
        if len(y) < 2 or y.max() - y.min() <= 1e-6:
            losses.append(0.0)
            ws.append(0.0)
            continue
        temp = t_sharp if y.max() - y.min() < low else t
        pt, pm = _np_softmax(y / temp), _np_softmax(p / temp)
        losses.append(float(np.sum(pt * (np.log(pt) - np.log(pm)))))
        ws.append(1.0 if weights is None else float(weights[i]))
    losses, ws = np.array(losses), np.array(ws)
    return losses, float((losses * ws).sum() / max(ws.sum(), 1e-12))


def _t(x) -> torch.Tensor:
    return torch.tensor(np.asarray(x), dtype=torch.float32)


CASES = [
    # (y_pred, y_true): tiny lists with padding, graded, negative and low-spread labels
    ([[0.5, 0.2, -1.0, 0.0]], [[1.0, 0.0, 0.0, PAD]]),
    ([[2.0, 1.0, 0.0], [0.1, 0.3, 9.0]], [[0.0, 0.5, 1.0], [0.8, -0.3, PAD]]),
    ([[1.0, -2.0, 0.5, 3.0]], [[0.55, 0.5, 0.58, 0.52]]),  # span 0.08 < 0.1: sharpened T=0.3
    ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[0.7, 0.7, 0.7], [1.0, PAD, PAD]]),  # both skipped
]


@pytest.mark.parametrize("y_pred,y_true", CASES)
def test_matches_numpy_reference(y_pred, y_true):
    ref_losses, ref = np_listnet(np.array(y_pred), np.array(y_true))
    losses, weight = listnet_per_session(_t(y_pred), _t(y_true))
    kept = weight.numpy() > 0
    np.testing.assert_allclose(losses.numpy()[kept], ref_losses[kept], rtol=1e-5, atol=1e-6)
    assert float(listnet_loss(_t(y_pred), _t(y_true))) == pytest.approx(ref, rel=1e-5, abs=1e-6)


def test_random_batches_match_reference_with_session_weights():
    rng = np.random.default_rng(0)
    for _ in range(20):
        b, n = rng.integers(1, 5), rng.integers(2, 9)
        y_pred = rng.normal(scale=2.0, size=(b, n))
        y_true = np.round(rng.uniform(-0.5, 1.0, size=(b, n)), 1)
        for i in range(b):
            y_true[i, rng.integers(2, n + 1) :] = PAD
        w = rng.uniform(0.1, 1.0, size=b)
        _, ref = np_listnet(y_pred, y_true, w)
        got = listnet_loss(_t(y_pred), _t(y_true), _t(w))
        assert float(got) == pytest.approx(ref, rel=1e-4, abs=1e-5)


def test_temperature_choice_and_skip_weights():
    y_pred = _t([[0.0, 1.0, 2.0]] * 4)
    y_true = _t([[0.0, 0.5, 1.0], [0.50, 0.55, 0.58], [0.3, 0.3, 0.3], [0.2, PAD, PAD]])
    losses, weight = listnet_per_session(y_pred, y_true)
    assert weight.tolist() == [1.0, 1.0, 0.0, 0.0]
    sharp, _ = listnet_per_session(y_pred[1:2], y_true[1:2], low_spread=0.0)  # forced T=0.5
    assert float(losses[1]) != pytest.approx(float(sharp[0]))
    _, ref = np_listnet(y_pred[1:2].numpy(), y_true[1:2].numpy())
    assert float(losses[1]) == pytest.approx(ref, rel=1e-5)


def test_minimum_at_matching_scores_and_shift_invariance():
    y_true = _t([[1.0, 0.0, 0.4, -0.3]])
    assert float(listnet_loss(y_true.clone(), y_true)) == pytest.approx(0.0, abs=1e-7)
    y_pred = _t([[0.3, 1.2, -0.7, 2.0]])
    assert float(listnet_loss(y_pred + 100.0, y_true)) == pytest.approx(float(listnet_loss(y_pred, y_true)), rel=1e-4)


def test_gradcheck_float64():
    y_true = torch.tensor([[1.0, 0.0, 0.5, PAD], [0.2, 0.9, -0.3, 0.6], [0.5, 0.52, 0.55, PAD]], dtype=torch.float64)
    y_pred = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
    w = torch.tensor([1.0, 0.5, 0.8], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda p: listnet_loss(p, y_true, w), (y_pred,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    "y_pred,y_true",
    [
        ([[1e-30, -1e-30, 0.0]], [[1.0, 0.0, 0.5]]),  # tiny scores
        ([[1e20, -1e20, 3e19]], [[1.0, 0.0, 0.5]]),  # huge scores
        ([[3e37, -3e37, 0.0]], [[0.0, 1.0, 0.5]]),  # near float32 max, wrong order
        ([[0.5, 0.5, 0.5]], [[0.4, 0.4, 0.4]]),  # equal labels
        ([[5.0, 1.0, 2.0]], [[PAD, PAD, PAD]]),  # fully padded
        ([[1e20, 2.0]], [[1.0, PAD]]),  # one candidate
        ([[-1e20, 1e20, 0.0], [0.0, 0.0, 0.0]], [[1.0, 0.0, PAD], [PAD, PAD, PAD]]),
    ],
)
def test_stability_no_nan_or_inf(y_pred, y_true):
    pred = _t(y_pred).requires_grad_(True)
    loss = listnet_loss(pred, _t(y_true))
    loss.backward()
    assert bool(torch.isfinite(loss)) and float(loss.detach()) >= 0.0
    assert bool(torch.isfinite(pred.grad).all())


def test_all_sessions_skipped_gives_zero_connected_loss():
    pred = _t([[1.0, 2.0], [3.0, 4.0]]).requires_grad_(True)
    loss = listnet_loss(pred, _t([[0.5, 0.5], [PAD, PAD]]))
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.equal(pred.grad, torch.zeros(2, 2))


def test_nan_inputs_surface_as_nan():
    # Corrupt data must reach the "losses finite" gate, not be skipped silently.
    assert torch.isnan(listnet_loss(_t([[0.1, 0.2]]), _t([[float("nan"), 1.0]])))
    assert torch.isnan(listnet_loss(_t([[float("nan"), 0.2]]), _t([[0.0, 1.0]])))


def test_masked_log_softmax_matches_torch_on_real_entries():
    x = torch.randn(4, 6)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [False] * 6, [True] + [False] * 5])
    out = masked_log_softmax(x, mask)
    for i in (0, 1, 3):
        torch.testing.assert_close(out[i][mask[i]], torch.log_softmax(x[i][mask[i]], dim=0))
    assert bool(torch.isfinite(out).all())


def test_rejects_bad_temperature():
    with pytest.raises(ValueError):
        listnet_loss(_t([[1.0, 0.0]]), _t([[1.0, 0.0]]), temperature=0.0)
