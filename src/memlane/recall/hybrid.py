"""Merging the two legs and the boosts (memory-pipeline-v2.md "Decision Stage" merge rule).

``score = alpha * vector + (1 - alpha) * bm25`` when both legs ran, or the single available
leg's score when only one could run (no embedder or no vector for this model; a query with
no word tokens). Within a run of both legs a memory that one leg did not return scores 0 on
that leg; the vector leg is exact, so every BM25 hit also gets its true vector score.
Then the boosts multiply (see :func:`boost`), ``min_score`` cuts, and the top ``limit`` remain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class LegScores:
    """Per-memory leg scores, in [0, 1]; None where that leg did not run."""

    vector: float | None
    bm25: float | None


def merge(
    vector: dict[int, float] | None, bm25: dict[int, float] | None, alpha: float
) -> dict[int, tuple[float, LegScores]]:
    """Merge leg results by seq.

    Args:
        vector: seq -> vector score, or None when the vector leg could not run.
        bm25: seq -> normalised BM25 score, or None when the BM25 leg could not run.
        alpha: weight of the vector leg in [0, 1].
    Returns:
        seq -> (merged score, LegScores).
    """
    out: dict[int, tuple[float, LegScores]] = {}
    if vector is None and bm25 is None:
        return out
    if vector is None:
        return {s: (b, LegScores(None, b)) for s, b in bm25.items()}  # type: ignore[union-attr]
    if bm25 is None:
        return {s: (v, LegScores(v, None)) for s, v in vector.items()}
    for s in vector.keys() | bm25.keys():
        v = vector.get(s, 0.0)
        b = bm25.get(s, 0.0)
        out[s] = (alpha * v + (1.0 - alpha) * b, LegScores(v, b))
    return out


def boost(
    score: Any,
    *,
    access_count: Any,
    age_days: Any,
    rehearsal_weight: float,
    recency_weight: float,
    recency_half_life_days: float,
) -> Any:
    """Rehearsal and recency boosts, multiplicative; scalars or numpy arrays of one shape [m].

    ``score * (1 + rehearsal_weight * min(1, ln(1 + access_count) / ln(51)))
           * (1 + recency_weight * 0.5 ** (age_days / half_life))``.
    A memory recalled 50 times gets the full rehearsal boost; one created now the full
    recency boost, halving every ``recency_half_life_days`` (days). Ages below 0 count as 0.
    """
    r = rehearsal_weight * np.minimum(1.0, np.log1p(np.maximum(access_count, 0)) / math.log(51.0))
    t = recency_weight * 0.5 ** (np.maximum(age_days, 0.0) / recency_half_life_days)
    return score * (1.0 + r) * (1.0 + t)
