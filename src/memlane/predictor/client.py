"""The daemon's side of the sidecar: spawn, JSON-RPC calls with deadlines, restarts, fail-open.

predictive-memory-scorer.md "Daemon Communication Protocol" and Phase 5 (scoreTimeoutMs,
crashDisableThreshold). Every failure - not started yet, a reply later than the deadline,
a crash (EOF on stdout), a malformed reply - raises :class:`PredictorUnavailable` at once so
the caller serves the baseline ranking; the error is recorded (an unparseable reply line is
recorded at once; the request it belonged to fails at its deadline). A crashed sidecar is started
again on the next call; ``crash_threshold`` crashes within an hour disable it until a
cool-down has passed.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from memlane.config import predictor as C
from memlane.fileperms import open_private, private_dir
from memlane.predictor.errors import PredictorError

__all__ = ["PredictorRpcError", "PredictorUnavailable", "SidecarClient", "sidecar_command"]

log = logging.getLogger(__name__)


class PredictorUnavailable(PredictorError):
    """No usable answer (not ready, timeout, crash, malformed reply, disabled): use the baseline.

    A failure put on a reply's future names its kind in ``details["kind"]``: ``"crash"`` (the
    sidecar exited or was closed) or ``"malformed"`` (a reply with neither result nor error).
    """

    code = "predictor_unavailable"


class PredictorRpcError(PredictorError):
    """The sidecar answered with a JSON-RPC error object (``details`` has code and message)."""

    code = "predictor_rpc_error"


def sidecar_command(
    *,
    db_path: str | Path,
    model_dir: str | Path,
    embedding_model_id: str,
    native_dim: int,
    base_weights: str = "",
    threads: int = 1,
) -> list[str]:
    """argv of ``memlane predictor serve`` run by this interpreter."""
    argv = [
        sys.executable,
        "-m",
        "memlane",
        "predictor",
        "serve",
        "--db",
        str(db_path),
        "--model-dir",
        str(model_dir),
        "--embedding-model",
        embedding_model_id,
        "--native-dim",
        str(native_dim),
        "--threads",
        str(threads),
    ]
    if base_weights:
        argv += ["--base-weights", base_weights]
    return argv


class SidecarClient:
    """A JSON-RPC 2.0 client over a child process's stdin/stdout.

    Args:
        argv: the sidecar command (:func:`sidecar_command`).
        crash_threshold: crashes within ``crash_window_s`` that disable the sidecar.
        crash_window_s: crash counting window (s).
        cooldown_s: how long the sidecar stays disabled (s).
        stderr_path: file receiving the sidecar's stderr (appended), or None (discarded).
        clock: monotonic clock in seconds (tests may pass their own).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        crash_threshold: int = 3,
        crash_window_s: float = C.CRASH_WINDOW_S,
        cooldown_s: float = C.CRASH_COOLDOWN_S,
        stderr_path: str | Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        env: dict[str, str] | None = None,
        listeners: Sequence[Callable[[str, str], None]] = (),
    ) -> None:
        self.argv = list(argv)
        self.crash_threshold = crash_threshold
        self.crash_window_s = crash_window_s
        self.cooldown_s = cooldown_s
        self.stderr_path = Path(stderr_path) if stderr_path else None
        self.clock = clock
        self.env = env
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[str] | None = None
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self._ready = threading.Event()
        self._outq: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._closing = False
        # Processes stopped on purpose (:meth:`stop`): their exit is not a crash.
        self._stopped: set[subprocess.Popen[str]] = set()
        self.crashes: deque[float] = deque()
        self.disabled_until: float | None = None
        self.restarts = 0
        self.ready_status: dict[str, Any] | None = None
        self.errors: deque[dict[str, Any]] = deque(maxlen=50)
        self.error_counts: Counter[str] = Counter()
        #: called as ``fn(kind, message)`` for every recorded error (the daemon's error ring,
        #: memlane.observability); a listener that raises is logged and skipped.
        self.listeners: list[Callable[[str, str], None]] = list(listeners)

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def disabled(self) -> bool:
        """True while crash-disabled; re-enables (and forgets old crashes) after the cool-down."""
        with self._lock:
            if self.disabled_until is None:
                return False
            if self.clock() >= self.disabled_until:
                self.disabled_until = None
                self.crashes.clear()
                return False
            return True

    @property
    def alive(self) -> bool:
        """The child process is running."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def ready(self) -> bool:
        """Running and past its start-up handshake (it answers requests)."""
        return self.alive and self._ready.is_set()

    def crashes_last_window(self) -> int:
        """Crashes within the last ``crash_window_s`` seconds (3 within an hour disable it)."""
        now = self.clock()
        return sum(1 for t in self.crashes if now - t <= self.crash_window_s)

    def start(self) -> None:
        """Spawn the sidecar unless it runs or is disabled (returns at once; readiness is async)."""
        with self._lock:
            if self._closing or self.alive or self.disabled:
                return
            if self._proc is not None:
                self.restarts += 1
            self._ready.clear()
            err: IO[Any] | int = subprocess.DEVNULL
            if self.stderr_path is not None:
                private_dir(self.stderr_path.parent)  # the home's logs/: 0700, the log 0600
                err = open_private(self.stderr_path, "a")  # handed to the child
            env = {**os.environ, **(self.env or {}), "PYTHONUNBUFFERED": "1"}
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    encoding="utf-8",
                    bufsize=1,
                    env=env,
                )
            except OSError as exc:
                self._record("spawn", str(exc))
                self._crash()
                return
            finally:
                if err is not subprocess.DEVNULL:
                    err.close()  # type: ignore[union-attr]
            threading.Thread(target=self._read_loop, args=(self._proc,), name="predictor-reader", daemon=True).start()
            # Requests are written by their own thread, so a sidecar that stops reading (hung,
            # paused, busy) can fill the pipe without blocking a caller past its deadline.
            self._outq = queue.SimpleQueue()
            threading.Thread(
                target=self._write_loop, args=(self._proc, self._outq), name="predictor-writer", daemon=True
            ).start()

    def wait_ready(self, timeout_s: float = C.START_TIMEOUT_S) -> bool:
        """Block until the sidecar announced readiness (start-up, benchmarks, tests)."""
        self.start()
        return self._ready.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Close stdin (the sidecar exits after its current request) and reap it."""
        with self._lock:
            self._closing = True
            proc = self._proc
        if proc is None:
            return
        try:
            self._outq.put(None)
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=5)
        self._fail_pending(PredictorUnavailable("predictor sidecar closed", details={"kind": "crash"}))

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop the sidecar on purpose: close its stdin (it exits after its current request)
        and reap it; SIGKILL after ``timeout_s`` seconds. Not a crash, and not final: a later
        :meth:`start` (or :meth:`send`) spawns it again. Requests in flight fail with
        :class:`PredictorUnavailable` (kind ``crash``: the process went away under them).

        Returns:
            True when a running process was stopped.
        """
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return False
            self._stopped.add(proc)
            self._proc = None
            self._ready.clear()
            outq = self._outq
        try:
            outq.put(None)
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=5)
        self._fail_pending(PredictorUnavailable("predictor sidecar stopped", details={"kind": "crash"}))
        return True

    def kill(self) -> None:
        """SIGKILL the sidecar (tests and the cool-down path); counts as a crash when noticed."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    # -- calls --------------------------------------------------------------------------
    def call(self, method: str, params: Any = None, *, timeout_s: float) -> Any:
        """Send one request and wait for its result (:meth:`send`, then :meth:`wait`).

        Raises:
            PredictorUnavailable: disabled, not ready, deadline passed, crash or malformed reply.
            PredictorRpcError: the sidecar returned a JSON-RPC error.
        """
        rid, fut = self.send(method, params)
        return self.wait(rid, fut, method, timeout_s=timeout_s)

    def send(self, method: str, params: Any = None) -> tuple[int, Future[Any]]:
        """Queue one request for the sidecar without waiting.

        Returns:
            (request id, future of its result), the future resolved by the reader thread; the
            caller waits with :meth:`wait`, on its own thread (no worker hop in between).

        Raises:
            PredictorUnavailable: disabled or not ready (the sidecar is started if not alive).
            TypeError: ``params`` hold a value JSON cannot encode.
        """
        if self.disabled:
            raise PredictorUnavailable(
                "predictor disabled after repeated crashes", details={"crashes": self.crashes_last_window()}
            )
        if not self.alive:
            self.start()
        if not self._ready.is_set():
            self._record("not_ready", f"{method}: sidecar starting")
            raise PredictorUnavailable("predictor sidecar is starting")
        rid = next(self._ids)
        fut: Future[Any] = Future()
        # orjson: faster than the stdlib on the session-start path (docs/decisions.md,
        # "Serialisation"). It writes a non-finite number as null (the sidecar then reads
        # an optional signal as missing and refuses a required one with INVALID_PARAMS).
        line = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}).decode()
        with self._lock:
            self._pending[rid] = fut
            self._outq.put(line + "\n")
        return rid, fut

    def wait(self, rid: int, fut: Future[Any], method: str, *, timeout_s: float) -> Any:
        """Wait up to ``timeout_s`` for the result of request ``rid`` sent by :meth:`send`.

        Raises:
            PredictorUnavailable: the deadline passed (recorded; a late reply is dropped), a
                crash or a malformed reply.
            PredictorRpcError: the sidecar returned a JSON-RPC error.
        """
        try:
            return fut.result(timeout=max(0.0, timeout_s))
        except FutureTimeout:
            self._pending.pop(rid, None)
            self._record("timeout", f"{method}: no reply within {timeout_s * 1000:.0f} ms")
            raise PredictorUnavailable(f"predictor {method} timed out after {timeout_s * 1000:.0f} ms") from None

    # -- internals ------------------------------------------------------------------------
    def _write_loop(self, proc: subprocess.Popen[str], q: queue.SimpleQueue[str | None]) -> None:
        while True:
            line = q.get()
            if line is None:
                return
            try:
                assert proc.stdin is not None
                proc.stdin.write(line)
                proc.stdin.flush()
            except (OSError, ValueError, AssertionError) as exc:
                self._record("write", str(exc))
                return  # the reader notices the exit; pending calls fail or time out

    def _read_loop(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = orjson.loads(line)
            except ValueError:
                self._record("malformed", f"unparseable reply: {line[:200]!r}")
                continue
            if not isinstance(msg, dict):
                self._record("malformed", f"reply is not an object: {line[:200]!r}")
                continue
            if msg.get("method") == "ready":
                self.ready_status = msg.get("params") if isinstance(msg.get("params"), dict) else {}
                self._ready.set()
                continue
            msg_id = msg.get("id")
            fut = self._pending.pop(msg_id, None) if isinstance(msg_id, int) else None
            if fut is None:
                if msg.get("id") is None and "error" in msg:
                    self._record("rpc_error", str(msg.get("error"))[:300])
                continue  # a late reply to a request that already timed out
            if isinstance(msg.get("error"), dict):
                err = msg["error"]
                self._record("rpc_error", str(err.get("message"))[:300])
                fut.set_exception(PredictorRpcError(str(err.get("message")), details={"code": err.get("code")}))
            elif "result" in msg:
                fut.set_result(msg["result"])
            else:
                self._record("malformed", "reply without result or error")
                fut.set_exception(PredictorUnavailable("malformed predictor reply", details={"kind": "malformed"}))
        proc.wait()
        with self._lock:
            stopped = proc in self._stopped
            self._stopped.discard(proc)
        if not self._closing and not stopped:
            self._record("crash", f"sidecar exited with code {proc.returncode}")
            self._crash()
        if self._proc is not proc:  # a restarted sidecar already took over: leave its state alone
            return
        self._ready.clear()
        self._fail_pending(PredictorUnavailable("predictor sidecar exited", details={"kind": "crash"}))

    def _fail_pending(self, exc: Exception) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    def _crash(self) -> None:
        with self._lock:
            now = self.clock()
            self.crashes.append(now)
            while self.crashes and now - self.crashes[0] > self.crash_window_s:
                self.crashes.popleft()
            if len(self.crashes) >= self.crash_threshold and self.disabled_until is None:
                self.disabled_until = now + self.cooldown_s
                log.error(
                    "predictor disabled for %.0f s after %d crashes within %.0f s",
                    self.cooldown_s,
                    len(self.crashes),
                    self.crash_window_s,
                )

    def _record(self, kind: str, message: str) -> None:
        self.error_counts[kind] += 1
        self.errors.append({"at": datetime.now(UTC).isoformat(), "kind": kind, "message": message})
        log.warning("predictor %s: %s", kind, message)
        for fn in list(self.listeners):
            try:
                fn(kind, message)
            except Exception:  # an observer never breaks the client
                log.exception("predictor error listener failed")

    def status(self) -> dict[str, Any]:
        """Process and error state for /api/predictor/status."""
        return {
            "alive": self.alive,
            "ready": self.ready,
            "disabled": self.disabled,
            "crashes_last_hour": self.crashes_last_window(),
            "restarts": self.restarts,
            "pid": self._proc.pid if self._proc is not None else None,
            "error_counts": dict(self.error_counts),
            "recent_errors": list(self.errors)[-10:],
        }
