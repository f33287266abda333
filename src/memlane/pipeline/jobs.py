"""Job-queue services the write paths call (memory-pipeline-v2.md "Worker Model").

Job types used by the pipeline: :data:`EXTRACT` (one memory's extraction + decision pass,
``memory_id`` set, deduplicated by memory id). Other workers define their own type strings
(e.g. ``document_ingest``) and enqueue with :func:`memlane.storage.jobs.enqueue`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from memlane.config.pipeline import PipelineV2Settings
from memlane.storage import jobs as jobs_sql
from memlane.storage.models import NewMemory

EXTRACT = "extract"
#: ``source_type`` of memories the pipeline itself writes (derived facts): never re-extracted.
DERIVED_SOURCE_TYPE = "pipeline_v2"
#: Source types whose memories get no extraction job (the pipeline's own output).
NO_EXTRACTION_SOURCES: frozenset[str] = frozenset({DERIVED_SOURCE_TYPE})


def enqueue_extraction(conn: sqlite3.Connection, memory_id: str, *, at: str, max_attempts: int = 3) -> int:
    """Queue the extraction of ``memory_id`` inside the caller's write transaction (SQL only:
    safe in the remember transaction, after the raw memory row is inserted).

    An extract job for the same memory that is still pending or leased is reused (dedup key =
    memory id). Returns the job id.

    Args:
        at: the remember time (ISO-8601 UTC).
        max_attempts: leases before the job goes dead (``pipeline_v2.worker.max_retries``).
    """
    return jobs_sql.enqueue(conn, EXTRACT, at=at, dedup_key=memory_id, memory_id=memory_id, max_attempts=max_attempts)


def extraction_hook(pipeline: Callable[[], PipelineV2Settings]) -> Callable[[sqlite3.Connection, NewMemory, str], None]:
    """A ``MemoryService.created_hooks`` entry: enqueue extraction for each created memory
    while ``pipeline().enabled`` (read per memory, so toggling the flag takes effect at once),
    except memories the pipeline wrote itself (:data:`NO_EXTRACTION_SOURCES`).

    Args:
        pipeline: returns the current settings (``lambda: settings.memory.pipeline_v2``).
    """

    def hook(conn: sqlite3.Connection, new: NewMemory, at: str) -> None:
        p = pipeline()
        if p.enabled and new.source_type not in NO_EXTRACTION_SOURCES:
            enqueue_extraction(conn, new.id, at=at, max_attempts=p.worker.max_retries)

    return hook
