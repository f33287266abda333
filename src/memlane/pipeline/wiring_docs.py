"""Wires document ingest, retention, maintenance and the embedding tracker into a container
(memory-pipeline-v2.md "Document Ingest", "Retention Worker", "Maintenance Worker",
"Embedding Tracker"). Called once from ``container._wire_pipeline``.

Adds to ``container.workers``: ``documents`` (a JobWorker for ``document_ingest`` jobs, every
``documents.workerIntervalMs`` ms when idle; it always runs: documents are explicit requests),
``embedding-tracker`` (while ``embeddingTracker.enabled`` and an embedder exists),
``retention`` (every 6 h, always) and ``maintenance`` (while ``maintenance_scheduled``).
Sets ``container.documents`` (DocumentService), ``container.embedding_tracker``,
``container.retention``, ``container.repairs`` and ``container.maintenance`` for the API.
Settings are read at use time, so hot changes apply without a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlane.documents.service import DOCUMENT_INGEST, DocumentService
from memlane.pipeline.embedding_tracker import EmbeddingTracker
from memlane.pipeline.maintenance import MaintenanceWorker
from memlane.pipeline.repairs import Repairs
from memlane.pipeline.retention import RetentionWorker
from memlane.workers.runtime import JobWorker

if TYPE_CHECKING:
    from memlane.container import Container


def wire(c: "Container") -> None:
    """Register the four workers on ``c.workers`` and attach the services (see module docstring)."""
    pipeline = lambda: c.settings.memory.pipeline_v2  # noqa: E731
    docs = JobWorker(c.db, "documents", poll_ms=lambda: pipeline().documents.worker_interval_ms,
                     lease_timeout_ms=lambda: pipeline().worker.lease_timeout_ms)
    service = DocumentService(c.db, c.memories, pipeline, on_enqueue=docs.wake)
    docs.register(DOCUMENT_INGEST, service.process)
    c.workers.add(docs)
    embedder = c.embedder
    tracker = EmbeddingTracker(c.db, embedder, c.memories.index,
                               batch_size=lambda: pipeline().embedding_tracker.batch_size,
                               poll_ms=lambda: pipeline().embedding_tracker.poll_ms,
                               enabled=lambda: pipeline().embedding_tracker.enabled and embedder is not None)
    c.workers.add(tracker)
    retention = RetentionWorker(c.db)
    c.workers.add(retention)
    repairs = Repairs(c.memories, pipeline, tracker=tracker)
    maintenance = MaintenanceWorker(repairs, pipeline, model=lambda: embedder.model_id if embedder else None)
    c.workers.add(maintenance)
    c.documents = service  # type: ignore[attr-defined]
    c.embedding_tracker = tracker  # type: ignore[attr-defined]
    c.retention = retention  # type: ignore[attr-defined]
    c.repairs = repairs  # type: ignore[attr-defined]
    c.maintenance = maintenance  # type: ignore[attr-defined]
