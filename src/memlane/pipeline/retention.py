"""The retention worker: purges expired data every 6 hours (memory-pipeline-v2.md
"Retention Worker").

One sweep runs these steps in this order (referential safety), each in its own short write
transaction and each touching at most :data:`BATCH_LIMIT` (500) rows; what is left over is
caught by the next sweep:

1. graph links: ``memory_entity_mentions`` of tombstones past the tombstone window; entity
   mention counts decremented, entities left with no mention deleted with their relations;
2. embeddings of those tombstones (vectors no other memory shares);
3. the tombstones themselves, hard-deleted (FTS by trigger; history, links by cascade);
4. ``memory_history`` rows older than the history window;
5. ``completed`` jobs older than the completed-job window;
6. ``dead`` jobs older than the dead-job window;
7. (memlane) documents soft-deleted before the tombstone window.

Windows (:class:`RetentionWindows`): tombstones 30 days, history 180 days, completed jobs 14
days, dead jobs 30 days. The worker always runs (with or without the extraction pipeline).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from memlane.config.clock import now_iso
from memlane.storage import retention as ret_sql
from memlane.storage.db import Database
from memlane.storage.jobs import add_ms
from memlane.workers.runtime import PollingWorker

log = logging.getLogger(__name__)

#: Interval between sweeps, ms (6 hours).
RETENTION_INTERVAL_MS = 6 * 3600 * 1000
#: Most rows one step touches per sweep.
BATCH_LIMIT = 500
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class RetentionWindows:
    """How long each kind of row is kept, days."""

    tombstone_days: float = 30
    history_days: float = 180
    completed_job_days: float = 14
    dead_job_days: float = 30


def sweep(
    db: Database, *, now: str, windows: RetentionWindows = RetentionWindows(), limit: int = BATCH_LIMIT
) -> dict[str, Any]:
    """Run the seven steps once, each in its own write transaction.

    Args:
        now: the current time (ISO-8601 UTC); cut-offs are ``now`` minus each window.
        limit: rows per step.

    Returns:
        rows deleted per step: graph (dict), embeddings, tombstones, history, completed_jobs,
        dead_jobs, documents.
    """
    tomb_cut = add_ms(now, -windows.tombstone_days * DAY_MS)
    ids = db.read(lambda c: ret_sql.expired_tombstones(c, tomb_cut, limit))
    out: dict[str, Any] = {}
    out["graph"] = db.write(lambda c: ret_sql.purge_graph_links(c, ret_sql.still_expired(c, ids, tomb_cut)))
    out["embeddings"] = db.write(lambda c: ret_sql.purge_embeddings(c, ret_sql.still_expired(c, ids, tomb_cut)))
    out["tombstones"] = db.write(lambda c: ret_sql.purge_memories(c, ret_sql.still_expired(c, ids, tomb_cut)))
    out["history"] = db.write(lambda c: ret_sql.purge_history(c, add_ms(now, -windows.history_days * DAY_MS), limit))
    out["completed_jobs"] = db.write(
        lambda c: ret_sql.purge_jobs(c, "completed", add_ms(now, -windows.completed_job_days * DAY_MS), limit)
    )
    out["dead_jobs"] = db.write(
        lambda c: ret_sql.purge_jobs(c, "dead", add_ms(now, -windows.dead_job_days * DAY_MS), limit)
    )
    out["documents"] = db.write(lambda c: ret_sql.purge_documents(c, tomb_cut, limit))
    return out


def _total(result: dict[str, Any]) -> int:
    return sum(sum(v.values()) if isinstance(v, dict) else int(v) for v in result.values())


class RetentionWorker(PollingWorker):
    """Runs :func:`sweep` every ``interval_ms`` (default 6 h).

    Args:
        db: the database.
        windows: retention windows, days.
        interval_ms: between sweeps, ms.
        now: the clock, ISO-8601 UTC.
    """

    def __init__(
        self,
        db: Database,
        *,
        windows: RetentionWindows = RetentionWindows(),
        interval_ms: float = RETENTION_INTERVAL_MS,
        now: Callable[[], str] = now_iso,
        name: str = "retention",
    ) -> None:
        super().__init__(name, poll_ms=interval_ms)
        self.db = db
        self.windows = windows
        self._now = now
        self.sweeps = 0
        self.purged = 0
        self.last_result: dict[str, Any] | None = None

    def tick(self) -> bool:
        self.run_sweep()
        return False  # sleep the full interval either way

    def run_sweep(self) -> dict[str, Any]:
        """One sweep now; returns :func:`sweep`'s counts."""
        result = sweep(self.db, now=self._now(), windows=self.windows)
        self.sweeps += 1
        n = _total(result)
        self.purged += n
        self.last_result = result
        if n:
            log.info("retention: purged %s", result)
        return result

    def telemetry(self) -> dict[str, Any]:
        """:meth:`PollingWorker.telemetry` plus sweeps, purged (rows, all steps), windows (days)
        and the last sweep's counts."""
        return {
            **super().telemetry(),
            "sweeps": self.sweeps,
            "purged": self.purged,
            "windows_days": asdict(self.windows),
            "last_result": self.last_result,
        }
