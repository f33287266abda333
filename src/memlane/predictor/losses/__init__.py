"""Listwise ranking losses, one file per loss (allRank layout).

Every loss takes ``y_pred [batch, slate]``, ``y_true [batch, slate]`` padded with
:data:`~memlane.predictor.padding.PADDED_Y_VALUE`, and optional ``session_weights [batch]``,
and returns a scalar tensor; :class:`LossFn` is that contract, as used by
:func:`memlane.predictor.train.fit`.

* :mod:`.listnet` -- ListNet KL divergence with temperature (seed default).
"""

from __future__ import annotations

from typing import Protocol

import torch

from memlane.predictor.losses.listnet import listnet_loss, listnet_per_session

__all__ = ["LossFn", "listnet_loss", "listnet_per_session"]


class LossFn(Protocol):
    """``(y_pred [B, N], y_true [B, N], session_weights [B] | None) -> scalar tensor``."""

    def __call__(
        self, y_pred: torch.Tensor, y_true: torch.Tensor, session_weights: torch.Tensor | None = None
    ) -> torch.Tensor: ...
