"""Background workers: a polling thread with backoff, a job worker over ``memory_jobs``, the
stale-lease reaper and the registry the container owns (memory-pipeline-v2.md "Worker Model").

* :class:`PollingWorker` -- one daemon thread calling :meth:`PollingWorker.tick` (returns
  whether it did work): at once again after work, ``poll_ms`` after an idle tick, and
  ``backoff_ms(n)`` (1 s doubling to 30 s, + up to 500 ms jitter) after ``n`` consecutive failures.
* :class:`JobWorker` -- leases one job per tick (``Database.write``: SELECT + UPDATE in one
  ``BEGIN IMMEDIATE``), runs the handler registered for its type **outside** any transaction
  (LLM calls allowed), then records completed / skipped / failed (retry with backoff, or dead).
* :class:`StaleLeaseReaper` -- every 60 s resets leases past ``leased_until`` to pending.
* :class:`WorkerRegistry` -- ``container.workers``: add, get, start_all, stop_all, status.

A handler, given to the worker's constructor (``handlers={"extract": handler}``) or to
:meth:`JobWorker.register`, is ``handler(job: Job) -> dict``: it returns the result stored on the job (or
:class:`CompletedInTransaction` when it completed the job in its own write), raises
:class:`SkipJob` (status ``skipped``) or any other exception (a failed attempt).
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from memlane.config.clock import now_iso
from memlane.storage import jobs as jobs_sql
from memlane.storage.db import Database
from memlane.storage.jobs import Job

log = logging.getLogger(__name__)

JobHandler = Callable[[Job], "dict[str, Any] | CompletedInTransaction | None"]
#: Called as ``fn(job, outcome, took_ms, error)`` after every job (:class:`JobWorker`).
JobListener = Callable[[Job, str, float, BaseException | None], None]
REAPER_INTERVAL_MS = 60_000
BACKOFF_BASE_MS = 1_000
BACKOFF_CAP_MS = 30_000
BACKOFF_JITTER_MS = 500


def backoff_ms(
    consecutive_failures: int,
    *,
    rng: random.Random | None = None,
    base_ms: float = BACKOFF_BASE_MS,
    cap_ms: float = BACKOFF_CAP_MS,
    jitter_ms: float = BACKOFF_JITTER_MS,
) -> float:
    """Delay after ``consecutive_failures`` failures in a row, ms (seed "Worker Model"):
    ``min(base * 2**(n-1), cap) + uniform(0, jitter)``; 1 s, 2 s, 4 s ... capped at 30 s, plus
    up to 500 ms of jitter. ``n <= 0`` gives 0 (no failure, no delay).

    Args:
        consecutive_failures: failures in a row (1 for the first).
        rng: the jitter source (seed one for reproducible tests); default the module's.
    """
    if consecutive_failures <= 0:
        return 0.0
    delay = min(base_ms * (2 ** min(consecutive_failures - 1, 30)), cap_ms)
    return delay + (rng or random).uniform(0.0, jitter_ms)


class SkipJob(Exception):
    """Raised by a job handler when there is nothing to do; the job becomes ``skipped``
    with ``reason`` as its error (not a failure, never retried)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CompletedInTransaction:
    """Returned by a handler that has already marked its job ``completed`` inside its own write
    transaction (``jobs_sql.complete`` in the same ``Database.write`` as its effects): the worker
    then writes nothing more. Effects and completion commit together, so a crash can never leave
    the effects without the completion (one transaction per job instead of two)."""

    __slots__ = ("result",)

    def __init__(self, result: dict[str, Any]) -> None:
        self.result = result


_current = threading.local()


def lease_ahead_hook() -> Callable[[sqlite3.Connection], None] | None:
    """For a handler running on a :class:`JobWorker` thread: a function to call inside the
    handler's final write transaction (on the writer connection) that leases the worker's next
    job in that same transaction, so one transaction both finishes a job and leases the next
    (one COMMIT per job instead of two). The lease is only used if that transaction commits
    (the handler returned normally); otherwise the next tick leases as usual. None outside a
    JobWorker thread (tests calling a handler directly)."""
    worker = getattr(_current, "worker", None)
    return worker._lease_ahead_fn() if worker is not None else None


def _value(v: float | Callable[[], float]) -> float:
    return float(v() if callable(v) else v)


class PollingWorker:
    """A daemon thread that calls :meth:`tick` in a loop.

    Args:
        name: unique name (thread ``memlane-{name}``, telemetry, registry key).
        poll_ms: delay after an idle tick, ms; a callable is read before every sleep (hot config).
        enabled: when given and false, the tick is not run (counted idle); read every tick.
        rng: jitter source for the failure backoff (seed it in tests).

    Subclasses implement :meth:`tick`. :meth:`run_once` runs one tick with the bookkeeping in
    the calling thread (what the thread loop does; handy in tests and CLI one-shots).
    """

    def __init__(
        self,
        name: str,
        *,
        poll_ms: float | Callable[[], float] = 2_000,
        enabled: Callable[[], bool] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self._poll_ms = poll_ms
        self._enabled = enabled
        self._rng = rng or random.Random()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.ticks = 0
        self.processed = 0
        self.failures = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.last_run_at: str | None = None
        self.next_delay_ms: float = 0.0

    def tick(self) -> bool:
        """Do at most one unit of work; return whether any was done. Exceptions count as failures."""
        raise NotImplementedError

    # -- one tick with bookkeeping ---------------------------------------------------------
    def run_once(self) -> bool:
        """Run one tick (unless disabled), update the counters and :attr:`next_delay_ms`
        (0 after work, ``poll_ms`` when idle, the failure backoff after a failure), ms.
        Never raises (the error is kept in :attr:`last_error`). Returns whether work was done."""
        if self._enabled is not None and not self._enabled():
            self.next_delay_ms = _value(self._poll_ms)
            return False
        with self._lock:
            self.ticks += 1
            self.last_run_at = now_iso()
            try:
                did = bool(self.tick())
            except Exception as exc:  # a failed tick: back off, keep running
                self.failures += 1
                self.consecutive_failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"[:2000]
                self.next_delay_ms = backoff_ms(self.consecutive_failures, rng=self._rng)
                log.warning(
                    "worker %s: tick failed (%d in a row): %s", self.name, self.consecutive_failures, self.last_error
                )
                return False
            self.consecutive_failures = 0
            if did:
                self.processed += 1
            self.next_delay_ms = 0.0 if did else _value(self._poll_ms)
            return did

    # -- thread --------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """The thread is alive and not asked to stop."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> None:
        """Start the thread (no-op when running)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"memlane-{self.name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            if self._stop.is_set():
                break
            if self.next_delay_ms > 0:
                self._wake.wait(self.next_delay_ms / 1000.0)
            self._wake.clear()

    def wake(self) -> None:
        """Cut the current sleep short (e.g. a job was just enqueued)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> bool:
        """Ask the thread to stop after its current tick and wait up to ``timeout`` seconds.
        Returns True when the thread has ended (or never ran)."""
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    def telemetry(self) -> dict[str, Any]:
        """name, running, ticks, processed, failures, consecutive_failures, last_error,
        last_run_at (ISO-8601 UTC), next_delay_ms (ms)."""
        return {
            "name": self.name,
            "running": self.running,
            "ticks": self.ticks,
            "processed": self.processed,
            "failures": self.failures,
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
            "last_run_at": self.last_run_at,
            "next_delay_ms": round(self.next_delay_ms, 3),
        }


class JobWorker(PollingWorker):
    """Leases one ``memory_jobs`` job per tick among the registered job types and runs its handler.

    Args:
        db: the database (leases and outcomes go through its writer).
        name: worker name.
        lease_timeout_ms: lease length, ms (``worker.leaseTimeoutMs``); callable read per lease.
        poll_ms, enabled, rng: see :class:`PollingWorker`.
        now: the clock, ISO-8601 UTC strings (tests pass a fixed one).
        handlers: job type -> handler (more with :meth:`register`).
        listeners: told of every job's outcome (:data:`JobListener`; the daemon's observability).

    A handler failure records the attempt with ``run_after = now + backoff_ms(job.attempts)``
    (or ``dead`` once ``attempts >= max_attempts``) and counts as a failed tick (worker backoff).
    """

    def __init__(
        self,
        db: Database,
        name: str = "jobs",
        *,
        lease_timeout_ms: float | Callable[[], float] = 300_000,
        poll_ms: float | Callable[[], float] = 2_000,
        enabled: Callable[[], bool] | None = None,
        rng: random.Random | None = None,
        now: Callable[[], str] = now_iso,
        handlers: Mapping[str, JobHandler] | None = None,
        listeners: Sequence[JobListener] = (),
    ) -> None:
        super().__init__(name, poll_ms=poll_ms, enabled=enabled, rng=rng)
        self.db = db
        self._lease_timeout_ms = lease_timeout_ms
        self._now = now
        self._handlers: dict[str, JobHandler] = dict(handlers or {})
        self.outcomes = {"completed": 0, "skipped": 0, "retried": 0, "dead": 0}
        self.last_job_id: int | None = None
        #: a job leased by the last handler's own transaction (:func:`lease_ahead_hook`), worked next.
        self._ahead: Job | None = None
        self._ahead_pending: list[Job] = []
        #: jobs that came leased ahead (telemetry).
        self.leased_ahead = 0
        #: called as ``fn(job, outcome, took_ms, error)`` after every job (outcome: completed,
        #: skipped, retried or dead; ``error`` the exception of a failed attempt, else None):
        #: the daemon's latency histograms and error ring (memlane.observability).
        self.listeners: list[JobListener] = list(listeners)

    def _notify(self, job: Job, outcome: str, t0: float, error: BaseException | None = None) -> None:
        took = (time.perf_counter() - t0) * 1000
        for fn in list(self.listeners):
            try:
                fn(job, outcome, took, error)
            except Exception:  # an observer never breaks the worker
                log.exception("worker %s: job listener failed", self.name)

    def register(self, job_type: str, handler: JobHandler) -> None:
        """Handle jobs of ``job_type`` with ``handler(job) -> dict | None`` (replaces an earlier one)."""
        self._handlers[job_type] = handler

    @property
    def job_types(self) -> list[str]:
        """The job types this worker leases (those with a handler)."""
        return sorted(self._handlers)

    def _lease_ahead_fn(self) -> Callable[[sqlite3.Connection], None]:
        holder = self._ahead_pending
        holder.clear()

        def lease_next(conn: sqlite3.Connection) -> None:
            if self._stop.is_set() or (self._enabled is not None and not self._enabled()):
                return
            nxt = jobs_sql.lease(
                conn, self.job_types, now=self._now(), lease_timeout_ms=int(_value(self._lease_timeout_ms))
            )
            if nxt is not None:
                holder.append(nxt)

        return lease_next

    def tick(self) -> bool:
        """Lease one due job (or take the one leased ahead), run its handler outside any
        transaction, record the outcome."""
        types = self.job_types
        if not types:
            return False
        job, self._ahead = self._ahead, None
        if job is None:
            lease_ms = int(_value(self._lease_timeout_ms))
            job = self.db.write(lambda c: jobs_sql.lease(c, types, now=self._now(), lease_timeout_ms=lease_ms))
        else:
            self.leased_ahead += 1
        if job is None:
            return False
        self.last_job_id = job.id
        self._ahead_pending.clear()
        _current.worker = self
        t0 = time.perf_counter()
        try:
            result = self._handlers[job.job_type](job)
        except SkipJob as skip:
            self._drop_pending_ahead()
            reason = skip.reason
            self.db.write(lambda c: jobs_sql.skip(c, job.id, reason, now=self._now()))
            self.outcomes["skipped"] += 1
            self._notify(job, "skipped", t0)
            return True
        except Exception as exc:
            self._drop_pending_ahead()
            error = f"{type(exc).__name__}: {exc}"
            delay = backoff_ms(job.attempts, rng=self._rng)
            status = self.db.write(lambda c: jobs_sql.fail(c, job, error, now=self._now(), backoff_ms=delay))
            self.outcomes["dead" if status == "dead" else "retried"] += 1
            self._notify(job, "dead" if status == "dead" else "retried", t0, exc)
            raise
        finally:
            _current.worker = None
        if not isinstance(result, CompletedInTransaction):
            self.db.write(lambda c: jobs_sql.complete(c, job.id, now=self._now(), result=dict(result or {})))
        elif self._ahead_pending:  # the handler's transaction committed with the next lease in it
            self._ahead = self._ahead_pending.pop()
        self._ahead_pending.clear()
        self.outcomes["completed"] += 1
        self._notify(job, "completed", t0)
        return True

    def _drop_pending_ahead(self) -> None:
        """The handler failed after its transaction may have leased ahead: give back any such lease
        that is still ours (same ``leased_at``); one rolled back is pending already."""
        pending = list(self._ahead_pending)
        self._ahead_pending.clear()
        for j in pending:

            def job(c: sqlite3.Connection, j: Job = j) -> None:
                cur = jobs_sql.get(c, j.id)
                if cur is not None and cur.status == "leased" and cur.leased_at == j.leased_at:
                    jobs_sql.release(c, j.id, now=self._now())

            try:
                self.db.write(job)
            except Exception as exc:  # the reaper frees it after the lease timeout
                log.warning("worker %s: could not release job %s leased ahead: %s", self.name, j.id, exc)

    def release_ahead(self) -> None:
        """Give back a job leased ahead and not worked on (pending again, attempt not counted)."""
        job, self._ahead = self._ahead, None
        if job is not None:
            try:
                self.db.write(lambda c: jobs_sql.release(c, job.id, now=self._now()))
            except Exception as exc:  # the reaper frees it after the lease timeout
                log.warning("worker %s: could not release job %s leased ahead: %s", self.name, job.id, exc)

    def run_once(self) -> bool:
        """:meth:`PollingWorker.run_once`; a job leased ahead is released when the worker is disabled."""
        if self._ahead is not None and self._enabled is not None and not self._enabled():
            self.release_ahead()
        return super().run_once()

    def _loop(self) -> None:
        try:
            super()._loop()
        finally:
            self.release_ahead()

    def telemetry(self) -> dict[str, Any]:
        """:meth:`PollingWorker.telemetry` plus job_types, outcomes and last_job_id."""
        return {
            **super().telemetry(),
            "job_types": self.job_types,
            "outcomes": dict(self.outcomes),
            "last_job_id": self.last_job_id,
            "leased_ahead": self.leased_ahead,
        }


class StaleLeaseReaper(PollingWorker):
    """Resets jobs leased past ``leased_until`` to pending, every ``interval_ms`` (60,000 ms,
    seed "Worker Model": stale lease reaper). ``processed`` counts ticks that reset any."""

    def __init__(
        self,
        db: Database,
        name: str = "lease-reaper",
        *,
        interval_ms: float = REAPER_INTERVAL_MS,
        now: Callable[[], str] = now_iso,
    ) -> None:
        super().__init__(name, poll_ms=interval_ms)
        self.db = db
        self._now = now
        self.reaped = 0

    def tick(self) -> bool:
        n = self.db.write(lambda c: jobs_sql.reap_stale(c, self._now()))
        self.reaped += n
        if n:
            self.processed += 1
            log.info("reaper: %d stale lease(s) reset to pending", n)
        return False  # sleep the full interval either way

    def telemetry(self) -> dict[str, Any]:
        return {**super().telemetry(), "reaped": self.reaped}


class WorkerRegistry:
    """The container's workers, by unique name. Started by ``open_container(start_workers=True)``
    (the daemon) and stopped first by ``Container.close()``.

    Args:
        workers: the workers, in the order they start and are reported.

    Raises:
        ValueError: two workers share a name.
    """

    def __init__(self, workers: Iterable[PollingWorker] = ()) -> None:
        self._workers: dict[str, PollingWorker] = {}
        self.started = False
        for worker in workers:
            self.add(worker)

    def add(self, worker: PollingWorker) -> PollingWorker:
        """Register ``worker`` (started at once if the registry already is). Returns it.

        Raises:
            ValueError: a worker with that name exists.
        """
        if worker.name in self._workers:
            raise ValueError(f"a worker named {worker.name!r} is already registered")
        self._workers[worker.name] = worker
        if self.started:
            worker.start()
        return worker

    def get(self, name: str) -> PollingWorker:
        """The worker named ``name``.

        Raises:
            KeyError: no such worker.
        """
        return self._workers[name]

    def __contains__(self, name: str) -> bool:
        return name in self._workers

    def __iter__(self):
        return iter(list(self._workers.values()))

    def start_all(self) -> None:
        """Start every worker (and those added later)."""
        self.started = True
        for w in list(self._workers.values()):
            w.start()

    def stop_all(self, timeout: float = 10.0) -> list[str]:
        """Stop every worker, newest first, waiting up to ``timeout`` seconds in all.
        Returns the names of those still running after the wait."""
        self.started = False
        for w in self._workers.values():  # ask all first, then wait
            w._stop.set()
            w.wake()
        deadline = time.monotonic() + timeout
        stuck = []
        for w in reversed(list(self._workers.values())):
            if not w.stop(max(0.0, deadline - time.monotonic())):
                stuck.append(w.name)
        if stuck:
            log.warning("workers still running after %.1f s: %s", timeout, ", ".join(stuck))
        return stuck

    def status(self) -> list[dict[str, Any]]:
        """Every worker's telemetry dict, in registration order."""
        return [w.telemetry() for w in self._workers.values()]


def wake_all(registry: WorkerRegistry, names: Sequence[str]) -> None:
    """Wake the named workers that exist (e.g. after enqueueing)."""
    for n in names:
        if n in registry:
            registry.get(n).wake()
