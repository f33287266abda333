"""The linear weights' Gaussian prior: ``lam * ||w - centre||^2`` with ``lam = PRIOR_STRENGTH /
training sessions``, centred where the user's model started (the baseline prior, or a Phase 6
base's weights), recorded in the checkpoint. Real engine, training loop, anchor fit and files."""

from __future__ import annotations

import json
from functools import partial

import pytest
import torch

from memlane.config import predictor as C
from memlane.predictor import checkpoint as ckpt
from memlane.predictor.anchor import fit_linear_anchor
from memlane.predictor.data import collate
from memlane.predictor.engine import CHECKPOINT_NAME, PredictorEngine
from memlane.predictor.features import CURRENT_SCHEMA, FEATURE_INDEX, NUM_FEATURES
from memlane.predictor.losses import listnet_loss
from memlane.predictor.model import BASELINE_PRIOR, MemoryScorer, ScorerConfig, baseline_prior_weights
from memlane.predictor.synthetic import make_sessions
from memlane.predictor.train import Constraints, FitConfig, fit

torch.set_num_threads(1)
DIM = 8
MODEL_ID = "test-8"
LOSS = partial(listnet_loss, label_scale=C.LABEL_SCALE)


def sessions(n: int, seed: int = 0):
    return make_sessions(n, signal="features", native_dim=DIM, n_candidates=12, n_relevant=3, seed=seed)


def engine(path, **kw) -> PredictorEngine:
    return PredictorEngine(path, embedding_model_id=MODEL_ID, native_dim=DIM, **kw)


def test_the_baseline_prior_is_the_untrained_models_weights():
    w = baseline_prior_weights()
    assert w.shape == (NUM_FEATURES,)
    torch.testing.assert_close(w, MemoryScorer(ScorerConfig(native_dim=DIM), seed=4).feature_weights())
    assert {n: float(w[FEATURE_INDEX[n]]) for n in BASELINE_PRIOR} == pytest.approx(BASELINE_PRIOR)
    assert float(w.abs().sum()) == pytest.approx(sum(BASELINE_PRIOR.values()))


def test_fit_adds_the_penalty_to_the_loss_and_it_pulls_toward_the_centre():
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=1)
    batch = collate(sessions(10), native_dim=DIM)
    centre = torch.full((NUM_FEATURES,), 0.25)

    def run(prior):
        opt = torch.optim.Adam([model.gate_linear.weight], lr=C.LEARNING_RATE)
        return fit(
            model,
            opt,
            LOSS,
            [batch],
            FitConfig(max_epochs=60, early_stop_patience=60, max_seconds=1e9),
            Constraints(grad_masks=model.feature_residual_masks(), prior=prior),
        )

    free, weak, strong = run(None), run((centre, 0.0)), run((centre, 50.0))
    # the first step's loss is the listwise loss plus lam * ||w0 - centre||^2
    w0 = model.feature_weights()
    with torch.no_grad():
        base = float(LOSS(model(batch), batch.labels, batch.confidence))
    assert strong.step_losses[0] == pytest.approx(base + 50.0 * float(((w0 - centre) ** 2).sum()), rel=1e-5)
    assert weak.step_losses == pytest.approx(free.step_losses)  # lam = 0 is no prior
    dist = lambda r: float((r.model.feature_weights() - centre).norm())  # noqa: E731
    assert dist(strong) < 0.5 * dist(free)
    with pytest.raises(ValueError, match="prior"):
        run((torch.zeros(3), 1.0))
    with pytest.raises(ValueError, match="prior"):
        run((centre, -1.0))


def test_the_anchor_takes_the_same_prior():
    batch = collate(sessions(10), native_dim=DIM)
    init, centre = torch.zeros(NUM_FEATURES), baseline_prior_weights()
    kw = dict(lr=C.LEARNING_RATE, max_epochs=60, early_stop_patience=60, max_seconds=1e9)
    free = fit_linear_anchor([batch], init, LOSS, **kw)
    none = fit_linear_anchor([batch], init, LOSS, prior=(centre, 0.0), **kw)
    strong = fit_linear_anchor([batch], init, LOSS, prior=(centre, 50.0), **kw)
    torch.testing.assert_close(none, free)
    assert float((strong - centre).norm()) < 0.5 * float((free - centre).norm())
    with pytest.raises(ValueError, match="prior"):
        fit_linear_anchor([batch], init, LOSS, prior=(torch.zeros(2), 1.0), **kw)


def test_few_sessions_stay_closer_to_the_prior_than_without_it(tmp_path, monkeypatch):
    data = sessions(12)
    with_prior = engine(tmp_path / "a")
    assert with_prior.train(data, save=False).accepted
    monkeypatch.setattr(C, "PRIOR_STRENGTH", 0.0)
    without = engine(tmp_path / "b")
    assert without.train(data, save=False).accepted
    centre = baseline_prior_weights()
    d_with = float((with_prior.model.feature_weights() - centre).norm())
    d_without = float((without.model.feature_weights() - centre).norm())
    assert d_with < d_without


def test_the_centre_survives_a_restart_and_older_checkpoints_get_the_right_one(tmp_path):
    first = engine(tmp_path)
    torch.testing.assert_close(first.feature_prior, baseline_prior_weights())
    assert first.train(sessions(12)).accepted  # saves model.bin
    meta = json.loads(
        json.dumps(
            ckpt.load(
                tmp_path / CHECKPOINT_NAME, CURRENT_SCHEMA, embedding_model_id=MODEL_ID, native_dim=DIM
            ).meta.training
        )
    )
    assert meta["feature_prior"] == pytest.approx(baseline_prior_weights().tolist())
    torch.testing.assert_close(engine(tmp_path).feature_prior, baseline_prior_weights())

    # a Phase 6 base: the fine-tune is pulled toward the base's weights, and remembers them
    base_path = tmp_path / "base.bin"
    first.save_base(base_path)
    tuned_dir = tmp_path / "tuned"
    tuned = engine(tuned_dir, base_weights=base_path)
    base_w = first.model.feature_weights()
    torch.testing.assert_close(tuned.feature_prior, base_w)
    assert tuned.train(sessions(12, seed=3)).accepted
    torch.testing.assert_close(engine(tuned_dir).feature_prior, base_w)

    # written before the centre was recorded: the baseline prior, unless fine-tuned from a base
    for finetuned, expected in ((False, baseline_prior_weights()), (True, None)):
        old = engine(tmp_path / f"old-{finetuned}")
        old.feature_prior = None
        old.is_finetuned_from_base = finetuned
        old.save_checkpoint()
        loaded = engine(tmp_path / f"old-{finetuned}").feature_prior
        assert (loaded is None) if expected is None else torch.equal(loaded, expected)
