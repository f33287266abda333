"""``fit()``: train a clone of the live model, then run the validation gates.

Seed "Negative Memory Signals" -> "Training schedule": training runs on a cloned parameter
set, never the live one; at most 30 s; replayed older sessions are mixed in (~20 %); the
result is offered for an all-or-nothing swap only if every gate of
:mod:`memlane.predictor.gates` passes. ``fit`` is handed the model, optimiser, loss and
batches (allRank style) and builds none of them::

    result = fit(live, torch.optim.Adam(live.parameters(), lr=3e-3), listnet_loss, batches,
                 max_epochs=50, early_stop_patience=5, canary=canary_batches)
    if result.accepted:
        live = result.model          # atomic pointer swap; otherwise keep serving `live`
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from memlane.predictor.data import SessionBatch
from memlane.predictor.gates import GateReport, GateThresholds, evaluate_gates
from memlane.predictor.losses import LossFn
from memlane.predictor.metrics import ndcg_at_k
from memlane.predictor.model import MemoryScorer

__all__ = ["FitResult", "fit"]


def _validation_ndcg(model: MemoryScorer, batches: Sequence[SessionBatch], k: int = 10) -> float:
    """Mean NDCG@k over validation sessions with a positive label (0.0 when none)."""
    model.eval()
    total, count = 0.0, 0
    for b in batches:
        informative = b.labels.clamp_min(0.0).amax(dim=-1) > 0
        if bool(informative.any()):
            total += float(ndcg_at_k(model.score(b), b.labels, k)[informative].sum())
            count += int(informative.sum())
    return total / count if count else 0.0


@dataclass
class FitResult:
    """Outcome of one :func:`fit` run.

    Attributes:
        model: the trained clone (the candidate); the live model is never modified.
        optimizer: the clone's optimiser (its state can seed the next run).
        gates: the validation gate report; swap only if ``gates.passed``.
        step_losses: loss of every optimiser step (nats), in order.
        epoch_losses: mean loss of every finished epoch (nats).
        epochs: epochs started.
        steps: optimiser steps taken.
        stop_reason: ``"max_epochs"``, ``"early_stop"``, ``"time_cap"``,
            ``"non_finite_loss"`` or ``"no_data"``.
        elapsed_seconds: wall time of training, gates excluded (s).
        validation_ndcg: mean validation NDCG@10 before training (index 0) and after each epoch.
        best_epoch: the epoch whose weights the candidate carries (0 = the starting weights);
            None without a validation set.
    """

    @property
    def improved(self) -> bool:
        """False when a validation set showed no epoch better than the starting weights."""
        return self.best_epoch is None or self.best_epoch > 0

    model: MemoryScorer
    optimizer: torch.optim.Optimizer
    gates: GateReport
    step_losses: list[float] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    epochs: int = 0
    steps: int = 0
    stop_reason: str = "max_epochs"
    elapsed_seconds: float = 0.0
    validation_ndcg: list[float] = field(default_factory=list)
    best_epoch: int | None = None

    @property
    def accepted(self) -> bool:
        """True when every gate passed (the caller may swap the live model)."""
        return self.gates.passed


def _clone(model: MemoryScorer, optimizer: torch.optim.Optimizer) -> tuple[MemoryScorer, torch.optim.Optimizer]:
    # One deepcopy with a shared memo: the copied optimiser points at the copied parameters.
    clone, clone_opt = copy.deepcopy((model, optimizer))
    owned = {id(p) for p in clone.parameters()}
    if not all(id(p) in owned for g in clone_opt.param_groups for p in g["params"]):
        raise ValueError("optimizer must be built on the model's own parameters")
    return clone, clone_opt


def _penalty(prior: tuple[torch.Tensor, float] | None, bilinear_l2: float, model: MemoryScorer
             ) -> Callable[[MemoryScorer], torch.Tensor] | None:
    """The MAP terms added to every step's loss: the Gaussian prior on the linear feature
    weights and the L2 on the bilinear W (see :func:`fit`); None when neither applies."""
    if not (math.isfinite(bilinear_l2) and bilinear_l2 >= 0):
        raise ValueError(f"bilinear_l2 must be finite and >= 0, got {bilinear_l2}")
    centre, lam = (None, 0.0) if prior is None else prior
    if centre is not None:
        centre = centre.detach().to(model.gate_linear.weight.dtype).reshape(-1)
        if centre.shape[0] != model.config.num_features or not math.isfinite(lam) or lam < 0:
            raise ValueError(f"prior must be ([{model.config.num_features}], lam >= 0), got "
                             f"({tuple(centre.shape)}, {lam})")
    if centre is None and bilinear_l2 == 0:
        return None

    def penalty(m: MemoryScorer) -> torch.Tensor:
        total = bilinear_l2 * (m.context_bilinear ** 2).sum()
        if centre is not None:
            total = total + lam * ((m.feature_weight_view() - centre) ** 2).sum()
        return total
    return penalty


def _zero(held: Mapping[torch.nn.Parameter, torch.Tensor]) -> None:
    with torch.no_grad():
        for p, m in held.items():
            p.masked_fill_(m, 0.0)


def _clamp_non_positive(bounded: Mapping[torch.nn.Parameter, torch.Tensor]) -> None:
    """Project the masked entries onto ``<= 0`` (projected gradient descent)."""
    with torch.no_grad():
        for p, m in bounded.items():
            p.masked_fill_(m & (p > 0), 0.0)


def _epoch_plan(train: Sequence[SessionBatch], rng: random.Random) -> list[SessionBatch]:
    plan = list(train)
    rng.shuffle(plan)
    return plan


def _mixed_loss(loss_fn: LossFn, candidate: MemoryScorer, batch: SessionBatch,
                replay: Sequence[SessionBatch], share: float, rng: random.Random) -> torch.Tensor:
    """One step's loss: ``(1 - share) * L(batch) + share * L(replay batch)`` (seed "Replay
    buffer for drift recovery": each training batch ~80 % recent sessions, ~20 % replay).

    The replay batch is drawn uniformly from ``replay`` for every step; with no replay (or
    ``share`` 0) the loss is the batch's own.
    """
    loss = loss_fn(candidate(batch), batch.labels, batch.confidence)
    if not replay or share <= 0:
        return loss
    old = replay[rng.randrange(len(replay))] if len(replay) > 1 else replay[0]
    return (1.0 - share) * loss + share * loss_fn(candidate(old), old.labels, old.confidence)


def fit(
    model: MemoryScorer,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    train_batches: Sequence[SessionBatch],
    *,
    max_seconds: float = 30.0,
    max_epochs: int = 50,
    early_stop_patience: int = 5,
    canary: Sequence[SessionBatch] | None = None,
    replay_batches: Sequence[SessionBatch] | None = None,
    replay_share: float = 0.2,
    previous_is_trained: bool = True,
    check_overlap: bool = True,
    thresholds: GateThresholds = GateThresholds(),
    max_grad_norm: float | None = 5.0,
    min_improvement: float = 1e-4,
    seed: int = 0,
    validation: Sequence[SessionBatch] | None = None,
    grad_masks: Mapping[str, torch.Tensor] | None = None,
    anchor: torch.Tensor | None = None,
    held_at_zero: Mapping[str, torch.Tensor] | None = None,
    non_positive: Mapping[str, torch.Tensor] | None = None,
    prior: tuple[torch.Tensor, float] | None = None,
    memory_basis: torch.Tensor | None = None,
    bilinear_l2: float = 0.0,
    previous_trained_on: Collection[str] = (),
) -> FitResult:
    """Train a deep copy of ``model`` and gate it against ``model`` on the canary set.

    Args:
        model: the live model; read only (its clone trains).
        optimizer: an optimiser over ``model.parameters()``; cloned together with the model.
        loss_fn: ``(y_pred [B, N], y_true [B, N], session_weights [B]) -> scalar``, e.g.
            :func:`~memlane.predictor.losses.listnet_loss`; called with ``batch.confidence``.
        train_batches: new sessions, collated.
        max_seconds: wall-clock cap on training (s); checked before every step.
        max_epochs: passes over ``train_batches``.
        early_stop_patience: epochs without the mean epoch loss improving by
            ``min_improvement`` (nats) before stopping.
        canary: canary batches for the gates (seed "Canary Evaluation Set").
        previous_trained_on: ids of the sessions ``model``'s lineage trained on; the canary
            NDCG gate leaves them out (:func:`~memlane.predictor.gates.evaluate_gates`).
        replay_batches: older sessions to rehearse (the replay buffer, collated): every step
            adds the loss of one of them, drawn at random, to the training batch's, weighted
            so that it is ``replay_share`` of the step's loss (:func:`_mixed_loss`).
        replay_share: the replay buffer's weight in every step's loss, in ``[0, 1)`` (the seed's
            ~20 %). Until 2026-11-23 replayed batches were extra steps, ``round(len(train) *
            share / (1 - share))`` of them per epoch, at least 1: the linear stage trains its
            sessions as one batch, so one step in two was the 20 replayed sessions alone.
        previous_is_trained: False at cold start (the comparison gates are skipped).
        check_overlap: enforce the top-5 overlap gate (see :func:`evaluate_gates`).
        thresholds: gate thresholds.
        max_grad_norm: gradient-norm clip, or ``None``.
        min_improvement: see ``early_stop_patience``.
        seed: seeds the batch order and replay sampling.
        validation: held-out batches; when given, early stopping and the returned weights
            follow their mean NDCG@10 (the best epoch is restored; patience in epochs) instead
            of the training loss.
        grad_masks: ``{parameter name: mask of that parameter's shape}``; when given, only the
            named parameters train and each gradient is multiplied by its mask before the
            clip and the step (entries with mask 0 keep their values). The optimiser must
            hold exactly those parameters (e.g. :meth:`MemoryScorer.feature_residual_masks`
            with an optimiser over ``gate_linear.weight``). Other parameters are taken out of
            autograd for the run (faster backward) and put back afterwards.
        anchor: float ``[F]`` linear anchor of the clone (:meth:`MemoryScorer.set_anchor`),
            set before training, so validation and the gates judge the ensemble the clone
            will serve; None: the clone has none (the linear stage).
        held_at_zero: ``{parameter name: bool mask of that parameter's shape}``: entries set
            to 0 on the clone before training and put back to 0 after every step, whatever
            their gradient or Adam's momentum from earlier runs did to them.
            The linear stage holds the weights of :func:`~memlane.predictor.data.
            session_constant_columns` there: Adam divides a gradient by its own running
            magnitude, so the rounding noise of such a column became full steps of the
            learning rate, and over 200 simulated sessions those weights drifted as far as
            +-16 (``is_embedded`` to +-10: a candidate without a vector would then be moved
            by that much in a session where the others have one; docs/predictor.md).
        non_positive: ``{parameter name: bool mask of that parameter's shape}``: entries
            projected onto ``<= 0`` on the clone before training and after every step (a sign
            constraint by projected gradient descent). The engine passes the linear gate's
            weights of :data:`~memlane.predictor.settings.NON_POSITIVE_FEATURES`
            (``log_age_days``: an older memory never scores higher for being older;
            docs/predictor.md, "Age may only count against a memory").
        prior: ``(centre [F], lam)``: adds ``lam * ||w - centre||^2`` over the linear gate's
            feature weights ``w`` (:meth:`MemoryScorer.feature_weight_view`) to every step's
            loss, a Gaussian prior on them (MAP estimation; the engine passes the weights the
            user's model started from and ``lam = PRIOR_STRENGTH / training sessions``). The
            losses recorded include it.
        memory_basis: float ``[E, r]``: the clone's bilinear subspace for this run
            (:meth:`MemoryScorer.set_memory_basis`, which carries W over), set before
            training; None: the clone keeps the live model's.
        bilinear_l2: adds ``bilinear_l2 * ||W||^2`` over the bilinear term's W
            (``context_bilinear``) to every step's loss, a Gaussian prior centred at 0 (the
            engine passes :func:`~memlane.predictor.engine.bilinear_l2`,
            ``BILINEAR_PRIOR_STRENGTH / sessions ** BILINEAR_PRIOR_EXPONENT``); >= 0.

    Returns:
        a :class:`FitResult`; training stops at the first non-finite loss (the
        ``losses_finite`` gate then fails).

    Raises:
        ValueError: bad arguments, or an optimiser not built on ``model``'s parameters.
    """
    if not 0.0 <= replay_share < 1.0:
        raise ValueError(f"replay_share must be in [0, 1), got {replay_share}")
    if max_epochs < 1 or early_stop_patience < 1 or max_seconds <= 0:
        raise ValueError("max_epochs and early_stop_patience must be >= 1, max_seconds > 0")
    candidate, cand_opt = _clone(model, optimizer)
    candidate.set_anchor(anchor)
    if memory_basis is not None:
        candidate.set_memory_basis(memory_basis)
    named = dict(candidate.named_parameters())
    masks: dict[torch.nn.Parameter, torch.Tensor] = {}
    if grad_masks is not None:
        unknown = set(grad_masks) - set(named)
        if unknown:
            raise ValueError(f"grad_masks names unknown parameters: {sorted(unknown)}")
        masks = {named[n]: m.to(named[n].dtype) for n, m in grad_masks.items()}
        for n, p in named.items():
            p.requires_grad_(n in grad_masks)
    for what, masks_by_name in (("held_at_zero", held_at_zero), ("non_positive", non_positive)):
        unknown = set(masks_by_name or {}) - set(named)
        if unknown:
            raise ValueError(f"{what} names unknown parameters: {sorted(unknown)}")
    held = {named[n]: m.bool() for n, m in (held_at_zero or {}).items()}
    bounded = {named[n]: m.bool() for n, m in (non_positive or {}).items()}
    _zero(held)
    _clamp_non_positive(bounded)
    penalty = _penalty(prior, bilinear_l2, candidate)
    result = FitResult(candidate, cand_opt, GateReport(()))
    rng = random.Random(seed)
    start = time.monotonic()
    best, stale = math.inf, 0
    if not train_batches:
        result.stop_reason = "no_data"
    best_state = None
    best_val = -math.inf
    if validation:
        best_val = _validation_ndcg(candidate, validation)
        result.validation_ndcg.append(best_val)
        best_state, result.best_epoch = copy.deepcopy(candidate.state_dict()), 0
    candidate.train()
    while train_batches and result.epochs < max_epochs and result.stop_reason == "max_epochs":
        result.epochs += 1
        epoch: list[float] = []
        for batch in _epoch_plan(train_batches, rng):
            if time.monotonic() - start >= max_seconds:
                result.stop_reason = "time_cap"
                break
            loss = _mixed_loss(loss_fn, candidate, batch, replay_batches or (), replay_share, rng)
            if penalty is not None:
                loss = loss + penalty(candidate)
            value = float(loss.detach())
            result.step_losses.append(value)
            epoch.append(value)
            if not math.isfinite(value):
                result.stop_reason = "non_finite_loss"
                break
            cand_opt.zero_grad(set_to_none=True)
            loss.backward()
            for p, m in masks.items():
                if p.grad is not None:
                    p.grad.mul_(m)
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(candidate.parameters(), max_grad_norm)
            cand_opt.step()
            _zero(held)
            _clamp_non_positive(bounded)
            result.steps += 1
        if epoch and result.stop_reason == "max_epochs":
            mean = sum(epoch) / len(epoch)
            result.epoch_losses.append(mean)
            if validation:
                val = _validation_ndcg(candidate, validation)
                candidate.train()
                result.validation_ndcg.append(val)
                if val > best_val + min_improvement:
                    best_val, stale = val, 0
                    best_state, result.best_epoch = copy.deepcopy(candidate.state_dict()), result.epochs
                else:
                    stale += 1
                    if stale >= early_stop_patience:
                        result.stop_reason = "early_stop"
            elif mean < best - min_improvement:
                best, stale = mean, 0
            else:
                stale += 1
                if stale >= early_stop_patience:
                    result.stop_reason = "early_stop"
    if best_state is not None and result.stop_reason != "non_finite_loss":
        candidate.load_state_dict(best_state)
    for p in named.values():
        p.requires_grad_(True)
    result.elapsed_seconds = time.monotonic() - start
    candidate.eval()
    result.gates = evaluate_gates(
        candidate,
        model,
        canary,
        result.step_losses,
        thresholds=thresholds,
        previous_is_trained=previous_is_trained,
        check_overlap=check_overlap,
        previous_trained_on=previous_trained_on,
    )
    return result
