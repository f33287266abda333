"""The continuity judge's own worker: one thread, a bounded backlog, abortable at shutdown.

A session-end with an LLM judge hands its scoring here. One daemon thread runs the jobs in
order, so a slow or hung model costs one thread, never the HTTP server's pool: the routes that
queue a job return at once, and a ``wait: true`` session-end waits on the job's future for a
bounded time (:class:`memlane.sessions.service.SessionService`).

* **Bounded**: at most ``max_pending()`` jobs wait besides the one running; :meth:`submit`
  refuses beyond that (:class:`JudgeRefused`) and the caller scores from behaviour.
* **Stoppable**: :meth:`stop` refuses new jobs, hands every waiting job to its ``skipped``
  function (the caller's behavioural scoring, with the reason) instead of the judge, and calls
  ``abort`` when a job is running (the session service closes the LLM provider, which ends the
  call in flight: sockets shut down, CLI process group killed). It does not block, so the HTTP
  server can call it the moment it starts shutting down. :meth:`close` stops and joins.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: The reason given to the jobs handed back by :meth:`JudgeQueue.stop` by default.
SHUTDOWN_REASON = "the daemon is shutting down"


class JudgeRefused(Exception):
    """:meth:`JudgeQueue.submit` did not take the job; the message says why (backlog full, stopping)."""


@dataclass
class _Job:
    future: Future[Any]
    run: Callable[[], Any]
    skipped: Callable[[str], Any]


class JudgeQueue:
    """One worker thread with a bounded backlog.

    Args:
        max_pending: the most jobs that may wait besides the running one (read at each submit,
            so a settings change applies at once); 0 = only one job at a time.
        abort: called by :meth:`stop` while a job runs, to end its blocking call (must not block).
        name: the worker thread's name.

    Thread-safe. The worker is a daemon thread started on the first submit, so a call that
    ignores ``abort`` still never keeps the process alive.
    """

    def __init__(
        self, max_pending: Callable[[], int], *, abort: Callable[[], None] | None = None, name: str = "memlane-judge"
    ) -> None:
        self._max_pending = max_pending
        self._abort = abort
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._current: _Job | None = None
        self._thread: threading.Thread | None = None
        self._stopping: str | None = None  # the reason, once stopped

    # -- submitting ---------------------------------------------------------------------
    def submit(self, run: Callable[[], Any], skipped: Callable[[str], Any]) -> Future[Any]:
        """Queue ``run()``; its result (or exception) lands on the returned future.

        If the queue is stopped before the job starts, ``skipped(reason)`` runs on the worker
        instead and its result lands on the future.

        Raises:
            JudgeRefused: the backlog already holds ``max_pending()`` jobs, or the queue is stopped.
        """
        with self._cond:
            if self._stopping is not None:
                raise JudgeRefused(self._stopping)
            limit = max(0, int(self._max_pending()))
            if len(self._queue) >= limit and (self._current is not None or self._queue):
                raise JudgeRefused(
                    f"{len(self._queue)} sessions already waiting for the judge (sessions.judge_queue_max = {limit})"
                )
            job = _Job(Future(), run, skipped)
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
            return job.future

    def state(self, future: Future[Any]) -> str:
        """``"running"``, ``"queued"`` or ``"done"`` for a future :meth:`submit` returned."""
        with self._cond:
            if future.done():
                return "done"
            if self._current is not None and self._current.future is future:
                return "running"
            return "queued"

    @property
    def pending(self) -> int:
        """Jobs waiting (not counting the running one)."""
        with self._cond:
            return len(self._queue)

    @property
    def busy(self) -> bool:
        """Whether a job is running."""
        with self._cond:
            return self._current is not None

    # -- stopping -----------------------------------------------------------------------
    def stop(self, reason: str = SHUTDOWN_REASON) -> None:
        """Refuse new jobs, hand the waiting ones to their ``skipped(reason)``, abort the running one.

        Returns at once (the worker finishes the handed-back jobs on its own thread); idempotent.
        """
        with self._cond:
            if self._stopping is None:
                self._stopping = reason
            running = self._current is not None
            self._cond.notify_all()
        if running and self._abort is not None:
            try:
                self._abort()
            except Exception:  # a failed abort must not break a shutdown
                log.exception("aborting the judge's call in flight failed")

    def close(self, timeout_s: float) -> bool:
        """:meth:`stop`, then wait up to ``timeout_s`` seconds for the worker to finish.

        Returns True when the worker has ended (or never ran)."""
        self.stop()
        with self._cond:
            t = self._thread
        if t is None:
            return True
        t.join(timeout_s)
        if t.is_alive():
            log.warning("the continuity judge is still running after %.1f s; left behind", timeout_s)
        return not t.is_alive()

    # -- the worker ---------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and self._stopping is None:
                    self._cond.wait()
                if not self._queue:
                    return  # stopped and drained
                job = self._queue.popleft()
                self._current = job
                reason = self._stopping
            try:
                if job.future.set_running_or_notify_cancel():
                    try:
                        result = job.run() if reason is None else job.skipped(reason)
                    except BaseException as exc:  # handed to the waiter; the worker goes on
                        log.exception("continuity judge job failed")
                        job.future.set_exception(exc)
                    else:
                        job.future.set_result(result)
            finally:
                with self._cond:
                    self._current = None
