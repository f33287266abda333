"""``fit()``: train a clone of the live model, then run the validation gates.

Seed "Negative Memory Signals" -> "Training schedule": training runs on a cloned parameter
set, never the live one; at most 30 s; replayed older sessions are mixed in (~20 %); the
result is offered for an all-or-nothing swap only if every gate of
:mod:`memlane.predictor.gates` passes. ``fit`` is handed the model, optimiser, loss and
batches (allRank style) and builds none of them::

    result = fit(live, torch.optim.Adam(live.parameters(), lr=3e-3), listnet_loss, batches,
                 FitConfig(max_epochs=50, early_stop_patience=5), canary=canary_batches)
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

__all__ = ["Constraints", "FitConfig", "FitResult", "fit"]


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


def _penalty(
    prior: tuple[torch.Tensor, float] | None, bilinear_l2: float, model: MemoryScorer
) -> Callable[[MemoryScorer], torch.Tensor] | None:
    """The MAP terms added to every step's loss: the Gaussian prior on the linear feature
    weights and the L2 on the bilinear W (see :class:`Constraints`); None when neither applies."""
    centre, lam = (None, 0.0) if prior is None else prior
    if centre is not None:
        centre = centre.detach().to(model.gate_linear.weight.dtype).reshape(-1)
        if centre.shape[0] != model.config.num_features or not math.isfinite(lam) or lam < 0:
            raise ValueError(
                f"prior must be ([{model.config.num_features}], lam >= 0), got ({tuple(centre.shape)}, {lam})"
            )
    if centre is None and bilinear_l2 == 0:
        return None

    def penalty(m: MemoryScorer) -> torch.Tensor:
        total = bilinear_l2 * (m.context_bilinear**2).sum()
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


def _mixed_loss(
    loss_fn: LossFn,
    candidate: MemoryScorer,
    batch: SessionBatch,
    replay: Sequence[SessionBatch],
    share: float,
    rng: random.Random,
) -> torch.Tensor:
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


@dataclass(frozen=True)
class FitConfig:
    """How one :func:`fit` run trains and how its candidate is judged.

    Attributes:
        max_seconds: wall-clock cap on training (s); checked before every step.
        max_epochs: passes over the training batches.
        early_stop_patience: epochs without improvement before stopping: of the mean epoch
            loss by ``min_improvement`` (nats), or with a validation set, of its mean NDCG@10
            by ``min_improvement``.
        min_improvement: see ``early_stop_patience``.
        max_grad_norm: gradient-norm clip, or ``None``.
        seed: seeds the batch order and replay sampling.
        replay_share: the replay buffer's weight in every step's loss, in ``[0, 1)`` (the
            seed's ~20 %; :func:`_mixed_loss`).
        thresholds: gate thresholds.
        previous_is_trained: False at cold start (the comparison gates are skipped).
        check_overlap: enforce the top-5 overlap gate (see :func:`evaluate_gates`).

    Raises:
        ValueError: ``replay_share`` outside ``[0, 1)``, ``max_epochs`` or
            ``early_stop_patience`` < 1, ``max_seconds`` <= 0.
    """

    max_seconds: float = 30.0
    max_epochs: int = 50
    early_stop_patience: int = 5
    min_improvement: float = 1e-4
    max_grad_norm: float | None = 5.0
    seed: int = 0
    replay_share: float = 0.2
    thresholds: GateThresholds = field(default_factory=GateThresholds)
    previous_is_trained: bool = True
    check_overlap: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.replay_share < 1.0:
            raise ValueError(f"replay_share must be in [0, 1), got {self.replay_share}")
        if self.max_epochs < 1 or self.early_stop_patience < 1 or self.max_seconds <= 0:
            raise ValueError("max_epochs and early_stop_patience must be >= 1, max_seconds > 0")


@dataclass(frozen=True)
class Constraints:
    """What the clone is set to before training and held to while it trains (all optional).

    Attributes:
        anchor: float ``[F]`` linear anchor of the clone (:meth:`MemoryScorer.set_anchor`),
            set before training, so validation and the gates judge the ensemble the clone
            will serve; None: the clone has none (the linear stage).
        memory_basis: float ``[E, r]``: the clone's bilinear subspace for this run
            (:meth:`MemoryScorer.set_memory_basis`, which carries W over), set before
            training; None: the clone keeps the live model's.
        grad_masks: ``{parameter name: mask of that parameter's shape}``; when given, only the
            named parameters train and each gradient is multiplied by its mask before the
            clip and the step (entries with mask 0 keep their values). The optimiser must
            hold exactly those parameters (e.g. :meth:`MemoryScorer.feature_residual_masks`
            with an optimiser over ``gate_linear.weight``). Other parameters are taken out of
            autograd for the run (faster backward) and put back afterwards.
        held_at_zero: ``{parameter name: bool mask of that parameter's shape}``: entries set
            to 0 on the clone before training and put back to 0 after every step, whatever
            their gradient or Adam's momentum from earlier runs did to them. The linear stage
            holds the weights of :func:`~memlane.predictor.data.session_constant_columns`
            there: their true gradient is 0, and Adam, dividing a gradient by its own running
            magnitude, would turn the rounding noise into full learning-rate steps
            (docs/predictor.md, "Weights no session can teach are held at 0").
        non_positive: ``{parameter name: bool mask of that parameter's shape}``: entries
            projected onto ``<= 0`` on the clone before training and after every step (a sign
            constraint by projected gradient descent). The engine passes the linear gate's
            weights of :data:`~memlane.config.predictor.NON_POSITIVE_FEATURES`
            (``log_age_days``: an older memory never scores higher for being older;
            docs/predictor.md, "Age may only count against a memory").
        prior: ``(centre [F], lam)``: adds ``lam * ||w - centre||^2`` over the linear gate's
            feature weights ``w`` (:meth:`MemoryScorer.feature_weight_view`) to every step's
            loss, a Gaussian prior on them (MAP estimation; the engine passes the weights the
            user's model started from and ``lam = PRIOR_STRENGTH / training sessions``). The
            losses recorded include it.
        bilinear_l2: adds ``bilinear_l2 * ||W||^2`` over the bilinear term's W
            (``context_bilinear``) to every step's loss, a Gaussian prior centred at 0 (the
            engine passes :func:`~memlane.predictor.engine.bilinear_l2`,
            ``BILINEAR_PRIOR_STRENGTH / sessions ** BILINEAR_PRIOR_EXPONENT``); >= 0.

    Raises:
        ValueError: ``bilinear_l2`` negative or not finite.
    """

    anchor: torch.Tensor | None = None
    memory_basis: torch.Tensor | None = None
    grad_masks: Mapping[str, torch.Tensor] | None = None
    held_at_zero: Mapping[str, torch.Tensor] | None = None
    non_positive: Mapping[str, torch.Tensor] | None = None
    prior: tuple[torch.Tensor, float] | None = None
    bilinear_l2: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bilinear_l2) and self.bilinear_l2 >= 0):
            raise ValueError(f"bilinear_l2 must be finite and >= 0, got {self.bilinear_l2}")


@dataclass
class _Prepared:
    """The clone with its constraints applied, and what every step re-applies."""

    candidate: MemoryScorer
    optimizer: torch.optim.Optimizer
    named: dict[str, torch.nn.Parameter]
    masks: dict[torch.nn.Parameter, torch.Tensor]
    held: dict[torch.nn.Parameter, torch.Tensor]
    bounded: dict[torch.nn.Parameter, torch.Tensor]
    penalty: Callable[[MemoryScorer], torch.Tensor] | None

    def project(self) -> None:
        """Put held entries back to 0 and clamp the sign-constrained ones (after every step)."""
        _zero(self.held)
        _clamp_non_positive(self.bounded)


def _prepare(model: MemoryScorer, optimizer: torch.optim.Optimizer, constraints: Constraints) -> _Prepared:
    """Clone ``model`` with its optimiser and apply ``constraints`` to the clone.

    Raises:
        ValueError: an optimiser not built on ``model``'s parameters, a mask naming an
            unknown parameter, or a prior of the wrong shape.
    """
    candidate, cand_opt = _clone(model, optimizer)
    candidate.set_anchor(constraints.anchor)
    if constraints.memory_basis is not None:
        candidate.set_memory_basis(constraints.memory_basis)
    named = dict(candidate.named_parameters())
    masks: dict[torch.nn.Parameter, torch.Tensor] = {}
    if constraints.grad_masks is not None:
        unknown = set(constraints.grad_masks) - set(named)
        if unknown:
            raise ValueError(f"grad_masks names unknown parameters: {sorted(unknown)}")
        masks = {named[n]: m.to(named[n].dtype) for n, m in constraints.grad_masks.items()}
        for n, p in named.items():
            p.requires_grad_(n in constraints.grad_masks)
    for what, masks_by_name in (("held_at_zero", constraints.held_at_zero), ("non_positive", constraints.non_positive)):
        unknown = set(masks_by_name or {}) - set(named)
        if unknown:
            raise ValueError(f"{what} names unknown parameters: {sorted(unknown)}")
    prepared = _Prepared(
        candidate,
        cand_opt,
        named,
        masks,
        held={named[n]: m.bool() for n, m in (constraints.held_at_zero or {}).items()},
        bounded={named[n]: m.bool() for n, m in (constraints.non_positive or {}).items()},
        penalty=_penalty(constraints.prior, constraints.bilinear_l2, candidate),
    )
    prepared.project()
    return prepared


def _run_epoch(
    run: _Prepared,
    result: FitResult,
    config: FitConfig,
    loss_fn: LossFn,
    train_batches: Sequence[SessionBatch],
    replay_batches: Sequence[SessionBatch],
    rng: random.Random,
    start: float,
) -> list[float]:
    """One shuffled pass over ``train_batches``: a step per batch, each recorded in ``result``.

    Stops early (setting ``result.stop_reason``) at the time cap or a non-finite loss.
    Returns the epoch's step losses (nats).
    """
    candidate, opt = run.candidate, run.optimizer
    epoch: list[float] = []
    for batch in _epoch_plan(train_batches, rng):
        if time.monotonic() - start >= config.max_seconds:
            result.stop_reason = "time_cap"
            break
        loss = _mixed_loss(loss_fn, candidate, batch, replay_batches, config.replay_share, rng)
        if run.penalty is not None:
            loss = loss + run.penalty(candidate)
        value = float(loss.detach())
        result.step_losses.append(value)
        epoch.append(value)
        if not math.isfinite(value):
            result.stop_reason = "non_finite_loss"
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for p, m in run.masks.items():
            if p.grad is not None:
                p.grad.mul_(m)
        if config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(candidate.parameters(), config.max_grad_norm)
        opt.step()
        run.project()
        result.steps += 1
    return epoch


def fit(
    model: MemoryScorer,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    train_batches: Sequence[SessionBatch],
    config: FitConfig = FitConfig(),
    constraints: Constraints = Constraints(),
    *,
    canary: Sequence[SessionBatch] | None = None,
    replay_batches: Sequence[SessionBatch] | None = None,
    validation: Sequence[SessionBatch] | None = None,
    previous_trained_on: Collection[str] = (),
) -> FitResult:
    """Train a deep copy of ``model`` and gate it against ``model`` on the canary set.

    Args:
        model: the live model; read only (its clone trains).
        optimizer: an optimiser over ``model.parameters()``; cloned together with the model.
        loss_fn: ``(y_pred [B, N], y_true [B, N], session_weights [B]) -> scalar``, e.g.
            :func:`~memlane.predictor.losses.listnet_loss`; called with ``batch.confidence``.
        train_batches: new sessions, collated.
        config: the schedule and the gates (:class:`FitConfig`).
        constraints: the clone's anchor, subspace, trainable entries, sign and zero
            constraints and penalties (:class:`Constraints`).
        canary: canary batches for the gates (seed "Canary Evaluation Set").
        replay_batches: older sessions to rehearse (the replay buffer, collated): every step
            adds the loss of one of them, drawn at random, to the training batch's, weighted
            so that it is ``config.replay_share`` of the step's loss (:func:`_mixed_loss`).
        validation: held-out batches; when given, early stopping and the returned weights
            follow their mean NDCG@10 (the best epoch is restored; patience in epochs) instead
            of the training loss.
        previous_trained_on: ids of the sessions ``model``'s lineage trained on; the canary
            NDCG gate leaves them out (:func:`~memlane.predictor.gates.evaluate_gates`).

    Returns:
        a :class:`FitResult`; training stops at the first non-finite loss (the
        ``losses_finite`` gate then fails).

    Raises:
        ValueError: an optimiser not built on ``model``'s parameters, a constraint naming an
            unknown parameter, or a prior of the wrong shape.
    """
    run = _prepare(model, optimizer, constraints)
    candidate = run.candidate
    result = FitResult(candidate, run.optimizer, GateReport(()))
    rng = random.Random(config.seed)
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
    while train_batches and result.epochs < config.max_epochs and result.stop_reason == "max_epochs":
        result.epochs += 1
        epoch = _run_epoch(run, result, config, loss_fn, train_batches, replay_batches or (), rng, start)
        if not epoch or result.stop_reason != "max_epochs":
            continue
        mean = sum(epoch) / len(epoch)
        result.epoch_losses.append(mean)
        if validation:
            val = _validation_ndcg(candidate, validation)
            candidate.train()
            result.validation_ndcg.append(val)
            improved = val > best_val + config.min_improvement
            if improved:
                best_val = val
                best_state, result.best_epoch = copy.deepcopy(candidate.state_dict()), result.epochs
        else:
            improved = mean < best - config.min_improvement
            if improved:
                best = mean
        stale = 0 if improved else stale + 1
        if stale >= config.early_stop_patience:
            result.stop_reason = "early_stop"
    if best_state is not None and result.stop_reason != "non_finite_loss":
        candidate.load_state_dict(best_state)
    for p in run.named.values():
        p.requires_grad_(True)
    result.elapsed_seconds = time.monotonic() - start
    candidate.eval()
    result.gates = evaluate_gates(
        candidate,
        model,
        canary,
        result.step_losses,
        thresholds=config.thresholds,
        previous_is_trained=config.previous_is_trained,
        check_overlap=config.check_overlap,
        previous_trained_on=previous_trained_on,
    )
    return result
