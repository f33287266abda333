"""SQL for the ``memory_jobs`` queue (enqueue and inspection; leasing lives with the workers)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any


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

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Job":
        d = dict(row)
        d["payload"] = json.loads(d["payload"] or "{}")
        d["result"] = json.loads(d["result"]) if d["result"] else None
        return cls(**d)


def enqueue(conn: sqlite3.Connection, job_type: str, *, at: str, dedup_key: str | None = None,
            memory_id: str | None = None, session_key: str | None = None, payload: dict[str, Any] | None = None,
            status: str = "pending", error: str | None = None, max_attempts: int = 3) -> int:
    """Add a job; with a ``dedup_key`` an equal pending or leased job is reused. Returns the job id."""
    if dedup_key is not None:
        r = conn.execute("SELECT id FROM memory_jobs WHERE job_type = ? AND dedup_key = ? "
                         "AND status IN ('pending', 'leased')", (job_type, dedup_key)).fetchone()
        if r:
            return int(r[0])
    cur = conn.execute(
        """INSERT INTO memory_jobs (job_type, dedup_key, memory_id, session_key, payload, status, error,
               max_attempts, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)""",
        (job_type, dedup_key, memory_id, session_key, json.dumps(payload or {}), status, error, max_attempts,
         at, at))
    return int(cur.lastrowid)


def finish(conn: sqlite3.Connection, job_id: int, *, status: str, at: str, result: dict[str, Any] | None = None,
           error: str | None = None) -> None:
    """Mark a job completed, failed, skipped or dead, with its result or error."""
    conn.execute("UPDATE memory_jobs SET status = ?, result = ?, error = ?, updated_at = ?, leased_until = NULL "
                 "WHERE id = ?", (status, json.dumps(result) if result is not None else None, error, at, job_id))


def get(conn: sqlite3.Connection, job_id: int) -> Job | None:
    r = conn.execute("SELECT * FROM memory_jobs WHERE id = ?", (job_id,)).fetchone()
    return Job.from_row(r) if r else None
