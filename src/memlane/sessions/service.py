"""The session lifecycle service: session-start, prompt-submit, session-end, feedback, labels.

It records what the predictor learns from (predictive-memory-scorer.md "Phase 0"):
every candidate of a session-start in ``session_memories`` (one transaction), prompt
matches as ``fts_hit_count`` / ``fts_only`` rows, agent feedback as a running mean, and at
session-end a continuity score (LLM judge when configured, behaviour otherwise) from which
the training labels are built (``sessions.labels``). Injection never bumps access counts.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from memlane.config import SessionSettings
from memlane.config.clock import now_iso, parse_iso
from memlane.errors import NotFound, StorageError, ValidationError
from memlane.providers.base import LlmProvider
from memlane.recall.memory_index import iso_to_epoch
from memlane.redact import redact
from memlane.services.deferred_records import release as release_record
from memlane.services.extensions import DriftGuard
from memlane.services.inputs import RecallQuery
from memlane.services.memory_service import MemoryService
from memlane.services.predictor_types import RankDecision
from memlane.services.recall_service import RecallService
from memlane.services.validation import check_text
from memlane.sessions import continuity, ranking
from memlane.sessions.feedback import resolve_feedback
from memlane.sessions.inflight import InflightStarts
from memlane.sessions.inject import (
    Shown,
    render_block,
    render_line,
    render_recovery,
    select_in_rank_order,
    select_within_budget,
    short_id,
    status_line,
)
from memlane.sessions.inputs import (
    EndInput,
    EndResult,
    FeedbackResult,
    PromptInput,
    PromptResult,
    StartInput,
    StartResult,
)
from memlane.sessions.judge_queue import JudgeQueue, JudgeRefused
from memlane.sessions.recent_prompts import RecentPrompts
from memlane.sessions.scoring import SessionScorer
from memlane.sessions.start import ContextVectors, RankedCandidate, build_pool
from memlane.storage import jobs as jobs_sql
from memlane.storage import memories as mem_sql
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.models import Memory
from memlane.v3.methodology.service import PhaseService, PhaseState

log = logging.getLogger(__name__)

#: Longest session key accepted, characters.
MAX_SESSION_KEY = 256
#: Seconds :meth:`SessionService.close` waits for the judge's thread once it is stopped.
JUDGE_CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class _RankedPool:
    """A session-start's candidates in the order they are injected, with the predictor's
    decision when it ran (``deferred``: its ranking is recorded after the answer,
    :meth:`PredictorService.record_later`)."""

    pool: list[RankedCandidate]
    state: str
    decision: RankDecision | None = None
    deferred: bool = False
    contents: dict[str, tuple[str, str]] | None = None  # read while the sidecar scored
    encoded: dict[str, str] = field(default_factory=dict)  # the candidates' signals as JSON


@dataclass(frozen=True)
class _StartPlan:
    """A new session-start, ranked and chosen, before anything is written."""

    inp: StartInput
    key: str
    project: str | None
    now: str
    context: str
    cv: Any  # the context's vector (numpy [D]) or None without an embedder
    ranked: _RankedPool
    chosen: list[Shown]
    rows: list[sess_sql.CandidateRow]
    model_id: str | None
    signals: dict[str, Any] | None

    @property
    def state(self) -> str:
        """The predictor phase recorded with the session."""
        return self.ranked.state


@dataclass(frozen=True)
class _Recorded:
    """The recording step's outcome: ``won`` False when another process started the key
    first; ``released`` completes once the deferred predictor ranking may be sent."""

    won: bool
    released: Future[None] | None


class SessionService:
    """Session lifecycle over the memory store.

    Args:
        memories, recall: the core services (database, embedder, index are shared).
        settings: session settings.
        llm: the continuity judge, or None (behavioural scoring only).
        checkpoints: the checkpoint service, or None.
        predictor: the predictor (:class:`memlane.services.predictor_service.PredictorService`),
            or None.
        scorer: the session-end scorer; the container builds it first so that it also listens to
            memory changes (``MemoryService(listeners=[scorer.on_memory_event])``: labels are
            rebuilt after a delete, supersede or recover). Default: one over ``memories.db``.
        drift: stale or drifting memories are never injected proactively and what is shown is
            queued for a drift check; None: off.
        phases: resolves each session's phase and work unit through its project's methodology
            plugin; with a phase, session-start and prompt recall weigh memories by type
            (docs/v3.md "Methodology plugins and phases"). None: no phases.
        prefetch: predictive pre-fetching (:class:`memlane.v3.active.ActiveLoop`): the files this
            kind of work usually needs are added to the session-start block and to the first
            prompt's block, within their budgets; None: off.
    """

    def __init__(
        self,
        memories: MemoryService,
        recall: RecallService,
        settings: SessionSettings,
        llm: LlmProvider | None = None,
        checkpoints: Any = None,
        predictor: Any = None,
        *,
        scorer: SessionScorer | None = None,
        drift: DriftGuard | None = None,
        phases: PhaseService | None = None,
        prefetch: Any = None,
    ) -> None:
        self.memories = memories
        self.predictor = predictor  # PredictorService or None
        self.recall = recall
        self.settings = settings
        self.llm = llm
        self.checkpoints = checkpoints
        self.db = memories.db
        # The LLM judge runs on its own thread with a bounded backlog; stopping it aborts the
        # call in flight by closing the provider (sessions.judge_queue).
        self._judge = JudgeQueue(lambda: self.settings.judge_queue_max, abort=self._abort_llm)
        self._warmer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlane-context")
        self.contexts = ContextVectors(memories.embedder, memories.index)
        self._pending: dict[str, Future] = {}
        self.inflight = InflightStarts()  # starts answered before their record committed
        self.prompts = RecentPrompts()  # recent prompts per active session (checkpoint digests)
        self.drift = drift
        self.phases = phases
        self.prefetch = prefetch
        self._lock = threading.Lock()
        self.scorer = scorer if scorer is not None else SessionScorer(self.db, llm, predictor)

    # -- helpers ------------------------------------------------------------------------
    def _key(self, key: Any) -> str:
        if not isinstance(key, str) or not key.strip():
            raise ValidationError("session_key: must be a non-empty string", details={"field": "session_key"})
        return check_text(key, "session_key", max_chars=MAX_SESSION_KEY)

    def _opt(self, value: Any, name: str) -> str | None:
        if value is None:
            return None
        return check_text(value, name, max_chars=4096, allow_empty=True)

    def _phase(self, key: str, project: str | None, inp: StartInput | PromptInput) -> PhaseState | None:
        """The session's phase state after this request (None without a phase service).

        Raises:
            ValidationError: a bad phase, work unit or hook payload.
        """
        if self.phases is None:
            return None
        if inp.hook is not None and not isinstance(inp.hook, dict):
            raise ValidationError("hook: expected an object", details={"field": "hook"})
        return self.phases.resolve(key, project, phase=inp.phase, work_unit=inp.work_unit, hook=inp.hook)

    def predictor_state(self) -> tuple[str, int]:
        """(phase, scored sessions): collecting, warming, active, disabled or retraining."""
        scored = self.db.read(sess_sql.count_scored_sessions)
        return (self.predictor.phase() if self.predictor is not None else "collecting"), scored

    # -- session-start ------------------------------------------------------------------
    def start(self, inp: StartInput, *, defer_predictor: bool = False, hold_write: bool = False) -> StartResult:
        """Build the candidate pool, record every candidate, return the inject text.

        A repeated start for a known key records nothing and returns a minimal answer (for a
        ``compact`` restart: the recovery digest).

        Args:
            inp: the start.
            defer_predictor: when the predictor's scores cannot change what is injected
                (alpha = 1: cold start, warming, the margin guard) and exploration did not draw
                this session, answer without them: the start's transaction holds the session
                and its candidates, and once the caller calls ``result.release()`` (the answer
                is out) the score request is sent and the predictor's inputs and ranking are
                recorded in one more transaction (:meth:`PredictorService.record_later`;
                session-end and shutdown release and wait for it). The HTTP hook does this
                after sending its response; in-process callers that read the rows right away
                leave it False (everything is recorded before this returns).
            hold_write: answer without the start's transaction (the session and its
                candidates; write-behind, :mod:`.inflight`): it is queued on the writer when the
                caller calls ``result.commit()`` once its answer is out, or when the key's next
                request or shutdown queues it (:meth:`InflightStarts.flush`). The key stays
                claimed until it commits, and prompts, feedback, session-end and :meth:`get` for
                it wait for that. The HTTP hook sets it and commits from a background task after
                the response, so the answer does not wait for the writer (docs/sessions.md has
                the session-start bench with and without it).

        Raises:
            ValidationError: a bad key, project, context or timestamp.
            StorageError: another start for the same key is still being recorded after
                ``sessions.inflight.WAIT_TIMEOUT_S``; the database is closed.
        """
        t0 = time.perf_counter()
        key = self._key(inp.session_key)
        project = self._opt(inp.project, "project")
        for name in ("cwd", "harness", "source"):
            self._opt(getattr(inp, name), name)
        if inp.context is not None:
            check_text(inp.context, "context", max_chars=self.settings.max_prompt_chars, allow_empty=True)
            # secrets never reach sessions.context (stored), the embedder or the predictor's inputs
            inp = replace(inp, context=redact(inp.context))
        if inp.ranking not in ("effective", "relevance"):
            raise ValidationError("ranking: must be 'effective' or 'relevance'", details={"field": "ranking"})
        now = parse_iso(inp.now, "now") if inp.now else now_iso()
        pstate = self._phase(key, project, inp)
        if self.predictor is not None:  # the status line is the predictor's: no count of scored sessions
            state, scored = self.predictor.phase(), 0
        else:
            state, scored = self.predictor_state()
        if not self.inflight.acquire(key):  # the same key is starting: its outcome first
            raise StorageError(f"a session-start for {key!r:.80} is still being recorded")
        try:  # until the recording step owns the claim, any way out releases it unrecorded
            answer = self._existing_start(inp, key, project, t0)
            phase = pstate.to_dict() if pstate is not None else None
            if answer is not None:
                self.inflight.settle(key, False)
                return replace(answer, phase=phase)
            plan = self._plan_start(
                inp, key, project, now, state, defer_predictor, pstate.phase if pstate is not None else None
            )
        except BaseException:
            self.inflight.settle(key, False)
            raise
        recorded = self._record_start(plan, hold_write)
        if not recorded.won:  # another process started this key first (nothing to record later)
            return StartResult(key, "existing", "", plan.state, took_ms=(time.perf_counter() - t0) * 1000, phase=phase)
        return replace(
            self._start_answer(plan, recorded, hold_write, scored, t0, pstate.phase if pstate is not None else None),
            phase=phase,
        )

    def _existing_start(self, inp: StartInput, key: str, project: str | None, t0: float) -> StartResult | None:
        """The answer to a repeated start of a started key (the recovery digest for a
        ``compact`` restart), or None for a new session."""
        existing = self.db.read(lambda c: sess_sql.get_session(c, key))
        if existing is None or not existing.started:
            return None
        inject = ""
        if inp.source == "compact" and self.checkpoints is not None:
            inject = render_recovery(self.checkpoints.recovery_digest(session_key=key, project=project))
        return StartResult(key, "existing", inject, existing.predictor_state, took_ms=(time.perf_counter() - t0) * 1000)

    def _plan_start(
        self,
        inp: StartInput,
        key: str,
        project: str | None,
        now: str,
        state: str,
        defer_predictor: bool,
        phase: str | None,
    ) -> _StartPlan:
        """Rank the pool (weighed by the universal ``phase`` when known), choose what is
        injected, build the rows to record (no writes)."""
        context = inp.context or self._default_context(project, inp.cwd)
        cv = self.contexts.get(context)
        ranked = self._rank_pool(inp, context, cv, project, now, state, defer_predictor, phase)
        ranked, chosen, explored = self._choose(ranked)
        chosen_ids = {c.id for c in chosen}
        if self.drift is not None:  # what is shown is checked for drift, write-behind
            self.drift.schedule_ids(list(chosen_ids))
            self.drift.session_started(project)  # the periodic staleness sweep
        decision = ranked.decision
        p_scores = decision.predictor_scores if decision is not None else {}
        p_ranks = decision.predictor_rank if decision is not None else {}
        feats = decision.features if decision is not None and not ranked.deferred else {}  # deferred: recorded later
        rows = [
            sess_sql.CandidateRow(
                memory_id=p.memory_id,
                source="exploration" if explored is not None and p.memory_id == explored else "effective",
                final_score=p.final_score,
                rank=p.rank,
                was_injected=p.memory_id in chosen_ids,
                effective_score=p.effective_score,
                similarity=p.similarity,
                predictor_score=p_scores.get(p.memory_id),
                baseline_rank=p.baseline_rank,
                predictor_rank=p_ranks.get(p.memory_id),
                features=ranked.encoded.get(p.memory_id) or feats.get(p.memory_id),
            )
            for p in ranked.pool
        ]
        return _StartPlan(
            inp=inp,
            key=key,
            project=project,
            now=now,
            context=context,
            cv=cv,
            ranked=ranked,
            chosen=chosen,
            rows=rows,
            model_id=self.memories.embedder.model_id if self.memories.embedder is not None else None,
            signals=dict(decision.signals) if decision is not None and not ranked.deferred else None,
        )

    def _rank_pool(
        self,
        inp: StartInput,
        context: str,
        cv: Any,
        project: str | None,
        now: str,
        state: str,
        defer_predictor: bool,
        phase: str | None = None,
    ) -> _RankedPool:
        """The candidate pool (relevance or effective) in the order it is injected: weighed by
        the phase's type weights when a phase is known, fused with the predictor's ranking when
        the predictor runs and has influence (alpha < 1)."""
        s = self.settings
        index = self.memories.index
        legs: dict[str, tuple[float | None, float | None]] = {}
        if inp.ranking == "relevance" and inp.context:
            pool, legs = ranking.relevance_pool(
                self.recall, index, context=context, project=project, cv=cv, s=s, now=now, now_epoch=iso_to_epoch(now)
            )
        else:
            eff = index.top_effective(
                project=project,
                now_epoch=iso_to_epoch(now),
                limit=max(s.similarity_pool, s.effective_top),
                min_effective=s.min_effective,
            )
            pool = build_pool(eff, cv, index, s)
        if phase is not None:
            pool = ranking.weight_by_phase(pool, index, phase)
        if self.predictor is None or not pool:
            return _RankedPool(pool, state)
        last = self.db.read(lambda c: pred_sql.last_session_start(c, before=now))
        decision = self.predictor.prepare(
            pool=ranking.pool_members(pool, legs),
            context_vector=cv,
            context_text=context,
            project=project,
            now=now,
            last_start=last,
            work_phase=phase,
        )
        if defer_predictor and self.predictor.can_defer(decision):
            return _RankedPool(pool, decision.phase, decision, deferred=True)
        # The sidecar scores on the other core; meanwhile this thread does the work that
        # does not need the scores: the pool's contents and its logged signals' JSON.
        pending = self.predictor.send_score(decision)  # sent from this thread, awaited here
        contents = self.db.read(lambda c: mem_sql.contents(c, [p.memory_id for p in pool]))
        encoded = {m: sess_sql.encode_features(f) for m, f in decision.features.items()}
        if pending is not None:
            self.predictor.apply(decision, pending.result())
        if decision.alpha < 1.0 and decision.predictor_rank:
            pool = ranking.fuse_pool(pool, decision, index)
        return _RankedPool(pool, decision.phase, decision, contents=contents, encoded=encoded)

    def _choose(self, ranked: _RankedPool) -> tuple[_RankedPool, list[Shown], str | None]:
        """What is injected, in rank order within the budget, and the id exploration put in
        (None when it did not run). A deferred ranking that exploration draws is scored now:
        the pool returned is then no longer deferred."""
        s = self.settings
        ranked_ids = [p.memory_id for p in ranked.pool]
        if self.drift is not None:  # never inject a stale or drifting memory proactively
            ranked_ids = self.drift.injectable(ranked_ids)
        contents = ranked.contents
        chosen = select_in_rank_order(
            ranked_ids,
            s.inject_budget_chars,
            s.inject_limit,
            (lambda ids: contents)
            if contents is not None
            else (lambda ids: self.db.read(lambda c: mem_sql.contents(c, ids))),
        )
        decision = ranked.decision
        if decision is None:
            return ranked, chosen, None
        ids = [c.id for c in chosen]
        explored = None
        if not ranked.deferred:
            explored = self.predictor.explore(ids, decision)
        elif self.predictor.exploration_drawn(ids, decision):
            # Exploration swaps a slot by the predictor's ranking: this start needs it now.
            ranked = replace(ranked, deferred=False)
            self.predictor.score_now(decision)
            explored = self.predictor.explore(ids, decision, drawn=True)
        if explored is None:
            return ranked, chosen, None
        replaced, added = explored
        rows = (
            {added: contents[added]}
            if contents and added in contents
            else self.db.read(lambda c: mem_sql.contents(c, [added]))
        )
        chosen = ranking.explored_shown(chosen, replaced, added, rows)
        decision.signals["exploration"] = {"replaced": replaced, "explored": added}
        return ranked, chosen, added

    def _record_start(self, plan: _StartPlan, hold_write: bool) -> _Recorded:
        """Record the session and its candidates in one transaction, now or write-behind
        (``hold_write``). From here the claim on the key is this step's: it is settled when the
        write ends, or handed to the held write, or released if registering either fails."""
        key, decision = plan.key, plan.ranked.decision

        def job(conn: sqlite3.Connection) -> bool:  # one transaction: the session, candidates, features
            if not sess_sql.insert_session(
                conn,
                key=key,
                project=plan.project,
                harness=plan.inp.harness,
                cwd=plan.inp.cwd,
                context=plan.context,
                started_at=plan.now,
                predictor_state=plan.state,
            ):
                return False
            sess_sql.record_candidates(conn, key, plan.rows, plan.now)
            if plan.signals is not None:
                pred_sql.set_session_inputs(
                    conn, key, context_vector=plan.cv, context_model=plan.model_id, signals=plan.signals
                )
            return True

        committed: Future[bool] | None = None
        released: Future[None] | None = None
        try:
            if plan.ranked.deferred:  # registered before the write: a session-end never misses it
                committed, released = Future(), Future()
                self.predictor.record_later(
                    key, decision, committed, context_vector=plan.cv, context_model=plan.model_id, released=released
                )
            # Derived records: committed without the WAL fsync (storage.db "durable"); they survive
            # a daemon kill, and a power loss can drop only these last rows, never a memory.
            if hold_write:

                def submit() -> None:
                    try:
                        fut = self.db.submit(job, durable=False)
                    except BaseException:  # the database is closed: nothing will be recorded later either
                        if committed is not None and not committed.done():
                            committed.set_result(False)
                        raise
                    fut.add_done_callback(partial(self.inflight.settle_after, key, committed))

                self.inflight.hold(key, submit)  # queued by result.commit() or the key's next request
                return _Recorded(True, released)
        except BaseException:
            self.inflight.settle(key, False)
            raise
        won = False
        try:
            won = self.db.write(job, durable=False)
        finally:
            if committed is not None:
                committed.set_result(won)
            self.inflight.settle(key, won)
        return _Recorded(won, released)

    def _start_answer(
        self,
        plan: _StartPlan,
        recorded: _Recorded,
        hold_write: bool,
        scored: int,
        t0: float,
        work_phase: str | None = None,
    ) -> StartResult:
        """The status line and the inject block of a recorded new session (``work_phase``: the
        universal phase, None when unknown)."""
        s = self.settings
        header = (
            self.predictor.status_line()
            if self.predictor is not None
            else status_line(plan.state, scored, s.collecting_target_sessions)
        )
        block = render_block("Relevant memories:", plan.chosen, with_feedback=s.agent_feedback)
        if work_phase in (None, "implement"):  # seed: pre-fetching serves implementation
            block += self._prefetch_block(
                plan.key,
                plan.project,
                "",
                plan.inp.cwd,
                s.inject_budget_chars - sum(len(render_line(c)) for c in plan.chosen),
            )
        inject = header + ("\n" + block if block else "\n")
        return StartResult(
            plan.key,
            "new",
            inject,
            plan.state,
            candidate_count=len(plan.ranked.pool),
            injected=[{"id": c.id, "short_id": short_id(c.id)} for c in plan.chosen],
            took_ms=(time.perf_counter() - t0) * 1000,
            release=None if recorded.released is None else partial(release_record, recorded.released),
            commit=partial(self.inflight.flush, plan.key) if hold_write else None,
        )

    def _prefetch_block(self, key: str, project: str | None, text: str, cwd: str | None, budget: int) -> str:
        """The pre-fetched files' block (memlane.v3.active) within ``budget`` chars, and their
        contents within ``sessions.prefetch_content_chars`` more; "" when off, empty or failing
        (pre-fetching never costs the agent its memories)."""
        if self.prefetch is None or budget <= 0:
            return ""
        try:
            return self.prefetch.prefetch_block(
                project=project,
                session_id=key,
                text=text,
                cwd=cwd,
                budget_chars=budget,
                content_chars=self.settings.prefetch_content_chars,
            )
        except Exception:
            log.exception("pre-fetching for %s failed", key)
            return ""

    def _warm_next_context(self, key: str, project: str | None, cwd: str | None) -> None:
        # Trigger: a session ended; its checkpoint is about to become the project's latest.
        # Why: the next session-start of this project embeds that new default context.
        # Outcome: it is embedded now, in the background, and session-start finds it cached.
        try:
            if self.checkpoints is not None:
                self.checkpoints.flush()
            sess = self.db.read(lambda c: sess_sql.get_session(c, key))
            self.contexts.warm(
                self._default_context(project or (sess.project if sess else None), cwd or (sess.cwd if sess else None))
            )
        except Exception:  # a warm-up must never disturb the daemon
            log.exception("warming the next session context of %s failed", key)

    def _default_context(self, project: str | None, cwd: str | None) -> str:
        parts = [f"project: {project}" if project else "", f"directory: {cwd}" if cwd else ""]
        if self.checkpoints is not None and project:
            parts.append(self.checkpoints.recovery_digest(project=project) or "")
        return "\n".join(p for p in parts if p)

    # -- user-prompt-submit ---------------------------------------------------------------
    def prompt(self, inp: PromptInput) -> PromptResult:
        """Recall on the prompt; record matches; apply agent feedback; inject only what clears
        the relevance threshold (nothing rather than padding).

        Raises:
            ValidationError / PayloadTooLarge: a bad key or an oversize prompt.
        """
        t0 = time.perf_counter()
        s = self.settings
        key = self._key(inp.session_key)
        project = self._opt(inp.project, "project")
        self._opt(inp.cwd, "cwd")
        self._opt(inp.harness, "harness")
        check_text(inp.prompt, "prompt", max_chars=s.max_prompt_chars, allow_empty=True)
        now = parse_iso(inp.now, "now") if inp.now else now_iso()
        unit_before = self.phases.current(key, project).work_unit_ref if self.phases is not None else None
        pstate = self._phase(key, project, inp)
        matched: list[tuple[str, float]] = []
        hits_mem: dict[str, Memory] = {}
        if inp.prompt.strip():
            res = self.recall.recall(
                RecallQuery(
                    query=inp.prompt,
                    limit=max(s.prompt_limit * 2, 5),
                    project=project,
                    include_global=True,
                    exclude_superseded=True,
                    now=now,
                    touch=False,
                    min_score=s.prompt_min_score,
                    phase=pstate.phase if pstate is not None else None,
                )
            )
            for h in res.hits:
                matched.append((h.memory.id, h.score))
                hits_mem[h.memory.id] = h.memory
        # A write-behind start of this key commits while the recall above runs (the recall does
        # not read the session); what it showed is read once it is recorded.
        self.inflight.wait(key)
        shown = self.db.read(lambda c: sess_sql.shown_state(c, key))  # memory id -> already seen by the agent
        scores, ignored = (
            resolve_feedback(list(shown), inp.memory_feedback)
            if inp.memory_feedback is not None and s.agent_feedback
            else ({}, 0)
        )

        def job(c: sqlite3.Connection) -> tuple[int, int]:  # one transaction for the whole prompt
            sess_sql.ensure_session(c, key=key, project=project, harness=inp.harness, cwd=inp.cwd, started_at=now)
            applied = sess_sql.apply_feedback(c, key, scores) if scores else 0
            sess_sql.track_fts_hits(c, key, matched, now)
            sess_sql.bump_prompt_count(c, key)
            return applied, sess_sql.get_session(c, key).prompt_count  # type: ignore[union-attr]

        # Without agent feedback the prompt writes only derived records (the session row, its
        # prompt count, which memories recall matched): committed without the WAL fsync, like a
        # session-start's candidate log (storage.db "durable"; they survive a daemon kill, a
        # power loss may drop the last of them); the fsync is the largest share of a
        # prompt-submit's write (docs/sessions.md). Feedback ratings are training labels: durable.
        applied, count = self.db.write(job, durable=bool(scores))
        feedback = FeedbackResult(applied, ignored + len(scores) - applied)
        fresh = [
            Shown(mid, hits_mem[mid].created_at, hits_mem[mid].content) for mid, _ in matched if not shown.get(mid)
        ]
        if self.drift is not None:  # never inject a stale or drifting memory proactively
            allowed = set(self.drift.injectable([f.id for f in fresh]))
            fresh = [f for f in fresh if f.id in allowed]
        chosen = select_within_budget(fresh, s.prompt_budget_chars, s.prompt_limit)
        inject = render_block("Memories related to this prompt:", chosen, with_feedback=s.agent_feedback)
        # The first prompt of the session or of a new work unit states the work: the files it
        # usually needs (seed: only while implementing, when the phase is known).
        new_unit = pstate is not None and pstate.work_unit_ref is not None and pstate.work_unit_ref != unit_before
        if (count == 1 or new_unit) and (pstate is None or pstate.phase in (None, "implement")):
            inject += self._prefetch_block(
                key, project, inp.prompt, inp.cwd, s.prompt_budget_chars - sum(len(render_line(c)) for c in chosen)
            )
        self.prompts.note(key, inp.prompt)
        if self.checkpoints is not None and self.checkpoints.should_checkpoint_periodic(key, count, time.time()):
            self.checkpoints.queue(
                key,
                "periodic",
                harness=inp.harness,
                project=project,
                prompt_count_delta=self.prompts.take_unsaved(key),
                queries=self.prompts.recent(key),
                remembers=[],
            )
        return PromptResult(
            key,
            inject,
            [m for m, _ in matched],
            [c.id for c in chosen],
            feedback,
            took_ms=(time.perf_counter() - t0) * 1000,
            phase=pstate.to_dict() if pstate is not None else None,
        )

    # -- compaction -------------------------------------------------------------------------
    def pre_compaction(
        self, session_key: str, *, project: str | None, harness: str | None, context: str | None
    ) -> dict[str, Any]:
        """Checkpoint now (flushed at once), and return the summary prompt and recovery digest.

        Raises:
            ValidationError: a bad key.
        """
        key = self._key(session_key)
        project = self._opt(project, "project")
        self._opt(harness, "harness")
        if context is not None:
            check_text(context, "context", max_chars=self.settings.max_prompt_chars, allow_empty=True)
        if self.checkpoints is None:
            return {"session_key": key, "inject": "", "summary_prompt": "", "digest": ""}
        self.checkpoints.queue(
            key,
            "pre_compaction",
            harness=harness,
            project=project,
            prompt_count_delta=self.prompts.take_unsaved(key),
            queries=self.prompts.recent(key),
            remembers=[],
            context=context,
        )
        self.checkpoints.flush()
        digest = self.checkpoints.recovery_digest(session_key=key, project=project)
        prompt = self.checkpoints.summary_prompt(key, project, context)
        return {
            "session_key": key,
            "inject": f"{prompt}\n\n{render_recovery(digest)}".strip(),
            "summary_prompt": prompt,
            "digest": digest,
        }

    def compaction_complete(
        self, session_key: str, *, project: str | None, harness: str | None, summary: str | None
    ) -> dict[str, Any]:
        """Store the agent's compaction summary as an ``agent`` checkpoint.

        Raises:
            ValidationError: a bad key or an oversize summary.
        """
        key = self._key(session_key)
        project = self._opt(project, "project")
        self._opt(harness, "harness")
        if summary is not None:
            check_text(summary, "summary", max_chars=self.settings.max_prompt_chars, allow_empty=True)
        if self.checkpoints is None or not (summary or "").strip():
            return {"session_key": key, "recorded": False}
        self.checkpoints.queue(
            key,
            "agent",
            harness=harness,
            project=project,
            prompt_count_delta=0,
            queries=self.prompts.recent(key),
            remembers=[],
            context=summary,
        )
        self.checkpoints.flush()
        return {"session_key": key, "recorded": True}

    def feedback(self, session_key: str, raw: Any) -> FeedbackResult:
        """Apply agent feedback ``{id or 8-char prefix: score in [-1, 1]}`` (or its JSON text) to the
        session's running means. Unknown ids, non-numbers and malformed input are ignored and
        counted, never raised (agent-relevance-feedback.md: fail open)."""
        key = self._key(session_key)
        if not self.settings.agent_feedback:
            return FeedbackResult(0, 0)
        self.inflight.wait(key)
        ids = self.db.read(lambda c: sess_sql.session_memory_ids(c, key))
        scores, ignored = resolve_feedback(ids, raw)
        applied = self.db.write(lambda c: sess_sql.apply_feedback(c, key, scores)) if scores else 0
        return FeedbackResult(applied, ignored + len(scores) - applied)

    # -- session-end ----------------------------------------------------------------------
    def end(self, inp: EndInput, *, wait: bool = False) -> EndResult:
        """Store the transcript, enqueue the summary job, score continuity, build labels.

        With an LLM judge the scoring runs on the judge's own thread (:mod:`.judge_queue`);
        without one the session is scored from behaviour alone, synchronously, and marked
        ``behavioral`` (:class:`~memlane.sessions.scoring.SessionScorer`). The result's ``judge``
        says what became of the judge:

        * ``"queued"``: not ``wait``; the judge scores it in the background.
        * ``"done"`` / ``"failed"``: ``wait`` and the judge answered (scorer ``llm``) or failed
          (scored from behaviour, the failure in the stored reasoning and the summary job).
        * ``"skipped"``: ``sessions.judge_queue_max`` sessions were already waiting, or the daemon
          is shutting down: scored from behaviour now, the reason stored in the score's
          reasoning and the summary job (``skipped``). Never waits.
        * ``"queued"`` / ``"running"`` with ``scoring: "queued"`` and scorer ``behavioral``:
          ``wait`` and ``sessions.judge_wait_s`` passed first. The score is the behavioural one
          as of now, not stored; the judge's verdict is stored when it answers (or, if it fails,
          the behavioural score then).

        Raises:
            ValidationError / PayloadTooLarge: a bad key or an oversize transcript.
        """
        key = self._key(inp.session_key)
        project = self._opt(inp.project, "project")
        for name in ("reason", "cwd", "harness"):
            self._opt(getattr(inp, name), name)
        if inp.transcript is not None:
            check_text(inp.transcript, "transcript", max_chars=self.settings.max_transcript_chars, allow_empty=True)
        now = parse_iso(inp.now, "now") if inp.now else now_iso()
        # Redacted before it is stored or sent to the LLM judge (docs/security.md).
        transcript = redact(inp.transcript) if inp.transcript else ""
        judge = self.llm is not None and len(transcript) >= continuity.MIN_TRANSCRIPT_CHARS
        self.inflight.wait(key)

        def job(conn: sqlite3.Connection) -> tuple[bool, int]:
            sess_sql.ensure_session(conn, key=key, project=project, harness=inp.harness, cwd=inp.cwd, started_at=now)
            stored = bool(transcript) and sess_sql.write_transcript(
                conn, key, transcript, harness=inp.harness, project=project, at=now
            )
            sess_sql.end_session(conn, key, now)
            job_id = jobs_sql.enqueue(
                conn,
                "session_summary",
                at=now,
                dedup_key=key,
                session_key=key,
                payload={"reason": inp.reason, "transcript_chars": len(transcript)},
                status="pending" if judge else "skipped",
                error=None
                if judge
                else (
                    "no LLM provider configured"
                    if self.llm is None
                    else "no transcript"
                    if not transcript
                    else f"transcript under {continuity.MIN_TRANSCRIPT_CHARS} characters: not judged"
                ),
            )
            return stored, job_id

        stored, job_id = self.db.write(job)
        if self.checkpoints is not None:
            self.checkpoints.queue(
                key,
                "session_end",
                harness=inp.harness,
                project=project,
                prompt_count_delta=self.prompts.take_unsaved(key),
                queries=self.prompts.recent(key),
                remembers=[],
            )
        self.prompts.forget(key)
        if self.phases is not None:
            self.phases.forget(key)
        verdict: str | None = None
        try:
            if judge:
                try:
                    fut = self._judge.submit(
                        partial(self._judge_session, key, transcript, now), partial(self._skip_judge, key, now)
                    )
                except JudgeRefused as exc:  # backlog full or stopping: behaviour, never a wait
                    scorer, score, conf, n, verdict = self._skip_judge(key, now, str(exc))
                    return EndResult(key, "done", scorer, score, conf, n, stored, job_id, judge=verdict)
                self._track(key, fut)
                if not wait:
                    return EndResult(key, "queued", None, None, None, 0, stored, job_id, judge="queued")
                try:
                    scorer, score, conf, n, verdict = fut.result(timeout=self.settings.judge_wait_s)
                except FutureTimeout:
                    state = self._judge.state(fut)
                    if state != "done":  # the judge is still at it: answer with behaviour, honestly marked
                        score, conf = self.scorer.behavioral_preview(key, now)
                        return EndResult(key, "queued", "behavioral", score, conf, 0, stored, job_id, judge=state)
                    scorer, score, conf, n, verdict = fut.result()
            else:
                scorer, score, conf, n = self.scorer.score_behavioral(key, now)
        finally:
            # After the scoring, not alongside it: the warm-up flushes checkpoints and embeds, CPU
            # work the session-end would otherwise wait behind.
            self._warmer.submit(self._warm_next_context, key, project, inp.cwd)
        return EndResult(key, "done", scorer, score, conf, n, stored, job_id, judge=verdict)

    def _judge_session(self, key: str, transcript: str, now: str) -> tuple[str, float, float, int, str]:
        """The judge's job: the LLM scores the session (behaviour if it fails); + ``done``/``failed``."""
        scorer, score, conf, n = self.scorer.score_llm(key, transcript, now)
        return scorer, score, conf, n, "done" if scorer == "llm" else "failed"

    def _skip_judge(self, key: str, now: str, reason: str) -> tuple[str, float, float, int, str]:
        """Score from behaviour because the judge will not run (``reason``), recorded in the score's
        reasoning and on the summary job (``skipped``); + ``skipped``."""
        scorer, score, conf, n = self.scorer.score_behavioral(
            key, now, note=f"LLM judge skipped: {reason}", summary=("skipped", reason)
        )
        return scorer, score, conf, n, "skipped"

    def _track(self, key: str, fut: Future) -> None:
        """Remember a judge future for :meth:`wait_idle` until it is done."""
        with self._lock:
            self._pending[key] = fut

        def forget(f: Future) -> None:
            with self._lock:
                if self._pending.get(key) is f:
                    del self._pending[key]

        fut.add_done_callback(forget)

    def _abort_llm(self) -> None:
        """End the judge's LLM call in flight: closing the provider shuts its sockets down or kills
        its CLI process group (providers' ``close``). Only when the judge is being stopped."""
        if self.llm is not None:
            self.llm.close()

    def stop_judge(self) -> None:
        """Stop the judge without waiting: no new judging (session-ends score from behaviour),
        the sessions waiting for it are scored from behaviour with the reason recorded, and the
        call in flight is aborted. The daemon calls this as soon as it starts shutting down, so
        ``wait: true`` session-ends answer at once and nothing waits on the model."""
        self._judge.stop()

    def wait_idle(self, timeout_s: float = 120.0) -> None:
        """Wait for background judging to finish (tests, replays).

        Raises:
            TimeoutError: a judged session is not done after ``timeout_s`` seconds.
        """
        with self._lock:
            futs = list(self._pending.values())
        for f in futs:
            f.result(timeout=timeout_s)

    def relabel(self, session_key: str) -> int:
        """(Re)build the labels of a scored session from its current signals; returns rows labelled."""
        self.inflight.wait(self._key(session_key))
        return self.scorer.relabel(session_key)

    def get(self, session_key: str) -> dict[str, Any]:
        """A session with its score and candidate rows (inspection API).

        Raises:
            NotFound: unknown key.
        """
        key = self._key(session_key)
        self.inflight.wait(key)
        sess = self.db.read(lambda c: sess_sql.get_session(c, key))
        if sess is None:
            raise NotFound(f"no session {key!r:.80}")
        rows = self.db.read(lambda c: sess_sql.session_memories(c, key))
        return {"session": sess, "score": self.db.read(lambda c: sess_sql.get_score(c, key)), "memories": rows}

    def summary(self) -> dict[str, Any]:
        """Counts over every session (reports and status)."""
        return self.db.read(sess_sql.summary)

    def close(self) -> None:
        """Wait for write-behind starts and background work; the database stays open.

        The judge is stopped (:meth:`stop_judge`): the sessions still waiting for it are scored
        from behaviour and a call in flight is aborted; its thread gets
        :data:`JUDGE_CLOSE_TIMEOUT_S` seconds to finish those writes."""
        self.inflight.wait_all()
        self._judge.close(JUDGE_CLOSE_TIMEOUT_S)
        self._warmer.shutdown(wait=True)
