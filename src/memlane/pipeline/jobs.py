"""Job-queue services the write paths call (memory-pipeline-v2.md "Worker Model").

Job types used by the pipeline: :data:`EXTRACT` (one memory's extraction + decision pass,
``memory_id`` set, deduplicated by memory id). Other workers define their own type strings
(e.g. ``document_ingest``) and enqueue with :func:`memlane.storage.jobs.enqueue`.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable

from memlane.pipeline.config import PipelineV2Settings
from memlane.storage import jobs as jobs_sql
from memlane.storage.models import NewMemory

EXTRACT = "extract"
#: ``source_type`` of memories the pipeline itself writes (derived facts): never re-extracted.
DERIVED_SOURCE_TYPE = "pipeline_v2"
#: Source types whose memories get no extraction job (the pipeline's own output).
NO_EXTRACTION_SOURCES: frozenset[str] = frozenset({DERIVED_SOURCE_TYPE})

BACKOFF_BASE_MS = 1_000
BACKOFF_CAP_MS = 30_000
BACKOFF_JITTER_MS = 500


def backoff_ms(consecutive_failures: int, *, rng: random.Random | None = None, base_ms: float = BACKOFF_BASE_MS,
               cap_ms: float = BACKOFF_CAP_MS, jitter_ms: float = BACKOFF_JITTER_MS) -> float:
    """Delay after ``consecutive_failures`` failures in a row, ms (seed "Worker Model"):
    ``min(base * 2**(n-1), cap) + uniform(0, jitter)``; 1 s, 2 s, 4 s ... capped at 30 s, plus
    up to 500 ms of jitter. ``n <= 0`` gives 0 (no failure, no delay).

    Args:
        consecutive_failures: failures in a row (1 for the first).
        rng: the jitter source (seed one for reproducible tests); default the module's.
    """
    if consecutive_failures <= 0:
        return 0.0
    delay = min(base_ms * (2 ** min(consecutive_failures - 1, 30)), cap_ms)
    return delay + (rng or random).uniform(0.0, jitter_ms)


def enqueue_extraction(conn: sqlite3.Connection, memory_id: str, *, at: str, max_attempts: int = 3) -> int:
    """Queue the extraction of ``memory_id`` inside the caller's write transaction (SQL only:
    safe in the remember transaction, after the raw memory row is inserted).

    An extract job for the same memory that is still pending or leased is reused (dedup key =
    memory id). Returns the job id.

    Args:
        at: the remember time (ISO-8601 UTC).
        max_attempts: leases before the job goes dead (``pipeline_v2.worker.max_retries``).
    """
    return jobs_sql.enqueue(conn, EXTRACT, at=at, dedup_key=memory_id, memory_id=memory_id,
                            max_attempts=max_attempts)


def extraction_hook(pipeline: Callable[[], PipelineV2Settings]
                    ) -> Callable[[sqlite3.Connection, NewMemory, str], None]:
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
