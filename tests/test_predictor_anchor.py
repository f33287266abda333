"""The full stage's linear anchor: its fit is the linear stage's, the ensemble it scores, its
checkpoint round trip (and older checkpoints without it), and the engine's use of it."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from memlane.config import predictor as C
from memlane.predictor import checkpoint as ckpt
from memlane.predictor.anchor import fit_linear_anchor
from memlane.predictor.data import collate, session_constant_columns
from memlane.predictor.engine import PredictorEngine
from memlane.predictor.features import CURRENT_SCHEMA, NUM_FEATURES
from memlane.predictor.losses import listnet_loss
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.predictor.synthetic import make_sessions
from memlane.predictor.train import Constraints, FitConfig, fit
from predictor_checkpoint_helpers import writer_without

torch.set_num_threads(1)
DIM = 8
LOSS = partial(listnet_loss, label_scale=C.LABEL_SCALE)


def sessions(n: int, seed: int = 0):
    return make_sessions(n, signal="features", native_dim=DIM, n_candidates=12, n_relevant=3, seed=seed)


def test_the_anchor_fit_is_the_linear_stage_on_the_feature_tensors():
    batch = collate(sessions(24), native_dim=DIM)
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=3)
    opt = torch.optim.Adam([model.gate_linear.weight], lr=C.LEARNING_RATE)
    stage = fit(
        model,
        opt,
        LOSS,
        [batch],
        FitConfig(max_epochs=40, early_stop_patience=40, max_seconds=1e9),
        Constraints(grad_masks=model.feature_residual_masks()),
    )
    linear_stage = stage.model.feature_weights()
    init = model.feature_weights()
    anchor = fit_linear_anchor(
        [batch], init, LOSS, lr=C.LEARNING_RATE, max_epochs=40, early_stop_patience=40, max_seconds=1e9
    )
    assert not torch.equal(anchor, init)  # it trained
    # Columns constant within every session (time of day, session gap, ...) cannot change a
    # ranking: their gradient is rounding noise, which Adam scales up differently in the two
    # computations. Every column that varies within a session must agree.
    varies = ~session_constant_columns([batch])
    assert int(varies.sum()) >= 4
    torch.testing.assert_close(anchor[varies], linear_stage[varies], atol=1e-5, rtol=1e-4)
    # the live model is untouched, and the anchor ranks as the linear-stage model does
    torch.testing.assert_close(model.feature_weights(), init)
    stage_order = torch.argsort(stage.model.score(batch), dim=-1, descending=True)
    anchor_order = torch.argsort(torch.einsum("bnf,f->bn", batch.features, anchor), dim=-1, descending=True)
    assert float((stage_order == anchor_order).float().mean()) > 0.99


def test_mini_batches_of_other_slate_lengths_train_as_one_full_batch():
    long = sessions(10)
    short = make_sessions(6, signal="features", native_dim=DIM, n_candidates=8, n_relevant=2, seed=5)
    init = torch.zeros(NUM_FEATURES)
    kw = dict(lr=C.LEARNING_RATE, max_epochs=30, early_stop_patience=40, max_seconds=1e9)
    one = fit_linear_anchor([collate(long + short, native_dim=DIM)], init, LOSS, **kw)
    two = fit_linear_anchor([collate(long, native_dim=DIM), collate(short, native_dim=DIM)], init, LOSS, **kw)
    varies = ~session_constant_columns([collate(long + short, native_dim=DIM)])
    torch.testing.assert_close(two[varies], one[varies], atol=1e-5, rtol=1e-4)


def test_anchor_fit_bad_input_and_no_data():
    init = torch.zeros(NUM_FEATURES)
    assert torch.equal(fit_linear_anchor([], init, LOSS, lr=0.01, max_epochs=5, early_stop_patience=2), init)
    with pytest.raises(ValueError, match=r"\[F\]"):
        fit_linear_anchor([], torch.zeros(2, 3), LOSS, lr=0.01, max_epochs=5, early_stop_patience=2)
    batch = collate(sessions(2), native_dim=DIM)
    with pytest.raises(ValueError, match="columns"):
        fit_linear_anchor([batch], torch.zeros(NUM_FEATURES + 1), LOSS, lr=0.01, max_epochs=5, early_stop_patience=2)


def _z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-6)


def test_score_with_an_anchor_is_the_sum_of_within_session_z_scores():
    batch = collate(
        sessions(3, seed=4)[:1]
        + make_sessions(1, signal="features", native_dim=DIM, n_candidates=5, n_relevant=2, seed=8),
        native_dim=DIM,
    )
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=1)
    plain = model.score(batch)
    torch.testing.assert_close(plain, model(batch).detach())  # no anchor: the forward pass
    assert not model.has_anchor
    w = torch.linspace(-1.0, 1.0, NUM_FEATURES)
    model.set_anchor(w)
    assert model.has_anchor
    got = model.score(batch).numpy()
    full = model(batch).detach().numpy()
    feats = batch.features.numpy()
    for b in range(2):
        n = int(batch.mask[b].sum())
        want = _z(full[b, :n].astype(np.float64)) + _z(feats[b, :n].astype(np.float64) @ w.numpy())
        np.testing.assert_allclose(got[b, :n], want, rtol=1e-4, atol=1e-4)
        assert np.all(got[b, n:] == 0.0)  # padded slots
    model.set_anchor(None)
    torch.testing.assert_close(model.score(batch), plain)
    with pytest.raises(ValueError):
        model.set_anchor(torch.tensor([float("nan")] * NUM_FEATURES))
    with pytest.raises(ValueError):
        model.set_anchor(torch.zeros(3))


def test_checkpoints_keep_the_anchor_and_older_ones_load_without_it(tmp_path):
    batch = collate(sessions(2, seed=6), native_dim=DIM)
    meta = ckpt.CheckpointMeta("test-8", CURRENT_SCHEMA, {})
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=2)
    model.set_anchor(torch.arange(NUM_FEATURES, dtype=torch.float32) / 10)
    ckpt.save(tmp_path / "new.bin", model, meta)
    loaded = ckpt.load(tmp_path / "new.bin", embedding_model_id="test-8", native_dim=DIM).model
    assert loaded.has_anchor
    torch.testing.assert_close(loaded.score(batch), model.score(batch))

    old = writer_without("anchor", "anchor_on")(ScorerConfig(native_dim=DIM), seed=2)
    ckpt.save(tmp_path / "old.bin", old, meta)
    restored = ckpt.load(tmp_path / "old.bin", embedding_model_id="test-8", native_dim=DIM).model
    assert not restored.has_anchor
    torch.testing.assert_close(restored.score(batch), old.score(batch))


def test_the_engine_serves_the_ensemble_in_the_full_stage_only(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "FULL_MODEL_MIN_SESSIONS", 30)
    engine = PredictorEngine(tmp_path / "predictor", embedding_model_id="test-8", native_dim=DIM)
    # relevance planted in the embeddings: the full model can beat what the features carry
    train = make_sessions(40, signal="embedding", native_dim=DIM, n_candidates=12, n_relevant=3, seed=1)
    report = engine.train(train[:20], max_epochs=20)  # the linear stage
    assert report.accepted and engine.stage == "linear" and not engine.model.has_anchor
    assert engine.status()["linear_anchor"] is False
    linear_weights = engine.model.feature_weights().clone()
    report = engine.train(train, max_epochs=10)  # 40 sessions: the full stage
    assert engine.stage == "full"
    assert report.accepted, report.error
    assert engine.model.has_anchor
    # continued from the linear stage's weights, then trained on the 40 sessions' training part
    assert not torch.equal(engine.model.anchor, linear_weights)
    probe = sessions(3, seed=9)
    before = [engine.score(s) for s in probe]
    restarted = PredictorEngine(tmp_path / "predictor", embedding_model_id="test-8", native_dim=DIM)
    assert restarted.model.has_anchor
    assert restarted.status()["linear_anchor"] is True
    for s, want in zip(probe, before):
        np.testing.assert_allclose(restarted.score(s), want, rtol=1e-6, atol=1e-6)
