"""Optional reranking of the top candidates (memory-pipeline-v2.md "Optional Reranking",
"Embedding-Based Reranker").

:func:`rerank` slices the ranked list at ``top_n``, hands the head to a :class:`Reranker` and
appends the untouched tail. When the reranker exceeds ``timeout_ms``, raises, or returns
something other than a reordering of the head, the original order is kept (no second attempt).

:class:`EmbeddingReranker` is the built-in one (``reranker.model`` empty or ``"embedding"``): it
blends ``0.7 * score + 0.3 * cos(query vector, stored content vector)`` for candidates with a
vector in the in-memory :class:`~memlane.recall.memory_index.MemoryIndex` (no re-embedding;
those without one keep their score) and sorts by the blend, descending. Other rerankers
implement :class:`Reranker` and are registered by name with :func:`register_reranker`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace

import numpy as np

from memlane.recall.memory_index import MemoryIndex

log = logging.getLogger(__name__)

#: Weight of the original score in the embedding reranker's blend (seed: 0.7).
ORIGINAL_WEIGHT = 0.7
#: Weight of the cosine similarity in the blend (seed: 0.3).
COSINE_WEIGHT = 0.3


@dataclass(frozen=True, slots=True)
class RerankCandidate:
    """One candidate handed to a reranker: the memory's seq and id, its content, its score."""

    seq: int
    memory_id: str
    content: str
    score: float


class Reranker(ABC):
    """Reorders the head of a recall's ranked list (the seed's ``RerankProvider``).

    ``inline = True`` declares pure, bounded in-process work (a few dot products): it runs in the
    caller's thread. Otherwise :func:`rerank` runs it on a worker thread and stops waiting after
    the timeout (the call itself cannot be interrupted; its late result is discarded).
    """

    name: str = "reranker"
    inline: bool = False

    @abstractmethod
    def rerank(
        self, query: str, candidates: list[RerankCandidate], *, query_vector: np.ndarray | None = None
    ) -> list[RerankCandidate]:
        """Return the same candidates (each exactly once) in the new order, best first, with
        their new scores.

        Args:
            query: the recall query text.
            candidates: the head of the ranked list, best first (at most ``top_n``).
            query_vector: the query embedding, float32 [d], or None when none was computed.
        """


class NoopReranker(Reranker):
    """Pass-through (seed: ``noopReranker``, for tests)."""

    name = "noop"
    inline = True

    def rerank(
        self, query: str, candidates: list[RerankCandidate], *, query_vector: np.ndarray | None = None
    ) -> list[RerankCandidate]:
        return list(candidates)


class EmbeddingReranker(Reranker):
    """Blend ``0.7 * score + 0.3 * cosine(query_vector, content vector)``; sort descending.

    Args:
        index: the in-memory index holding the stored content vectors.
    """

    name = "embedding"
    inline = True

    def __init__(self, index: MemoryIndex) -> None:
        self.index = index

    def rerank(
        self, query: str, candidates: list[RerankCandidate], *, query_vector: np.ndarray | None = None
    ) -> list[RerankCandidate]:
        if query_vector is None or not candidates:
            return list(candidates)
        vecs, has = self.index.vectors_of([c.seq for c in candidates])  # [k, d], [k]
        if not has.any() or vecs.shape[1] != np.shape(query_vector)[0]:
            return list(candidates)
        blended = cosine_blend(
            np.array([c.score for c in candidates], dtype=np.float64),
            vecs,
            has,
            np.asarray(query_vector, dtype=np.float32),
        )
        order = np.argsort(-blended, kind="stable")
        return [replace(candidates[i], score=float(blended[i])) for i in order]


def cosine_blend(scores: np.ndarray, vectors: np.ndarray, has: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Blended scores, float64 [k]: ``0.7 * scores + 0.3 * cos(query, vectors[i])`` where
    ``has[i]``, else ``scores[i]``.

    Args:
        scores: original scores [k]; vectors: float32 [k, d] (rows without a vector ignored);
        has: bool [k]; query: float32 [d]. Zero vectors have cosine 0.
    """
    norms = np.linalg.norm(vectors, axis=1) * float(np.linalg.norm(query))
    dots = vectors @ query
    cos = np.divide(dots, norms, out=np.zeros_like(dots, dtype=np.float64), where=norms > 0)
    return np.where(has, ORIGINAL_WEIGHT * scores + COSINE_WEIGHT * cos, scores)


_FACTORIES: dict[str, Callable[[MemoryIndex], Reranker]] = {
    "": EmbeddingReranker,
    "embedding": EmbeddingReranker,
    "noop": lambda index: NoopReranker(),
}


def register_reranker(model: str, factory: Callable[[MemoryIndex], Reranker]) -> None:
    """Make ``reranker.model: <model>`` build ``factory(index)``."""
    _FACTORIES[model] = factory


def build_reranker(model: str, index: MemoryIndex) -> Reranker | None:
    """The reranker ``reranker.model`` names, or None (logged) for an unknown name."""
    factory = _FACTORIES.get(model)
    if factory is None:
        log.warning("unknown reranker model %r: reranking skipped", model)
        return None
    return factory(index)


def _valid(head: Sequence[RerankCandidate], out: object) -> bool:
    """``out`` is a list of RerankCandidate holding exactly the head's seqs, each once."""
    return (
        isinstance(out, list)
        and len(out) == len(head)
        and all(isinstance(c, RerankCandidate) for c in out)
        and sorted(c.seq for c in out) == sorted(c.seq for c in head)
    )


def rerank(
    query: str,
    candidates: list[RerankCandidate],
    reranker: Reranker,
    *,
    top_n: int,
    timeout_ms: float,
    pool: ThreadPoolExecutor,
    query_vector: np.ndarray | None = None,
) -> tuple[list[RerankCandidate], str]:
    """Rerank the first ``top_n`` candidates; never raises.

    Args:
        candidates: the ranked list, best first.
        top_n: candidates handed to the reranker (``reranker.top_n``).
        timeout_ms: budget, ms (``reranker.timeout_ms``); ignored for ``inline`` rerankers.
        pool: runs non-inline rerankers.
    Returns:
        (the new list: reranked head + untouched tail, status): status ``ok``, or ``timeout``,
        ``error``, ``invalid`` - those three return ``candidates`` unchanged.
    """
    head, tail = list(candidates[:top_n]), list(candidates[top_n:])
    if not head:
        return list(candidates), "ok"
    try:
        if reranker.inline:
            out = reranker.rerank(query, list(head), query_vector=query_vector)
        else:
            fut = pool.submit(reranker.rerank, query, list(head), query_vector=query_vector)
            out = fut.result(timeout=timeout_ms / 1000.0)
    except FutureTimeout:
        log.warning("reranker %s exceeded %.0f ms: original order kept", reranker.name, timeout_ms)
        return list(candidates), "timeout"
    except Exception as exc:
        log.warning("reranker %s failed: original order kept: %s", reranker.name, exc)
        return list(candidates), "error"
    if not _valid(head, out):
        log.warning("reranker %s returned a list that is not a reordering of its input: ignored", reranker.name)
        return list(candidates), "invalid"
    return list(out) + tail, "ok"
