"""Session-start ranking beyond the baseline pool: relevance pools, predictor fusion, exploration.

predictive-memory-scorer.md "Hook Flow (session-start)": the pool is ranked by the baseline,
scored by the predictor, fused with RRF, then attenuated by topic diversity. These helpers
keep :mod:`memlane.sessions.service` small; they do no I/O beyond the in-memory index, except
:func:`explored_shown` (one read of the explored memory's content).
"""

from __future__ import annotations

import math
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
from memlane.v3.methodology.phases import PHASE_WEIGHTS

__all__ = ["baseline_score", "explored_shown", "fuse_pool", "pool_members", "relevance_pool", "weight_by_phase"]


def pool_members(
    pool: Sequence[RankedCandidate], legs: dict[str, tuple[float | None, float | None]] | None = None
) -> list[PoolMember]:
    """The pool in baseline order as the predictor sees it (``legs``: ``{id: (bm25, vector)}``)."""
    legs = legs or {}
    return [
        PoolMember(
            p.memory_id,
            p.seq,
            p.baseline_score,
            p.baseline_rank,
            p.similarity,
            *legs.get(p.memory_id, (None, None)),
            prior_score=p.prior_score,
            prior_rank=p.prior_rank,
        )
        for p in sorted(pool, key=lambda p: p.baseline_rank)
    ]


def relevance_pool(
    recall: RecallService,
    index: MemoryIndex,
    *,
    context: str,
    project: str | None,
    cv: np.ndarray | None,
    s: SessionSettings,
    now: str,
    now_epoch: float,
) -> tuple[list[RankedCandidate], dict[str, tuple[float | None, float | None]]]:
    """A pool ranked by hybrid relevance to ``context`` (``ranking="relevance"`` starts).

    For clients that start a session with a real request (a question, a task). The pool is the
    union of the seed's two pre-filter paths (predictive-memory-scorer.md "Candidate
    Pre-Filtering"), the relevance path first:

    1. the top ``similarity_top`` hybrid-recall hits of the context (project and global
       memories, superseded excluded; ``candidate_pool_size`` when ``similarity_top`` is 0),
       recalled with the ranker ``relevance_ranker`` names. The baseline is always the
       heuristic recall: its score and order. When the shipped learned base ordered the hits
       (``learned``, its features available) the hits are its top ones, and each carries the
       base's logistic score and rank as ``prior_score`` / ``prior_rank`` (:func:`baseline_score`):
       the first stage the per-user predictor starts from and corrects, while the baseline it
       is fused with and earns alpha against is the heuristic's order of the same hits
       (docs/predictor.md, "Starting from the shipped base");
    2. then the top ``effective_top`` memories of the project (and global ones) by effectiveScore
       that the recall did not return (:meth:`MemoryIndex.top_effective`, ``min_effective``
       applies), best first, with baseline score 0 and no recall legs (``(None, None)``).

    The union is cut at ``candidate_pool_size`` (recall hits kept first). The baseline ranking
    is the recall's order followed by the effectiveScore path's, so its top of list is the
    recall's and its NDCG@10 does not change; the predictor scores the whole pool and may lift
    a memory the recall missed. ``final_score`` / ``rank`` of the hits are the recall order after
    topic diversity; the second path follows them unchanged (final score 0).

    Returns:
        ``(pool, legs)``: the ranked pool, best first, and each recall hit's ``(bm25_score,
        vector_score)`` (the second path's members are absent: no legs).
    """
    cap = s.candidate_pool_size
    limit = min(cap, s.similarity_top) if s.similarity_top > 0 else cap
    res = recall.recall(
        RecallQuery(
            query=context,
            limit=limit,
            project=project,
            include_global=True,
            exclude_superseded=True,
            now=now,
            touch=False,
            ranker=s.relevance_ranker,
        )
    )
    hits = res.hits
    if not hits:
        return [], {}
    learned = res.ranker == "learned" and all(h.heuristic_rank is not None for h in hits)
    prior: dict[str, tuple[float, int]] = {}
    if learned:  # the base's score and rank; the pool is ranked by the heuristic's
        prior = {h.memory.id: (baseline_score(h.score, h.rank_score), r) for r, h in enumerate(hits, 1)}
        hits = sorted(hits, key=lambda h: h.heuristic_rank or 0)
    ranked = [
        (h.memory.seq, h.memory.id, float(h.heuristic_score if learned and h.heuristic_score is not None else h.score))
        for h in hits
    ]
    wide = s.model_copy(update={"effective_top": len(ranked), "similarity_top": 0})
    pool = build_pool(ranked, cv, index, wide)
    if prior:
        pool = [replace(p, prior_score=prior[p.memory_id][0], prior_rank=prior[p.memory_id][1]) for p in pool]
    eff = {}
    for h in hits:
        m = h.memory
        days = max(0.0, (now_epoch - _epoch(m.created_at)) / 86400.0)
        eff[m.id] = 1.0 if m.pinned else float(m.importance) * DECAY_PER_DAY**days
    legs = {h.memory.id: (h.bm25_score, h.vector_score) for h in hits}
    pool = [replace(p, effective_score=eff.get(p.memory_id, p.effective_score)) for p in pool]
    return pool + _effective_path(index, pool, project=project, cv=cv, s=s, now_epoch=now_epoch), legs


def baseline_score(score: float, rank_score: float | None) -> float:
    """The first-stage score the per-user predictor starts from for one recall hit: the
    heuristic recall ``score``, or, when the learned ranker ordered the hits, the logistic
    ``1 / (1 + exp(-rank_score))`` of its score (LightGBM lambdarank scores are unbounded
    log-odds-like margins).

    The logistic keeps the learned order (it is increasing), keeps every hit above the
    effectiveScore path's members (score 0) and keeps the value in (0, 1), the range of the
    heuristic score the predictor's prior (``1.0 x baseline_score + 0.4 x baseline_rank_inv``
    over its ``baseline_*`` signals, :mod:`memlane.predictor.prior`) was scaled for: the
    untrained predictor then ranks as the shipped base does.
    """
    if rank_score is None:
        return float(score)
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, float(rank_score)))))


def _effective_path(
    index: MemoryIndex,
    hits: Sequence[RankedCandidate],
    *,
    project: str | None,
    cv: np.ndarray | None,
    s: SessionSettings,
    now_epoch: float,
) -> list[RankedCandidate]:
    """The effectiveScore path of a relevance pool: up to ``candidate_pool_size - len(hits)``
    memories of the top ``effective_top`` by effectiveScore not among ``hits``, ranked after
    them (baseline score 0, final score 0, cosine to ``cv`` when both vectors exist)."""
    room = s.candidate_pool_size - len(hits)
    if room <= 0 or s.effective_top <= 0:
        return []
    seen = {p.memory_id for p in hits}
    top = index.top_effective(
        project=project, now_epoch=now_epoch, limit=s.effective_top, min_effective=s.min_effective
    )
    extra = [e for e in top if e[1] not in seen][:room]
    if not extra:
        return []
    sims: list[float | None] = [None] * len(extra)
    if cv is not None:
        vecs, has = index.vectors_of([e[0] for e in extra])
        dots = (vecs @ cv).tolist() if len(extra) else []
        sims = [float(d) if h else None for d, h in zip(dots, has.tolist())]
    n = len(hits)
    return [
        RankedCandidate(
            memory_id=mid,
            seq=seq,
            effective_score=float(score),
            similarity=sims[j],
            baseline_score=0.0,
            final_score=0.0,
            baseline_rank=n + j + 1,
            rank=n + j + 1,
        )
        for j, (seq, mid, score) in enumerate(extra)
    ]


def weight_by_phase(pool: Sequence[RankedCandidate], index: MemoryIndex, phase: str) -> list[RankedCandidate]:
    """The pool with its baseline and final scores multiplied by ``phase``'s weight of each
    memory's type (seed section 7 "Phase-Aware Re-Ranking": final_score = score x
    PHASE_WEIGHTS[phase][type]) and both ranks recomputed from them (ties keep the old order),
    in the new final order. The phase-weighted order is the baseline the predictor is fused
    with; ``effective_score`` stays the memory's own. A pool with a first stage of its own
    (``prior_score``, the shipped base) gets it weighed and re-ranked the same way (members
    without one count with their baseline score and rank).

    Raises:
        KeyError: ``phase`` is not a universal phase.
    """
    if not pool:
        return list(pool)
    w = index.type_weights([p.seq for p in pool], PHASE_WEIGHTS[phase]).tolist()
    base = sorted(range(len(pool)), key=lambda j: (-pool[j].baseline_score * w[j], pool[j].baseline_rank))
    final = sorted(range(len(pool)), key=lambda j: (-pool[j].final_score * w[j], pool[j].rank))
    b_rank = {j: r for r, j in enumerate(base, 1)}
    f_rank = {j: r for r, j in enumerate(final, 1)}
    p_rank: dict[int, int] = {}
    p_score = [(p.baseline_score if p.prior_score is None else p.prior_score) * w[j] for j, p in enumerate(pool)]
    if any(p.prior_score is not None for p in pool):  # the shipped base's order, weighed the same way
        prior = sorted(
            range(len(pool)),
            key=lambda j: (-p_score[j], pool[j].baseline_rank if pool[j].prior_rank is None else pool[j].prior_rank),
        )
        p_rank = {j: r for r, j in enumerate(prior, 1)}
    return [
        replace(
            pool[j],
            baseline_score=pool[j].baseline_score * w[j],
            final_score=pool[j].final_score * w[j],
            baseline_rank=b_rank[j],
            rank=f_rank[j],
            prior_score=p_score[j] if p_rank else None,
            prior_rank=p_rank.get(j),
        )
        for j in final
    ]


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


def explored_shown(
    chosen: list[Shown], replaced: str, explored: str, contents: dict[str, tuple[str, str]]
) -> list[Shown]:
    """``chosen`` with ``replaced`` swapped for ``explored`` (kept in the last slot)."""
    if explored not in contents:
        return chosen
    body, created = contents[explored]
    return [c for c in chosen if c.id != replaced] + [Shown(explored, created, body)]
