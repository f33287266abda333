"""The full stage's linear anchor: a linear-stage model fitted straight on the feature tensors.

From :data:`~memlane.config.predictor.FULL_MODEL_MIN_SESSIONS` sessions on, the engine trains
every parameter of the cross-attention model, and :meth:`MemoryScorer.score` ranks by the sum
of its within-session z-scores and those of this anchor. Rankings averaged this way vary less
from one retrain to the next than the full model's alone, and rank better than either
model alone (docs/predictor.md, "Full stage: an ensemble with a linear anchor").

The anchor is what the linear stage would learn on the same sessions. In the linear stage the
model's score is ``features @ w + b``: only the feature columns ``w`` of ``gate_linear`` train,
and the gate MLP and every other column stay 0. So the same optimisation runs here on
``batch.features`` alone, without the encoders and attention: the same loss, Adam at the
same learning rate, the same gradient clip, and early stopping on the mean epoch loss. A test
checks it against :func:`memlane.predictor.train.fit` in the linear stage.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from memlane.predictor.data import SessionBatch
from memlane.predictor.losses import LossFn
from memlane.predictor.padding import PADDED_Y_VALUE

__all__ = ["fit_linear_anchor"]


def fit_linear_anchor(
    batches: Sequence[SessionBatch],
    init: torch.Tensor,
    loss_fn: LossFn,
    *,
    lr: float,
    max_epochs: int,
    early_stop_patience: int,
    max_seconds: float = 30.0,
    max_grad_norm: float | None = 5.0,
    min_improvement: float = 1e-4,
    held_at_zero: torch.Tensor | None = None,
    non_positive: torch.Tensor | None = None,
    prior: tuple[torch.Tensor, float] | None = None,
) -> torch.Tensor:
    """Fit the feature weights of a linear ranker ``score = features @ w`` by the listwise loss.

    Args:
        batches: training batches (features ``[B, N, F]``, labels ``[B, N]``, confidence
            ``[B]``). They are joined into one full batch, as the linear stage trains: one
            Adam step per epoch, whatever the mini-batch size they were collated with.
        init: float ``[F]`` starting weights (the previous anchor, or the linear stage's
            weights, so each retrain continues from the last one as the live model does).
        loss_fn: ``(y_pred [B, N], y_true [B, N], session_weights [B]) -> scalar`` (ListNet).
        lr: Adam learning rate.
        max_epochs: passes over ``batches`` (one Adam step each).
        early_stop_patience: epochs without the mean epoch loss improving by
            ``min_improvement`` (nats) before stopping.
        max_seconds: wall-clock cap (s), checked before every step.
        max_grad_norm: gradient-norm clip, or None.
        min_improvement: see ``early_stop_patience``.
        held_at_zero: optional bool ``[F]``: weights set to 0 and kept there, as the linear
            stage keeps those of :func:`~memlane.predictor.data.session_constant_columns`.
        non_positive: optional bool ``[F]``: weights projected onto ``<= 0`` at the start and
            after every step, as the linear stage does (``fit``'s ``non_positive``).
        prior: ``(centre [F], lam)``: adds ``lam * ||w - centre||^2`` to the loss, as the
            linear stage does (:func:`memlane.predictor.train.fit`).

    Returns:
        float ``[F]``, the weights after the last step. ``init`` is returned unchanged when
        there are no batches, and also when a loss is not finite.

    Raises:
        ValueError: ``init`` is not one-dimensional, or its length differs from the features'.
    """
    if init.dim() != 1:
        raise ValueError(f"init must be [F], got {tuple(init.shape)}")
    if batches and batches[0].features.shape[-1] != init.shape[0]:
        raise ValueError(f"init has {init.shape[0]} weights, the features {batches[0].features.shape[-1]} columns")
    if not batches:
        return init.detach().clone().float()
    if held_at_zero is not None and tuple(held_at_zero.shape) != tuple(init.shape):
        raise ValueError(f"held_at_zero must be [{init.shape[0]}], got {tuple(held_at_zero.shape)}")
    if non_positive is not None and tuple(non_positive.shape) != tuple(init.shape):
        raise ValueError(f"non_positive must be [{init.shape[0]}], got {tuple(non_positive.shape)}")
    centre, lam = (prior[0].detach().float().reshape(-1), float(prior[1])) if prior is not None else (None, 0.0)
    if centre is not None and (centre.shape != init.shape or not math.isfinite(lam) or lam < 0):
        raise ValueError(f"prior must be ([{init.shape[0]}], lam >= 0), got ({tuple(centre.shape)}, {lam})")
    features, labels, confidence = _join(batches)
    held = held_at_zero.bool() if held_at_zero is not None else torch.zeros(init.shape, dtype=torch.bool)
    bounded = non_positive.bool() if non_positive is not None else torch.zeros(init.shape, dtype=torch.bool)
    w = init.detach().clone().float().masked_fill(held, 0.0)
    w = w.masked_fill(bounded & (w > 0), 0.0).requires_grad_(True)
    opt = torch.optim.Adam([w], lr=lr)
    start = time.monotonic()
    best, stale = math.inf, 0
    for _ in range(max_epochs):  # one full-batch step per epoch, as the linear stage
        if time.monotonic() - start >= max_seconds:
            break
        loss = loss_fn(torch.einsum("bnf,f->bn", features, w), labels, confidence)
        if centre is not None:
            loss = loss + lam * ((w - centre) ** 2).sum()
        value = float(loss.detach())
        if not math.isfinite(value):
            return init.detach().clone().float()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_([w], max_grad_norm)
        opt.step()
        with torch.no_grad():
            w.masked_fill_(held, 0.0)
            w.masked_fill_(bounded & (w > 0), 0.0)
        if value < best - min_improvement:
            best, stale = value, 0
        else:
            stale += 1
            if stale >= early_stop_patience:
                break
    return w.detach()


def _join(batches: Sequence[SessionBatch]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features ``[S, N, F]``, labels ``[S, N]`` (padding: ``PADDED_Y_VALUE``) and confidence
    ``[S]`` of every session of ``batches``, padded to the longest slate ``N``."""
    n = max(b.features.shape[1] for b in batches)
    feats, labels = [], []
    for b in batches:
        pad = n - b.features.shape[1]
        feats.append(torch.nn.functional.pad(b.features, (0, 0, 0, pad)))
        labels.append(torch.nn.functional.pad(b.labels, (0, pad), value=PADDED_Y_VALUE))
    return torch.cat(feats), torch.cat(labels), torch.cat([b.confidence for b in batches])
