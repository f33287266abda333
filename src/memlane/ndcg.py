"""NDCG@k: the one definition every ranking comparison in memlane uses.

Järvelin & Kekäläinen, "Cumulated Gain-Based Evaluation of IR Techniques", ACM TOIS 20(4),
2002, with linear gains as in the seed's "Technical Notes"::

    DCG@k  = sum_{i < k} gain(ranking[i]) / log2(i + 2)      (i = 0-based rank)
    IDCG@k = the same sum over the ideal gains, largest first
    NDCG@k = DCG@k / IDCG@k

Rules, each a parameter of :func:`ndcg_at_k` so a caller states which it uses:

* **Gain** of an item is ``gains[item]`` (0 for an item not in ``gains``), used as is (no
  ``2**rel - 1``).
* **Clipping** (``clip_negative``, default on): a negative gain counts as 0, in the ranking and
  in the ideal. The seed's negative labels (-0.3 superseded, -0.5 deleted) would otherwise
  make IDCG zero or negative and NDCG unbounded; NDCG then does not tell a harmful memory
  from a merely irrelevant one.
* **Ideal** (``ideal_gains``): by default the ``k`` largest values of ``gains`` (items the
  ranking missed count, so a ranking without them scores below 1). A caller whose relevant
  set is larger than what it can name (e.g. evidence items the candidate pool never held)
  passes the ideal gains explicitly.
* **Repeats** (``first_occurrence_only``, default off): with it on, an item repeated in the
  ranking earns its gain only at its first position.
* **Undefined** (``undefined``): when IDCG <= 0 (nothing relevant) the result is this value
  (``None`` by default).

The batched, padding-aware tensor form used in training, :mod:`memlane.predictor.metrics.ndcg`,
computes the same quantity with ``clip_negative=True`` and the ideal over the session's labels.

Pure Python, no dependencies: the daemon, the benches and the dashboard import it without torch.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar, overload

__all__ = ["dcg", "ndcg_at_k"]

H = TypeVar("H", bound=Hashable)


def dcg(gains: Iterable[float], k: int) -> float:
    """Discounted cumulative gain of the first ``k`` gains in rank order.

    Args:
        gains: gains in rank order (best rank first), used as given.
        k: cutoff, >= 1.

    Returns:
        ``sum_{i < k} gains[i] / log2(i + 2)`` (units of gain).

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    total = 0.0
    for i, g in enumerate(gains):
        if i >= k:
            break
        total += g / math.log2(i + 2)
    return total


@overload
def ndcg_at_k(
    ranking: Sequence[H],
    gains: Mapping[H, float],
    k: int,
    *,
    ideal_gains: Iterable[float] | None = ...,
    clip_negative: bool = ...,
    first_occurrence_only: bool = ...,
    undefined: None = ...,
) -> float | None: ...


@overload
def ndcg_at_k(
    ranking: Sequence[H],
    gains: Mapping[H, float],
    k: int,
    *,
    ideal_gains: Iterable[float] | None = ...,
    clip_negative: bool = ...,
    first_occurrence_only: bool = ...,
    undefined: float,
) -> float: ...


def ndcg_at_k(
    ranking: Sequence[H],
    gains: Mapping[H, float],
    k: int,
    *,
    ideal_gains: Iterable[float] | None = None,
    clip_negative: bool = True,
    first_occurrence_only: bool = False,
    undefined: float | None = None,
) -> float | None:
    """NDCG@k of ``ranking`` under the rules in the module docstring.

    Args:
        ranking: item ids, best first.
        gains: item id -> gain (graded relevance; binary relevance is 1.0 per relevant id).
            Items absent from it have gain 0.
        k: cutoff, >= 1.
        ideal_gains: the gains of the ideal ranking (any order); default ``gains.values()``.
        clip_negative: count negative gains as 0 (in the ranking and the ideal).
        first_occurrence_only: a repeated item earns its gain only at its first position.
        undefined: the result when the ideal DCG is <= 0.

    Returns:
        NDCG@k, in [0, 1] when gains are clipped or non-negative; ``undefined`` when the ideal
        DCG is <= 0.

    Raises:
        ValueError: ``k < 1``.
    """

    def gain(value: float) -> float:
        value = float(value)
        return max(value, 0.0) if clip_negative else value

    ideal = dcg(sorted((gain(v) for v in (gains.values() if ideal_gains is None else ideal_gains)), reverse=True), k)
    if ideal <= 0:
        return undefined
    seen: set[H] = set()
    ranked_gains: list[float] = []
    for item in ranking[:k]:
        repeated = first_occurrence_only and item in seen
        seen.add(item)
        ranked_gains.append(0.0 if repeated else gain(gains.get(item, 0.0)))
    return dcg(ranked_gains, k) / ideal
