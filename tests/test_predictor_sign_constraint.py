"""The linear weight of ``log_age_days`` is kept at or below 0: age may only count against a memory.

On LoCoMo the learning questions come before the held-out ones in the order their evidence
appears, so every conversation's model learned "older is better" (+0.15 to +0.51) and the
held-out questions needed the opposite (docs/predictor.md, "Age may only count against a
memory"). These tests run the real training loop, anchor fit and engine on sessions where the
relevant candidates are the older ones, and on sessions where they are the newer ones.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
import pytest
import torch

from memlane.config import predictor as C
from memlane.predictor.anchor import fit_linear_anchor
from memlane.predictor.data import collate
from memlane.predictor.engine import PredictorEngine, non_positive_columns
from memlane.predictor.features import FEATURE_INDEX, NUM_FEATURES
from memlane.predictor.losses import listnet_loss
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.predictor.synthetic import make_sessions
from memlane.predictor.train import Constraints, FitConfig, fit

torch.set_num_threads(1)
DIM = 8
AGE = FEATURE_INDEX["log_age_days"]
LOSS = partial(listnet_loss, label_scale=C.LABEL_SCALE)


def aged_sessions(n: int, *, older_is_better: bool, seed: int = 0):
    """Sessions whose relevant candidates are older (or newer) than the rest: log(1 + days)
    about 4 (~two months) against about 1 (~two days), with noise."""
    rng = np.random.default_rng(seed)
    out = []
    for s in make_sessions(n, signal="features", native_dim=DIM, n_candidates=12, n_relevant=3, seed=seed):
        feats = s.features.copy()
        relevant = s.labels > 0
        old, new = 4.0, 1.0
        feats[:, AGE] = np.where(relevant == older_is_better, old, new) + rng.normal(0, 0.3, len(relevant))
        out.append(dataclasses.replace(s, features=np.maximum(feats, 0.0).astype(np.float32)))
    return out


def train_linear(batch, non_positive=None):
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=1)
    opt = torch.optim.Adam([model.gate_linear.weight], lr=C.LEARNING_RATE)
    result = fit(
        model,
        opt,
        LOSS,
        [batch],
        FitConfig(max_epochs=60, early_stop_patience=60, max_seconds=1e9),
        Constraints(grad_masks=model.feature_residual_masks(), non_positive=non_positive),
    )
    return model, result


def test_the_engine_bounds_exactly_the_configured_features():
    mask = non_positive_columns()
    assert mask.shape == (NUM_FEATURES,) and mask.dtype == torch.bool
    assert [i for i in range(NUM_FEATURES) if mask[i]] == [FEATURE_INDEX[n] for n in C.NON_POSITIVE_FEATURES]
    assert bool(mask[AGE])


def test_fit_keeps_the_age_weight_at_or_below_zero_when_older_looks_better():
    batch = collate(aged_sessions(30, older_is_better=True), native_dim=DIM)
    model, free = train_linear(batch)
    assert float(free.model.feature_weights()[AGE]) > 0.1  # unconstrained, the data says "older"
    _, bounded = train_linear(batch, non_positive=model.feature_column_mask(non_positive_columns()))
    w = bounded.model.feature_weights()
    assert float(w[AGE]) == 0.0  # held at the bound
    others = torch.ones(NUM_FEATURES, dtype=torch.bool)
    others[AGE] = False
    assert torch.count_nonzero(w[others]) > 0  # everything else still trained
    assert bounded.accepted


def test_fit_learns_a_negative_age_weight_freely_when_newer_is_better():
    batch = collate(aged_sessions(30, older_is_better=False), native_dim=DIM)
    model, free = train_linear(batch)
    _, bounded = train_linear(batch, non_positive=model.feature_column_mask(non_positive_columns()))
    assert float(bounded.model.feature_weights()[AGE]) < -0.1
    # the bound never binds: the same weights as without it
    torch.testing.assert_close(bounded.model.feature_weights(), free.model.feature_weights())


def test_fit_projects_a_positive_starting_weight_and_rejects_unknown_parameters():
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=1)
    with torch.no_grad():  # a model trained before the bound existed
        model.gate_linear.weight[0, -NUM_FEATURES + AGE] = 2.0
    opt = torch.optim.Adam([model.gate_linear.weight], lr=C.LEARNING_RATE)
    batch = collate(aged_sessions(10, older_is_better=True), native_dim=DIM)
    result = fit(
        model,
        opt,
        LOSS,
        [batch],
        FitConfig(max_epochs=1, early_stop_patience=1, max_seconds=1e9),
        Constraints(
            grad_masks=model.feature_residual_masks(), non_positive=model.feature_column_mask(non_positive_columns())
        ),
    )
    assert float(result.model.feature_weights()[AGE]) == 0.0
    assert float(model.feature_weights()[AGE]) == 2.0  # the live model is untouched
    with pytest.raises(ValueError, match="non_positive"):
        fit(
            model,
            opt,
            LOSS,
            [batch],
            FitConfig(max_epochs=1),
            Constraints(non_positive={"nope": torch.ones(1, dtype=torch.bool)}),
        )


def test_the_anchor_keeps_the_same_bound():
    kw = dict(lr=C.LEARNING_RATE, max_epochs=60, early_stop_patience=60, max_seconds=1e9)
    init = torch.zeros(NUM_FEATURES)
    older = collate(aged_sessions(30, older_is_better=True), native_dim=DIM)
    assert float(fit_linear_anchor([older], init, LOSS, **kw)[AGE]) > 0.1
    assert float(fit_linear_anchor([older], init, LOSS, non_positive=non_positive_columns(), **kw)[AGE]) == 0.0
    start = init.clone()
    start[AGE] = 1.5
    assert float(fit_linear_anchor([older], start, LOSS, non_positive=non_positive_columns(), **kw)[AGE]) == 0.0
    newer = collate(aged_sessions(30, older_is_better=False), native_dim=DIM)
    free = fit_linear_anchor([newer], init, LOSS, **kw)
    bounded = fit_linear_anchor([newer], init, LOSS, non_positive=non_positive_columns(), **kw)
    assert float(bounded[AGE]) < -0.1
    torch.testing.assert_close(bounded, free)
    with pytest.raises(ValueError, match="non_positive"):
        fit_linear_anchor([older], init, LOSS, non_positive=torch.ones(3, dtype=torch.bool), **kw)


def test_the_engine_never_serves_a_model_that_prefers_older_memories(tmp_path):
    """Linear stage, then the full stage (every parameter trains; the linear gate's column and
    the anchor keep the bound)."""
    engine = PredictorEngine(tmp_path, embedding_model_id="test-8", native_dim=DIM)
    report = engine.train(aged_sessions(40, older_is_better=True), save=False)
    assert report.accepted and report.stage == "linear"
    assert float(engine.model.feature_weights()[AGE]) == 0.0
    newer = PredictorEngine(tmp_path / "newer", embedding_model_id="test-8", native_dim=DIM)
    assert newer.train(aged_sessions(40, older_is_better=False), save=False).accepted
    assert float(newer.model.feature_weights()[AGE]) < 0.0  # learned freely
    # 10 epochs: the bound is checked on an accepted full run (with schema v7's 24 columns, two
    # epochs did not beat the untrained model's validation NDCG of 0.964 and the run was refused)
    full = engine.train(
        aged_sessions(C.FULL_MODEL_MIN_SESSIONS, older_is_better=True, seed=3), save=False, max_epochs=10
    )
    assert full.stage == "full" and engine.model.has_anchor, full
    assert float(engine.model.feature_weights()[AGE]) <= 0.0
    assert float(engine.model.anchor[AGE]) <= 0.0
    # the gate MLP, which cannot be held to a sign, does not see age at all
    mlp = engine.model.gate_hidden.weight.detach()[:, -NUM_FEATURES:]
    assert torch.count_nonzero(mlp[:, AGE]) == 0
    assert torch.count_nonzero(mlp) > 0  # while it sees the other features


def test_the_mlp_feature_mask_marks_every_hidden_unit_of_the_named_columns():
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=1)
    mask = model.mlp_feature_mask(non_positive_columns())["gate_hidden.weight"]
    assert mask.shape == model.gate_hidden.weight.shape and mask.dtype == torch.bool
    assert int(mask.sum()) == model.config.gate_hidden
    assert bool(mask[:, -NUM_FEATURES + AGE].all())
    with pytest.raises(ValueError, match="columns"):
        model.mlp_feature_mask(torch.ones(NUM_FEATURES + 1, dtype=torch.bool))


def test_a_base_whose_mlp_learned_age_loses_it_at_the_next_run(tmp_path):
    """A Phase 6 base (or a checkpoint) written before the bound: its gate MLP weighs age and
    its output layer is live. The next run, a linear-stage fine-tune that does not train the
    MLP, takes age out of it, so older memories no longer score higher through the MLP."""
    engine = PredictorEngine(tmp_path, embedding_model_id="test-8", native_dim=DIM)
    with torch.no_grad():
        engine.model.gate_hidden.weight[:, -NUM_FEATURES + AGE] = 1.0
        engine.model.gate_out.weight.fill_(0.5)
    probe = aged_sessions(1, older_is_better=True, seed=5)[0]
    older = np.argsort(-probe.features[:, AGE])
    before = engine.score(probe)
    report = engine.train(aged_sessions(40, older_is_better=False), save=False)
    assert report.accepted and report.stage == "linear"
    assert torch.count_nonzero(engine.model.gate_hidden.weight.detach()[:, -NUM_FEATURES + AGE]) == 0
    assert float(engine.model.gate_out.weight.detach().abs().sum()) > 0  # the rest of the MLP is kept
    after = engine.score(probe)
    # the oldest candidates lost the lead the MLP gave them
    assert after[older[:3]].mean() - after.mean() < before[older[:3]].mean() - before.mean()
