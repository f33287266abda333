"""Session-starts answered before their transaction commits (write-behind).

The session-start hook's answer (the inject text) does not depend on the start's record of
its candidate pool, only on the pool and the scores. The HTTP hook therefore queues that
record and answers at once (``SessionService.start(..., hold_write=True)``: the record is
queued on the writer once the response is sent, below), which takes the write off the
answer (docs/sessions.md, "Write-behind session-start", has the measurement).

What keeps this correct:

* **One start per key.** A start claims its key here before it looks the session up; a second
  start for the same key waits for the first one's commit and then finds the session started
  ("existing"), as it would have found it in the database.
* **Later requests see the record.** Prompt-submit, feedback, session-end and the session
  inspection API wait for a claimed key's commit before they read (:meth:`wait`), so a prompt
  sent right after the answer still knows what the start injected. Write jobs are FIFO on the
  one writer, so theirs commit after it in any case.
* **Held until the answer is out.** The transaction is not even queued until the caller
  calls ``result.commit()`` after sending its response (a background task): on two cores, a
  transaction that runs while the response is written competes with it. Whatever touches the
  key first queues it instead (:meth:`flush`): a second start, a prompt, feedback,
  session-end, the inspection API, and shutdown (:meth:`wait_all`). A response that is never sent therefore delays the record only until
  the session's next request or the daemon's stop.
* **A failed commit is logged, never silent.** The answer is already out; the session is then
  unknown to the store (its prompts and end create it implicitly, as for a session whose start
  the daemon never saw) and the claim is dropped. Nothing a user or agent stored is at stake:
  the record is derived (the pool, its ranks and signals).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

log = logging.getLogger(__name__)

#: How long a request waits for a claimed key's commit before it goes on without it, s.
WAIT_TIMEOUT_S = 30.0


class InflightStarts:
    """The session keys whose start is being built or committed, each with a future that
    resolves to True when its session row committed (False: not recorded). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[str, Future[bool]] = {}
        self._held: dict[str, Callable[[], None]] = {}  # claimed keys whose write is not queued yet

    def hold(self, key: str, submit: Callable[[], None]) -> None:
        """Keep a claimed key's write for later: ``submit`` queues the start's transaction (its
        done-callback settles the key). It runs once, from :meth:`flush`, whoever calls first."""
        with self._lock:
            self._held[key] = submit

    def flush(self, key: str) -> None:
        """Queue ``key``'s held write now, if it is still held (idempotent, thread-safe). A
        failure to queue (the database is closed) is logged and settles the key."""
        with self._lock:
            submit = self._held.pop(key, None)
        if submit is None:
            return
        try:
            submit()
        except Exception as exc:
            log.error("session %r: its start was answered but could not be recorded: %s", key[:80], exc)
            self.settle(key, False)

    def claim(self, key: str) -> Future[bool] | None:
        """Claim ``key`` for a start; None when claimed (the caller must :meth:`settle` it),
        otherwise the future of the start that holds it (wait for it, then claim again)."""
        with self._lock:
            held = self._claims.get(key)
            if held is not None:
                return held
            self._claims[key] = Future()
            return None

    def acquire(self, key: str, timeout_s: float = WAIT_TIMEOUT_S) -> bool:
        """Claim ``key``, first waiting for any start that holds it to settle; False when it is
        still held after ``timeout_s``. A True caller must :meth:`settle` the key."""
        deadline = time.monotonic() + timeout_s
        while (held := self.claim(key)) is not None:
            self.flush(key)
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                held.result(timeout=left)
            except TimeoutError:
                pass
        return True

    def settle(self, key: str, recorded: bool) -> None:
        """Release ``key``: its start committed (``recorded``) or will not. Idempotent."""
        with self._lock:
            fut = self._claims.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(recorded)

    def settle_after(self, key: str, committed: Future[bool] | None, fut: Future[bool]) -> None:
        """Done-callback of a write-behind start's transaction ``fut`` (True: the session row was
        inserted): release ``key`` and resolve ``committed`` (the predictor's record waits on it).
        A failure is logged as an error: the answer is out, the record is not."""
        try:
            won = bool(fut.result())
        except Exception as exc:
            log.error("session %r: its start was answered but not recorded: %s", key[:80], exc)
            won = False
        else:
            if not won:
                log.warning("session %r: already started elsewhere; this start's record was not kept", key[:80])
        if committed is not None:
            committed.set_result(won)
        self.settle(key, won)

    def wait(self, key: str, timeout_s: float = WAIT_TIMEOUT_S) -> bool | None:
        """Wait for ``key``'s start to commit, if one is in flight.

        Returns:
            None when nothing was in flight; else whether the start was recorded (False also
            when ``timeout_s`` passed first, logged).
        """
        self.flush(key)
        with self._lock:
            fut = self._claims.get(key)
        if fut is None:
            return None
        try:
            return fut.result(timeout=timeout_s)
        except TimeoutError:
            log.warning("session %r: its start did not commit within %.0f s", key[:80], timeout_s)
            return False

    def wait_all(self, timeout_s: float = WAIT_TIMEOUT_S) -> None:
        """Queue every held write, then wait for every start in flight (shutdown, tests)."""
        with self._lock:
            held = list(self._held)
        for key in held:
            self.flush(key)
        with self._lock:
            futs = list(self._claims.values())
        for fut in futs:
            try:
                fut.result(timeout=timeout_s)
            except TimeoutError:
                log.warning("a session-start did not commit within %.0f s", timeout_s)

    def __len__(self) -> int:
        with self._lock:
            return len(self._claims)
