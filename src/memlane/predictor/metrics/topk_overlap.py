"""Top-k overlap between two rankings of the same slates (seed "Negative Memory Signals" ->
training schedule: "overlap between new and old model's top-5 on canary batch >= 60%").
"""

from __future__ import annotations

import torch

__all__ = ["topk_overlap"]


def _topk_members(scores: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    filled = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    order = torch.sort(filled, dim=-1, descending=True, stable=True).indices[:, :k]
    members = torch.zeros_like(mask)
    members.scatter_(1, order, True)
    return members & mask


def topk_overlap(scores_a: torch.Tensor, scores_b: torch.Tensor, mask: torch.Tensor, k: int = 5) -> torch.Tensor:
    """Share of the top-k candidates two models agree on, per session.

    Args:
        scores_a: scores of model A ``[batch, slate]``.
        scores_b: scores of model B ``[batch, slate]``.
        mask: bool ``[batch, slate]``, True at real candidates.
        k: cutoff, >= 1.

    Returns:
        ``|top_k(A) & top_k(B)| / min(k, n_real)`` per session, ``[batch]`` in ``[0, 1]``;
        1.0 for a session without candidates. Ties break by slate position.

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    kk = min(k, scores_a.shape[1])
    both = _topk_members(scores_a, mask, kk) & _topk_members(scores_b, mask, kk)
    size = mask.sum(dim=-1).clamp(max=kk)
    overlap = both.sum(dim=-1).to(torch.float32) / size.clamp_min(1).to(torch.float32)
    return torch.where(size > 0, overlap, torch.ones_like(overlap))
