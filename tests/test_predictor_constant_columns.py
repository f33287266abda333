"""Linear weights on feature columns that never vary within a training session are held at 0.

A listwise loss cannot see such a column (time of day, session gap, ``is_embedded`` when every
candidate has a vector): its gradient is rounding noise, and Adam, which divides a gradient by
its running magnitude, turned that noise into full steps. On the simulated users those weights
had drifted as far as +-16 after 200 sessions (``is_embedded`` to +-10), so a candidate without
a vector in a session whose others had one moved by up to 10 score units. These tests run the
real engine, training loop and anchor fit.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
import pytest
import torch

from memlane.config import predictor as C
from memlane.predictor.anchor import fit_linear_anchor
from memlane.predictor.data import collate, session_constant_columns
from memlane.predictor.engine import PredictorEngine
from memlane.predictor.features import FEATURE_INDEX, NUM_FEATURES
from memlane.predictor.losses import listnet_loss
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.predictor.synthetic import make_sessions
from memlane.predictor.train import Constraints, FitConfig, fit

torch.set_num_threads(1)
DIM = 8
LOSS = partial(listnet_loss, label_scale=C.LABEL_SCALE)
SESSION_CONSTANT = ("tod_sin", "tod_cos", "dow_sin", "dow_cos", "moy_sin", "moy_cos", "log_session_gap_hours")


def sessions(n: int, n_candidates: int = 12, seed: int = 0):
    return make_sessions(n, signal="features", native_dim=DIM, n_candidates=n_candidates, n_relevant=3, seed=seed)


def with_unembedded(session, row: int):
    """The session with candidate ``row``'s ``is_embedded`` column set to 0."""
    feats = session.features.copy()
    feats[row, FEATURE_INDEX["is_embedded"]] = 0.0
    return dataclasses.replace(session, features=feats)


def test_session_constant_columns_ignore_padding_and_see_one_varying_session():
    # slates of 12 and 8 candidates: the short one is padded with zero rows
    batch = collate(sessions(6) + sessions(4, n_candidates=8, seed=1), native_dim=DIM)
    constant = session_constant_columns([batch])
    assert constant.shape == (NUM_FEATURES,) and constant.dtype == torch.bool
    for name in (*SESSION_CONSTANT, "is_embedded", "pinned", "mentions_project"):
        assert bool(constant[FEATURE_INDEX[name]]), name
    for name in ("log_age_days", "importance", "baseline_rank_inv", "is_superseded"):
        assert not bool(constant[FEATURE_INDEX[name]]), name
    # one session with a candidate without a vector makes is_embedded learnable
    mixed = sessions(3, seed=2)
    mixed[1] = with_unembedded(mixed[1], 4)
    both = session_constant_columns([batch, collate(mixed, native_dim=DIM)])
    assert not bool(both[FEATURE_INDEX["is_embedded"]])
    assert bool(both[FEATURE_INDEX["tod_sin"]])
    assert bool(session_constant_columns([]).all())


def test_fit_holds_the_named_weights_at_zero_despite_old_momentum():
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=1)
    batch = collate(sessions(20), native_dim=DIM)
    constant = session_constant_columns([batch])
    with torch.no_grad():  # a checkpoint written before: drifted weights on constant columns
        cols = model.gate_linear.weight[0, -NUM_FEATURES:]
        cols[constant] = torch.linspace(-8.0, 8.0, int(constant.sum()))
    opt = torch.optim.Adam([model.gate_linear.weight], lr=C.LEARNING_RATE)
    # an earlier run left momentum on every feature weight
    first = fit(
        model,
        opt,
        LOSS,
        [batch],
        FitConfig(max_epochs=5, early_stop_patience=5, max_seconds=1e9),
        Constraints(grad_masks=model.feature_residual_masks()),
    )
    model, opt = first.model, first.optimizer
    before = model.feature_weights()
    result = fit(
        model,
        opt,
        LOSS,
        [batch],
        FitConfig(max_epochs=30, early_stop_patience=30, max_seconds=1e9),
        Constraints(grad_masks=model.feature_residual_masks(), held_at_zero=model.feature_column_mask(constant)),
    )
    after = result.model.feature_weights()
    assert torch.count_nonzero(after[constant]) == 0
    assert not torch.equal(after[~constant], before[~constant])  # the rest trained
    assert torch.equal(model.feature_weights(), before)  # the live model is untouched
    with pytest.raises(ValueError, match="held_at_zero"):
        fit(
            model,
            opt,
            LOSS,
            [batch],
            FitConfig(max_epochs=1),
            Constraints(held_at_zero={"nope": torch.ones(1, dtype=torch.bool)}),
        )
    with pytest.raises(ValueError, match="columns"):
        model.feature_column_mask(torch.ones(NUM_FEATURES + 1, dtype=torch.bool))


def test_the_anchor_holds_the_same_columns_at_zero():
    batch = collate(sessions(20), native_dim=DIM)
    constant = session_constant_columns([batch])
    init = torch.full((NUM_FEATURES,), 0.5)
    kw = dict(lr=C.LEARNING_RATE, max_epochs=40, early_stop_patience=40, max_seconds=1e9)
    held = fit_linear_anchor([batch], init, LOSS, held_at_zero=constant, **kw)
    free = fit_linear_anchor([batch], init, LOSS, **kw)
    assert torch.count_nonzero(held[constant]) == 0
    assert torch.count_nonzero(free[constant]) > 0  # without it they keep (and move) their value
    # the columns that vary train the same way (the held ones cannot change a ranking)
    torch.testing.assert_close(held[~constant], free[~constant], atol=1e-4, rtol=1e-3)
    with pytest.raises(ValueError, match="held_at_zero"):
        fit_linear_anchor([batch], init, LOSS, held_at_zero=torch.ones(3, dtype=torch.bool), **kw)


def test_a_candidate_without_a_vector_is_not_moved_by_an_unlearned_weight(tmp_path):
    """The linear stage trained on sessions where every candidate has a vector: a later
    candidate without one scores as it would with one."""
    engine = PredictorEngine(tmp_path, embedding_model_id="test-8", native_dim=DIM)
    report = engine.train(sessions(40), save=False)
    assert report.accepted and report.stage == "linear"
    w = engine.model.feature_weights()
    for name in (*SESSION_CONSTANT, "is_embedded"):
        assert float(w[FEATURE_INDEX[name]]) == 0.0, name
    assert float(w[FEATURE_INDEX["importance"]]) != 0.0  # the planted signal was learned
    probe = sessions(1, seed=9)[0]
    np.testing.assert_allclose(engine.score(with_unembedded(probe, 5)), engine.score(probe), rtol=1e-6, atol=1e-6)


def test_the_full_stage_holds_them_too(tmp_path):
    """From FULL_MODEL_MIN_SESSIONS on every parameter trains; the linear gate's weights on the
    constant columns (added to the score) and the anchor's stay at 0."""
    engine = PredictorEngine(tmp_path, embedding_model_id="test-8", native_dim=DIM)
    report = engine.train(sessions(C.FULL_MODEL_MIN_SESSIONS, n_candidates=8), save=False, max_epochs=2)
    assert report.stage == "full"
    assert engine.model.has_anchor
    for name in (*SESSION_CONSTANT, "is_embedded"):
        i = FEATURE_INDEX[name]
        assert float(engine.model.feature_weights()[i]) == 0.0, name
        assert float(engine.model.anchor[i]) == 0.0, name
