"""Session-start: the candidate pool, baseline ranking, topic diversity and budgeted selection.

predictive-memory-scorer.md "Candidate Pre-Filtering", "Hook Flow (session-start)",
"Topic Diversity". Baseline score = effectiveScore (importance x 0.95^days, pinned = 1.0).
Pool = top ``effective_top`` by effectiveScore U top ``similarity_top`` by cosine to the
session context among the top ``similarity_pool`` by effectiveScore, deduplicated, at most
``candidate_pool_size``. The pool is ranked by the baseline (ties broken by similarity),
attenuated by topic diversity, and the top of it is injected within the character budget.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from memlane.config import SessionSettings
from memlane.embedding.base import Embedder
from memlane.errors import EmbeddingError
from memlane.lru import LRUCache
from memlane.recall.memory_index import MemoryIndex
from memlane.sessions.diversity import apply_topic_diversity

#: Characters of the session context that are embedded (~150 tokens). The embedding's cost grows
#: with its length (docs/decisions.md, "Session-start writes"); the head of the context
#: (project, directory, the latest digest's first lines) carries the topic.
CONTEXT_EMBED_CHARS = 600


@dataclass(frozen=True, slots=True)
class RankedCandidate:
    """One pool member after ranking: scores, both ranks (1-based) and its vector flag.

    ``prior_score`` / ``prior_rank`` (1-based): the first stage the per-user predictor starts
    from when it is not the baseline (a learned relevance start: the shipped base's logistic
    score and rank, :func:`memlane.sessions.ranking.relevance_pool`); None means the baseline's
    own ``baseline_score`` / ``baseline_rank``.
    """

    memory_id: str
    seq: int
    effective_score: float
    similarity: float | None
    baseline_score: float
    final_score: float
    baseline_rank: int
    rank: int
    prior_score: float | None = None
    prior_rank: int | None = None


class ContextVectors:
    """Session-context embeddings with a small LRU cache keyed by the embedded text.

    The default context of a project changes when a session ends (its checkpoint becomes the
    latest), so :meth:`warm` embeds the next session's context right after a session-end,
    off the session-start hot path (a context of ~150 tokens costs tens of ms on 2 cores).
    """

    def __init__(self, embedder: Embedder | None, index: MemoryIndex, size: int = 256) -> None:
        self.embedder = embedder
        self.index = index
        self.size = size
        self._cache: LRUCache[str, np.ndarray] = LRUCache(size)
        self._stats_lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, context: str) -> np.ndarray | None:
        """The context's embedding (float32 [d]), or None without an embedder or on failure."""
        text = context[:CONTEXT_EMBED_CHARS]
        if self.embedder is None or not len(self.index) or not text.strip():
            return None
        v = self._cache.get(text)
        with self._stats_lock:
            if v is not None:
                self.hits += 1
            else:
                self.misses += 1
        if v is not None:
            return v
        try:
            v = self.embedder.embed([text])[0]
        except EmbeddingError:
            return None
        if v.shape != (self.index.dimensions,):
            return None
        self._cache.put(text, v)
        return v

    def warm(self, context: str) -> None:
        """Embed and cache ``context`` now (called off the hot path)."""
        self.get(context)


def build_pool(
    eff: list[tuple[int, str, float]], cv: np.ndarray | None, index: MemoryIndex, s: SessionSettings
) -> list[RankedCandidate]:
    """Pool, baseline ranking and topic diversity (no I/O beyond the in-memory index).

    Args:
        eff: the top ``similarity_pool`` memories by effectiveScore, best first, as
            (seq, memory id, effective score) (``MemoryIndex.top_effective``).
        cv: the session context vector [d], or None.
    """
    sims = np.full(len(eff), np.nan, dtype=np.float64)
    vecs = has = None
    if cv is not None and eff:
        vecs, has = index.vectors_of([e[0] for e in eff])
        sims[has] = vecs[has] @ cv
    finite = np.isfinite(sims)
    chosen: dict[int, None] = {i: None for i in range(min(s.effective_top, len(eff)))}
    if s.similarity_top and finite.any():
        order = np.argsort(-np.nan_to_num(sims, nan=-np.inf), kind="stable")[: s.similarity_top]
        for i in order[finite[order]].tolist():
            chosen.setdefault(i, None)
    picked = list(chosen)[: s.candidate_pool_size]
    if not picked:
        return []
    eff_scores = np.array([eff[i][2] for i in picked])
    pick_sims = sims[picked]
    sim_scores = np.where(np.isfinite(pick_sims), pick_sims, -1.0)
    # Baseline = effectiveScore; similarity breaks ties (lexsort: last key is primary).
    baseline_order = np.lexsort((-sim_scores, -eff_scores))
    baseline_rank = np.empty(len(picked), dtype=int)
    baseline_rank[baseline_order] = np.arange(1, len(picked) + 1)
    # Diversity walks by score; encode the tie-break as a tiny epsilon so it walks baseline order.
    walk_scores = eff_scores + 1e-9 * (len(picked) - baseline_rank)
    pool_vecs = vecs[picked] if vecs is not None else None
    pool_has = has[picked] if has is not None else None
    adjusted, final_order = apply_topic_diversity(walk_scores, pool_vecs, pool_has)
    rank = np.empty(len(picked), dtype=int)
    rank[final_order] = np.arange(1, len(picked) + 1)
    # Plain Python numbers from here (numpy scalar access costs ~1 us each; 90 candidates x 6).
    effs, sims_l, adj, b_rank, f_rank = (
        eff_scores.tolist(),
        pick_sims.tolist(),
        adjusted.tolist(),
        baseline_rank.tolist(),
        rank.tolist(),
    )
    out = []
    for j, i in enumerate(picked):
        sim = sims_l[j]
        out.append(
            RankedCandidate(
                memory_id=eff[i][1],
                seq=eff[i][0],
                effective_score=effs[j],
                similarity=sim if math.isfinite(sim) else None,
                baseline_score=effs[j],
                final_score=adj[j],
                baseline_rank=b_rank[j],
                rank=f_rank[j],
            )
        )
    out.sort(key=lambda c: c.rank)
    return out
