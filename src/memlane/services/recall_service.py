"""Hybrid recall in three steps: legs -> merge -> stages.

ARCHITECTURE "The three paths", 2. :meth:`RecallService.recall` runs

1. the legs (``_run_legs``): FTS5 BM25 candidates, the hint leg and the graph's entity lookup
   on one worker while the query is embedded, then exact vector KNN candidates;
2. the merge (``_merge``): ``alpha * vector + (1 - alpha) * bm25`` (``recall.hybrid``), the
   hints (max), the graph boost;
3. the stages (``_stages``): rehearsal and recency boosts, dampening and the reranker (or the
   ``min_score`` cut and top ``limit``), the learned ranker; then the drift step.

Returned memories get their access_count bumped (rehearsal) in a background write, unless
``touch`` is off."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memlane.config import RecallSettings
from memlane.config.clock import now_iso, parse_iso
from memlane.embedding.base import Embedder
from memlane.errors import EmbeddingError, ValidationError
from memlane.recall.bm25 import bm25_leg
from memlane.recall.fts_cache import FtsCache
from memlane.recall.hybrid import boost, merge
from memlane.recall.memory_index import MemoryIndex, single_threaded_blas
from memlane.recall.stages import Prefetched, RecallStages, read_candidates
from memlane.services.extensions import DriftGuard
from memlane.services.inputs import RecallHit, RecallQuery, RecallResult
from memlane.services.memory_service import MemoryService
from memlane.services.validation import MAX_SHORT_CHARS, check_text, clean_query
from memlane.storage import fts
from memlane.storage import memories as mem_sql
from memlane.v3.methodology.phases import PHASE_WEIGHTS, check_phase

log = logging.getLogger(__name__)

#: Characters of a query sent to the embedder (the model reads at most 256 tokens anyway).
EMBED_QUERY_CHARS = 4000

#: Largest ``limit`` a recall may ask for.
MAX_LIMIT = 1000
#: With a phase, the best ``limit`` x this many candidates are weighted before the cut to
#: ``limit``: the weights span 0.3 to 1.5 (seed section 7), a factor of 5.
PHASE_POOL_FACTOR = 5

#: Stores with fewer memories (deleted included) keep BM25 in SQL: it is fast there, and the
#: in-memory FTS statistics (memlane.recall.fts_cache) would be rebuilt after every write.
FTS_CACHE_MIN_MEMORIES = 2000


class SerialBatch(Executor):
    """An executor that collects calls and, once :meth:`start` ed, runs them in submission order
    on one worker of another executor (each call's future completes as it finishes)."""

    def __init__(self) -> None:
        self._calls: list[tuple[Future, Callable[..., Any], tuple, dict]] = []
        self._started = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Queue ``fn(*args, **kwargs)``; its future completes when the batch reaches it.

        Raises:
            RuntimeError: the batch has started.
        """
        if self._started:
            raise RuntimeError("batch already started")
        fut: Future = Future()
        self._calls.append((fut, fn, args, kwargs))
        return fut

    def start(self, pool: Executor) -> None:
        """Run the queued calls on one worker of ``pool`` (nothing to do: no worker used)."""
        self._started = True
        if self._calls:
            pool.submit(self._run)

    def _run(self) -> None:
        for fut, fn, args, kwargs in self._calls:
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to whoever waits on it
                fut.set_exception(exc)


@dataclass(frozen=True)
class _Plan:
    """One validated recall: the cleaned query text, its filters, and how many candidates
    each leg fetches (``n_cand``) and the learned ranker rescores (``n_pool``)."""

    query: RecallQuery
    text: str
    filters: fts.Filters
    now: datetime
    alpha: float
    min_score: float
    n_cand: int
    want_pool: bool
    n_pool: int


@dataclass(frozen=True)
class _Legs:
    """What the legs found: the query vector (or None: BM25 only), each leg's ``seq -> score``
    (None when the leg did not run), the hint leg's and the graph lookup's pending work, and
    the candidates' rows read ahead for the stages (filled further by the merge)."""

    names: tuple[str, ...]
    qv: np.ndarray | None
    bm25: dict[int, float] | None
    vector: dict[int, float] | None
    hints: Any
    graph: Any
    links: bool
    prefetched: Prefetched | None


class RecallService:
    """Recall over the memory store.

    Args:
        memories: the memory service (its database, embedder and vector index are shared).
        settings: recall defaults (alpha, min_score, boosts, candidate multiplier).
        fts: the in-memory FTS5 statistics of the BM25 and hint legs (one is built over
            ``memories.db`` when not given; see :meth:`fts_cache`).
        stages: the memory-pipeline-v2 hints, dampening and reranker stages
            (:class:`memlane.recall.stages.RecallStages`); None: none of them.
        graph_boost: the knowledge-graph boost (:class:`memlane.graph.search.GraphBooster`:
            ``submit`` ahead of the legs, then ``boost``; never raises); None: no boost.
        ranker: the learned reranking stage (:class:`memlane.ranker.stage.LearnedRanker`);
            None: heuristic ranking only.
        drift: the drift step after ranking (penalty and warning for stale or drifting
            memories, write-behind drift check); None: off.
    """

    def __init__(
        self,
        memories: MemoryService,
        settings: RecallSettings,
        *,
        fts: FtsCache | None = None,
        stages: RecallStages | None = None,
        graph_boost: Any = None,
        ranker: Any = None,
        drift: DriftGuard | None = None,
    ) -> None:
        self.memories = memories
        self.settings = settings
        single_threaded_blas()  # the vector leg's matrix-vector product (see there)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="memlane-bm25")
        self.fts = fts if fts is not None else FtsCache(memories.db)
        self.stages = stages
        self.graph_boost = graph_boost
        self.ranker = ranker
        self.drift = drift

    @property
    def embedder(self) -> Embedder | None:
        return self.memories.embedder

    @property
    def index(self) -> MemoryIndex:
        return self.memories.index

    def fts_cache(self) -> FtsCache | None:
        """The in-memory FTS statistics when the store is large enough to use them
        (:data:`FTS_CACHE_MIN_MEMORIES`), else None (SQL)."""
        return self.fts if self.index.size >= FTS_CACHE_MIN_MEMORIES else None

    def warm(self) -> None:
        """Start building the in-memory FTS statistics now (in the background) when the store is
        large enough to use them, and loading the learned ranker's model, instead of at the first
        recall. Never raises."""
        cache = self.fts_cache()
        if cache is not None:
            cache.schedule()
        if self.ranker is not None and self.ranker.wanted(None):  # parse the model off the first recall's path
            self._pool.submit(self.ranker.model)

    def recall(self, q: RecallQuery, *, pool_out: list[Any] | None = None) -> RecallResult:
        """Run one recall: legs -> merge -> stages.

        Any string is a valid query (empty, quotes, FTS operators, 100 KB: truncated to
        ``max_query_chars``). An empty query returns no hits.

        With ``pool_out`` (a list), the candidate pool the learned ranker reads
        (:class:`memlane.ranker.features.Pool`, heuristic order) is appended to it whether or
        not the ranker runs: the training set is built from these (``memlane train ranker``).

        Raises:
            ValidationError: limit outside [1, 1000], alpha or min_score outside [0, 1],
            a bad timestamp or filter string.
        """
        t0 = time.perf_counter()
        plan = self._plan(q, pool_out is not None)
        if plan is None:
            return RecallResult([], (), (time.perf_counter() - t0) * 1000)
        legs = self._run_legs(plan)
        unboosted, merged = self._merge(plan, legs)
        if not merged:
            return RecallResult([], legs.names, (time.perf_counter() - t0) * 1000)
        hits, used = self._stages(plan, legs, unboosted, merged, pool_out)
        if self.drift is not None and hits:
            hits = self.drift.after_recall(hits)
        if q.touch and hits:
            self._touch(hits)
        return RecallResult(hits, legs.names, (time.perf_counter() - t0) * 1000, used)

    def _plan(self, q: RecallQuery, collect_pool: bool) -> _Plan | None:
        """Validate ``q`` and settle what this recall fetches; None for an empty query.

        Raises:
            ValidationError: see :meth:`recall`.
        """
        s = self.settings
        if not isinstance(q.limit, int) or isinstance(q.limit, bool) or not 1 <= q.limit <= MAX_LIMIT:
            raise ValidationError(f"limit: must be an integer in [1, {MAX_LIMIT}]", details={"field": "limit"})
        alpha = s.alpha if q.alpha is None else q.alpha
        min_score = s.min_score if q.min_score is None else q.min_score
        for name, v in (("alpha", alpha), ("min_score", min_score)):
            if not 0.0 <= v <= 1.0:
                raise ValidationError(f"{name}: must be in [0, 1]", details={"field": name})
        if q.phase is not None:
            check_phase(q.phase)
        if q.ranker is not None and q.ranker not in ("learned", "heuristic"):
            raise ValidationError("ranker: must be 'learned' or 'heuristic'", details={"field": "ranker"})
        if q.project is not None:
            check_text(q.project, "project", max_chars=MAX_SHORT_CHARS, allow_empty=True)
        for t in q.types:
            check_text(t, "types[]", max_chars=MAX_SHORT_CHARS)
        filters = fts.Filters(
            project=q.project,
            types=tuple(q.types),
            since=parse_iso(q.since, "since") if q.since else None,
            until=parse_iso(q.until, "until") if q.until else None,
            include_deleted=q.include_deleted,
            include_global=q.include_global,
            exclude_superseded=q.exclude_superseded,
        )
        now = datetime.fromisoformat(parse_iso(q.now, "now")) if q.now else datetime.now(UTC)
        text = clean_query(q.query, s.max_query_chars)
        if not text.strip():
            return None
        # The learned ranker rescores the best ``pool_size`` candidates: each leg fetches that many.
        ranker = self.ranker
        want_pool = ranker is not None and (
            collect_pool
            or ranker.reason_off(
                q.ranker, self.index.model_id, self.embedder is not None and alpha > 0, q.alpha is not None
            )
            is None
        )
        n_pool = ranker.pool_size() if want_pool else 0
        return _Plan(
            q,
            text,
            filters,
            now,
            alpha,
            min_score,
            n_cand=max(q.limit * s.candidate_multiplier, 50, n_pool),
            want_pool=want_pool,
            n_pool=n_pool,
        )

    def _run_legs(self, plan: _Plan) -> _Legs:
        """The BM25, hint and vector legs, and the graph lookup's query-only steps.

        Everything that does not need the query vector runs, in order, on one worker while this
        thread embeds the query (onnxruntime and SQLite release the GIL: on 2 cores they
        overlap): the BM25 leg, the hint leg, the graph's entity lookup. One worker, not one
        each: fewer thread wake-ups, and together they take less than the embedding.
        """
        s = self.settings
        text, n_cand, filters = plan.text, plan.n_cand, plan.filters
        expr = fts.match_expression(text)
        ahead = SerialBatch()
        # The graph lookup's first two steps (query entities, neighbours) need no candidates.
        graph_submit = getattr(self.graph_boost, "submit", None)
        graph_future = graph_submit(ahead, text) if graph_submit is not None else None
        # Dampening and the reranker read the candidates' rows, hub dampening and the graph boost
        # their entity links: each leg reads its own candidates' on the worker, the rest are read
        # in one query after the merge.
        rows_needed = self.stages is not None and self.stages.active()
        links = self.stages is not None and (graph_future is not None or (rows_needed and self.stages.hub_active()))
        prefetch = rows_needed or links or plan.want_pool
        bm25_future = ahead.submit(self._bm25, expr, n_cand, filters, prefetch, links) if expr is not None else None
        hint_future = self.stages.submit_hints(ahead, expr, n_cand, filters, prefetch, links) if self.stages else None
        ahead.start(self._pool)
        qv = None
        if self.embedder is not None and len(self.index):
            try:
                qv = self.embedder.embed([text[:EMBED_QUERY_CHARS]])[0]
                if qv.shape != (self.index.dimensions,):
                    log.error("query vector has %s dims, index %d: BM25 only", qv.shape, self.index.dimensions)
                    qv = None
            except EmbeddingError as exc:
                log.warning("query embedding failed, BM25 only: %s", exc)
        names: list[str] = []
        bm25_scores: dict[int, float] | None = None
        prefetched = Prefetched(links={} if links else None) if prefetch else None
        if bm25_future is not None:
            pairs, rows_ahead = bm25_future.result()
            bm25_scores = dict(pairs)
            names.append("bm25")
            if prefetched is not None:
                prefetched.add(rows_ahead)
        vector_scores: dict[int, float] | None = None
        if qv is not None:
            vector_scores = dict(self.index.search(qv, n_cand, filters, s.context_weight))
            if bm25_scores:
                missing = [x for x in bm25_scores if x not in vector_scores]
                vector_scores.update(self.index.score_of(qv, missing, s.context_weight))
            names.append("vector")
        return _Legs(tuple(names), qv, bm25_scores, vector_scores, hint_future, graph_future, links, prefetched)

    def _merge(self, plan: _Plan, legs: _Legs) -> tuple[dict, dict]:
        """The legs merged (``alpha * vector + (1 - alpha) * bm25``, ``recall.hybrid.merge``)
        and the hints merged in (max): (that merge, the same after the graph boost), each
        ``seq -> (score, leg scores)``; both empty without candidates. The remaining
        candidates' rows are prefetched for the stages."""
        merged = merge(legs.vector, legs.bm25, plan.alpha)
        prefetched = legs.prefetched
        if self.stages is not None:  # hints merge (max), before the graph boost
            merged = self.stages.merge_hints(merged, legs.hints, plan.alpha, legs.qv, self.settings.context_weight)
            if prefetched is not None and legs.hints is not None:
                prefetched.add(self.stages.hint_rows(legs.hints))
        if not merged:
            return merged, merged
        if prefetched is not None and self.stages is not None:  # the rest of the candidates' rows
            missing = [x for x in merged if x not in prefetched.rows]
            if missing:
                prefetched.add(self.stages.prefetch_rows(missing, legs.links))
        if legs.graph is not None:  # "Graph-Augmented Search": + boost_weight, deadline-bounded
            return merged, self.graph_boost.boost(
                plan.text, merged, prepared=legs.graph, links=prefetched.seq_links() if prefetched is not None else None
            )
        if self.graph_boost is not None:
            return merged, self.graph_boost(plan.text, merged)
        return merged, merged

    def _stages(
        self, plan: _Plan, legs: _Legs, unboosted: dict, merged: dict, pool_out: list[Any] | None
    ) -> tuple[list[RecallHit], str]:
        """Rehearsal and recency boosts, dampening and the reranker (or the ``min_score`` cut
        and top ``limit``), then the learned ranker: (the hits, the ranker that ordered them)."""
        s, q = self.settings, plan.query
        seqs = list(merged)
        known, access, created = self.index.ranking_fields(seqs)
        final = boost(
            np.array([merged[x][0] for x in seqs]),
            access_count=access,
            age_days=(plan.now.timestamp() - created) / 86400.0,
            rehearsal_weight=s.rehearsal_weight,
            recency_weight=s.recency_weight,
            recency_half_life_days=s.recency_half_life_days,
        )
        fetch = lambda want: self.memories.db.read(lambda c: mem_sql.get_by_seqs(c, want))  # noqa: E731
        # With the learned ranker the heuristic ranks a pool of n_pool; rows are read after it.
        upto = max(q.limit, plan.n_pool)
        if q.phase is not None:  # the weights may lift a hit from below the limit
            upto = max(upto, q.limit * PHASE_POOL_FACTOR)
        fetch_ranked = fetch if not plan.want_pool else (lambda want: {})  # noqa: E731
        qv = legs.qv if plan.alpha > 0 else None  # alpha 0 = no vector signal, in the reranker too
        # dampening -> reranker (None: baseline ranking)
        staged = (
            self.stages.rank(
                plan.text, qv, seqs, final, known, merged, plan.min_score, upto, fetch_ranked, legs.prefetched
            )
            if self.stages is not None
            else None
        )
        if staged is not None:
            ranked, rows = staged
        else:
            ok = known & (final > 0.0) & (final >= plan.min_score)
            order = [i for i in np.lexsort((-np.array(seqs), -final)) if ok[i]][:upto]
            ranked = [(float(final[i]), seqs[i]) for i in order]
            rows = fetch_ranked([seq for _, seq in ranked])
        used, rank_scores, heuristic = "heuristic", None, None
        if plan.want_pool:
            before = ranked[: plan.n_pool]
            ranked, rank_scores, used = self._learned(
                q, plan.text, before, unboosted, merged, legs.prefetched, qv, plan.now, pool_out
            )
            if used == "learned":  # the heuristic's own (score, 1-based rank) of each reranked candidate
                heuristic = {seq: (score, r) for r, (score, seq) in enumerate(before, 1)}
        if q.phase is not None:
            ranked = self._by_phase(ranked, q.phase)
        if plan.want_pool:
            ranked = ranked[: q.limit]
            rows = fetch([seq for _, seq in ranked])
        elif q.phase is not None:
            ranked = ranked[: q.limit]
        hits = [
            RecallHit(
                rows[seq],
                score,
                merged[seq][1].vector,
                merged[seq][1].bm25,
                rank_scores.get(seq) if rank_scores is not None else None,
                *(heuristic.get(seq, (None, None)) if heuristic is not None else (None, None)),
            )
            for score, seq in ranked
            if seq in rows
        ]
        return hits, used

    def _by_phase(self, ranked: list[tuple[float, int]], phase: str) -> list[tuple[float, int]]:
        """``ranked`` ((score, seq), best first) with each score multiplied by ``phase``'s weight
        of the memory's type (seed section 7: final_score = score x PHASE_WEIGHTS[phase][type]),
        re-sorted best first; equal scores keep their order."""
        if not ranked:
            return ranked
        w = self.index.type_weights([seq for _, seq in ranked], PHASE_WEIGHTS[phase]).tolist()
        weighted = [(score * w[i], seq) for i, (score, seq) in enumerate(ranked)]
        order = sorted(range(len(weighted)), key=lambda i: (-weighted[i][0], i))
        return [weighted[i] for i in order]

    def _learned(
        self,
        q: RecallQuery,
        text: str,
        ranked: list[tuple[float, int]],
        unboosted: dict,
        merged: dict,
        prefetched: Prefetched | None,
        qv: np.ndarray | None,
        now: datetime,
        pool_out: list[Any] | None,
    ) -> tuple[list[tuple[float, int]], dict[int, float] | None, str]:
        """The learned reranking stage (memlane.ranker.stage) over the heuristic's best
        candidates ``ranked`` ((final score, seq), best first): (the order, seq -> model score
        or None, the ranker that ordered them). Never raises: on any failure the heuristic
        order stands."""
        from memlane.ranker.features import Pool
        from memlane.ranker.stage import MIN_POOL

        try:
            reason = self.ranker.reason_off(q.ranker, self.index.model_id, qv is not None, q.alpha is not None)
            if (reason is not None and pool_out is None) or not ranked:
                return ranked, None, "heuristic"
            seqs = [seq for _, seq in ranked]
            rows = dict(prefetched.rows) if prefetched is not None else {}
            missing = [x for x in seqs if x not in rows]
            if missing:
                rows.update(self.memories.db.read(lambda c: read_candidates(c, missing, False)).rows)
            keep = [i for i, x in enumerate(seqs) if x in rows]
            ranked, seqs = [ranked[i] for i in keep], [seqs[i] for i in keep]
            legs = [merged[x][1] for x in seqs]
            nan = float("nan")
            vectors = None
            if qv is not None:
                v_content, v_context = self.index.leg_cosines(qv, seqs)
                vectors = self.index.vectors_of(seqs)[0]
            else:
                v_content = v_context = np.full(len(seqs), np.nan)
            pool = Pool(
                seqs=seqs,
                contents=[rows[x].content for x in seqs],
                hybrid=np.array([unboosted[x][0] if x in unboosted else merged[x][0] for x in seqs]),
                final=np.array([f for f, _ in ranked]),
                vector=np.array([nan if g.vector is None else g.vector for g in legs]),
                vector_content=v_content,
                vector_context=v_context,
                bm25=np.array([nan if g.bm25 is None else g.bm25 for g in legs]),
                created=self.index.ranking_fields(seqs)[2].astype(np.float64),
                now=now.timestamp(),
                content_vectors=vectors,
            )
            if pool_out is not None:
                pool_out.append(pool)
            if reason is not None or len(pool) < MIN_POOL:
                return ranked, None, "heuristic"
            scores = self.ranker.score(text, pool)
            if scores is None:
                return ranked, None, "heuristic"
            order = np.lexsort((np.arange(len(seqs)), -scores))  # ties keep the heuristic order
            # Hits keep the heuristic score scale, assigned in the learned order (the i-th hit gets
            # the pool's i-th best score): scores stay monotone and min_score / prompt thresholds
            # keep their meaning; the model's own score is rank_score.
            scale = [f for f, _ in ranked]  # best first
            return (
                [(scale[r], ranked[i][1]) for r, i in enumerate(order.tolist())],
                {seqs[i]: float(scores[i]) for i in range(len(seqs))},
                "learned",
            )
        except Exception as exc:  # the learned stage never fails a recall
            log.warning("learned ranker skipped: %s", exc)
            return ranked, None, "heuristic"

    def _bm25(
        self, expr: str, n_cand: int, filters: fts.Filters, prefetch: bool = False, links: bool = False
    ) -> tuple[list[tuple[int, float]], Prefetched | None]:
        """The BM25 leg (``memlane.recall.bm25.bm25_leg``) and, with ``prefetch``, its candidates'
        rows (and with ``links`` their entity links) for the stages and the graph boost
        (``RecallStages.prefetch_rows``)."""
        pairs = bm25_leg(
            self.memories.db, self.index, expr, n_cand, filters, self.settings.context_weight, cache=self.fts_cache()
        )
        rows = self.stages.prefetch_rows([s for s, _ in pairs], links) if prefetch and self.stages is not None else None
        return pairs, rows

    def _touch(self, hits: list[RecallHit]) -> None:
        """Rehearsal: bump access counts in a background write; the index follows the commit."""
        at = now_iso()
        ids, seqs = [h.memory.id for h in hits], [h.memory.seq for h in hits]
        fut = self.memories.db.submit(lambda c: mem_sql.touch(c, ids, at))

        def done(f: Any) -> None:
            if f.exception() is not None:
                log.warning("touch failed: %s", f.exception())
            else:
                self.index.add_access(seqs)

        fut.add_done_callback(done)
