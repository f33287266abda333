"""The one padding constant shared by losses, metrics and loaders (allRank convention).

A batch of sessions is padded to the longest candidate list of the batch. Padded label
slots hold :data:`PADDED_Y_VALUE`; losses and metrics find padding by comparing
``y_true == PADDED_Y_VALUE``, and :func:`memlane.predictor.data.collate` writes it.

Real labels lie in ``[-1, 1]`` (seed "Training Signals": 0..1 relevance, -0.3 superseded,
-0.5 deleted), so the constant can never collide with a real label.
"""

from __future__ import annotations

__all__ = ["PADDED_Y_VALUE"]

#: Label value of a padded candidate slot, shape-compatible with ``y_true`` ``[batch, slate]``.
PADDED_Y_VALUE: float = -1.0e4
