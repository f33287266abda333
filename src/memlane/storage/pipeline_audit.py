"""SQL for the pipeline's audit trail in ``memory_history`` and the memories' ``extraction_status``
(memory-pipeline-v2.md "Controlled Writes"). Storage layer: SQL only; writers run inside the
caller's write transaction.

Events (migration 0008): ``proposal`` (one per decision proposal, on the source memory),
``extraction`` (one summary per extraction job, on the source memory, ``changes.job_id`` set).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from memlane.storage import memories as mem_sql

EXTRACTION_STATUSES = ("none", "completed", "skipped", "failed", "shadow")


def add_event(
    conn: sqlite3.Connection,
    memory_id: str,
    event: str,
    *,
    changes: dict[str, Any],
    at: str,
    old_content: str | None = None,
    new_content: str | None = None,
    who: str | None = None,
    why: str | None = None,
) -> None:
    """Append one ``proposal`` / ``extraction`` history row."""
    mem_sql.add_history(
        conn,
        memory_id,
        event,
        old_content=old_content,
        new_content=new_content,
        changes=changes,
        who=who,
        why=why,
        at=at,
    )


def set_extraction_status(conn: sqlite3.Connection, memory_id: str, status: str) -> None:
    """Set ``memories.extraction_status`` (one of :data:`EXTRACTION_STATUSES`); ``updated_at`` is left alone
    (a pipeline status change is not an edit of the memory).

    Raises:
        ValueError: an unknown status.
    """
    if status not in EXTRACTION_STATUSES:
        raise ValueError(f"unknown extraction status {status!r}")
    conn.execute("UPDATE memories SET extraction_status = ? WHERE id = ?", (status, memory_id))


def job_summary(conn: sqlite3.Connection, memory_id: str, job_id: int) -> dict[str, Any] | None:
    """The ``changes`` of the ``extraction`` row an earlier attempt of job ``job_id`` committed, or None."""
    r = conn.execute(
        "SELECT changes FROM memory_history WHERE memory_id = ? AND event = 'extraction' "
        "AND json_extract(changes, '$.job_id') = ? ORDER BY id DESC LIMIT 1",
        (memory_id, int(job_id)),
    ).fetchone()
    return json.loads(r[0]) if r else None


def events(conn: sqlite3.Connection, memory_id: str, event: str) -> list[dict[str, Any]]:
    """Every ``event`` row of a memory as ``{id, new_content, old_content, changes, who, why, created_at}``."""
    rows = conn.execute(
        "SELECT id, old_content, new_content, changes, who, why, created_at FROM memory_history "
        "WHERE memory_id = ? AND event = ? ORDER BY id",
        (memory_id, event),
    ).fetchall()
    return [
        {
            "id": r[0],
            "old_content": r[1],
            "new_content": r[2],
            "changes": json.loads(r[3] or "{}"),
            "who": r[4],
            "why": r[5],
            "created_at": r[6],
        }
        for r in rows
    ]
