"""SQL for the V3 pruning and lifecycle job (seed memory-system-v3-design.md section 13)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the lifecycle rules read of one live, unprotected memory (not pinned, not user-verified)."""

    id: str
    type: str
    scope: str
    source: str
    project: str | None
    confidence: float
    created_at: str
    last_accessed: str | None
    decay_half_life_days: float | None
    related_files: tuple[str, ...]
    type_fields: dict[str, Any]
    stale_at: str | None
    work_unit_ref: dict[str, Any] | None


def candidates(conn: sqlite3.Connection, project: str | None = None) -> list[Candidate]:
    """Every live memory the automatic rules may touch (optionally one project's)."""
    sql = (
        "SELECT id, type, scope, source, project, confidence, created_at, last_accessed, decay_half_life_days, "
        "related_files, type_fields, stale_at, work_unit_ref FROM memories "
        "WHERE is_deleted = 0 AND pinned = 0 AND user_verified = 0"
    )
    args: tuple = ()
    if project is not None:
        sql += " AND project = ?"
        args = (project,)
    return [
        Candidate(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            float(r[5]),
            r[6],
            r[7],
            r[8],
            tuple(json.loads(r[9] or "[]")),
            json.loads(r[10] or "{}"),
            r[11],
            json.loads(r[12]) if r[12] else None,
        )
        for r in conn.execute(sql, args)
    ]


def mark_stale(conn: sqlite3.Connection, ids: list[str], at: str) -> int:
    """Set ``stale_at`` on the given memories that are not stale yet; returns how many."""
    n = 0
    for i in ids:
        n += conn.execute("UPDATE memories SET stale_at = ? WHERE id = ? AND stale_at IS NULL", (at, i)).rowcount
    return n


def work_unit_ids(conn: sqlite3.Connection, methodology: str, work_unit: str) -> list[str]:
    """Live memories of a work unit (outermost hierarchy entry) not pinned or user-verified."""
    return [
        r[0]
        for r in conn.execute(
            """SELECT id FROM memories WHERE is_deleted = 0 AND pinned = 0 AND user_verified = 0 AND methodology = ?
               AND json_extract(work_unit_ref, '$.hierarchy[0]') = ?""",
            (methodology, work_unit),
        )
    ]


def ended_sessions(conn: sqlite3.Connection) -> int:
    """Number of ended sessions."""
    return int(conn.execute("SELECT count(*) FROM sessions WHERE status = 'ended'").fetchone()[0])


def project_roots(conn: sqlite3.Connection) -> dict[str, str]:
    """``project -> cwd`` of each project's latest session that recorded a working directory."""
    # SQLite takes the bare column (cwd) from the row holding max(started_at): one pass, no subquery
    return {
        r[0]: r[1]
        for r in conn.execute(
            """SELECT project, cwd, max(started_at) FROM sessions WHERE project IS NOT NULL AND cwd IS NOT NULL
           GROUP BY project"""
        )
    }
