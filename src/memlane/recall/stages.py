"""The optional recall stages of memory-pipeline-v2, in the order recall runs them:

hybrid merge -> **hints merge** (max, :mod:`memlane.recall.hints`) -> graph boost -> rehearsal and
recency boosts -> **dampening** (:mod:`memlane.recall.dampening`) -> **reranker**
(:mod:`memlane.recall.rerank`) -> ``limit``.

:class:`RecallStages` is what :class:`~memlane.services.recall_service.RecallService` calls. Every
flag is read from ``pipeline_v2`` at call time (hot config). Nothing here raises into recall: a
failing stage is skipped and the previous scores and order are kept.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from memlane.config.pipeline import PipelineV2Settings
from memlane.recall.dampening import Dampener, any_enabled, max_gain
from memlane.recall.fts_cache import FtsCache
from memlane.recall.hints import merge_hints, search_hints
from memlane.recall.hybrid import LegScores
from memlane.recall.memory_index import MemoryIndex
from memlane.recall.rerank import RerankCandidate, Reranker, build_reranker, rerank
from memlane.storage import hubs as hubs_sql
from memlane.storage import memories as mem_sql
from memlane.storage.db import Database
from memlane.storage.fts import Filters
from memlane.storage.models import CandRow, Memory

log = logging.getLogger(__name__)

#: Smallest candidate pool dampening rescores.
MIN_POOL = 20
#: Per-stage timing samples kept (ms), for benchmarks and status.
TIMING_SAMPLES = 1000

Merged = dict[int, tuple[float, LegScores]]


def read_candidates(conn: sqlite3.Connection, seqs: list[int], links: bool) -> Prefetched:
    """Rows of ``seqs`` (unknown seqs absent) and, with ``links``, their memories' entity links
    (``memory_entity_mentions``), in one read.

    Raises:
        sqlite3.Error: SQLite failed.
    """
    rows = mem_sql.candidate_rows(conn, seqs)
    return Prefetched(rows, hubs_sql.entities_of(conn, [r.id for r in rows.values()]) if links else None)


@dataclass
class Prefetched:
    """Candidate rows read ahead (on the leg worker while the query is embedded, then the rest
    in one read after the merge).

    Attributes:
        rows: seq -> CandRow.
        links: memory id -> linked entity ids, covering every row in ``rows`` (memories without
            links absent), or None when they were not read (for all of them).
    """

    rows: dict[int, CandRow] = field(default_factory=dict)
    links: dict[str, set[str]] | None = None
    #: False once a read failed: rows may be missing for candidates that exist.
    complete: bool = True

    def seq_links(self) -> dict[int, set[str]] | None:
        """seq -> linked entity ids of every live row; None without links or when a read failed
        (the caller must then read them itself)."""
        if self.links is None or not self.complete:
            return None
        return {s: self.links.get(r.id, set()) for s, r in self.rows.items() if not r.is_deleted}

    def add(self, other: Prefetched | None) -> None:
        """Take ``other``'s rows (and links; links become None unless both have them). None: a
        read that failed (``complete`` becomes False)."""
        if other is None:
            self.complete = False
            return
        self.rows.update(other.rows)
        if self.links is not None and other.links is not None:
            self.links.update(other.links)
        else:
            self.links = None


class RecallStages:
    """Hints merge, dampening and reranking for one store.

    Args:
        db: the database (hint search, hub statistics).
        index: the in-memory index (filters, stored vectors).
        pipeline: returns the current ``pipeline_v2`` settings.
        reranker: use this reranker instead of the one ``reranker.model`` names.
        fts: returns the in-memory FTS statistics for the hint leg, or None (SQL); default
            always None (:meth:`memlane.services.recall_service.RecallService.fts_cache` in the
            container).
    """

    def __init__(
        self,
        db: Database,
        index: MemoryIndex,
        pipeline: Callable[[], PipelineV2Settings],
        reranker: Reranker | None = None,
        *,
        fts: Callable[[], FtsCache | None] = lambda: None,
    ) -> None:
        self.db = db
        self.index = index
        self.pipeline = pipeline
        self.reranker = reranker
        self.dampener = Dampener(db)
        self.fts = fts
        self._built: tuple[str, Reranker | None] | None = None
        self._rerank_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memlane-rerank")
        #: stage name -> recent durations, ms (``hints`` = waiting for the hint leg + merging).
        self.timings: dict[str, deque[float]] = {
            k: deque(maxlen=TIMING_SAMPLES) for k in ("hints", "dampening", "rerank")
        }
        #: rerank outcome -> count (ok, timeout, error, invalid).
        self.rerank_outcomes: dict[str, int] = {}

    # -- hints --------------------------------------------------------------------------
    def submit_hints(
        self,
        pool: Executor,
        expr: str | None,
        n_cand: int,
        filters: Filters,
        prefetch: bool = False,
        links: bool = False,
    ) -> Future | None:
        """Start the hint leg on ``pool`` when ``hints.enabled`` (None otherwise). The future's
        result is ``(seq -> hint score, Prefetched of those memories or None)``; rows (and with
        ``links`` their entity links) are read only with ``prefetch`` (:meth:`prefetch_rows`)."""
        try:
            if expr is None or not self.pipeline().hints.enabled:
                return None
            cache = self.fts()

            def leg() -> tuple[dict[int, float], Prefetched | None]:
                scores = search_hints(self.db, self.index, expr, n_cand, filters, cache)
                return scores, self.prefetch_rows(list(scores), links) if prefetch else None

            return pool.submit(leg)
        except Exception as exc:
            log.warning("hint search not started: %s", exc)
            return None

    @staticmethod
    def hint_rows(future: Future | None) -> Prefetched | None:
        """The rows the hint leg read ahead (None if none, or the leg failed)."""
        try:
            return future.result()[1] if future is not None else None
        except Exception:
            return None

    def prefetch_rows(self, seqs: list[int], links: bool = False) -> Prefetched | None:
        """Candidate rows (and with ``links`` their entity links) for ``seqs`` in one read
        (:func:`read_candidates`), for :meth:`rank` and the graph boost; None when it failed.
        Never raises."""
        try:
            return self.db.read(lambda c: read_candidates(c, seqs, links))
        except Exception as exc:
            log.warning("candidate prefetch skipped: %s", exc)
            return None

    def hub_active(self) -> bool:
        """Whether hub dampening is on now (it reads entity links). Never raises."""
        try:
            p = self.pipeline().dampening
            return p.hub_enabled
        except Exception:
            return False

    def merge_hints(
        self,
        merged: Merged,
        future: Future | None,
        alpha: float,
        query_vector: np.ndarray | None,
        context_weight: float,
    ) -> Merged:
        """``merged`` with the hint leg merged in by max (see :func:`memlane.recall.hints.merge_hints`);
        ``merged`` unchanged when no hint search ran or it failed."""
        if future is None:
            return merged
        t0 = time.perf_counter()
        try:
            scores = future.result()[0]
            vector_of = None
            if query_vector is not None:
                vector_of = lambda seqs: self.index.score_of(query_vector, seqs, context_weight)  # noqa: E731
            out = merge_hints(merged, scores, alpha, vector_of)
        except Exception as exc:
            log.warning("hints merge skipped: %s", exc)
            out = merged
        self.timings["hints"].append((time.perf_counter() - t0) * 1000)
        return out

    # -- dampening + rerank -------------------------------------------------------------
    def active(self) -> bool:
        """Whether :meth:`rank` changes anything now (a dampening stage or the reranker is on).
        Never raises: False when the settings cannot be read."""
        try:
            p = self.pipeline()
            return any_enabled(p.dampening) or p.reranker.enabled
        except Exception as exc:
            log.warning("recall stage settings unreadable: %s", exc)
            return False

    def rank(
        self,
        query: str,
        query_vector: np.ndarray | None,
        seqs: list[int],
        final: np.ndarray,
        known: np.ndarray,
        merged: Merged,
        min_score: float,
        limit: int,
        fetch: Callable[[list[int]], dict[int, Memory]],
        prefetched: Prefetched | None = None,
    ) -> tuple[list[tuple[float, int]], dict[int, Memory]] | None:
        """The final ranking with dampening and the reranker, or None to let the caller rank as
        before (no stage active, or an unexpected failure).

        Args:
            query: the (cleaned) query text.
            query_vector: float32 [d] or None.
            seqs: candidate seqs, length m; final: their boosted fused scores [m];
            known: bool [m], in the index; merged: seq -> (score, LegScores) (BM25 leg > 0 = lexical).
            min_score: the cut applied to the final score (dampened, then reranked when the
                reranker runs); limit: hits returned.
            fetch: seqs -> {seq: Memory} (one read), for the hits returned.
            prefetched: candidate rows already read (:meth:`prefetch_rows`); the rest are read here.
        Returns:
            ([(score, seq)] best first, at most ``limit``; {seq: Memory} covering them).
        """
        try:
            p = self.pipeline()
            damp, rr = any_enabled(p.dampening), p.reranker.enabled
            if not (damp or rr):
                return None
            # The min_score cut applies to the score reported: after the reranker when it runs.
            ranked, rows = self._dampened(
                query,
                seqs,
                final,
                known,
                merged,
                0.0 if rr else min_score,
                max(limit, p.reranker.top_n if rr else 0),
                p,
                prefetched,
            )
            if rr and ranked:
                ranked = [
                    (sc, sq)
                    for sc, sq in self._rerank(query, query_vector, ranked, rows, p)
                    if sc > 0.0 and sc >= min_score
                ]
            ranked = ranked[:limit]
            return ranked, fetch([seq for _, seq in ranked])
        except Exception as exc:
            log.warning("recall stages failed, baseline ranking kept: %s", exc)
            return None

    def _dampened(
        self,
        query: str,
        seqs: list[int],
        final: np.ndarray,
        known: np.ndarray,
        merged: Merged,
        min_score: float,
        need: int,
        p: PipelineV2Settings,
        prefetched: Prefetched | None = None,
    ) -> tuple[list[tuple[float, int]], dict[int, CandRow]]:
        """Dampen a pool of the best candidates, growing it until no candidate outside could
        enter the top ``need`` (outsiders can gain at most ``max_gain`` x their score). Rows in
        ``prefetched`` are not read again."""
        t0 = time.perf_counter()
        seq_arr = np.asarray(seqs, dtype=np.int64)
        idx = np.flatnonzero(known & (final > 0.0))
        order = idx[np.lexsort((-seq_arr[idx], -final[idx]))]
        damp, gain = any_enabled(p.dampening), max_gain(p.dampening)
        hub = damp and p.dampening.hub_enabled
        have = Prefetched(links={} if hub else None)
        if prefetched is not None:
            have.rows.update(prefetched.rows)
            if have.links is not None and prefetched.links is not None:
                have.links.update(prefetched.links)
            elif hub:  # the links of those rows were not read
                have.links = None
        rows = have.rows
        factor = np.ones(len(seqs), dtype=np.float64)  # per candidate; each one's factor is its own
        done = 0  # candidates of ``order`` already fetched and dampened
        size = max(2 * need, MIN_POOL)
        seq_list = seq_arr.tolist()
        if all(seq_list[i] in rows for i in order.tolist()):
            # Every row is at hand (read ahead): one pass over all candidates costs less than
            # growing the pool, and ranks the same (the growth only ever stops early when the
            # candidates left out cannot reach the top ``need``).
            size = max(size, int(order.size))
        while True:
            new = order[done:size]
            want = [seq_list[i] for i in new.tolist()]
            missing = [s for s in want if s not in rows]
            if missing:
                got = self.db.read(lambda c: read_candidates(c, missing, have.links is not None))
                rows.update(got.rows)
                if have.links is not None:
                    have.links.update(got.links or {})
            new = np.array([i for i in new.tolist() if seq_list[i] in rows], dtype=np.int64)
            if damp and new.size:
                mems = [rows[seq_list[i]] for i in new.tolist()]
                lexical = np.array([(merged[seq_list[i]][1].bm25 or 0.0) > 0.0 for i in new.tolist()], dtype=bool)
                factor[new] = self.dampener.factors(
                    query, mems, final[new], lexical, p.dampening, links=have.links if hub else None
                )
            done = min(size, order.size)
            pool = np.array([i for i in order[:done].tolist() if seq_list[i] in rows], dtype=np.int64)
            scores = final[pool] * factor[pool]
            keep = (scores > 0.0) & (scores >= min_score)
            pool, scores = pool[keep], scores[keep]
            o = np.lexsort((-seq_arr[pool], -scores))
            pool, scores = pool[o], scores[o]
            if done >= order.size:
                break
            # Trigger: the pool is smaller than the candidate list.
            # Why: dampening may lift a candidate by up to ``gain`` and drop those above it.
            # Outcome: stop when the need-th dampened score beats any outsider's best case.
            if scores.size >= need and scores[need - 1] >= gain * final[order[done]]:
                break
            size *= 2
        self.timings["dampening"].append((time.perf_counter() - t0) * 1000)
        return [(float(s), seq_list[i]) for s, i in zip(scores.tolist(), pool.tolist())], rows

    def _rerank(
        self,
        query: str,
        query_vector: np.ndarray | None,
        ranked: list[tuple[float, int]],
        rows: dict[int, CandRow],
        p: PipelineV2Settings,
    ) -> list[tuple[float, int]]:
        reranker = self._reranker(p.reranker.model)
        if reranker is None:
            return ranked
        t0 = time.perf_counter()
        cands = [RerankCandidate(seq, rows[seq].id, rows[seq].content, score) for score, seq in ranked]
        out, status = rerank(
            query,
            cands,
            reranker,
            top_n=p.reranker.top_n,
            timeout_ms=p.reranker.timeout_ms,
            pool=self._rerank_pool,
            query_vector=query_vector,
        )
        self.rerank_outcomes[status] = self.rerank_outcomes.get(status, 0) + 1
        self.timings["rerank"].append((time.perf_counter() - t0) * 1000)
        return [(c.score, c.seq) for c in out]

    def _reranker(self, model: str) -> Reranker | None:
        if self.reranker is not None:
            return self.reranker
        if self._built is None or self._built[0] != model:
            self._built = (model, build_reranker(model, self.index))
        return self._built[1]

    def close(self) -> None:
        """Stop waiting for reranker threads (a stuck one is abandoned)."""
        self._rerank_pool.shutdown(wait=False, cancel_futures=True)
