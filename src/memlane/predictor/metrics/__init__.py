"""Ranking metrics, one file per metric (allRank layout); padding-aware, batched.

* :mod:`.ndcg` -- NDCG@k with graded, zero-clipped gains.
* :mod:`.topk_overlap` -- top-k agreement of two models (the stability gate).
"""

from __future__ import annotations

from memlane.predictor.metrics.ndcg import dcg_at_k, mean_ndcg_at_k, ndcg_at_k
from memlane.predictor.metrics.topk_overlap import topk_overlap

__all__ = ["dcg_at_k", "mean_ndcg_at_k", "ndcg_at_k", "topk_overlap"]
