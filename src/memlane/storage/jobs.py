"""SQL for the ``memory_jobs`` queue: enqueue (with dedup), lease, complete, fail, reap, inspect.

memory-pipeline-v2.md "Worker Model". Every function takes the caller's connection; the ones
that write must run inside the caller's write transaction (``Database.write``), which is what
makes :func:`lease` atomic: the SELECT and the UPDATE happen under one ``BEGIN IMMEDIATE``.

Statuses: ``pending`` (waiting; ``run_after`` may delay it), ``leased`` (a worker holds it until
``leased_until``), ``completed``, ``failed`` (kept for the sessions' own bookkeeping), ``dead``
(attempts exhausted; kept for audit), ``skipped`` (nothing to do, with the reason in ``error``).
Timestamps are ISO-8601 UTC strings with milliseconds and ``Z`` (sortable as text).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memlane.storage.db import inserted_rowid

STATUSES = ("pending", "leased", "completed", "failed", "dead", "skipped")


@dataclass(frozen=True, slots=True)
class Job:
    """One row of ``memory_jobs``."""

    id: int
    job_type: str
    dedup_key: str | None
    memory_id: str | None
    session_key: str | None
    payload: dict[str, Any]
    status: str
    attempts: int
    max_attempts: int
    leased_until: str | None
    run_after: str | None
    error: str | None
    result: dict[str, Any] | None
    created_at: str
    updated_at: str
    leased_at: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Job:
        d = dict(row)
        d["payload"] = json.loads(d["payload"] or "{}")
        d["result"] = json.loads(d["result"]) if d["result"] else None
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def as_dict(self) -> dict[str, Any]:
        """JSON-able view (every field)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def iso(dt: datetime) -> str:
    """``dt`` as the store's timestamp format: UTC, milliseconds, ``Z``."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    return f"{dt.year:04d}" + dt.strftime("-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _parse(at: str) -> datetime:
    dt = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def add_ms(at: str, ms: float) -> str:
    """The timestamp ``at`` plus ``ms`` milliseconds, in the store's format."""
    return iso(_parse(at) + timedelta(milliseconds=ms))


def enqueue(
    conn: sqlite3.Connection,
    job_type: str,
    *,
    at: str,
    dedup_key: str | None = None,
    memory_id: str | None = None,
    session_key: str | None = None,
    payload: dict[str, Any] | None = None,
    status: str = "pending",
    error: str | None = None,
    max_attempts: int = 3,
    run_after: str | None = None,
) -> int:
    """Add a job; with a ``dedup_key`` an equal pending or leased job (same type and key) is
    reused instead ("Job deduplication is enforced at enqueue time"). Returns the job id.

    Args:
        at: creation time (ISO-8601 UTC).
        max_attempts: leases before a failing job goes ``dead`` (pipeline ``worker.maxRetries``).
        run_after: earliest time a worker may lease it; None = at once.
    """
    if dedup_key is not None:
        r = conn.execute(
            "SELECT id FROM memory_jobs WHERE job_type = ? AND dedup_key = ? AND status IN ('pending', 'leased')",
            (job_type, dedup_key),
        ).fetchone()
        if r:
            return int(r[0])
    cur = conn.execute(
        """INSERT INTO memory_jobs (job_type, dedup_key, memory_id, session_key, payload, status, error,
               max_attempts, run_after, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)""",
        (
            job_type,
            dedup_key,
            memory_id,
            session_key,
            json.dumps(payload or {}),
            status,
            error,
            max_attempts,
            run_after,
            at,
            at,
        ),
    )
    return inserted_rowid(cur)


def lease(conn: sqlite3.Connection, job_types: Sequence[str], *, now: str, lease_timeout_ms: int) -> Job | None:
    """Lease the oldest pending job of one of ``job_types`` whose ``run_after`` has come.

    Sets ``status='leased'``, ``leased_at=now``, ``leased_until=now+lease_timeout_ms`` and
    ``attempts+1``. Must run inside the caller's write transaction (``Database.write``): the
    SELECT and UPDATE are then atomic, so two workers never lease the same job
    (memory-pipeline-v2.md "Worker Model", "Job leasing is atomic").

    Args:
        job_types: the types this worker handles (non-empty).
        now: the current time (ISO-8601 UTC).
        lease_timeout_ms: how long the lease holds before the reaper may reset it, ms
            (``worker.leaseTimeoutMs``, default 300,000).

    Returns:
        the leased job as it is after the update, or None when nothing is due.
    """
    if not job_types:
        return None
    marks = ",".join("?" * len(job_types))
    r = conn.execute(
        f"SELECT id FROM memory_jobs WHERE status = 'pending' AND job_type IN ({marks}) "
        "AND (run_after IS NULL OR run_after <= ?) ORDER BY created_at, id LIMIT 1",
        (*job_types, now),
    ).fetchone()
    if r is None:
        return None
    until = add_ms(now, lease_timeout_ms)
    cur = conn.execute(
        "UPDATE memory_jobs SET status = 'leased', leased_at = ?, leased_until = ?, attempts = attempts + 1, "
        "updated_at = ? WHERE id = ? AND status = 'pending'",
        (now, until, now, int(r[0])),
    )
    if cur.rowcount != 1:  # pragma: no cover - impossible inside one write transaction
        return None
    return get(conn, int(r[0]))


def complete(conn: sqlite3.Connection, job_id: int, *, now: str, result: dict[str, Any] | None = None) -> None:
    """Mark a job ``completed`` with its result; the lease is released."""
    finish(conn, job_id, status="completed", at=now, result=result)


def skip(conn: sqlite3.Connection, job_id: int, reason: str, *, now: str) -> None:
    """Mark a job ``skipped`` (nothing to do); the reason is kept in ``error``."""
    finish(conn, job_id, status="skipped", at=now, error=reason)


def fail(conn: sqlite3.Connection, job: Job, error: str, *, now: str, backoff_ms: float) -> str:
    """Record a failed attempt of a leased job.

    The attempt was already counted at lease time. When ``attempts >= max_attempts`` the job
    goes ``dead`` (kept for audit); otherwise back to ``pending`` with
    ``run_after = now + backoff_ms`` (memory-pipeline-v2.md "Worker Model").

    Args:
        job: the job as leased (its ``attempts`` includes this attempt).
        error: what went wrong (stored, truncated to 2,000 chars).
        backoff_ms: delay before the job may be leased again, ms (see ``pipeline.runtime.backoff_ms``).

    Returns:
        the new status, ``pending`` or ``dead``.
    """
    row = conn.execute("SELECT attempts, max_attempts FROM memory_jobs WHERE id = ?", (job.id,)).fetchone()
    attempts, max_attempts = (int(row[0]), int(row[1])) if row else (job.attempts, job.max_attempts)
    status = "dead" if attempts >= max_attempts else "pending"
    run_after = None if status == "dead" else add_ms(now, backoff_ms)
    conn.execute(
        "UPDATE memory_jobs SET status = ?, error = ?, run_after = ?, leased_until = NULL, updated_at = ? WHERE id = ?",
        (status, error[:2000], run_after, now, job.id),
    )
    return status


def release(conn: sqlite3.Connection, job_id: int, *, now: str) -> bool:
    """Give back a lease that was never worked on (a worker stopping with a job leased ahead):
    ``pending`` again, the attempt the lease counted taken back. Returns whether it was leased."""
    cur = conn.execute(
        "UPDATE memory_jobs SET status = 'pending', leased_until = NULL, leased_at = NULL, "
        "attempts = MAX(attempts - 1, 0), updated_at = ? WHERE id = ? AND status = 'leased'",
        (now, job_id),
    )
    return cur.rowcount == 1


def reap_stale(conn: sqlite3.Connection, now: str) -> int:
    """Return every job leased past its ``leased_until`` to ``pending`` (a crashed worker's
    lease); the attempt it used stays counted. Returns how many were reset.
    memory-pipeline-v2.md "Worker Model" (stale lease reaper)."""
    cur = conn.execute(
        "UPDATE memory_jobs SET status = 'pending', leased_until = NULL, updated_at = ?, "
        "error = COALESCE(error, 'lease expired') WHERE status = 'leased' AND leased_until IS NOT NULL "
        "AND leased_until < ?",
        (now, now),
    )
    return int(cur.rowcount)


def finish(
    conn: sqlite3.Connection,
    job_id: int,
    *,
    status: str,
    at: str,
    result: dict[str, Any] | None = None,
    error: str | None = None,
) -> None:
    """Mark a job completed, failed, skipped or dead, with its result or error."""
    conn.execute(
        "UPDATE memory_jobs SET status = ?, result = ?, error = ?, updated_at = ?, leased_until = NULL WHERE id = ?",
        (status, json.dumps(result) if result is not None else None, error, at, job_id),
    )


def get(conn: sqlite3.Connection, job_id: int) -> Job | None:
    """The job with this id, or None."""
    r = conn.execute("SELECT * FROM memory_jobs WHERE id = ?", (job_id,)).fetchone()
    return Job.from_row(r) if r else None


def counts_by_status(conn: sqlite3.Connection, job_types: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
    """``{job_type: {status: count}}`` over the whole table (or only ``job_types``)."""
    sql, args = "SELECT job_type, status, COUNT(*) FROM memory_jobs", []
    if job_types:
        sql += f" WHERE job_type IN ({','.join('?' * len(job_types))})"
        args = list(job_types)
    out: dict[str, dict[str, int]] = {}
    for t, s, n in conn.execute(sql + " GROUP BY job_type, status", args):
        out.setdefault(t, {})[s] = int(n)
    return out


def list_jobs(
    conn: sqlite3.Connection,
    *,
    job_type: str | None = None,
    status: str | None = None,
    memory_id: str | None = None,
    limit: int = 50,
    offset: int = 0,
    newest_first: bool = True,
) -> list[Job]:
    """A page of jobs, filtered by type, status and memory id (all optional)."""
    where, args = [], []
    for col, val in (("job_type", job_type), ("status", status), ("memory_id", memory_id)):
        if val is not None:
            where.append(f"{col} = ?")
            args.append(val)
    sql = "SELECT * FROM memory_jobs" + (" WHERE " + " AND ".join(where) if where else "")
    sql += f" ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ? OFFSET ?"
    return [Job.from_row(r) for r in conn.execute(sql, (*args, int(limit), int(offset)))]


def latest_for_memory(conn: sqlite3.Connection, memory_id: str, job_type: str) -> Job | None:
    """The newest job of ``job_type`` about ``memory_id``, or None."""
    r = conn.execute(
        "SELECT * FROM memory_jobs WHERE memory_id = ? AND job_type = ? ORDER BY id DESC LIMIT 1", (memory_id, job_type)
    ).fetchone()
    return Job.from_row(r) if r else None


def latest_id_for_session(conn: sqlite3.Connection, session_key: str, job_type: str) -> int | None:
    """The id of the newest job of ``job_type`` about session ``session_key``, or None."""
    r = conn.execute(
        "SELECT id FROM memory_jobs WHERE job_type = ? AND session_key = ? ORDER BY id DESC LIMIT 1",
        (job_type, session_key),
    ).fetchone()
    return int(r[0]) if r else None
