"""The deferred predictor records (docs/predictor.md "Session-start without waiting for the
predictor"): which session-starts answered before their predictor ranking was recorded, the
chain that scores and records it once the start committed and its answer is out
(:meth:`DeferredRecords.record`, behind :meth:`PredictorService.record_later`), and waiting for
them at session-end and shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np

from memlane.services.predictor_types import RankDecision, ScoreResult
from memlane.storage import predictor as pred_sql
from memlane.storage.db import Database

log = logging.getLogger(__name__)

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

    def record(
        self,
        session_key: str,
        decision: RankDecision,
        committed: Future[bool],
        *,
        db: Database,
        score_async: Callable[[RankDecision], Future[ScoreResult] | None],
        context_vector: np.ndarray | None,
        context_model: str | None,
        released: Future[None] | None = None,
    ) -> Future[int]:
        """Register ``session_key``'s record and chain its writing (the contract is
        :meth:`PredictorService.record_later`'s): once ``committed`` is True and ``released``
        is done, ``score_async(decision)`` sends the score request, and one write on ``db``
        records the session's context vector and signals (``predictor_error`` added on a failed
        score) and every candidate's features, scores and ranks
        (:func:`memlane.storage.predictor.record_predictor`). ``committed`` False or failed
        records nothing.

        Returns:
            a future of the number of candidate rows updated (it raises what the write raised).
        """
        done: Future[int] = Future()
        self.add(session_key, done, released)
        signals = dict(decision.signals)
        features = decision.features
        fired = threading.Lock()

        def forget() -> None:
            self.forget(session_key, done)

        def fail(exc: BaseException) -> None:
            log.warning("recording the predictor ranking of %s failed: %s", session_key, exc)
            if not done.done():
                done.set_exception(exc)
            forget()

        def written(f: Future[Any]) -> None:
            if f.exception() is not None:
                return fail(f.exception())  # type: ignore[arg-type]
            done.set_result(int(f.result()))
            forget()

        def scored(f: Future[ScoreResult]) -> None:
            try:
                result = f.result()
                sig = signals if result.error is None else {**signals, "predictor_error": result.error[:300]}
                wf = db.submit(
                    lambda conn: pred_sql.record_predictor(
                        conn,
                        session_key,
                        features=features,
                        scores=result.scores,
                        ranks=result.rank,
                        context_vector=context_vector,
                        context_model=context_model,
                        signals=sig,
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - e.g. the database is closed
                return fail(exc)
            wf.add_done_callback(written)

        def ready(_: Future[Any]) -> None:  # runs its body once: committed and released are known
            if not committed.done() or (released is not None and not released.done()):
                return
            if not fired.acquire(blocking=False):
                return
            try:
                if committed.exception() is not None or not committed.result():
                    done.set_result(0)  # the start recorded nothing: neither does this
                    forget()
                    return
                pending = score_async(decision)
                assert pending is not None, "record_later needs a decision with a request"
            except BaseException as exc:  # noqa: BLE001 - e.g. the executor is shut down
                return fail(exc)
            pending.add_done_callback(scored)

        committed.add_done_callback(ready)
        if released is not None:
            released.add_done_callback(ready)
        return done

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
