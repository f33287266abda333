"""The untrained model's scores, without PyTorch: the baseline prior over two logged signals.

A fresh :class:`memlane.predictor.model.MemoryScorer` starts with every gate weight, the gate
MLP's output layer, the bilinear term and the anchor at 0, except the feature columns of
:data:`BASELINE_PRIOR` in its linear gate: it scores each candidate exactly
``1.0 * baseline_score + 0.4 * baseline_rank_inv`` (float32), which ranks the candidates as
the baseline does. Until a user has a model (a ``model.bin`` or Phase 6 base weights) the
daemon answers ``score`` requests with :func:`untrained_reply` instead of spawning the
sidecar, which would load PyTorch (~300 MiB) to compute the same numbers
(services/predictor_scoring.py, :class:`~memlane.services.predictor_scoring.SidecarLifecycle`).
``tests/test_sidecar_lifecycle.py`` checks these scores against a real untrained sidecar's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BASELINE_PRIOR", "untrained_reply", "untrained_scores"]

#: Initial weights of the baseline's own signals in the linear gate (see MemoryScorer.__init__).
#: Only their ratio (2.5 : 1) matters for the untrained ranking; their scale sets how far a
#: trained residual can move it, chosen offline on the simulated user (docs/predictor.md).
BASELINE_PRIOR = {"baseline_score": 1.0, "baseline_rank_inv": 0.4}


def untrained_scores(candidates: Sequence[Mapping[str, Any]]) -> list[float]:
    """The untrained model's score of each candidate, in order.

    Args:
        candidates: each candidate's logged signals (``score`` params' ``candidates``):
            ``baseline_score`` (unitless, default 0) and ``baseline_rank`` (0-based, None or
            absent: unranked), as :func:`memlane.predictor.features.build_feature_matrix`
            reads them (``baseline_rank_inv = 1 / (1 + rank)``, 0 when unranked).

    Returns:
        float32 values as floats, ``BASELINE_PRIOR`` weighted, in float32 arithmetic like the
        model's linear gate.

    Raises:
        ValueError: a ``baseline_score`` that is not a finite number (the sidecar refuses it too).
    """
    score = np.empty(len(candidates), dtype=np.float32)
    rank_inv = np.empty(len(candidates), dtype=np.float32)
    for i, c in enumerate(candidates):
        value = float(c.get("baseline_score", 0.0))
        if not math.isfinite(value):
            raise ValueError(f"candidates[{i}].baseline_score must be a finite number, got {value!r}")
        rank = c.get("baseline_rank")
        score[i] = value
        rank_inv[i] = 0.0 if rank is None else 1.0 / (1.0 + max(int(rank), 0))
    w_score = np.float32(BASELINE_PRIOR["baseline_score"])
    w_rank = np.float32(BASELINE_PRIOR["baseline_rank_inv"])
    return (w_score * score + w_rank * rank_inv).astype(np.float64).tolist()


def untrained_reply(request: Mapping[str, Any]) -> dict[str, Any]:
    """A ``score`` reply as the sidecar gives it, from the untrained model.

    Args:
        request: the daemon's ``score`` params (``candidate_ids`` [n] and ``candidates`` [n]).

    Returns:
        ``{"scores": [{"id", "score"}] (request order), "model_version": 0, "trained": False}``.

    Raises:
        ValueError / KeyError / TypeError: ``candidate_ids`` and ``candidates`` missing, of
            different lengths, or a signal of the wrong type.
    """
    ids = list(request["candidate_ids"])
    candidates = list(request["candidates"])
    if len(ids) != len(candidates):
        raise ValueError(f"{len(ids)} candidate_ids but {len(candidates)} candidates")
    scores = untrained_scores(candidates)
    return {"scores": [{"id": i, "score": s} for i, s in zip(ids, scores)], "model_version": 0, "trained": False}
