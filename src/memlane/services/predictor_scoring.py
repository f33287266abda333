"""Score requests to the predictor sidecar: send, wait within the deadline, check the reply.

predictive-memory-scorer.md "Daemon Communication Protocol" (``score``) and Phase 3's fail-open
rule: a reply later than ``scoreTimeoutMs`` (120 ms), a crash or a malformed reply means the
baseline ranking for that request, counted and recorded, never an error to the caller.

The session-start sends its request from its own thread and waits for the reply on that same
thread (:meth:`ScoreChannel.send` -> :class:`PendingScore`): the client's reader thread resolves
the reply's future directly, with no worker thread in between.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from memlane.predictor.settings import PredictorSettings
from memlane.services.predictor_types import ScoreResult

#: Score request durations kept for ``status()["score_latency_ms"]``.
SCORE_LATENCY_WINDOW = 500


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


class ScoreChannel:
    """Score requests over one backend, with their counters.

    Args:
        backend: the sidecar client, or None (the predictor is off: every request fails open).
        timeout_ms: ``scoreTimeoutMs``, from the moment a request is sent, ms.

    Attributes:
        scored / errors: requests answered with valid scores / failed (baseline served).
        latency_ms: round trips of the last :data:`SCORE_LATENCY_WINDOW` answered requests as
            the daemon saw them (JSON and pipes included), ms.
    """

    def __init__(self, backend: PredictorBackend | None, timeout_ms: float) -> None:
        self.backend = backend
        self.timeout_s = timeout_ms / 1000.0
        self.scored = 0
        self.errors = 0
        self.latency_ms: deque[float] = deque(maxlen=SCORE_LATENCY_WINDOW)
        self._lock = threading.Lock()

    def send(self, request: dict[str, Any]) -> PendingScore:
        """Send ``request`` (``score`` params with ``candidate_ids``) now; never raises."""
        return PendingScore(self, request)

    def score(self, request: dict[str, Any]) -> ScoreResult:
        """Send ``request`` and wait for its result on this thread."""
        return PendingScore(self, request).result()

    def checked(self, baseline: list[str], reply: Any, took_ms: float) -> ScoreResult:
        """A ``score`` reply checked and ranked (stable: equal scores keep the baseline order).

        Args:
            baseline: the candidate ids, in baseline order.
            reply: the sidecar's result object.
            took_ms: the round trip, ms.

        Raises:
            ValueError / KeyError / TypeError: the reply does not score exactly the candidates
                with finite numbers.
        """
        scores = {s["id"]: float(s["score"]) for s in reply["scores"]}
        if set(scores) != set(baseline) or not all(math.isfinite(v) for v in scores.values()):
            raise ValueError("reply does not score exactly the candidates with finite numbers")
        with self._lock:
            self.scored += 1
            self.latency_ms.append(took_ms)
        ranked = sorted(baseline, key=lambda m: -scores[m])
        return ScoreResult(scores, {m: i + 1 for i, m in enumerate(ranked)}, ranked, took_ms=took_ms)

    def failed(self, exc: BaseException, took_ms: float) -> ScoreResult:
        """Count a failed request; its result carries ``"<ExceptionType>: <message>"``."""
        with self._lock:
            self.errors += 1
        return ScoreResult({}, {}, [], error=f"{type(exc).__name__}: {exc}", took_ms=took_ms)


class PendingScore:
    """One ``score`` request in flight, sent on construction.

    Args:
        channel: the channel (backend, deadline, counters).
        request: the ``score`` params (``RankDecision.request``).
    """

    def __init__(self, channel: ScoreChannel, request: dict[str, Any]) -> None:
        self._channel = channel
        self._request = request
        self._t0 = time.perf_counter()
        self._error: BaseException | None = None
        self._sent: tuple[int, Future[Any]] | None = None
        self._replied: float | None = None  # perf_counter() when the reply arrived
        try:
            if channel.backend is None:
                raise RuntimeError("predictor off")
            self._sent = channel.backend.send("score", request)
            self._sent[1].add_done_callback(self._stamp)
        except Exception as exc:  # PredictorUnavailable (disabled, starting), bad JSON
            self._error = exc

    def _stamp(self, _: Future[Any]) -> None:  # on the reader thread: the round trip ends here
        self._replied = time.perf_counter()

    def result(self) -> ScoreResult:
        """Wait for the reply, at most until ``timeout_ms`` after sending; call once.

        Returns:
            the scores and ranks, or a :class:`ScoreResult` with ``error`` (timeout, crash,
            malformed reply): the caller serves the baseline.
        """
        ch = self._channel
        try:
            if self._error is not None:
                raise self._error
            assert self._sent is not None and ch.backend is not None
            left = ch.timeout_s - (time.perf_counter() - self._t0)
            reply = ch.backend.wait(*self._sent, "score", timeout_s=left)
            took = ((self._replied or time.perf_counter()) - self._t0) * 1000
            return ch.checked(self._request["candidate_ids"], reply, took)
        except Exception as exc:  # PredictorUnavailable, PredictorRpcError, a malformed reply
            return ch.failed(exc, (time.perf_counter() - self._t0) * 1000)


def sidecar_for(settings: PredictorSettings, *, db_path: Path, home: Path, embedding_model_id: str,
                native_dim: int) -> Any:
    """Build the :class:`SidecarClient` for the daemon's data directory."""
    from memlane.predictor.client import SidecarClient, sidecar_command

    argv = sidecar_command(db_path=db_path, model_dir=home / "predictor", embedding_model_id=embedding_model_id,
                           native_dim=native_dim, base_weights=settings.base_weights, threads=settings.threads)
    return SidecarClient(argv, crash_threshold=settings.crash_disable_threshold,
                         stderr_path=home / "logs" / "predictor.log")
