"""Bookkeeping of the deferred predictor records (docs/predictor.md "Session-start without
waiting for the predictor"): which session-starts answered before their predictor ranking was
recorded, releasing them once their answer is out, and waiting for them at session-end and
shutdown. The record itself is written by :meth:`PredictorService.record_later`.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout

#: A deferred record not released this long after its session-start is released by the next
#: session-start (s).
RELEASE_FALLBACK_S = 5.0


def release(released: Future[None] | None) -> None:
    """Mark a deferred record's answer as out (:meth:`PredictorService.record_later`); idempotent."""
    if released is not None and not released.done():
        try:
            released.set_result(None)
        except InvalidStateError:  # released by another thread meanwhile
            pass


class DeferredRecords:
    """Session key -> records still being written after their session-start answered. Thread-safe.

    Each record is ``(done, released, registered_at)``: ``done`` resolves when the write ran (or
    failed, or was skipped); ``released`` is set once the answer is out (None: released from the
    start); ``registered_at`` is ``time.monotonic()`` (s).

    Attributes:
        deferred: session-starts that answered before the predictor's ranking, since start.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, list[tuple[Future[int], Future[None] | None, float]]] = {}
        self.deferred = 0

    def add(self, session_key: str, done: Future[int], released: Future[None] | None) -> None:
        """Register one record. A record left unreleased for :data:`RELEASE_FALLBACK_S` (the client
        went away before the hook's background task ran, an in-process caller forgot) is released
        here."""
        now = time.monotonic()
        with self._lock:
            stale = [r[1] for v in self._records.values() for r in v if now - r[2] > RELEASE_FALLBACK_S]
            self._records.setdefault(session_key, []).append((done, released, now))
            self.deferred += 1
        for r in stale:
            release(r)

    def forget(self, session_key: str, done: Future[int]) -> None:
        """Drop the record whose future is ``done`` (it has finished)."""
        with self._lock:
            pending = self._records.get(session_key)
            if pending is not None:
                pending[:] = [r for r in pending if r[0] is not done]
                if not pending:
                    del self._records[session_key]

    def pending(self) -> int:
        """Records not finished yet."""
        with self._lock:
            return sum(len(v) for v in self._records.values())

    def wait(self, session_key: str | None, timeout_s: float = 30.0) -> bool:
        """Release, then wait for, the records of ``session_key`` (None: of every session), at most
        ``timeout_s`` seconds in all; True when none is pending any more. A failed record is not
        raised (its writer logs it)."""
        with self._lock:
            recs = [r for k, v in self._records.items() if session_key is None or k == session_key for r in v]
        for _, released, _ in recs:
            release(released)
        deadline = time.monotonic() + timeout_s
        for f, _, _ in recs:
            try:
                f.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                return False
            except Exception:  # logged by the writer
                pass
        return True
