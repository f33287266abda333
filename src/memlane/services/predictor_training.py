"""The daemon's predictor retrains: queued one at a time, run in the sidecar, logged.

predictive-memory-scorer.md Phase 3 (a retrain every ``train_interval_sessions``
training-grade sessions, or after a drift reset) and 5b (drift). :class:`Retrainer` runs a
retrain on its own training thread: it refreshes the canary set when due, asks the sidecar
for ``train_from_db`` (which trains, gates and swaps the model only when every gate passes),
and writes one ``predictor_training_log`` row with the policy state. A rejected run leaves the
serving model as it was. The policy state and the lock guarding it are the service's
(:class:`memlane.services.predictor_service.PredictorService`), which delegates its
``schedule_retrain``, ``wait_training`` and ``retrain`` here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from memlane.config import predictor as C
from memlane.config.clock import now_iso
from memlane.predictor import policy
from memlane.predictor.client import PredictorUnavailable
from memlane.recall.memory_index import iso_to_epoch
from memlane.services.predictor_rows import training_log_row
from memlane.services.predictor_scoring import PredictorBackend
from memlane.storage import predictor as pred_sql
from memlane.storage.db import Database

__all__ = ["Retrainer", "canary_refresh_due"]

log = logging.getLogger(__name__)


def canary_refresh_due(newest_member: str | None, newest_session: str | None) -> bool:
    """Whether the weekly canary refresh is due (seed "Canary Evaluation Set").

    A week is measured between sessions, the newest training-grade one and the canary's newest
    member (ISO-8601 start times), not on the wall clock: a replay or a benchmark of months of
    sessions refreshes the canary as the daemon would have while they happened. An empty canary
    is always due. Growing the canary to its size is not a refresh: it only adds members
    (:func:`memlane.storage.predictor.refresh_canary`).
    """
    if newest_member is None:
        return True
    return (
        newest_session is not None
        and iso_to_epoch(newest_session) - iso_to_epoch(newest_member) >= C.CANARY_REFRESH_DAYS * 86400
    )


class Retrainer:
    """Schedules and runs the predictor's retrains (at most one queued or running).

    Args:
        db: the database (the canary set, the training log and the policy state are written).
        lock: the service's lock, held while ``state`` is read or changed.
        state: returns the service's policy state.
        backend: returns the sidecar client, or None when the predictor is off; read at use
            time (the service's ``backend`` may be replaced).
        hold: returns a context manager that keeps the sidecar up for one run and yields
            whether it is ready (:meth:`memlane.services.predictor_scoring.SidecarLifecycle.training`);
            None: the sidecar is already up.
    """

    def __init__(
        self,
        db: Database,
        lock: threading.Lock,
        *,
        state: Callable[[], policy.PolicyState],
        backend: Callable[[], PredictorBackend | None],
        hold: Callable[[], AbstractContextManager[bool]] | None = None,
        listeners: Sequence[Callable[[dict[str, Any], float], None]] = (),
    ) -> None:
        self.db = db
        self._lock = lock
        self._state = state
        self._backend = backend
        self._hold = hold
        self._trainer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlane-predictor-train")
        self._training: Future[Any] | None = None
        #: called as ``fn(row, took_ms)`` after every run with its training-log row and its wall
        #: time (ms): the daemon's latency histograms and error ring (memlane.observability).
        self.listeners: list[Callable[[dict[str, Any], float], None]] = list(listeners)

    def schedule(self, trigger: str) -> Future[Any] | None:
        """Queue a retrain on the training thread unless one is queued or running."""
        if self._backend() is None:
            return None
        with self._lock:
            if self.running():
                return self._training
            self._training = self._trainer.submit(self.run, trigger)
            return self._training

    def wait(self, timeout_s: float = 300.0) -> None:
        """Block until a scheduled retrain finished (benchmarks, tests, shutdown)."""
        fut = self._training
        if fut is not None:
            fut.result(timeout=timeout_s)

    def running(self) -> bool:
        """A scheduled retrain is queued or running."""
        return self._training is not None and not self._training.done()

    def close(self) -> None:
        """Finish a running retrain, then stop the training thread."""
        self._trainer.shutdown(wait=True)

    def run(self, trigger: str = "manual") -> dict[str, Any]:
        """Refresh the canary set if due, run ``train_from_db`` in the sidecar, log the run.

        Every run writes one ``predictor_training_log`` row; a rejected one (``accepted`` 0: a
        gate failed, no validation gain, or the run failed) leaves the serving model as it was
        and is logged as a warning and counted in
        :meth:`memlane.services.predictor_service.PredictorService.status` (``training_runs``).
        Waits up to ``TRAIN_TIMEOUT_S`` (120 s) for the sidecar's reply.

        Returns:
            the training-log row written (accepted or not), with ``error`` on failure.

        Raises:
            StorageError: the training-log row could not be written (sidecar failures are
                not raised: they are the row's ``error``).
        """
        t0 = time.perf_counter()
        now = now_iso()
        keys, newest_member, newest = self.db.read(
            lambda c: (
                pred_sql.canary_keys(c),
                pred_sql.canary_newest_start(c),
                pred_sql.newest_training_start(c, min_confidence=C.MIN_SCORER_CONFIDENCE),
            )
        )
        with self._lock:
            state = self._state()
            # The canary never takes more than a fifth of the training-grade sessions: early on a
            # 25-session canary would leave nothing to train on.
            size = min(C.CANARY_SIZE, state.training_sessions // 5)
            influential = policy.alpha_for(state) < 1.0
            # Influence can come at any session after cold start exits (the margin guard lets
            # it through), and only then (alpha_for): from the exit on, each run is gated on
            # sessions it did not train on.
            hold_out = state.cold_start_exited
            seen, through = set(state.canary_seen), state.trained_through
        weekly = canary_refresh_due(newest_member, newest)
        if size and (len(keys) < size or weekly):
            keys = self.db.write(
                lambda c: pred_sql.refresh_canary(
                    c,
                    size=size,
                    min_confidence=C.MIN_SCORER_CONFIDENCE,
                    at=now,
                    replace=weekly,
                    max_replaced=C.CANARY_REFRESH_MAX_REPLACED,
                )
            )
        # The sidecar trains on the canary until cold start exits. From then on the NDCG gate
        # needs members the live model has not seen: the ones it trained on make way for
        # sessions that started after its last run (docs/predictor.md, "The canary is trained
        # on until cold start exits").
        leaving = [k for k in keys if k in seen]
        if hold_out and leaving and through:
            self.db.write(
                lambda c: pred_sql.swap_canary_members(
                    c, leaving, started_after=through, min_confidence=C.MIN_SCORER_CONFIDENCE, at=now
                )
            )
        with self._lock:
            state = self._state()
            sessions_before = state.sessions_since_train
            state.sessions_since_train = 0
        report: dict[str, Any]
        try:
            backend = self._backend()
            if backend is None:
                raise PredictorUnavailable("the predictor is disabled (predictor.enabled is false)")
            with self._hold() if self._hold is not None else nullcontext(True) as ready:
                if not ready:
                    raise PredictorUnavailable(f"the predictor sidecar did not start within {C.START_TIMEOUT_S:.0f} s")
                report = backend.call(
                    "train_from_db",
                    {"trigger": trigger, "influential": influential, "hold_out_canary": hold_out},
                    timeout_s=C.TRAIN_TIMEOUT_S,
                )
            error = report.get("error")
        except Exception as exc:
            report, error = {}, f"{type(exc).__name__}: {exc}"
            log.warning("predictor retrain failed: %s", error)
        accepted = bool(report.get("accepted"))
        if not accepted and report:
            gates_report = report.get("gates")
            gates: dict[str, Any] = gates_report if isinstance(gates_report, dict) else {}
            failed = [g.get("name") for g in gates.get("gates") or [] if isinstance(g, dict) and not g.get("passed")]
            log.warning(
                "predictor retrain (%s) rejected, model v%s keeps serving: %s",
                trigger,
                report.get("model_version"),
                f"gates failed {failed}" if failed else error or "not accepted",
            )
        with self._lock:
            s = self._state()
            if accepted:
                s.trained = True
                s.model_version = int(report.get("model_version", s.model_version + 1))
                s.last_trained = now
            if error and not accepted and not report:
                s.sessions_since_train = sessions_before  # the sidecar never ran it: try again next session
            if report:
                s.drifting = False  # the drift retrain ran (accepted or not): earn alpha again from warming
                seen_now = report.get("canary_seen")
                s.canary_seen = [str(k) for k in seen_now] if isinstance(seen_now, list) else []
                s.trained_through = newest
            saved = s.to_dict()
            drift_resets = s.drift_resets
        row = training_log_row(
            report,
            model_version=saved["model_version"],
            trigger=trigger,
            accepted=accepted,
            drift_resets=drift_resets,
            error=error,
            at=now,
        )

        def job(conn: Any) -> None:
            pred_sql.insert_training_log(conn, row)
            pred_sql.save_state(conn, saved, now)

        self.db.write(job)
        for fn in list(self.listeners):
            try:
                fn(row, (time.perf_counter() - t0) * 1000)
            except Exception:  # an observer never breaks training
                log.exception("training listener failed")
        return row
