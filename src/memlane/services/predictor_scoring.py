"""Score requests to the predictor sidecar: send, wait within the deadline, check the reply.

predictive-memory-scorer.md "Daemon Communication Protocol" (``score``) and Phase 3's fail-open
rule: a reply later than ``scoreTimeoutMs`` (120 ms), a crash or a malformed reply means the
baseline ranking for that request, counted and recorded, never an error to the caller.

The session-start sends its request from its own thread and waits for the reply on that same
thread (:meth:`ScoreChannel.send` -> :class:`PendingScore`): the client's reader thread resolves
the reply's future directly, with no worker thread in between.

The deadline is read from the live setting when each request is sent (the channel is given a
callable, not a number), so a changed ``scoreTimeoutMs`` applies to the next request. Every
failure is counted by kind (:data:`ERROR_KINDS`) and the last ones are kept with the deadline
that applied, so a timeout can be told from a crash after the fact.

:class:`SidecarLifecycle` decides when the sidecar process runs: while there is a model to
serve, during a training run, never while the predictor is disabled. Before a user has a
model, the channel answers from the untrained model's formula in this process
(:mod:`memlane.predictor.prior`: the same scores, without loading PyTorch).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from memlane.config import predictor as C
from memlane.config.predictor import PredictorSettings
from memlane.predictor.client import PredictorRpcError
from memlane.predictor.prior import untrained_reply
from memlane.services.predictor_types import ScoreResult

#: Score request durations kept for ``status()["score_latency_ms"]``.
SCORE_LATENCY_WINDOW = 500
#: Failed score requests kept (newest last) for ``status()["score_recent_errors"]``.
SCORE_ERROR_WINDOW = 20

#: Why a score request failed (the baseline was served):
#:
#: * ``timeout``: no reply within the deadline (``scoreTimeoutMs`` from the moment it was sent);
#: * ``crash``: the sidecar exited (or was closed) with the request in flight;
#: * ``rpc_error``: the sidecar answered with a JSON-RPC error object;
#: * ``malformed``: a reply with neither result nor error, or one that does not score exactly
#:   the candidates with finite numbers;
#: * ``unavailable``: never sent: predictor off, disabled after repeated crashes, still
#:   starting, or params JSON cannot encode.
ERROR_KINDS = ("timeout", "crash", "rpc_error", "malformed", "unavailable")


class PredictorBackend(Protocol):
    """What the service needs from a sidecar client (:class:`memlane.predictor.client.SidecarClient`)."""

    def start(self) -> None: ...
    def call(self, method: str, params: Any = None, *, timeout_s: float) -> Any: ...
    def send(self, method: str, params: Any = None) -> tuple[int, Future[Any]]: ...
    def wait(self, rid: int, fut: Future[Any], method: str, *, timeout_s: float) -> Any: ...
    def status(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    @property
    def disabled(self) -> bool: ...


class SidecarLifecycle:
    """When the daemon's predictor sidecar runs (a daemon that is light to keep running: docs/architecture.md, "Footprint").

    The sidecar holds PyTorch and the model (~250-400 MiB resident). It runs while

    * the predictor is enabled (``predictor.enabled``, read at each check: turning it off
      stops the process), and
    * there is a model to serve (``model_available()``: a ``model.bin`` in the model
      directory or Phase 6 base weights), or a training run is in progress (:meth:`training`).

    Otherwise it is *dormant*: not spawned at start-up on a store without a model, and stopped
    after a training run that started it and left no model. A dormant sidecar's scores are the untrained
    model's, computed in the daemon (:func:`memlane.predictor.prior.untrained_reply`), so a
    session-start records the same predictor ranking either way. A sidecar that crashed while
    wanted is restarted by the next request, as before (the client's crash rules apply).

    Args:
        backend: the sidecar client (``start``, ``stop``, ``wait_ready``, ``alive``).
        model_available: whether a model exists to serve (cheap: called on every request).
        enabled: whether the predictor is enabled now.
        start_timeout_s: how long a training run waits for the sidecar to be ready (s).
    """

    def __init__(
        self,
        backend: Any,
        *,
        model_available: Callable[[], bool],
        enabled: Callable[[], bool],
        start_timeout_s: float = C.START_TIMEOUT_S,
    ) -> None:
        self.backend = backend
        self.model_available = model_available
        self.enabled = enabled
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._training = 0
        #: times the lifecycle stopped a running sidecar (no model left, or disabled).
        self.stops = 0

    def wanted(self) -> bool:
        """The sidecar should run now (enabled, and a model to serve or a training run)."""
        if not self.enabled():
            return False
        with self._lock:
            if self._training:
                return True
        return bool(self.model_available())

    def dormant(self) -> bool:
        """Enabled, the sidecar not running and not wanted: score with the untrained model here."""
        return self.enabled() and not self.backend.alive and not self.wanted()

    def sync(self) -> None:
        """Start the sidecar when it is wanted and not running; stop it when the predictor is
        disabled.

        Returns at once when starting (readiness is asynchronous); stopping waits for the
        process to exit (it finishes its current request first).
        """
        if self.wanted():
            if not self.backend.alive:
                self.backend.start()
        elif not self.enabled():
            self._stop()

    def _stop(self) -> None:
        if self.backend.alive and self.backend.stop():
            self.stops += 1

    @contextmanager
    def training(self) -> Iterator[bool]:
        """Hold the sidecar up for one training run; yields whether it is ready.

        The sidecar is started (if needed) and waited for, up to ``start_timeout_s``; when the
        block ends, a sidecar this run started is stopped again unless there is now a model to
        serve (or another run); one that was running before is left running.
        """
        with self._lock:
            self._training += 1
        started_here = False
        try:
            ready = False
            if self.enabled():
                started_here = not self.backend.alive
                self.backend.start()
                ready = bool(self.backend.wait_ready(self.start_timeout_s))
            yield ready
        finally:
            with self._lock:
                self._training -= 1
            if (started_here and not self.wanted()) or not self.enabled():
                self._stop()

    def status(self) -> dict[str, Any]:
        """``{"state": "running" | "dormant" | "starting" | "stopped", "wanted", "model_available",
        "training", "stops"}``: ``dormant`` = no model yet (the untrained model is computed in
        the daemon), ``stopped`` = the predictor is disabled."""
        alive = bool(self.backend.alive)
        wanted = self.wanted()
        ready = bool(getattr(self.backend, "ready", alive))
        state = (
            ("running" if ready else "starting")
            if alive
            else ("stopped" if not self.enabled() else "starting" if wanted else "dormant")
        )
        with self._lock:
            training = self._training > 0
        return {
            "state": state,
            "wanted": wanted,
            "model_available": bool(self.model_available()),
            "training": training,
            "stops": self.stops,
        }


class ScoreChannel:
    """Score requests over one backend, with their counters.

    Args:
        backend: the sidecar client, or None (the predictor is off: every request fails open).
        lifecycle: when the sidecar runs (:class:`SidecarLifecycle`); None: it always may.
        timeout_ms: ``scoreTimeoutMs``, ms, counted from the moment a request is sent: a number,
            or a callable returning the current value, read once per request when it is sent
            (the service passes ``lambda: settings.score_timeout_ms``, so a changed setting
            applies to the next request). A value that is not a finite number > 0 means 0 ms:
            every request then fails open with a timeout unless its reply is already there.

    Attributes:
        scored / errors: requests answered with valid scores / failed (baseline served).
        error_kinds: failed requests by kind (:data:`ERROR_KINDS`); they sum to ``errors``.
        recent_errors: the last :data:`SCORE_ERROR_WINDOW` failures, oldest first, each
            ``{"at": ISO-8601 UTC, "kind", "error", "deadline_ms", "took_ms"}`` (ms).
        latency_ms: round trips of the last :data:`SCORE_LATENCY_WINDOW` answered requests as
            the daemon saw them (JSON and pipes included), ms.
    """

    def __init__(
        self,
        backend: PredictorBackend | None,
        timeout_ms: float | Callable[[], float],
        lifecycle: SidecarLifecycle | None = None,
        *,
        listeners: Sequence[Callable[[float, str | None], None]] = (),
    ) -> None:
        self.backend = backend
        self._timeout_ms = timeout_ms
        #: when set and :meth:`SidecarLifecycle.dormant`, requests are answered by the
        #: untrained model in this process (not sent, no latency recorded).
        self.lifecycle = lifecycle
        self.scored = 0
        #: of ``scored``, the requests the untrained model answered here (dormant sidecar).
        self.scored_untrained = 0
        self.errors = 0
        self.error_kinds: Counter[str] = Counter()
        self.recent_errors: deque[dict[str, Any]] = deque(maxlen=SCORE_ERROR_WINDOW)
        self.latency_ms: deque[float] = deque(maxlen=SCORE_LATENCY_WINDOW)
        self._lock = threading.Lock()
        #: called as ``fn(took_ms, error_kind)`` after every request (``error_kind`` None when it
        #: was answered): the daemon's latency histograms (memlane.observability).
        self.listeners: list[Callable[[float, str | None], None]] = list(listeners)

    def _notify(self, took_ms: float, kind: str | None) -> None:
        for fn in list(self.listeners):
            try:
                fn(took_ms, kind)
            except Exception:  # an observer never breaks scoring
                pass

    def deadline_ms(self) -> float:
        """The deadline a request sent now gets, ms (the live ``scoreTimeoutMs``; never raises:
        a value that is not a finite number > 0, or a callable that raises, gives 0)."""
        try:
            v = float(self._timeout_ms() if callable(self._timeout_ms) else self._timeout_ms)
        except Exception:  # a broken setting must not break the session-start: fail open
            return 0.0
        return v if math.isfinite(v) and v > 0 else 0.0

    def error_snapshot(self, last: int = SCORE_ERROR_WINDOW) -> tuple[dict[str, int], list[dict[str, Any]]]:
        """``(error_kinds, the last `last` recent_errors)``, copied together under the lock."""
        with self._lock:
            return dict(self.error_kinds), list(self.recent_errors)[-last:] if last > 0 else []

    def send(self, request: dict[str, Any]) -> PendingScore:
        """Send ``request`` (``score`` params with ``candidate_ids``) now; never raises."""
        return PendingScore(self, request)

    def score(self, request: dict[str, Any]) -> ScoreResult:
        """Send ``request`` and wait for its result on this thread."""
        return PendingScore(self, request).result()

    def checked(self, baseline: list[str], reply: Any, took_ms: float, *, local: bool = False) -> ScoreResult:
        """A ``score`` reply checked and ranked (stable: equal scores keep the baseline order).

        Args:
            baseline: the candidate ids, in baseline order.
            reply: the sidecar's result object.
            took_ms: the round trip, ms.
            local: the untrained model answered in this process (counted in
                ``scored_untrained``; not a sidecar round trip, so no latency is recorded).

        Raises:
            ValueError / KeyError / TypeError: the reply does not score exactly the candidates
                with finite numbers.
        """
        scores = {s["id"]: float(s["score"]) for s in reply["scores"]}
        if set(scores) != set(baseline) or not all(math.isfinite(v) for v in scores.values()):
            raise ValueError("reply does not score exactly the candidates with finite numbers")
        with self._lock:
            self.scored += 1
            if local:
                self.scored_untrained += 1
            else:
                self.latency_ms.append(took_ms)
        if not local:
            self._notify(took_ms, None)
        ranked = sorted(baseline, key=lambda m: -scores[m])
        return ScoreResult(scores, {m: i + 1 for i, m in enumerate(ranked)}, ranked, took_ms=took_ms)

    def failed(
        self, exc: BaseException, took_ms: float, kind: str = "unavailable", deadline_ms: float | None = None
    ) -> ScoreResult:
        """Count a failed request; its result carries ``"<ExceptionType>: <message>"``.

        Args:
            exc: what failed.
            took_ms: from sending to the failure, ms.
            kind: one of :data:`ERROR_KINDS` (counted in ``error_kinds``).
            deadline_ms: the deadline the request had, ms (None: it was never sent).
        """
        error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.errors += 1
            self.error_kinds[kind] += 1
            self.recent_errors.append(
                {
                    "at": datetime.now(UTC).isoformat(),
                    "kind": kind,
                    "error": error[:300],
                    "deadline_ms": deadline_ms,
                    "took_ms": round(took_ms, 3),
                }
            )
        self._notify(took_ms, kind)
        return ScoreResult({}, {}, [], error=error, took_ms=took_ms)


class PendingScore:
    """One ``score`` request in flight, sent on construction.

    Args:
        channel: the channel (backend, deadline, counters).
        request: the ``score`` params (``RankDecision.request``).

    Attributes:
        deadline_ms: the channel's deadline when the request was sent, ms (a later change of
            the setting does not move it).
    """

    def __init__(self, channel: ScoreChannel, request: dict[str, Any]) -> None:
        self._channel = channel
        self._request = request
        self.deadline_ms = channel.deadline_ms()
        self._t0 = time.perf_counter()
        self._error: BaseException | None = None
        self._sent: tuple[int, Future[Any]] | None = None
        self._dormant = False  # answered by the untrained model here (SidecarLifecycle.dormant)
        self._replied: float | None = None  # perf_counter() when the reply arrived
        try:
            if channel.backend is None:
                raise RuntimeError("predictor off")
            if channel.lifecycle is not None and channel.lifecycle.dormant():
                self._dormant = True
                return
            self._sent = channel.backend.send("score", request)
            self._sent[1].add_done_callback(self._stamp)
        except Exception as exc:  # PredictorUnavailable (disabled, starting), bad JSON
            self._error = exc

    def _stamp(self, _: Future[Any]) -> None:  # on the reader thread: the round trip ends here
        self._replied = time.perf_counter()

    def result(self) -> ScoreResult:
        """Wait for the reply, at most until ``deadline_ms`` after sending; call once.

        Never raises for predictor faults.

        Returns:
            the scores and ranks, or a :class:`ScoreResult` with ``error`` (timeout, crash,
            JSON-RPC error, malformed reply, never sent; counted by kind in the channel's
            ``error_kinds``): the caller serves the baseline.
        """
        ch = self._channel
        if self._error is not None:
            return ch.failed(self._error, (time.perf_counter() - self._t0) * 1000, "unavailable")
        if self._dormant:
            try:
                reply = untrained_reply(self._request)
                took = (time.perf_counter() - self._t0) * 1000
                return ch.checked(self._request["candidate_ids"], reply, took, local=True)
            except Exception as exc:  # a signal the feature builder would refuse too
                return ch.failed(exc, (time.perf_counter() - self._t0) * 1000, "malformed", self.deadline_ms)
        assert self._sent is not None and ch.backend is not None
        fut = self._sent[1]
        try:
            left = self.deadline_ms / 1000.0 - (time.perf_counter() - self._t0)
            reply = ch.backend.wait(*self._sent, "score", timeout_s=max(0.0, left))
        except Exception as exc:  # PredictorUnavailable, PredictorRpcError
            # The reply's own failure is the future's exception; anything else the wait raised
            # on its own: the deadline passed with no reply.
            from_reply = fut.done() and not fut.cancelled() and fut.exception(timeout=0) is exc
            kind = _reply_error_kind(exc) if from_reply else "timeout"
            return ch.failed(exc, (time.perf_counter() - self._t0) * 1000, kind, self.deadline_ms)
        took = ((self._replied or time.perf_counter()) - self._t0) * 1000
        try:
            return ch.checked(self._request["candidate_ids"], reply, took)
        except Exception as exc:  # not exactly the candidates with finite scores
            return ch.failed(exc, took, "malformed", self.deadline_ms)


def _reply_error_kind(exc: BaseException) -> str:
    """The :data:`ERROR_KINDS` entry of a failure the sidecar client put on the reply's future."""
    if isinstance(exc, PredictorRpcError):
        return "rpc_error"
    kind = (getattr(exc, "details", None) or {}).get("kind")  # SidecarClient names it
    return "malformed" if kind == "malformed" else "crash"


def sidecar_for(
    settings: PredictorSettings,
    *,
    db_path: Path,
    home: Path,
    embedding_model_id: str,
    native_dim: int,
    listeners: Sequence[Callable[[str, str], None]] = (),
) -> Any:
    """Build the :class:`SidecarClient` for the daemon's data directory; ``listeners`` are told
    of every error it records, as ``fn(kind, message)``."""
    from memlane.predictor.client import SidecarClient, sidecar_command

    argv = sidecar_command(
        db_path=db_path,
        model_dir=home / "predictor",
        embedding_model_id=embedding_model_id,
        native_dim=native_dim,
        base_weights=settings.base_weights,
        threads=settings.threads,
    )
    return SidecarClient(
        argv,
        crash_threshold=settings.crash_disable_threshold,
        stderr_path=home / "logs" / "predictor.log",
        listeners=listeners,
    )


def sidecar_lifecycle(backend: Any, settings: PredictorSettings, *, home: Path) -> SidecarLifecycle:
    """The daemon's :class:`SidecarLifecycle`: a model to serve is ``{home}/predictor/model.bin``
    (:data:`~memlane.config.predictor.CHECKPOINT_NAME`: what :func:`sidecar_for`'s sidecar
    loads and saves) or ``settings.base_weights``; enabled
    is ``settings.enabled``, read at each check (``POST /api/config`` may change it)."""
    model = home / "predictor" / C.CHECKPOINT_NAME
    return SidecarLifecycle(
        backend,
        model_available=lambda: bool(settings.base_weights) or model.is_file(),
        enabled=lambda: settings.enabled,
    )
