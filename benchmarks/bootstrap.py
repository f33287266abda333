"""Paired bootstrap confidence intervals for ranking metrics (Efron & Tibshirani 1993, ch. 16;
the paired form used for IR significance testing by Sakai 2006)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["paired_bootstrap"]


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000, seed: int = 0, level: float = 0.95
) -> dict[str, float]:
    """Mean difference ``mean(a - b)`` over paired items with a percentile bootstrap interval.

    Args:
        a, b: per-item metric values of two systems on the same items (length n >= 1).
        resamples: bootstrap resamples of the n items (with replacement).
        seed: RNG seed (the interval is reproducible).
        level: confidence level of the two-sided interval.

    Returns:
        ``{"mean_a", "mean_b", "diff", "lo", "hi", "n", "p_le_0"}``; ``p_le_0`` is the share of
        resamples whose mean difference is <= 0 (a one-sided bootstrap p-value for a > b).

    Raises:
        ValueError: different lengths or no items.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"paired samples need equal non-zero lengths, got {x.size} and {y.size}")
    d = x - y
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(resamples, d.size))
    means = d[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return {
        "mean_a": float(x.mean()),
        "mean_b": float(y.mean()),
        "diff": float(d.mean()),
        "lo": float(np.quantile(means, tail)),
        "hi": float(np.quantile(means, 1.0 - tail)),
        "n": int(d.size),
        "p_le_0": float((means <= 0).mean()),
    }
