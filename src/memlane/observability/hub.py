"""The daemon's observability hub: latency histograms and the error ring of one container,
and the listeners that feed them from the predictor, the job workers and the HTTP path.

:func:`memlane.container.open_container` builds one :class:`Observability` per container
(``container.observability``) and passes its listeners to the predictor, the sidecar client and
every job worker as they are built. The HTTP path is timed by
:class:`memlane.api.observability_middleware.ObservabilityMiddleware`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memlane.errors import EmbeddingError, StorageError
from memlane.observability import logs
from memlane.observability.errors import ErrorRing
from memlane.observability.latency import LatencyBook

#: Sidecar error kinds (memlane.predictor.client) -> the seed's error codes.
PREDICTOR_CODES = {
    "timeout": "predictor_timeout",
    "crash": "predictor_crash",
    "spawn": "predictor_crash",
    "write": "predictor_crash",
    "malformed": "predictor_parse_error",
    "rpc_error": "predictor_rpc_error",
    "not_ready": "predictor_unavailable",
}
#: Training-log errors that are outcomes, not failures (the run had nothing to gain or learn from).
TRAIN_NON_FAILURES = ("no validation gain", "no labelled sessions")
#: Job types -> error-ring stage of their failures.
JOB_STAGES = {"extract": "extraction", "session_summary": "extraction", "document_ingest": "connector"}


class Observability:
    """Latency histograms (:class:`LatencyBook`), the error ring (:class:`ErrorRing`) and the
    process's log ring (:class:`memlane.observability.logs.LogRing`).

    Args:
        clock: wall-clock seconds for both (tests pass their own).
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.latency = LatencyBook(clock=clock)
        self.errors = ErrorRing(clock=clock)
        self.started = clock()
        #: the newest hook request seen (epoch s), for the connector domain.
        self.last_hook_at: float | None = None

    @property
    def logs(self) -> logs.LogRing:
        """The process's log ring, added to the ``memlane`` logger on the first read
        (:func:`memlane.observability.logs.install`; the HTTP app reads it when it is built, so
        a CLI run that opens a store but serves nothing keeps Python's default log output)."""
        return logs.install()

    # -- listeners ------------------------------------------------------------------------
    def on_sidecar_error(self, kind: str, message: str) -> None:
        """A sidecar client error (``SidecarClient.listeners``) -> the ring, stage predictor."""
        self.errors.add("predictor", PREDICTOR_CODES.get(kind, f"predictor_{kind}"), message, {"kind": kind})

    def on_score(self, took_ms: float, error_kind: str | None) -> None:
        """A score request's round trip (``ScoreChannel.listeners``) -> ``predictor_score``
        (answered requests only: a timeout's duration is the deadline, not the sidecar's)."""
        if error_kind is None:
            self.latency.observe("predictor_score", took_ms)

    def on_training(self, row: dict[str, Any], took_ms: float) -> None:
        """A retrain (``Retrainer.listeners``) -> ``predictor_train`` and, when it failed, the ring."""
        self.latency.observe("predictor_train", took_ms)
        error = row.get("error")
        if error and not str(error).startswith(TRAIN_NON_FAILURES):
            code = "predictor_checkpoint_error" if "checkpoint" in str(error).lower() else "predictor_train_failure"
            self.errors.add(
                "predictor",
                code,
                str(error),
                {"trigger": row.get("trigger"), "model_version": row.get("model_version")},
            )

    def on_job(self, job: Any, outcome: str, took_ms: float, error: BaseException | None) -> None:
        """A job attempt (``JobWorker.listeners``) -> ``jobs`` and, when it failed, the ring
        (stage from the job type, or ``embedding`` / ``storage`` by the exception)."""
        self.latency.observe("jobs", took_ms)
        if error is None:
            return
        if isinstance(error, EmbeddingError):
            stage = "embedding"
        elif isinstance(error, StorageError):
            stage = "storage"
        else:
            stage = JOB_STAGES.get(job.job_type, "jobs")
        self.errors.add(
            stage,
            f"job_{outcome}",
            f"{type(error).__name__}: {error}",
            {
                "job_id": job.id,
                "job_type": job.job_type,
                "attempts": job.attempts + 1,
                "memory_id": job.memory_id,
                "session_key": job.session_key,
            },
        )
