"""fit(): learning on synthetic sessions, clone isolation, replay, stopping, validation gates."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch

from memlane.predictor.data import batched, collate
from memlane.predictor.gates import GateThresholds, evaluate_gates
from memlane.predictor.losses import listnet_loss
from memlane.predictor.metrics import mean_ndcg_at_k
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.predictor.synthetic import make_sessions
from memlane.predictor.train import Constraints, FitConfig, fit

torch.set_num_threads(1)
DIM = 32


def _model(seed: int = 0) -> MemoryScorer:
    return MemoryScorer(ScorerConfig(native_dim=DIM), seed=seed)


def _adam(model: MemoryScorer, lr: float = 3e-3) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=lr, fused=True)


def _batches(n: int, *, signal: str = "features", seed: int = 0, batch_size: int = 16, n_candidates: int = 30):
    sessions = make_sessions(n, signal=signal, native_dim=DIM, seed=seed, n_candidates=n_candidates)
    return batched(sessions, batch_size=batch_size, native_dim=DIM)


def _state(model: MemoryScorer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("signal", ["features", "embedding", "text"])
def test_learns_planted_signal(signal):
    train = _batches(96, signal=signal, seed=1)
    held_out = collate(make_sessions(40, signal=signal, native_dim=DIM, seed=99), native_dim=DIM)
    canary = [collate(make_sessions(10, signal=signal, native_dim=DIM, seed=7), native_dim=DIM)]
    live = _model()
    rng = torch.Generator().manual_seed(0)
    shape = held_out.labels.shape
    random_ndcg = np.mean([mean_ndcg_at_k(torch.rand(shape, generator=rng), held_out.labels) for _ in range(20)])
    result = fit(
        live,
        _adam(live),
        listnet_loss,
        train,
        FitConfig(max_epochs=20, early_stop_patience=3, previous_is_trained=False),
        canary=canary,
    )
    after = mean_ndcg_at_k(result.model.score(held_out), held_out.labels)
    print(
        f"{signal}: random {random_ndcg:.3f} untrained {mean_ndcg_at_k(live.score(held_out), held_out.labels):.3f} "
        f"trained {after:.3f} ({result.steps} steps, {result.elapsed_seconds:.2f}s, {result.stop_reason})"
    )
    assert after > random_ndcg + 0.3 and after > 0.7
    assert result.accepted, result.gates.to_dict()
    assert result.epoch_losses[-1] < result.epoch_losses[0]


def test_live_model_is_never_modified():
    live = _model()
    before = _state(live)
    optimizer = _adam(live)
    result = fit(live, optimizer, listnet_loss, _batches(32), FitConfig(max_epochs=2, early_stop_patience=2))
    assert _same(before, _state(live))
    assert not _same(before, _state(result.model))
    assert result.model is not live and result.optimizer is not optimizer
    assert not optimizer.state  # the handed optimiser was never stepped


@pytest.mark.parametrize("corrupt", ["labels", "features"])
def test_corrupt_training_data_trips_a_gate_and_keeps_the_old_model(corrupt):
    sessions = make_sessions(32, signal="features", native_dim=DIM, seed=3)
    bad = sessions[5]
    if corrupt == "labels":
        labels = bad.labels.copy()
        labels[2] = np.nan
        sessions[5] = dataclasses.replace(bad, labels=labels)
    else:
        feats = bad.features.copy()
        feats[4, 1] = np.nan
        sessions[5] = dataclasses.replace(bad, features=feats)
    canary = [collate(make_sessions(10, native_dim=DIM, seed=8), native_dim=DIM)]
    live = _model()
    before = _state(live)
    result = fit(
        live,
        _adam(live),
        listnet_loss,
        batched(sessions, batch_size=8, native_dim=DIM),
        FitConfig(max_epochs=3, early_stop_patience=3, previous_is_trained=False),
        canary=canary,
    )
    assert result.stop_reason == "non_finite_loss"
    assert not result.accepted and "losses_finite" in result.gates.failed
    serving = result.model if result.accepted else live  # the caller's all-or-nothing swap
    assert serving is live and _same(before, _state(serving))


def test_time_cap_and_early_stop():
    live = _model()
    capped = fit(
        live, _adam(live), listnet_loss, _batches(32), FitConfig(max_seconds=1e-9, max_epochs=5, early_stop_patience=2)
    )
    assert capped.stop_reason == "time_cap" and capped.steps == 0
    frozen = fit(live, _adam(live, lr=0.0), listnet_loss, _batches(32), FitConfig(max_epochs=20, early_stop_patience=2))
    assert frozen.stop_reason == "early_stop" and frozen.epochs == 3
    full = fit(live, _adam(live), listnet_loss, _batches(16), FitConfig(max_epochs=2, early_stop_patience=5))
    assert full.stop_reason == "max_epochs" and full.epochs == 2 and full.steps == 2
    empty = fit(live, _adam(live), listnet_loss, [], FitConfig(max_epochs=2, early_stop_patience=2))
    assert empty.stop_reason == "no_data" and empty.accepted


def test_replay_weighs_a_fifth_of_every_step():
    """Seed "Replay buffer" (verification item 16): each step's loss is ~80 % training batch and
    ~20 % replay batch, however few training batches there are (the linear stage has one)."""
    train = _batches(8, batch_size=1, n_candidates=8)
    replay = _batches(10, batch_size=1, seed=5, n_candidates=8)
    replay_ids = {id(b.labels) for b in replay}
    seen: list[bool] = []
    values: list[float] = []

    def recording_loss(y_pred, y_true, weights=None):
        seen.append(id(y_true) in replay_ids)
        out = listnet_loss(y_pred, y_true, weights)
        values.append(float(out.detach()))
        return out

    live = _model()
    result = fit(
        live, _adam(live), recording_loss, train, FitConfig(max_epochs=3, early_stop_patience=5), replay_batches=replay
    )
    assert result.steps == 24  # replay adds no steps: 8 batches x 3 epochs
    assert len(seen) == 48 and seen[1::2] == [True] * 24 and not any(seen[0::2])
    # every recorded step loss is 0.8 x its training batch's + 0.2 x its replay batch's
    for step, (own, old) in enumerate(zip(values[0::2], values[1::2])):
        assert result.step_losses[step] == pytest.approx(0.8 * own + 0.2 * old, rel=1e-5)
    seen.clear()
    fit(
        live,
        _adam(live),
        recording_loss,
        train,
        FitConfig(max_epochs=1, early_stop_patience=5, replay_share=0.0),
        replay_batches=replay,
    )
    assert len(seen) == 8 and not any(seen)


def test_one_training_batch_is_not_outweighed_by_replay():
    """The linear stage trains all its sessions as one batch. A replayed batch used to be a
    step of its own there, half the steps; now the single batch's loss keeps 80 % of each step."""
    train = _batches(1, batch_size=1, n_candidates=8)
    replay = _batches(4, batch_size=1, seed=5, n_candidates=8)
    live = _model()
    result = fit(
        live, _adam(live), listnet_loss, train, FitConfig(max_epochs=4, early_stop_patience=5), replay_batches=replay
    )
    assert result.steps == 4 and result.epochs == 4


def test_same_seed_same_result():
    train = _batches(32)
    a, b = _model(), _model()
    ra = fit(a, _adam(a), listnet_loss, train, FitConfig(max_epochs=2, early_stop_patience=2, seed=3))
    rb = fit(b, _adam(b), listnet_loss, train, FitConfig(max_epochs=2, early_stop_patience=2, seed=3))
    assert ra.step_losses == rb.step_losses and _same(_state(ra.model), _state(rb.model))


def test_bad_arguments():
    live, other = _model(), _model(1)
    with pytest.raises(ValueError, match="optimizer"):
        fit(live, _adam(other), listnet_loss, _batches(8), FitConfig(max_epochs=1, early_stop_patience=1))
    with pytest.raises(ValueError, match="replay_share"):
        fit(
            live,
            _adam(live),
            listnet_loss,
            _batches(8),
            FitConfig(max_epochs=1, early_stop_patience=1, replay_share=1.0),
        )


# --- the gates on hand-made cases -------------------------------------------------------


@pytest.fixture(scope="module")
def gate_case():
    """A previous model and a canary whose labels are exactly that model's top-5."""
    previous = _model(11)
    canary = collate(make_sessions(10, native_dim=DIM, seed=12), native_dim=DIM)
    scores = previous.score(canary)
    top5 = torch.zeros_like(canary.mask)
    top5.scatter_(1, scores.topk(5, dim=-1).indices, True)
    labels = torch.where(canary.mask, top5.float(), canary.labels)
    return previous, [dataclasses.replace(canary, labels=labels)]


def _edited(model: MemoryScorer, edit) -> MemoryScorer:
    out = copy.deepcopy(model)
    with torch.no_grad():
        edit(out)
    return out


def test_gates_pass_for_an_unchanged_model(gate_case):
    previous, canary = gate_case
    report = evaluate_gates(copy.deepcopy(previous), previous, canary, [0.5, 0.4])
    assert report.passed and report.failed == []
    assert report.gate("top5_overlap").value == 1.0 and report.gate("ndcg_drop").value == pytest.approx(0.0)
    assert report.canary_ndcg == pytest.approx(1.0) and report.gate("score_variance").value > 0
    json.dumps(report.to_dict())


def test_gates_catch_a_reversed_ranking(gate_case):
    previous, canary = gate_case

    def negate(m):
        for layer in (m.gate_out, m.gate_linear):
            layer.weight.neg_()
            layer.bias.neg_()

    report = evaluate_gates(_edited(previous, negate), previous, canary, [0.5])
    assert set(report.failed) == {"top5_overlap", "ndcg_drop"}
    assert report.gate("top5_overlap").value < 0.6 and report.gate("ndcg_drop").value > 0.15


def test_gates_catch_a_collapsed_model(gate_case):
    previous, canary = gate_case

    def collapse(m):
        for layer in (m.gate_out, m.gate_linear):
            layer.weight.zero_()
            layer.bias.fill_(0.3)

    report = evaluate_gates(_edited(previous, collapse), previous, canary, [0.5])
    assert "score_variance" in report.failed and report.gate("score_variance").value == 0.0


def test_gates_catch_non_finite_losses_and_parameters(gate_case):
    previous, canary = gate_case
    assert evaluate_gates(previous, previous, canary, [0.3, float("inf")]).failed == ["losses_finite"]
    broken = _edited(previous, lambda m: m.key.weight[0, 0].fill_(float("nan")))
    failed = evaluate_gates(broken, previous, canary, [0.3]).failed
    assert "parameters_finite" in failed and "score_variance" in failed


def test_gates_skip_what_cannot_apply(gate_case):
    previous, canary = gate_case
    no_canary = evaluate_gates(previous, previous, None, [0.3])
    assert no_canary.passed and all(no_canary.gate(n).skipped for n in ("score_variance", "top5_overlap", "ndcg_drop"))
    cold = evaluate_gates(
        _edited(previous, lambda m: m.gate_out.weight.neg_()), previous, canary, [0.3], previous_is_trained=False
    )
    assert cold.gate("top5_overlap").skipped and cold.gate("ndcg_drop").skipped
    assert not cold.gate("score_variance").skipped
    strict = evaluate_gates(previous, previous, canary, [0.3], thresholds=GateThresholds(min_score_variance=1e9))
    assert strict.failed == ["score_variance"]


def _negate(m: MemoryScorer) -> None:
    for layer in (m.gate_out, m.gate_linear):
        layer.weight.neg_()
        layer.bias.neg_()


def test_the_ndcg_gate_leaves_out_the_sessions_the_previous_model_trained_on():
    """On the canary sessions it trained on, the live model is scored in-sample and the candidate,
    which never sees a canary session, held-out: the NDCG gate compares the others only."""
    previous = _model(11)
    candidate = _edited(previous, _negate)
    canary = collate(make_sessions(10, native_dim=DIM, seed=12), native_dim=DIM)
    labels = torch.zeros_like(canary.labels)
    for i, model in enumerate([previous] * 7 + [candidate] * 3):  # 7 sessions the live model learned
        top5 = model.score(canary)[i].masked_fill(~canary.mask[i], float("-inf")).topk(5).indices
        labels[i, top5] = 1.0
    canary = [dataclasses.replace(canary, labels=torch.where(canary.mask, labels, canary.labels))]
    seen = canary[0].session_ids[:7]
    assert len(set(canary[0].session_ids)) == 10
    whole = evaluate_gates(candidate, previous, canary, [0.5], check_overlap=False)
    assert whole.failed == ["ndcg_drop"] and whole.gate("ndcg_drop").value > 0.15
    held_out = evaluate_gates(candidate, previous, canary, [0.5], check_overlap=False, previous_trained_on=seen)
    assert held_out.passed and held_out.gate("ndcg_drop").value < 0
    assert held_out.canary_ndcg == pytest.approx(1.0) and held_out.previous_canary_ndcg < 0.5
    # variance and overlap still look at the whole canary
    assert held_out.gate("top5_overlap").value == whole.gate("top5_overlap").value
    assert held_out.gate("score_variance").value == whole.gate("score_variance").value
    everything = evaluate_gates(
        candidate, previous, canary, [0.5], check_overlap=False, previous_trained_on=canary[0].session_ids
    )
    gate = everything.gate("ndcg_drop")
    assert everything.passed and gate.skipped and "trained on by the previous model" in gate.detail
    assert everything.canary_ndcg is None and everything.previous_canary_ndcg is None
    # at cold start nothing is compared, whatever the ids
    cold = evaluate_gates(candidate, previous, canary, [0.5], previous_is_trained=False, previous_trained_on=seen)
    assert cold.gate("ndcg_drop").skipped and cold.canary_ndcg == whole.canary_ndcg


def test_grad_masks_train_only_the_feature_residual():
    """The linear stage: only gate_linear's feature columns move; everything else is untouched."""
    train = _batches(48, signal="features", seed=3)
    live = _model()
    masks = live.feature_residual_masks()
    opt = torch.optim.Adam([live.gate_linear.weight], lr=1e-2, fused=True)
    before = _state(live)
    result = fit(
        live,
        opt,
        listnet_loss,
        train,
        FitConfig(max_epochs=10, early_stop_patience=10, previous_is_trained=False),
        Constraints(grad_masks=masks),
    )
    after = result.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"gate_linear.weight"}
    delta = (after["gate_linear.weight"] - before["gate_linear.weight"]).abs()[0]
    n_feat = live.config.num_features
    assert float(delta[:-n_feat].max()) == 0.0 and float(delta[-n_feat:].max()) > 0.0
    assert all(p.requires_grad for p in result.model.parameters())  # restored after the run
    assert _same(before, _state(live))  # the live model is never modified


def test_grad_masks_name_unknown_parameters():
    live = _model()
    with pytest.raises(ValueError, match="unknown parameters"):
        fit(live, _adam(live), listnet_loss, _batches(8), constraints=Constraints(grad_masks={"nope": torch.ones(1)}))
