"""The daemon's predictor: score the pool, fuse with the baseline, compare, earn alpha, retrain.

predictive-memory-scorer.md Phase 3 ("Hook Flow (session-start)", "Ranking Fusion",
"Success Rate Tracking", "Exploration Sampling"), Phase 5 (config) and 5b (drift). The model
runs in the sidecar (:class:`memlane.predictor.client.SidecarClient`); every failure there
means the baseline ranking for that request, never an error to the caller.

At session-start :meth:`PredictorService.rank` logs every candidate's raw signals, asks the
sidecar for scores within ``score_timeout_ms``, fuses both rankings with RRF (alpha = the
baseline's earned weight) and may swap one injected slot for exploration
(:mod:`memlane.services.predictor_exploration`). When alpha is 1 the
scores cannot change what is injected, so the session-start may answer first and record the
predictor's ranking right after (:meth:`score_async` and :meth:`record_later`; the same request,
deadline and fail-open rules). At session-end, once labels exist, :meth:`on_session_scored`
(or :meth:`prepare_comparison` and :meth:`write_comparison` inside the session-end's own
transaction) waits for a ranking still being recorded, computes NDCG@10 of both rankings over
one evaluation pool, updates the success-rate EMA, records a ``predictor_comparisons`` row and
schedules a retrain every ``train_interval_sessions`` training-grade sessions
(:mod:`memlane.services.predictor_training`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memlane.config.clock import now_iso
from memlane.config.predictor import PredictorSettings
from memlane.predictor import policy
from memlane.recall.memory_index import MemoryIndex, iso_to_epoch
from memlane.services import predictor_exploration as exploration
from memlane.services.deferred_records import DeferredRecords
from memlane.services.predictor_rows import comparison_row
from memlane.services.predictor_scoring import PendingScore, PredictorBackend, ScoreChannel, SidecarLifecycle
from memlane.services.predictor_signals import candidate_signals, score_params
from memlane.services.predictor_training import Retrainer
from memlane.services.predictor_types import Comparison, PoolMember, RankDecision, ScoreResult
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database

__all__ = ["Comparison", "PredictorBackend", "PredictorService", "RankDecision", "ScoreResult"]

log = logging.getLogger(__name__)


class PredictorService:
    """Owns the policy state and talks to the predictor backend.

    Args:
        db: the database (the service writes comparisons, the training log, canary and state).
        index: the in-memory index (memory fields and vectors for candidate signals).
        backend: the sidecar client, or None when the predictor is off.
        settings: the eight exposed keys. Read at use time (``self.settings``, replaced or
            changed in place): ``score_timeout_ms`` applies to the next score request sent.
        rng: exploration randomness (seeded in tests and benchmarks).
        lifecycle: when the sidecar process runs (:class:`SidecarLifecycle`: with a model to
            serve or a training run, while ``settings.enabled``); None: from :meth:`start` on.
        score_listeners: told ``fn(took_ms, error_kind)`` after every score request
            (:class:`ScoreChannel`).
        training_listeners: told ``fn(training_log_row, took_ms)`` after every retrain
            (:class:`Retrainer`).
    """

    def __init__(
        self,
        db: Database,
        index: MemoryIndex,
        backend: PredictorBackend | None,
        settings: PredictorSettings,
        *,
        rng: random.Random | None = None,
        lifecycle: SidecarLifecycle | None = None,
        score_listeners: Sequence[Callable[[float, str | None], None]] = (),
        training_listeners: Sequence[Callable[[dict[str, Any], float], None]] = (),
    ) -> None:
        self.db = db
        self.index = index
        self.backend = backend
        self.settings = settings
        self.lifecycle = lifecycle
        self.rng = rng or random.Random()
        self._lock = threading.Lock()
        self.state = policy.PolicyState.from_dict(db.read(pred_sql.load_state))
        # Retrains, one at a time on their own thread (sharing the lock and the policy state).
        self.retrainer = Retrainer(
            db,
            self._lock,
            state=lambda: self.state,
            backend=self._live_backend,
            hold=lifecycle.training if lifecycle is not None else None,
            listeners=training_listeners,
        )
        # Score requests sent ahead of the session-start's own work (score_async).
        self._scorer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memlane-predictor-score")
        # Rankings still being recorded after their session-start answered.
        self.records = DeferredRecords()
        # Score requests and their outcomes (counters, round-trip latency). The deadline is the
        # live setting, read when each request is sent (not fixed here).
        self.channel = ScoreChannel(
            backend, lambda: self.settings.score_timeout_ms, lifecycle, listeners=score_listeners
        )

    # -- lifecycle ------------------------------------------------------------------------
    def _live_backend(self) -> PredictorBackend | None:
        """The backend while the predictor is enabled (``settings.enabled``), else None."""
        return self.backend if self.settings.enabled else None

    def start(self) -> None:
        """Spawn the sidecar when it is wanted (returns at once; the first sessions use the
        baseline meanwhile). With a lifecycle: only when there is a model to serve."""
        if self.lifecycle is not None:
            self.lifecycle.sync()
        elif self.backend is not None:
            self.backend.start()

    def sync(self) -> None:
        """Start or stop the sidecar as :class:`SidecarLifecycle` says now (after a change of
        ``predictor.enabled``); without a lifecycle, nothing."""
        if self.lifecycle is not None:
            self.lifecycle.sync()

    def close(self) -> None:
        """Record the rankings still pending, finish a running retrain, stop the sidecar."""
        self.wait_recorded(None, timeout_s=60.0)
        self._scorer.shutdown(wait=True)
        self.retrainer.close()
        if self.backend is not None:
            self.backend.close()

    @property
    def disabled(self) -> bool:
        """No sidecar, ``predictor.enabled`` turned off, or the client disabled it after
        repeated crashes (baseline only)."""
        return self.backend is None or not self.settings.enabled or self.backend.disabled

    def phase(self) -> str:
        """collecting, warming, active, disabled or retraining (seed Phase 3 status)."""
        with self._lock:
            return policy.phase_of(
                self.state, disabled=self.disabled, min_training_sessions=self.settings.min_training_sessions
            )

    def alpha(self) -> float:
        """The baseline's RRF weight in [0, 1] the policy has earned (1 when disabled)."""
        with self._lock:
            return 1.0 if self.disabled else policy.alpha_for(self.state)

    def status_line(self) -> str:
        """The one-line status of the session-start block (seed "4.x Agent-facing status")."""
        with self._lock:
            s = self.state
            phase = policy.phase_of(
                s, disabled=self.disabled, min_training_sessions=self.settings.min_training_sessions
            )
            crashes = (
                self.backend.status().get("crashes_last_hour", 0)
                if phase == "disabled" and self.backend is not None
                else 0
            )
            return policy.status_line(
                s, phase, crashes_last_hour=crashes, min_training_sessions=self.settings.min_training_sessions
            )

    # -- session-start ------------------------------------------------------------------
    def candidate_signals(
        self,
        pool: Sequence[PoolMember],
        now_epoch: float,
        project: str | None = None,
        context_text: str = "",
        work_phase: str | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Raw per-candidate signals (:func:`memlane.services.predictor_signals.candidate_signals`)."""
        return candidate_signals(self.index, self.db, pool, now_epoch, project, context_text, work_phase)

    def rank(
        self,
        *,
        pool: Sequence[PoolMember],
        context_vector: np.ndarray | None,
        context_text: str,
        project: str | None,
        now: str,
        last_start: str | None,
        work_phase: str | None = None,
    ) -> RankDecision:
        """Score ``pool`` and fuse it with the baseline ranking (never raises for predictor faults).

        :meth:`prepare` then :meth:`score_now`.

        Args:
            pool: the candidates in baseline order.
            context_vector: the session context embedding ``[E]``, or None.
            context_text: the session context (text path when there is no vector).
            project: the session's project.
            now: session start, ISO-8601 UTC.
            last_start: the previous session's start (ISO) for the session-gap signal.
            work_phase: the session's universal phase (the ``phase_weight`` feature), or None.

        Returns:
            a :class:`RankDecision`.
        """
        t0 = time.perf_counter()
        decision = self.prepare(
            pool=pool,
            context_vector=context_vector,
            context_text=context_text,
            project=project,
            now=now,
            last_start=last_start,
            work_phase=work_phase,
        )
        self.score_now(decision)
        return self._done(decision, t0)

    def prepare(
        self,
        *,
        pool: Sequence[PoolMember],
        context_vector: np.ndarray | None,
        context_text: str,
        project: str | None,
        now: str,
        last_start: str | None,
        work_phase: str | None = None,
    ) -> RankDecision:
        """Everything of :meth:`rank` but the scores: the candidates' raw signals, the session
        signals, alpha, the phase and the ``score`` request (``decision.request``).

        The decision's ``order`` and ``fused`` are the baseline's until :meth:`apply` (or
        :meth:`score_now`) adds the predictor's ranking. Arguments as :meth:`rank`. One read
        (memory contents, when there is a project); never raises for predictor faults.
        """
        t0 = time.perf_counter()
        now_epoch = iso_to_epoch(now)
        baseline = [p.memory_id for p in pool]
        local = datetime.fromtimestamp(now_epoch, tz=UTC).astimezone()
        gap = max(0.0, (now_epoch - iso_to_epoch(last_start)) / 3600.0) if last_start else 0.0
        features = self.candidate_signals(pool, now_epoch, project, context_text, work_phase)
        with self._lock:
            alpha = 1.0 if self.disabled else policy.alpha_for(self.state)
            phase = policy.phase_of(
                self.state, disabled=self.disabled, min_training_sessions=self.settings.min_training_sessions
            )
            version = self.state.model_version
        signals = {
            "session_time": local.isoformat(),
            "session_gap_hours": gap,
            "alpha": alpha,
            "phase": phase,
            "model_version": version,
        }
        decision = RankDecision(
            order=baseline,
            fused={m: 1.0 / (self.settings.rrf_k + i + 1) for i, m in enumerate(baseline)},
            alpha=alpha,
            phase=phase,
            features=features,
            signals=signals,
        )
        if not pool or self._live_backend() is None:
            decision.error = "predictor off" if self._live_backend() is None else None
        else:
            decision.request = score_params(pool, features, context_vector, context_text, project, local, gap)
        return self._done(decision, t0)

    def score_now(self, decision: RankDecision) -> RankDecision:
        """Ask the sidecar for ``decision``'s scores on this thread (within ``score_timeout_ms``)
        and :meth:`apply` them; a failure leaves the baseline and sets ``decision.error``."""
        if decision.request is not None:
            self.apply(decision, self.channel.score(decision.request))
        return decision

    def score_async(self, decision: RankDecision) -> Future[ScoreResult] | None:
        """Send ``decision``'s score request from a worker thread; None when there is none.

        The future never raises: a timeout (``score_timeout_ms`` from the moment the request is
        sent), a crash or a malformed reply is a :class:`ScoreResult` with ``error``.
        """
        if decision.request is None:
            return None
        return self._scorer.submit(self.channel.score, decision.request)

    def can_defer(self, decision: RankDecision) -> bool:
        """True when the predictor's scores cannot change this start's injected list (alpha = 1:
        the fused ranking is the baseline's) and there is a request to send, so the start may
        answer before they arrive and record them with :meth:`record_later`."""
        return decision.request is not None and decision.alpha >= 1.0

    def send_score(self, decision: RankDecision) -> PendingScore | None:
        """Send ``decision``'s score request from this thread; None when there is none.

        ``.result()`` on the returned handle waits on the caller's thread for the reply (the
        client's reader thread resolves it): no worker thread between the session-start and
        the sidecar. The deadline (``score_timeout_ms``) runs from the moment it is sent. Never
        raises for predictor faults: they are a :class:`ScoreResult` with ``error``.
        """
        return None if decision.request is None else self.channel.send(decision.request)

    def apply(self, decision: RankDecision, result: ScoreResult) -> RankDecision:
        """Put ``result`` into ``decision``: scores, predictor ranks, RRF-fused scores and order;
        on failure ``error`` and the ``predictor_error`` signal (the baseline stays)."""
        if result.error is not None:
            decision.error = result.error
            decision.signals["predictor_error"] = result.error[:300]
            return decision
        baseline = decision.request["candidate_ids"] if decision.request is not None else decision.order
        decision.predictor_scores = result.scores
        decision.predictor_rank = result.rank
        decision.fused = policy.rrf_fuse(baseline, result.ranked, decision.alpha, self.settings.rrf_k)
        decision.order = sorted(baseline, key=lambda m: -decision.fused[m])
        return decision

    # -- the deferred ranking --------------------------------------------------------------
    def record_later(
        self,
        session_key: str,
        decision: RankDecision,
        committed: Future[bool],
        *,
        context_vector: np.ndarray | None,
        context_model: str | None,
        released: Future[None] | None = None,
    ) -> Future[int]:
        """Record the predictor's part of a session-start that answered without it.

        Call it before the start's own write (which then holds the session and its candidates,
        without the predictor's inputs); set ``committed`` when that write is done (True: the
        candidate rows are committed). Once it is, and ``released`` is done (the answer is
        out; None: at once), the score request is sent - the same request, deadline and
        fail-open rules as :meth:`score_now` - and ONE write records what a start that waited
        records in its own transaction: the session's context vector and signals, every
        candidate's logged features and the predictor's scores and ranks (on failure: the
        signals with ``predictor_error``, no scores). ``committed`` False (the start lost a
        race, or its write failed) records nothing. ``decision`` must not change after this
        call.

        Session-end waits for it (:meth:`wait_recorded`, which also releases it at once); a
        record left unreleased for ``deferred_records.RELEASE_FALLBACK_S`` is released by the next call. A
        daemon that stops in between leaves the session without predictor inputs: training
        and the comparison treat it as a session the predictor did not see.

        Returns:
            a future of the number of candidate rows updated (it raises what the write raised).
        """
        return self.records.record(
            session_key,
            decision,
            committed,
            db=self.db,
            score_async=self.score_async,
            context_vector=context_vector,
            context_model=context_model,
            released=released,
        )

    def pending_records(self) -> int:
        """Rankings still being recorded after their session-start answered."""
        return self.records.pending()

    def wait_recorded(self, session_key: str | None, timeout_s: float = 30.0) -> bool:
        """Release, then wait for, the deferred predictor record of ``session_key`` (None: of
        every session) (:meth:`record_later`); True when none is pending any more.

        Returns at once when nothing is pending. A failed record is logged, not raised.
        """
        return self.records.wait(session_key, timeout_s)

    @staticmethod
    def _done(decision: RankDecision, t0: float) -> RankDecision:
        decision.took_ms = (time.perf_counter() - t0) * 1000
        return decision

    def explore(
        self, injected: Sequence[str], decision: RankDecision, *, drawn: bool | None = None
    ) -> tuple[str, str] | None:
        """Maybe swap the lowest injected memory for the largest-disagreement candidate
        (:func:`memlane.services.predictor_exploration.explore`, with ``exploration_rate`` and
        ``rng``). Returns ``(replaced_id, explored_id)`` or None."""
        return exploration.explore(injected, decision, rate=self.settings.exploration_rate, rng=self.rng, drawn=drawn)

    def exploration_drawn(self, injected: Sequence[str], decision: RankDecision) -> bool:
        """The epsilon draw of exploration, made before the predictor's ranking is known
        (:func:`memlane.services.predictor_exploration.exploration_drawn`; same ``rng``)."""
        return exploration.exploration_drawn(injected, decision, rate=self.settings.exploration_rate, rng=self.rng)

    # -- session-end ----------------------------------------------------------------------
    def comparison_inputs(self, conn: Any, session_key: str) -> dict[str, Any] | None:
        """SQL part of a comparison, run inside the caller's read: the session's logged signals
        (``{}`` when none), or None when the session was already compared (a re-scored session
        never moves the EMA twice)."""
        if pred_sql.has_comparison(conn, session_key):
            return None
        return pred_sql.session_signals(conn, session_key) or {}

    def prepare_comparison(
        self,
        session_key: str,
        rows: Sequence[Any],
        labels: Mapping[str, float],
        *,
        confidence: float,
        project: str | None,
        signals: Mapping[str, Any],
    ) -> Comparison | None:
        """Compare both rankings on the session's labels and update the policy state in memory.

        NDCG@10 of both rankings over one evaluation pool, the success-rate EMA and the
        margin EMA (seed "Success Rate Tracking"). The caller writes the result with
        :meth:`write_comparison` (in its own transaction) and then calls :meth:`after_comparison`.

        Args:
            rows: the session's candidates (``memory_id``, ``baseline_rank``, ``predictor_rank``,
                ``was_injected``, ``fts_hit_count``), any order.
            labels: ``{memory_id: relevance}`` of the labelled rows, in [-0.5, 1]
                (``sessions.labels.evaluation_relevance``: the label without the soft negative).
            confidence: the session's continuity-score confidence in [0, 1].
            signals: the session's logged signals (:meth:`comparison_inputs`).

        Returns:
            the :class:`Comparison`, or None when no candidate has a baseline rank.
        """
        ranked = [r for r in rows if r.baseline_rank is not None]
        if not ranked:
            return None
        baseline = [r.memory_id for r in sorted(ranked, key=lambda r: r.baseline_rank or 0)]
        by_pred = [r for r in ranked if r.predictor_rank is not None]
        predictor = [r.memory_id for r in sorted(by_pred, key=lambda r: r.predictor_rank or 0)]
        injected = [r.memory_id for r in ranked if r.was_injected]
        p_ndcg, b_ndcg, relevance = policy.evaluation_ndcg(baseline, predictor, injected, labels)
        matched = sum(1 for r in ranked if r.was_injected and r.fts_hit_count > 0)
        fts_overlap = matched / len(injected) if injected else None
        confidence = float(confidence)
        with self._lock:
            outcome = policy.record_comparison(
                self.state,
                predictor_ndcg=p_ndcg if predictor else None,
                baseline_ndcg=b_ndcg,
                confidence=confidence,
                predictor_scored=bool(predictor),
                project=project,
                min_training_sessions=self.settings.min_training_sessions,
                train_interval_sessions=self.settings.train_interval_sessions,
                drift_reset_window=self.settings.drift_reset_window,
            )
            state = self.state.to_dict()
            phase = policy.phase_of(
                self.state, disabled=self.disabled, min_training_sessions=self.settings.min_training_sessions
            )
        now = now_iso()
        row = comparison_row(
            session_key=session_key,
            project=project,
            predictor=predictor,
            baseline=baseline,
            predictor_ndcg=p_ndcg,
            baseline_ndcg=b_ndcg,
            won=outcome.won,
            ema_updated=outcome.ema_updated,
            confidence=confidence,
            success_rate=state["success_rate"],
            signals=signals,
            relevance=relevance,
            fts_overlap=fts_overlap,
            phase=phase,
            at=now,
        )
        return Comparison(session_key, row, bool(predictor), state, outcome, now)

    @staticmethod
    def write_comparison(conn: Any, comparison: Comparison) -> None:
        """Write a prepared comparison (its row, when the predictor scored, and the policy state)."""
        if comparison.scored:
            pred_sql.insert_comparison(conn, comparison.row)
        pred_sql.save_state(conn, comparison.state, comparison.at)

    def after_comparison(self, comparison: Comparison) -> None:
        """After the comparison was written: log a drift reset, schedule a due retrain."""
        outcome = comparison.outcome
        if outcome.drift_reset:
            log.warning("predictor drift detected: alpha back to 1.0, retraining with the replay buffer")
        if outcome.retrain_due:
            self.schedule_retrain("drift" if outcome.drift_reset else "interval")

    def on_session_scored(self, session_key: str) -> dict[str, Any] | None:
        """Compare both rankings on the session's labels, update the EMA, maybe retrain.

        Called once labels are written (one read, one write). Waits first for a predictor
        ranking its session-start is still recording (:meth:`wait_recorded`). Returns the
        comparison row (with ``outcome``), or None when the session was compared already or
        has no ranked candidates or no score.
        """
        self.wait_recorded(session_key)

        def read(c: Any) -> tuple[Any, ...] | None:
            signals = self.comparison_inputs(c, session_key)
            if signals is None:
                return None
            return (
                sess_sql.session_memories(c, session_key),
                sess_sql.get_score(c, session_key),
                sess_sql.get_session(c, session_key),
                signals,
            )

        found = self.db.read(read)
        if found is None:
            return None
        rows, score, sess, signals = found
        if score is None or sess is None:
            return None
        labels = {r.memory_id: float(r.label) for r in rows if r.label is not None}
        cmp = self.prepare_comparison(
            session_key, rows, labels, confidence=float(score["confidence"]), project=sess.project, signals=signals
        )
        if cmp is None:
            return None
        self.db.write(lambda conn: self.write_comparison(conn, cmp))
        self.after_comparison(cmp)
        return {**cmp.row, "outcome": cmp.outcome.__dict__}

    # -- training (memlane.services.predictor_training) ----------------------------------
    def schedule_retrain(self, trigger: str) -> Future[Any] | None:
        """Queue a retrain on the training thread unless one is queued or running."""
        return self.retrainer.schedule(trigger)

    def wait_training(self, timeout_s: float = 300.0) -> None:
        """Block until a scheduled retrain finished (benchmarks, tests, shutdown)."""
        self.retrainer.wait(timeout_s)

    def retrain(self, trigger: str = "manual") -> dict[str, Any]:
        """Refresh the canary set if due, run ``train_from_db`` in the sidecar, log the run
        (:meth:`memlane.services.predictor_training.Retrainer.run`: the training-log row
        written, accepted or not, with ``error`` on failure; raises StorageError)."""
        return self.retrainer.run(trigger)

    # -- observability ------------------------------------------------------------------
    def sidecar_process(self) -> dict[str, Any]:
        """The sidecar process, cheaply (no database read): ``{"state", "pid", "rss_bytes",
        "peak_rss_bytes"}``, memory in bytes (:mod:`memlane.procinfo`); ``state`` as
        :meth:`SidecarLifecycle.status` (``running``, ``starting``, ``dormant``: no model yet,
        ``stopped``: disabled), ``pid`` and memory None while no process runs."""
        from memlane.procinfo import process_info

        st = self.backend.status() if self.backend is not None else {}
        pid = st.get("pid") if st.get("alive") else None
        if self.lifecycle is not None:
            state = self.lifecycle.status()["state"]
        else:
            state = ("running" if st.get("ready") else "starting") if pid else "stopped"
        info = process_info(pid) if pid else {"pid": None, "rss_bytes": None, "peak_rss_bytes": None}
        return {"state": state, **info}

    def status(self) -> dict[str, Any]:
        """Phase, alpha, EMA, per-project slices, counters and the sidecar's health.

        Counters: ``scored_sessions`` and ``score_errors`` (score requests answered / failed),
        ``scored_untrained`` (of the answered, those the untrained model answered in the daemon
        while the sidecar was dormant: no model yet; ``sidecar.state``, :class:`SidecarLifecycle`),
        ``score_error_kinds`` (the failures by kind: ``timeout``, ``crash``, ``rpc_error``,
        ``malformed``, ``unavailable``; :data:`memlane.services.predictor_scoring.ERROR_KINDS`),
        ``score_recent_errors`` (the last failures with their kind and the deadline that applied,
        ms), ``score_timeout_ms`` (the deadline the next request gets, ms),
        ``deferred_sessions`` (starts that answered before the predictor's ranking, recorded
        after) and ``pending_records`` (of those, not recorded yet); ``score_latency_ms``: p50,
        p95 and p99 of the last answered score requests as the daemon saw them (ms).
        ``training_runs``: the training log's runs, ``accepted`` and ``rejected`` (the old model
        kept serving), the rejected ones by reason (``gates``: a validation gate failed;
        ``no_validation_gain``; ``error``: the run failed or never ran), from
        ``predictor_training_log`` (:func:`memlane.storage.predictor.training_outcomes`).

        The score counters count since the daemon started; ``training_runs`` since the store
        was created. One read of the database.

        Raises:
            StorageError: the training log could not be read.
        """
        runs = self.db.read(pred_sql.training_outcomes)
        with self._lock:
            s = self.state.to_dict()
            lat = sorted(self.channel.latency_ms)
        kinds, recent = self.channel.error_snapshot(10)
        pct = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 3)) if lat else (lambda q: None)
        out = {
            "enabled": self.backend is not None,
            "phase": self.phase(),
            "alpha": self.alpha(),
            "status_line": self.status_line(),
            "state": s,
            "scored_sessions": self.channel.scored,
            "scored_untrained": self.channel.scored_untrained,
            "score_errors": self.channel.errors,
            "score_error_kinds": kinds,
            "score_recent_errors": recent,
            "score_timeout_ms": self.channel.deadline_ms(),
            "deferred_sessions": self.records.deferred,
            "pending_records": self.pending_records(),
            "score_latency_ms": {"n": len(lat), "p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99)},
            "training": self.retrainer.running(),
            "training_runs": runs,
            "settings": self.settings.model_dump(),
        }
        if self.backend is not None:
            sidecar = self.backend.status()
            if self.lifecycle is not None:
                sidecar.update(self.lifecycle.status())
            out["sidecar"] = sidecar
        return out
