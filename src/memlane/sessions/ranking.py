"""Session-start ranking beyond the baseline pool: relevance pools, predictor fusion, exploration.

predictive-memory-scorer.md "Hook Flow (session-start)": the pool is ranked by the baseline,
scored by the predictor, fused with RRF, then attenuated by topic diversity. These helpers
keep :mod:`memlane.sessions.service` small; they do no I/O beyond the in-memory index, except
:func:`explored_shown` (one read of the explored memory's content).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from memlane.config import SessionSettings
from memlane.recall.memory_index import DECAY_PER_DAY, MemoryIndex
from memlane.services.inputs import RecallQuery
from memlane.services.predictor_types import PoolMember, RankDecision
from memlane.services.recall_service import RecallService
from memlane.sessions.diversity import apply_topic_diversity
from memlane.sessions.inject import Shown
from memlane.sessions.start import RankedCandidate, build_pool

__all__ = ["explored_shown", "fuse_pool", "pool_members", "relevance_pool"]


def pool_members(pool: Sequence[RankedCandidate],
                 legs: dict[str, tuple[float | None, float | None]] | None = None) -> list[PoolMember]:
    """The pool in baseline order as the predictor sees it (``legs``: ``{id: (bm25, vector)}``)."""
    legs = legs or {}
    return [PoolMember(p.memory_id, p.seq, p.baseline_score, p.baseline_rank, p.similarity,
                       *legs.get(p.memory_id, (None, None)))
            for p in sorted(pool, key=lambda p: p.baseline_rank)]


def relevance_pool(recall: RecallService, index: MemoryIndex, *, context: str, project: str | None,
                   cv: np.ndarray | None, s: SessionSettings, now: str, now_epoch: float
                   ) -> tuple[list[RankedCandidate], dict[str, tuple[float | None, float | None]]]:
    """A pool ranked by hybrid relevance to ``context`` (``ranking="relevance"`` starts).

    For clients that start a session with a real request (a question, a task): the pool is
    the top ``candidate_pool_size`` hybrid-recall hits of the context (project and global
    memories, superseded excluded), the baseline score is the recall score, and the
    ``effective_score`` column keeps the memory's effectiveScore.

    Returns:
        ``(pool, legs)``: the ranked pool and each hit's ``(bm25_score, vector_score)``.
    """
    hits = recall.recall(RecallQuery(query=context, limit=s.candidate_pool_size, project=project,
                                     include_global=True, exclude_superseded=True, now=now, touch=False)).hits
    if not hits:
        return [], {}
    ranked = [(h.memory.seq, h.memory.id, float(h.score)) for h in hits]
    wide = s.model_copy(update={"effective_top": len(ranked), "similarity_top": 0})
    pool = build_pool(ranked, cv, index, wide)
    eff = {}
    for h in hits:
        m = h.memory
        days = max(0.0, (now_epoch - _epoch(m.created_at)) / 86400.0)
        eff[m.id] = 1.0 if m.pinned else float(m.importance) * DECAY_PER_DAY ** days
    legs = {h.memory.id: (h.bm25_score, h.vector_score) for h in hits}
    return [replace(p, effective_score=eff.get(p.memory_id, p.effective_score)) for p in pool], legs


def _epoch(iso: str) -> float:
    from memlane.recall.memory_index import iso_to_epoch

    return iso_to_epoch(iso)


def fuse_pool(pool: Sequence[RankedCandidate], decision: RankDecision, index: MemoryIndex) -> list[RankedCandidate]:
    """Re-rank the pool by the fused RRF scores, then topic diversity (seed order of stages)."""
    ids = [p.memory_id for p in pool]
    fused = np.array([decision.fused[m] for m in ids], dtype=np.float64)
    vecs, has = index.vectors_of([p.seq for p in pool])
    adjusted, order = apply_topic_diversity(fused, vecs if has.any() else None, has)
    rank = np.empty(len(ids), dtype=int)
    rank[order] = np.arange(1, len(ids) + 1)
    adj, ranks = adjusted.tolist(), rank.tolist()  # plain numbers: no numpy scalar per candidate
    out = [replace(p, final_score=adj[j], rank=ranks[j]) for j, p in enumerate(pool)]
    return sorted(out, key=lambda c: c.rank)


def explored_shown(chosen: list[Shown], replaced: str, explored: str, contents: dict[str, tuple[str, str]]) -> list[Shown]:
    """``chosen`` with ``replaced`` swapped for ``explored`` (kept in the last slot)."""
    if explored not in contents:
        return chosen
    body, created = contents[explored]
    return [c for c in chosen if c.id != replaced] + [Shown(explored, created, body)]
