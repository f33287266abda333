"""``memlane bench predictor-offline --recency-grid``: which setting of the recall's recency
boost would a user have picked, and what does it give on questions it was not picked on?

The boost (:func:`memlane.recall.hybrid.boost`, ``recency_weight`` 0 in the daemon) multiplies
the hybrid recall score by ``1 + weight * 0.5 ** (age_days / half_life_days)``. On the stores
of a LoCoMo first pass (read as :func:`benchmarks.predictor_offline.load_first_pass` reads
them, usually with ``dating="answerable"``: each question's session dated when it could first
be asked), each setting of a grid re-ranks every question's pool by the boosted score, and the
bench's metric (binary NDCG@10, :func:`benchmarks.predictor_locomo.ndcg_binary`) scores it
on two disjoint sets:

* the learning questions (the first ``train_share`` of each conversation's questions by last
  evidence turn), where a setting is *picked*: the grid point with the best mean NDCG@10;
* the held-out questions (the rest), where the picked setting is *reported* against the
  unboosted hybrid baseline with a paired bootstrap 95 % interval.

The held-out mean of every grid point is reported as well; its best is an oracle (picked on
the questions it is scored on) and is labelled as one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bootstrap import paired_bootstrap
from benchmarks.predictor_locomo import ndcg_binary
from benchmarks.predictor_offline import OfflineSession, Progress, apply_recency, load_first_pass

__all__ = ["HALF_LIVES_DAYS", "WEIGHTS", "boosted_ndcg", "grid", "run_grid"]

#: recency weights of the default grid (dimensionless; the boost is ``1 + weight * decay``)
WEIGHTS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
#: half-lives of the default grid, days
HALF_LIVES_DAYS = (1.0, 3.0, 7.0, 14.0, 30.0, 60.0, 90.0)


def boosted_ndcg(session: OfflineSession, weight: float, half_life_days: float) -> float:
    """NDCG@10 of ``session``'s pool re-ranked by the recency-boosted baseline score
    (``weight`` <= 0: the logged baseline order, ``half_life_days`` unused)."""
    ids = session.ids if weight <= 0 else apply_recency(session.features, session.ids, weight, half_life_days)[1]
    return ndcg_binary(ids, session.evidence, len(session.evidence))


def grid(
    sessions: Sequence[OfflineSession],
    *,
    weights: Sequence[float] = WEIGHTS,
    half_lives: Sequence[float] = HALF_LIVES_DAYS,
    seed: int = 0,
) -> dict[str, Any]:
    """Evaluate every ``(weight, half-life)`` on the learning and the held-out sessions.

    Args:
        sessions: question sessions of any number of conversations (``held_out`` marks the test set).
        weights: recency weights (> 0).
        half_lives: half-lives, days (> 0).
        seed: bootstrap seed.

    Returns:
        ``{"points": [{"weight", "half_life_days", "learning", "held_out"} (mean NDCG@10)],
        "baseline": {"learning", "held_out"}, "picked": the point best on the learning
        questions, "picked_held_out": paired bootstrap of its held-out NDCG@10 against the
        unboosted baseline's, "oracle": the point best on the held-out questions}``.

    Raises:
        ValueError: no learning or no held-out session, or a weight or half-life <= 0.
    """
    if any(w <= 0 for w in weights) or any(h <= 0 for h in half_lives):
        raise ValueError("recency weights and half-lives must be > 0")
    learn = [s for s in sessions if not s.held_out]
    held = [s for s in sessions if s.held_out]
    if not learn or not held:
        raise ValueError(f"a recency grid needs learning and held-out sessions (got {len(learn)} and {len(held)})")
    base_held = [boosted_ndcg(s, 0.0, 0.0) for s in held]
    points = []
    for w in weights:
        for h in half_lives:
            points.append(
                {
                    "weight": w,
                    "half_life_days": h,
                    "learning": float(np.mean([boosted_ndcg(s, w, h) for s in learn])),
                    "held_out": float(np.mean([boosted_ndcg(s, w, h) for s in held])),
                }
            )
    picked = max(points, key=lambda p: p["learning"])  # first of equals: grid order
    picked_held = [boosted_ndcg(s, picked["weight"], picked["half_life_days"]) for s in held]
    return {
        "points": points,
        "baseline": {
            "learning": float(np.mean([boosted_ndcg(s, 0.0, 0.0) for s in learn])),
            "held_out": float(np.mean(base_held)),
        },
        "picked": picked,
        "picked_held_out": paired_bootstrap(picked_held, base_held, seed=seed),
        "oracle": max(points, key=lambda p: p["held_out"]),
    }


def run_grid(
    workdir: Path,
    data: Path,
    *,
    dating: str = "answerable",
    weights: Sequence[float] = WEIGHTS,
    half_lives: Sequence[float] = HALF_LIVES_DAYS,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """:func:`grid` over every conversation of the first pass in ``workdir`` (pooled).

    Raises:
        FileNotFoundError, ValueError: as :func:`benchmarks.predictor_offline.load_first_pass`
            and :func:`grid`.
    """
    sessions, share = load_first_pass(workdir, data, dating=dating, progress=progress)
    report = grid([s for v in sessions.values() for s in v], weights=weights, half_lives=half_lives, seed=seed)
    return {
        "workdir": str(workdir),
        "dating": dating,
        "train_share": share,
        "learning_questions": sum(not s.held_out for v in sessions.values() for s in v),
        "held_out_questions": sum(s.held_out for v in sessions.values() for s in v),
        **report,
    }
