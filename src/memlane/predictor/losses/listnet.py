"""ListNet listwise ranking loss with temperature (seed "Loss Function: Listwise Ranking Loss").

ListNet (Cao, Qin, Liu, Tsai, Li, "Learning to Rank: From Pairwise Approach to Listwise
Approach", ICML 2007) compares top-one probability distributions of the labels and of the
scores. Following the seed, per session::

    P_true  = softmax(y_true / T)          over the session's real candidates
    P_model = softmax(y_pred / T)
    loss    = KL(P_true || P_model) = sum P_true * (log P_true - log P_model)

``T = temperature`` (0.5); a session whose labels span less than ``low_spread`` (0.1) is
sharpened with ``T = sharp_temperature`` (0.3); a session whose labels are all equal (span
<= ``min_spread``) or that has fewer than two candidates carries no ranking signal and gets
weight 0 ("skip the session as a low-signal training example").

``label_scale`` multiplies the labels inside ``P_true`` only (a target temperature of
``T / label_scale``). The seed's T = 0.5 was chosen for continuity-scorer labels clustered in
0.4-0.7; with agent-feedback labels - one or two positives near 0.7 among ~50 zeros - the
T = 0.5 target is nearly uniform (the positive gets ~7 % of the mass), and matching it
flattens the model's scores until its ranking is noise: on LoCoMo sessions, training then
lowered held-out NDCG@10 from 0.49 (untrained, baseline prior) to 0.36. With
``label_scale = 5`` (target temperature 0.1) the same training improved it. The engine uses 5;
the default 1 is the seed's formula.
"""

from __future__ import annotations

import torch

from memlane.predictor.padding import PADDED_Y_VALUE

__all__ = ["listnet_loss", "listnet_per_session", "masked_log_softmax"]


def masked_log_softmax(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Numerically stable log-softmax over the last axis, restricted to ``mask``.

    Args:
        x: logits ``[batch, slate]``.
        mask: bool ``[batch, slate]``, True at real entries.

    Returns:
        log-probabilities ``[batch, slate]``; finite at real entries for finite ``x``, finite
        but meaningless at masked entries and in fully masked rows (callers mask them out).
        Padded entries get no gradient and never produce NaN gradients.
    """
    neg_inf = torch.tensor(float("-inf"), dtype=x.dtype)
    m = torch.where(mask, x, neg_inf).amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    z = torch.where(mask, x, m)  # padded entries sit at the max: exp(0) = 1, never overflows
    e = torch.where(mask, torch.exp(z - m), torch.zeros_like(z))
    lse = m + torch.log(e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny))
    return z - lse


def listnet_per_session(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    *,
    temperature: float = 0.5,
    sharp_temperature: float = 0.3,
    low_spread: float = 0.1,
    min_spread: float = 1e-6,
    padded_value_indicator: float = PADDED_Y_VALUE,
    label_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-session ListNet KL divergence and its signal weight.

    Args:
        y_pred: model scores ``[batch, slate]`` (any finite values; |y| below ~1e37 in float32).
        y_true: labels ``[batch, slate]``, ``padded_value_indicator`` at padded slots.
        temperature: softmax temperature T (> 0).
        sharp_temperature: T used when the labels span less than ``low_spread``.
        low_spread: label span (max - min over real candidates) below which T is sharpened.
        min_spread: a span at or below this counts as "all labels equal" -> weight 0.
        padded_value_indicator: the padding label (default :data:`PADDED_Y_VALUE`).
        label_scale: multiplies the labels in ``P_true`` only (> 0; see the module docstring).

    Returns:
        ``(loss, weight)``, each ``[batch]``: KL divergence in nats (>= 0), and 1.0 for
        sessions that carry ranking signal, 0.0 for skipped ones (fully padded, one
        candidate, equal labels). NaN labels or scores give NaN loss with weight 1 on
        purpose, so the "all losses finite" training gate sees them.
    """
    if temperature <= 0 or sharp_temperature <= 0:
        raise ValueError("temperatures must be > 0")
    mask = y_true != padded_value_indicator
    inf = torch.tensor(float("inf"), dtype=y_true.dtype)
    spread = torch.where(mask, y_true, -inf).amax(dim=-1) - torch.where(mask, y_true, inf).amin(dim=-1)
    spread = torch.where(mask.any(dim=-1), spread, torch.zeros_like(spread))
    temp = torch.where(
        spread < low_spread,
        torch.tensor(sharp_temperature, dtype=y_pred.dtype),
        torch.tensor(temperature, dtype=y_pred.dtype),
    ).unsqueeze(-1)  # [batch, 1]
    weight = ((mask.sum(dim=-1) >= 2) & ~(spread <= min_spread)).to(y_pred.dtype)
    labels = torch.where(mask, y_true, torch.zeros_like(y_true)).to(y_pred.dtype)
    log_p_true = masked_log_softmax(labels * label_scale / temp, mask)
    log_p_model = masked_log_softmax(y_pred / temp, mask)
    terms = torch.exp(log_p_true) * (log_p_true - log_p_model)
    loss = torch.where(mask, terms, torch.zeros_like(terms)).sum(dim=-1)
    return loss, weight


def listnet_loss(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    session_weights: torch.Tensor | None = None,
    *,
    temperature: float = 0.5,
    sharp_temperature: float = 0.3,
    low_spread: float = 0.1,
    padded_value_indicator: float = PADDED_Y_VALUE,
    label_scale: float = 1.0,
) -> torch.Tensor:
    """Batch ListNet loss: weighted mean of :func:`listnet_per_session` over sessions.

    Args:
        y_pred: model scores ``[batch, slate]``.
        y_true: labels ``[batch, slate]``, padded with ``padded_value_indicator``.
        session_weights: optional ``[batch]`` weights >= 0 (e.g. continuity-scorer confidence).
        temperature, sharp_temperature, low_spread: see :func:`listnet_per_session`.
        padded_value_indicator: the padding label.

    Returns:
        scalar tensor (nats): ``sum(w_i * loss_i) / sum(w_i)`` over sessions with signal;
        0.0 (still connected to ``y_pred``'s graph) when no session carries signal.
    """
    loss, weight = listnet_per_session(
        y_pred,
        y_true,
        temperature=temperature,
        sharp_temperature=sharp_temperature,
        low_spread=low_spread,
        padded_value_indicator=padded_value_indicator,
        label_scale=label_scale,
    )
    if session_weights is not None:
        weight = weight * session_weights.to(weight.dtype)
    # Skipped sessions contribute exactly 0 (their loss is finite by construction).
    return (loss * weight).sum() / weight.sum().clamp_min(1e-12)
