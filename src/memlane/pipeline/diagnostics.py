"""Maintenance diagnostics and recommendations (memory-pipeline-v2.md "Maintenance Worker").

:func:`get_diagnostics` reads a :class:`DiagnosticsReport`: queue health (dead rate, stale
leases), index health (FTS rows vs memories), storage health (tombstone ratio) and, in
memlane, embedding coverage (live memories without a vector of the current model). Each
component is a score in [0, 1]; ``score`` is their mean.

:func:`build_recommendations` turns a report into repair actions:

* ``requeue_dead_jobs`` when the dead-job rate exceeds 1 % (:data:`DEAD_RATE_THRESHOLD`);
* ``release_stale_leases`` when any lease is past its ``leased_until``;
* ``check_fts_consistency`` when the FTS row count differs from the memories' (FTS indexes
  every row, deleted or not, so it is compared with the total);
* ``trigger_retention_sweep`` when tombstones exceed 30 % of all memories;
* ``reembed`` when live memories lack vectors of the current model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from memlane.storage import maintenance as mnt_sql
from memlane.storage.db import Database
from memlane.storage.maintenance import HealthCounts

#: Dead jobs / all jobs above which requeueing is recommended (fraction).
DEAD_RATE_THRESHOLD = 0.01
#: Tombstones / all memories above which a retention sweep is recommended (fraction).
TOMBSTONE_RATIO_THRESHOLD = 0.30

REQUEUE_DEAD_JOBS = "requeue_dead_jobs"
RELEASE_STALE_LEASES = "release_stale_leases"
CHECK_FTS = "check_fts_consistency"
RETENTION_SWEEP = "trigger_retention_sweep"
REEMBED = "reembed"
DEDUP = "dedup"
#: Every repair action, in the order a cycle runs them.
ACTIONS = (RELEASE_STALE_LEASES, REQUEUE_DEAD_JOBS, CHECK_FTS, RETENTION_SWEEP, REEMBED, DEDUP)


@dataclass(frozen=True, slots=True)
class DiagnosticsReport:
    """Health at ``at`` (ISO-8601 UTC). Rates and scores are fractions in [0, 1]."""

    at: str
    counts: HealthCounts
    dead_rate: float
    tombstone_ratio: float
    fts_in_sync: bool
    queue_score: float
    index_score: float
    storage_score: float
    embedding_score: float
    score: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One repair action to run and why."""

    action: str
    reason: str


def score_counts(counts: HealthCounts, at: str) -> DiagnosticsReport:
    """The report of ``counts``: component scores and their mean.

    queue = (1 - min(1, 10 x dead rate)) x (0.5 with stale leases, else 1); index = 1 in sync,
    else 0.5 x (1 - |fts - total| / total); storage = 1 up to a 30 % tombstone ratio, then
    falling linearly to 0 at 100 %; embedding = share of live memories with vectors.
    """
    dead_rate = counts.jobs_dead / counts.jobs_total if counts.jobs_total else 0.0
    tomb = counts.memories_deleted / counts.memories_total if counts.memories_total else 0.0
    in_sync = counts.fts_rows == counts.memories_total
    queue = max(0.0, 1.0 - 10.0 * dead_rate) * (0.5 if counts.stale_leases else 1.0)
    index = (
        1.0
        if in_sync
        else 0.5 * max(0.0, 1.0 - abs(counts.fts_rows - counts.memories_total) / max(counts.memories_total, 1))
    )
    storage = (
        1.0
        if tomb <= TOMBSTONE_RATIO_THRESHOLD
        else max(0.0, 1.0 - (tomb - TOMBSTONE_RATIO_THRESHOLD) / (1.0 - TOMBSTONE_RATIO_THRESHOLD))
    )
    emb = 1.0 - counts.missing_vectors / counts.memories_live if counts.memories_live else 1.0
    score = (queue + index + storage + emb) / 4.0
    return DiagnosticsReport(
        at,
        counts,
        round(dead_rate, 6),
        round(tomb, 6),
        in_sync,
        round(queue, 6),
        round(index, 6),
        round(storage, 6),
        round(max(0.0, emb), 6),
        round(score, 6),
    )


def get_diagnostics(db: Database, *, now: str, model: str | None) -> DiagnosticsReport:
    """Read the counts (one read connection, no write) and score them.

    Args:
        now: the current time, ISO-8601 UTC (stale leases are those past it).
        model: the embedding model whose coverage is measured (None: no embedder).
    """
    counts = db.read(lambda c: mnt_sql.health_counts(c, now=now, model=model))
    return score_counts(counts, now)


def build_recommendations(report: DiagnosticsReport) -> list[Recommendation]:
    """The repair actions the report calls for, in :data:`ACTIONS` order."""
    c = report.counts
    recs = []
    if c.stale_leases:
        recs.append(Recommendation(RELEASE_STALE_LEASES, f"{c.stale_leases} lease(s) past their timeout"))
    if report.dead_rate > DEAD_RATE_THRESHOLD:
        recs.append(
            Recommendation(REQUEUE_DEAD_JOBS, f"dead job rate {report.dead_rate:.1%} > {DEAD_RATE_THRESHOLD:.0%}")
        )
    if not report.fts_in_sync:
        recs.append(Recommendation(CHECK_FTS, f"FTS has {c.fts_rows} rows for {c.memories_total} memories"))
    if report.tombstone_ratio > TOMBSTONE_RATIO_THRESHOLD:
        recs.append(
            Recommendation(
                RETENTION_SWEEP,
                f"tombstones are {report.tombstone_ratio:.0%} of memories > {TOMBSTONE_RATIO_THRESHOLD:.0%}",
            )
        )
    if c.missing_vectors:
        recs.append(Recommendation(REEMBED, f"{c.missing_vectors} live memories lack vectors"))
    return recs
