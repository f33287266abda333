"""What the daemon tells the predictor about a session-start's candidates.

predictive-memory-scorer.md "Additional scoring signals": each candidate's raw signals are
logged at scoring time (``session_memories.features``) and sent in the ``score`` request;
training rebuilds the feature matrix from the very same logged values
(:func:`memlane.predictor.dataset.build_session`), so serving and training never disagree.
Reads the in-memory index and, with a session context or a project, the candidates' texts in
one query (``query_coverage``, ``mentions_project``).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memlane.predictor.coverage import query_coverage
from memlane.predictor.features import project_name
from memlane.recall.memory_index import MemoryIndex
from memlane.services.predictor_types import PoolMember
from memlane.storage import predictor as pred_sql
from memlane.storage.db import Database
from memlane.v3.methodology.phases import PHASE_WEIGHTS

__all__ = ["candidate_signals", "mentions_project", "score_params"]


def mentions_project(row: tuple[str, str | None] | None, project: str | None, name: str | None) -> bool:
    """True when a memory (``row`` = ``(content, its project)``) belongs to ``project`` or its
    content names it (``name`` from :func:`project_name`, case-insensitive)."""
    if row is None or not project:
        return False
    content, mem_project = row
    return mem_project == project or (name is not None and name in content.lower())


def candidate_signals(
    index: MemoryIndex,
    db: Database,
    pool: Sequence[PoolMember],
    now_epoch: float,
    project: str | None = None,
    context_text: str = "",
    work_phase: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Raw per-candidate signals (:data:`memlane.predictor.dataset.CANDIDATE_SIGNALS`).

    Args:
        index: the in-memory index (age, importance, access count, superseded, pinned).
        db: the store (memory contents for ``mentions_project``; read only with a project).
        pool: the candidates in baseline order.
        now_epoch: the session start, Unix seconds.
        project: the session's project, or None.
        context_text: the session context the pool was recalled for (``query_coverage``:
            :func:`memlane.predictor.coverage.query_coverage`; "" gives 0 for every candidate).
        work_phase: the session's universal phase (``phase_weight``: the phase's weight of each
            memory's type, :mod:`memlane.v3.methodology.phases`), or None: no ``phase_weight``
            is logged and the feature is 1.0.

    Returns:
        ``{memory_id: {signal: value}}``; ``age_days`` in days, ``baseline_rank`` 0-based.
    """
    fields = index.candidate_fields([p.seq for p in pool])
    name = project_name(project)
    ids = [p.memory_id for p in pool]
    coverage = [0.0] * len(pool)
    texts: dict[str, tuple[str, str | None]] = {}
    if context_text.strip() and pool:  # one read of every candidate's text serves both signals
        texts = db.read(lambda c: pred_sql.contents_and_projects(c, ids))
        coverage = query_coverage(context_text, [texts.get(m, ("", None))[0] for m in ids])
    elif project:
        texts = db.read(lambda c: pred_sql.contents_and_projects(c, ids, unread_project=project))
    out: dict[str, dict[str, Any]] = {}
    for p, f, cov in zip(pool, fields, coverage):
        out[p.memory_id] = {
            "age_days": max(0.0, (now_epoch - f["created"]) / 86400.0) if f else 0.0,
            "importance": float(f["importance"]) if f else 0.5,
            "access_count": int(f["access_count"]) if f else 0,
            "is_superseded": bool(f["superseded"]) if f else False,
            "pinned": bool(f["pinned"]) if f else False,
            # the first stage the model corrects: the shipped base when the pool has one
            "baseline_score": float(p.baseline_score if p.prior_score is None else p.prior_score),
            "baseline_rank": int(p.baseline_rank if p.prior_rank is None else p.prior_rank) - 1,
            "context_similarity": None if p.similarity is None else float(p.similarity),
            "bm25_score": p.bm25_score,
            "vector_score": p.vector_score,
            "mentions_project": mentions_project(texts.get(p.memory_id), project, name),
            "query_coverage": cov,
        }
    if work_phase is not None and pool:
        weights = index.type_weights([p.seq for p in pool], PHASE_WEIGHTS[work_phase]).tolist()
        for p, w in zip(pool, weights):
            out[p.memory_id]["phase_weight"] = w
    return out


def score_params(
    pool: Sequence[PoolMember],
    features: dict[str, dict[str, Any]],
    context_vector: np.ndarray | None,
    context_text: str,
    project: str | None,
    local: datetime,
    gap: float,
) -> dict[str, Any]:
    """The ``score`` request's params (shapes in :func:`memlane.predictor.rpc_params.parse_score_params`).

    Candidate vectors and texts are not sent: the sidecar reads them from its read-only
    connection, which is cheaper than encoding, piping and decoding them (docs/decisions.md,
    "The sidecar reads candidates itself"). The context vector ``[E]`` goes as base64 float32 little-endian.

    Args:
        local: the session start in local time; gap: hours since the previous session.
    """
    params: dict[str, Any] = {
        "candidate_ids": [p.memory_id for p in pool],
        "candidates": [features[p.memory_id] for p in pool],
        "session_time": local.isoformat(),
        "session_gap_hours": gap,
        "project": project,
        "context_text": "" if context_vector is not None else context_text[:2000],
    }
    if context_vector is not None:
        params["context_embedding_b64"] = base64.b64encode(np.asarray(context_vector, dtype="<f4").tobytes()).decode(
            "ascii"
        )
    return params
