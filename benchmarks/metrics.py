"""Retrieval metrics for the LoCoMo benchmark (pure functions).

Conventions shared by every ``*_at_k`` function:

* ``ranked`` is a sequence of ids, best first. The top-k are the first ``k``
  *positions* as given; a repeated id occupies a slot but only its first
  occurrence can count as a hit (a retriever that returns duplicates is
  penalised, never rewarded). ``k`` larger than the list simply uses the list.
* ``relevant`` must be non-empty: recall of an empty set is undefined, so
  callers exclude such questions (LoCoMo has 4 questions with no evidence) and
  report how many were excluded -- :func:`score_question` marks them and
  :func:`aggregate` counts them. ``k`` must be >= 1.
* Every metric returns a float in [0, 1].
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memlane.ndcg import ndcg_at_k as unified_ndcg
from memlane.ranker.locomo import CATEGORY_NAMES

__all__ = [
    "KS",
    "LEVELS",
    "METRICS",
    "aggregate",
    "category_counts",
    "latency_summary",
    "ndcg_at_k",
    "percentile",
    "recall_all_at_k",
    "recall_any_at_k",
    "recall_at_k",
    "score_question",
    "session_ndcg_at_k",
    "session_of",
    "session_ranking",
    "session_recall_all_at_k",
    "session_recall_any_at_k",
    "session_recall_at_k",
    "session_relevant",
]


def _check(relevant: set[str], k: int) -> None:
    if not relevant:
        raise ValueError("relevant set is empty; exclude this question and count it")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def _hits(ranked: Sequence[str], relevant: set[str], k: int) -> list[bool]:
    """Per top-k position: True iff a relevant id at its first occurrence."""
    seen: set[str] = set()
    out = []
    for item in list(ranked)[:k]:
        out.append(item in relevant and item not in seen)
        seen.add(item)
    return out


def recall_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Fraction of the relevant ids found in the top k.

    ``|top_k(ranked) ∩ relevant| / |relevant|`` -- the LoCoMo "recall
    accuracy" of retrieved evidence (Maharana et al., ACL 2024, Sec. 5 /
    Table 3). Raises ValueError for an empty ``relevant`` (see module doc).
    """
    _check(relevant, k)
    return sum(_hits(ranked, relevant, k)) / len(relevant)


def recall_any_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """1.0 if at least one relevant id is in the top k, else 0.0 (hit rate / success@k)."""
    _check(relevant, k)
    return 1.0 if any(_hits(ranked, relevant, k)) else 0.0


def recall_all_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """1.0 if every relevant id is in the top k, else 0.0 (complete recall@k)."""
    _check(relevant, k)
    return 1.0 if sum(_hits(ranked, relevant, k)) == len(relevant) else 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Normalised discounted cumulative gain with binary gains:
    :func:`memlane.ndcg.ndcg_at_k` with gain 1 per relevant id, counted at its first
    occurrence only.

    ``DCG@k = sum_{i=1..k} rel_i / log2(i + 1)`` where ``rel_i`` is 1 for a
    relevant id at its first occurrence at 1-based rank ``i`` and 0 otherwise;
    ``IDCG@k = sum_{i=1..min(|relevant|, k)} 1 / log2(i + 1)``;
    ``NDCG@k = DCG@k / IDCG@k`` (Järvelin & Kekäläinen, "Cumulated gain-based
    evaluation of IR techniques", ACM TOIS 20(4), 2002). Raises ValueError for an
    empty ``relevant`` or ``k < 1``.
    """
    _check(relevant, k)
    return unified_ndcg(list(ranked), dict.fromkeys(relevant, 1.0), k, first_occurrence_only=True, undefined=0.0)


# ---------------------------------------------------------------- sessions


def session_of(dia_id: str) -> str:
    """Session id of a LoCoMo turn id: ``"D3:7" -> "D3"`` (ids without ':' are returned as is)."""
    return dia_id.split(":", 1)[0]


def session_ranking(ranked: Iterable[str]) -> list[str]:
    """Map ranked turn ids to sessions, deduplicated keeping first-occurrence order.

    ``["D3:7", "D1:2", "D3:1", "D2:5"] -> ["D3", "D1", "D2"]``.
    """
    return list(dict.fromkeys(session_of(t) for t in ranked))


def session_relevant(evidence: Iterable[str]) -> set[str]:
    """Sessions containing at least one evidence turn."""
    return {session_of(t) for t in evidence}


def session_recall_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """:func:`recall_at_k` over sessions; ``ranked``/``relevant`` are turn ids, k counts sessions."""
    return recall_at_k(session_ranking(ranked), session_relevant(relevant), k)


def session_recall_any_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """:func:`recall_any_at_k` over sessions (turn ids in, k counts sessions)."""
    return recall_any_at_k(session_ranking(ranked), session_relevant(relevant), k)


def session_recall_all_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """:func:`recall_all_at_k` over sessions (turn ids in, k counts sessions)."""
    return recall_all_at_k(session_ranking(ranked), session_relevant(relevant), k)


def session_ndcg_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """:func:`ndcg_at_k` over sessions (turn ids in, k counts sessions)."""
    return ndcg_at_k(session_ranking(ranked), session_relevant(relevant), k)


# ------------------------------------------------------------ aggregation

KS = (5, 10, 25, 50)
#: metric name -> (function, k); the same names are used at turn and session level.
METRICS: dict[str, tuple[Any, int]] = {
    **{f"R@{k}": (recall_at_k, k) for k in KS},
    "any@5": (recall_any_at_k, 5),
    "any@10": (recall_any_at_k, 10),
    "all@5": (recall_all_at_k, 5),
    "all@10": (recall_all_at_k, 10),
    "NDCG@10": (ndcg_at_k, 10),
}
LEVELS = ("turn", "session")


def score_question(ranked: Sequence[str], relevant: Iterable[str], category: int, **extra: Any) -> dict[str, Any]:
    """One per-question row for :func:`aggregate`.

    ``ranked`` are turn ids best first, ``relevant`` the normalized evidence
    turn ids. Returns ``{"category", "excluded", "turn": {metric: fraction},
    "session": {...}, **extra}``; with no relevant ids the row has
    ``excluded=True`` and empty metric dicts.
    """
    rel = set(relevant)
    row: dict[str, Any] = {"category": int(category), "excluded": not rel, **extra}
    if not rel:
        row.update(turn={}, session={})
        return row
    sess_ranked, sess_rel = session_ranking(ranked), session_relevant(rel)
    row["turn"] = {name: fn(ranked, rel, k) for name, (fn, k) in METRICS.items()}
    row["session"] = {name: fn(sess_ranked, sess_rel, k) for name, (fn, k) in METRICS.items()}
    return row


def _group(rows: list[Mapping[str, Any]], name: str) -> dict[str, Any]:
    scored = [r for r in rows if not r.get("excluded")]
    out: dict[str, Any] = {"name": name, "n": len(scored), "excluded": len(rows) - len(scored)}
    for level in LEVELS:
        out[level] = {m: (100.0 * sum(r[level][m] for r in scored) / len(scored) if scored else None) for m in METRICS}
    return out


def aggregate(per_question_rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean of every metric, overall and per LoCoMo category, in percent.

    Input rows are as produced by :func:`score_question`. Excluded rows (no
    relevant ids) do not enter any mean and are counted in ``excluded``.
    Returns ``{"units": "percent", "overall": G, "by_category": {cat: G}}``
    with ``G = {"name", "n", "excluded", "turn": {metric: mean|None},
    "session": {...}}``; values are unrounded floats in [0, 100] (None when
    a group has no scored rows). Categories appear in ascending id order.
    """
    rows = list(per_question_rows)
    by_cat: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_cat[int(r["category"])].append(r)
    return {
        "units": "percent",
        "metrics": list(METRICS),
        "overall": _group(rows, "overall"),
        "by_category": {c: _group(by_cat[c], CATEGORY_NAMES.get(c, f"category {c}")) for c in sorted(by_cat)},
    }


def percentile(values: Iterable[float], p: float) -> float:
    """p-th percentile (0 <= p <= 100) with linear interpolation between order statistics.

    Rank ``h = (n - 1) * p / 100`` on the sorted values, result
    ``x[floor(h)] + (h - floor(h)) * (x[floor(h)+1] - x[floor(h)])``; this is
    Hyndman & Fan (1996) definition 7, numpy's default ``method="linear"``.
    Units are those of ``values`` (e.g. milliseconds). Raises ValueError on
    empty input or p outside [0, 100].
    """
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"p must be in [0, 100], got {p}")
    h = (len(xs) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def latency_summary(values_ms: Iterable[float]) -> dict[str, float]:
    """``{"n", "mean", "p50", "p95", "p99", "max"}`` of latencies in milliseconds."""
    xs = [float(v) for v in values_ms]
    if not xs:
        raise ValueError("no latencies")
    out = {f"p{p}": percentile(xs, p) for p in (50, 95, 99)}
    return {"n": len(xs), "mean": sum(xs) / len(xs), **out, "max": max(xs)}


def category_counts(rows: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """Number of rows (scored or excluded) per category, ascending."""
    return dict(sorted(Counter(int(r["category"]) for r in rows).items()))
