"""The age check: does a learned preference for older or newer memories hold going forward?

``log_age_days`` is the one feature whose useful sign can flip for the same user: a stretch of
sessions that needed old notes teaches "older is better", and the next stretch, about newer
work, needs the opposite. A linear-stage run (``PredictorEngine.train``) on at least
:data:`~memlane.predictor.settings.AGE_CHECK_MIN_SESSIONS` sessions therefore first asks the
sessions themselves, the way a forecaster is validated: train on the older sessions twice,
with and without the age column, and score both on the newest
:data:`~memlane.predictor.settings.AGE_CHECK_SHARE` (a time-ordered split, never a random
one: the question is whether what was learned from the past carries into the future). When the
model without age ranks the newest sessions better, the real run is trained with the age
weight held at 0; otherwise it trains every feature as before.

Measured (docs/predictor.md, "Age check"): on LoCoMo, where the bench's learning sessions are
about early turns and its held-out ones about the latest, the check masks age on all ten
conversations and the linear stage's held-out NDCG@10 against the hybrid baseline goes from
-0.044 to +0.032 (mean over conversations); on the simulated user, whose stale memories make
age a real signal, it keeps age from 80 sessions on.

The check changes what one run may learn, never the model's shape or the feature schema: a
masked run starts with the ``log_age_days`` columns of the gate (linear and MLP) at 0 and keeps
them there. Phase 6 base models are trained the same way without any check
(``PredictorEngine.train(learn_age=False)``): whether older or newer notes help is a user's own
habit, which the user's linear stage and its age check learn, not something to inherit from
other users.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from memlane.predictor import settings as C
from memlane.predictor.data import Session, batched
from memlane.predictor.model import MemoryScorer
from memlane.predictor.train import fit, session_ndcg_at_k

__all__ = ["AGE_FEATURE", "AgeCheck", "age_free_masks", "mask_age", "run_age_check", "without_age"]

AGE_FEATURE = "log_age_days"


@dataclass(frozen=True)
class AgeCheck:
    """Outcome of one age check.

    Attributes:
        train_sessions: older sessions both check models were trained on.
        validation_sessions: newest sessions they were scored on (those with a positive label).
        ndcg_with_age: mean NDCG@10 on them of the model trained with every feature.
        ndcg_without_age: the same with the ``log_age_days`` weight held at 0.
        standard_error: standard error of the mean per-session difference (without minus with
            age), ``sd / sqrt(n)`` with the n - 1 sample sd; 0.0 with fewer than 2 sessions.
        min_t: how many standard errors the age-free model must win by
            (:data:`~memlane.predictor.settings.AGE_CHECK_MIN_T`).
    """

    train_sessions: int
    validation_sessions: int
    ndcg_with_age: float
    ndcg_without_age: float
    standard_error: float
    min_t: float

    @property
    def masked(self) -> bool:
        """True when the run that follows must not learn from age: the age-free model ranked
        the newest sessions better by more than ``min_t`` standard errors of the difference
        (never on fewer than 2 scored sessions, which have no standard error)."""
        return (self.validation_sessions >= 2
                and self.ndcg_without_age - self.ndcg_with_age > self.min_t * self.standard_error)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "masked": self.masked}


def _age_columns(model: MemoryScorer) -> dict[str, int]:
    """``{parameter name: column}`` of every weight that reads ``log_age_days``: the linear gate
    and the gate MLP's hidden layer (both take the gate inputs, features last)."""
    col = model.feature_column(AGE_FEATURE)
    return {"gate_linear.weight": col, "gate_hidden.weight": col}


def mask_age(model: MemoryScorer, masks: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copy of gradient ``masks`` (as :func:`memlane.predictor.train.fit` takes them) with the
    ``log_age_days`` column of every masked weight that reads it set to 0 (those entries no
    longer train). Parameters absent from ``masks`` stay absent.
    """
    out = {name: m.clone() for name, m in masks.items()}
    for name, col in _age_columns(model).items():
        if name in out:
            out[name][..., col] = 0.0
    return out


def age_free_masks(model: MemoryScorer) -> dict[str, torch.Tensor]:
    """Gradient masks that train every parameter except the ``log_age_days`` columns.

    For a full-stage run that must not learn age (Phase 6 base models: an age preference is a
    user's own, which their linear stage and its age check learn); pair it with
    :func:`without_age` so those columns start at 0.
    """
    return mask_age(model, {name: torch.ones_like(p) for name, p in model.named_parameters()})


def without_age(model: MemoryScorer, optimizer: torch.optim.Optimizer
                ) -> tuple[MemoryScorer, torch.optim.Optimizer]:
    """Deep copies of ``model`` and its ``optimizer`` that do not read ``log_age_days``.

    The age column of ``gate_linear.weight`` and of ``gate_hidden.weight`` is set to 0, and so
    is that column of every same-shaped optimiser state tensor (Adam's moments): with a masked
    gradient, a moment left over from an earlier run would otherwise keep moving the weight.
    """
    clone, clone_opt = copy.deepcopy((model, optimizer))  # one memo: the optimiser follows its copy
    named = dict(clone.named_parameters())
    with torch.no_grad():
        for name, col in _age_columns(clone).items():
            weight = named[name]
            weight[..., col] = 0.0
            for value in clone_opt.state.get(weight, {}).values():
                if isinstance(value, torch.Tensor) and value.shape == weight.shape:
                    value[..., col] = 0.0
    return clone, clone_opt


def run_age_check(model: MemoryScorer, optimizer: torch.optim.Optimizer, sessions: Sequence[Session], *,
                  loss_fn: Callable[..., torch.Tensor], masks: Mapping[str, torch.Tensor], native_dim: int,
                  batch_size: int, share: float, max_seconds: float, max_epochs: int,
                  early_stop_patience: int, seed: int, min_t: float = C.AGE_CHECK_MIN_T) -> AgeCheck:
    """Train on the older sessions with and without age; score both on the newest ``share``.

    Args:
        model: the serving model (read only; each check run trains a copy).
        optimizer: its linear-stage optimiser.
        sessions: labelled sessions, **newest first** (as ``PredictorEngine.train`` gets them).
        loss_fn: the training loss, ``(y_pred [B, N], y_true [B, N], weights [B]) -> scalar``.
        masks: the linear-stage gradient masks.
        native_dim: the embedder's vector width E.
        batch_size: sessions per batch (the linear stage's full batch).
        share: fraction of ``sessions`` (the newest) held out for scoring, in ``(0, 1)``.
        max_seconds: wall-clock cap of each of the two runs (s).
        max_epochs, early_stop_patience: as for :func:`memlane.predictor.train.fit`.
        seed: batch-order seed.
        min_t: see :attr:`AgeCheck.min_t`.

    Returns:
        an :class:`AgeCheck` (NDCG@10 of both models on the newest sessions).

    Raises:
        ValueError: ``share`` outside ``(0, 1)``, or too few sessions to hold out one and train
            on one.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share}")
    n_val = int(len(sessions) * share)
    if n_val < 1 or n_val >= len(sessions):
        raise ValueError(f"an age check needs sessions on both sides of the split, got {len(sessions)}")
    validation = batched(list(sessions[:n_val]), batch_size=batch_size, native_dim=native_dim)
    older = batched(list(sessions[n_val:]), batch_size=batch_size, native_dim=native_dim)
    per_session: dict[bool, list[float]] = {}
    for drop_age in (False, True):
        start, start_opt = without_age(model, optimizer) if drop_age else (model, optimizer)
        result = fit(start, start_opt, loss_fn, older, max_seconds=max_seconds, max_epochs=max_epochs,
                     early_stop_patience=early_stop_patience, previous_is_trained=False,
                     check_overlap=False, seed=seed,
                     grad_masks=mask_age(model, masks) if drop_age else masks)
        per_session[drop_age] = session_ndcg_at_k(result.model, validation)
    with_age, no_age = per_session[False], per_session[True]
    n = len(with_age)
    diffs = [b - a for a, b in zip(with_age, no_age)]
    mean = sum(diffs) / n if n else 0.0
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n >= 2 else 0.0
    return AgeCheck(train_sessions=len(sessions) - n_val, validation_sessions=n,
                    ndcg_with_age=sum(with_age) / n if n else 0.0,
                    ndcg_without_age=sum(no_age) / n if n else 0.0,
                    standard_error=se, min_t=min_t)
