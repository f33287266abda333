"""NDCG@k with graded gains (Järvelin & Kekäläinen, "Cumulated Gain-Based Evaluation of IR
Techniques", ACM TOIS 2002), as written in the seed's "Technical Notes"::

    DCG@k  = sum_{i < k} gain_i / log2(i + 2)       (i = 0-based rank by y_pred)
    NDCG@k = DCG@k / IDCG@k                          (IDCG = DCG of the ideal order)

Gains are the labels themselves (linear, not ``2**rel - 1``), clipped at 0: the seed's
negative labels (-0.3 superseded, -0.5 deleted) would otherwise make IDCG zero or negative
and NDCG unbounded. Consequence: NDCG does not tell a harmful memory from a merely
irrelevant one; the listwise loss still does.

Ties in ``y_pred`` are broken by slate position (stable sort), padded slots rank last.

This is the batched, padding-aware tensor form of :func:`memlane.ndcg.ndcg_at_k` (the one
definition, pure Python) with its defaults: clipped gains, the ideal over the session's labels.
"""

from __future__ import annotations

import torch

from memlane.predictor.padding import PADDED_Y_VALUE

__all__ = ["dcg_at_k", "mean_ndcg_at_k", "ndcg_at_k"]


def _gains(y_true: torch.Tensor, padded_value_indicator: float) -> tuple[torch.Tensor, torch.Tensor]:
    mask = y_true != padded_value_indicator
    gains = torch.where(mask, y_true.clamp_min(0.0), torch.zeros_like(y_true))
    return gains, mask


def _discounted_sum(sorted_gains: torch.Tensor, k: int) -> torch.Tensor:
    top = sorted_gains[:, : min(k, sorted_gains.shape[1])]
    ranks = torch.arange(top.shape[1], dtype=top.dtype)
    return (top / torch.log2(ranks + 2.0)).sum(dim=-1)


def dcg_at_k(
    y_pred: torch.Tensor, y_true: torch.Tensor, k: int = 10, *, padded_value_indicator: float = PADDED_Y_VALUE
) -> torch.Tensor:
    """Discounted cumulative gain of the order given by ``y_pred``.

    Args:
        y_pred: scores ``[batch, slate]``.
        y_true: labels ``[batch, slate]``, padded with ``padded_value_indicator``.
        k: cutoff (>= 1); a cutoff above the slate length uses the whole slate.
        padded_value_indicator: the padding label.

    Returns:
        DCG@k ``[batch]`` (units of gain).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gains, mask = _gains(y_true, padded_value_indicator)
    scores = torch.where(mask, y_pred.detach(), torch.tensor(float("-inf"), dtype=y_pred.dtype))
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return _discounted_sum(torch.gather(gains, 1, order), k)


def ndcg_at_k(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    k: int = 10,
    *,
    filler_value: float = 1.0,
    padded_value_indicator: float = PADDED_Y_VALUE,
) -> torch.Tensor:
    """Normalised DCG@k per session.

    Args:
        y_pred: scores ``[batch, slate]``.
        y_true: labels ``[batch, slate]`` (negative labels count as gain 0).
        k: cutoff, >= 1.
        filler_value: NDCG reported for a session without any positive gain (IDCG = 0),
            where every order is ideal; 1.0 as in allRank.
        padded_value_indicator: the padding label.

    Returns:
        NDCG@k ``[batch]`` in ``[0, 1]``.

    Raises:
        ValueError: ``k < 1``.
    """
    dcg = dcg_at_k(y_pred, y_true, k, padded_value_indicator=padded_value_indicator)
    gains, _ = _gains(y_true, padded_value_indicator)
    ideal = _discounted_sum(torch.sort(gains, dim=-1, descending=True).values, k)
    has_gain = ideal > 0
    ndcg = dcg / torch.where(has_gain, ideal, torch.ones_like(ideal))
    return torch.where(has_gain, ndcg, torch.full_like(ndcg, filler_value))


def mean_ndcg_at_k(
    y_pred: torch.Tensor, y_true: torch.Tensor, k: int = 10, *, padded_value_indicator: float = PADDED_Y_VALUE
) -> float:
    """Mean NDCG@k over the sessions that have a positive gain (others say nothing).

    Args and shapes as :func:`ndcg_at_k`.

    Returns:
        a float in ``[0, 1]``; NaN when no session has a positive gain. A session whose
        labels contain NaN has no defined gain and is left out.
    """
    gains, _ = _gains(y_true, padded_value_indicator)
    informative = gains.amax(dim=-1) > 0
    if not bool(informative.any()):
        return float("nan")
    values = ndcg_at_k(y_pred, y_true, k, padded_value_indicator=padded_value_indicator)
    return float(values[informative].mean())
