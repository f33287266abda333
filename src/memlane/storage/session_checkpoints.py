"""SQL for ``session_checkpoints`` (migration 0002; memory-pipeline-v2.md "Session Checkpoints").

SQL only: every function takes a connection (the writer's inside ``db.write`` for changes, a
pooled reader for queries) and returns plain values or frozen :class:`SessionCheckpoint` rows.
Timestamps are memlane's ISO-8601 UTC strings (``2026-11-21T10:00:00.123Z``), which sort
lexicographically; ties are broken by ``id`` (insertion order).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from memlane.config.clock import to_iso
from memlane.storage.db import inserted_rowid

_COLUMNS = (
    "id, session_key, harness, project, project_normalized, trigger, digest, prompt_count, "
    "memory_queries, recent_remembers, created_at"
)


@dataclass(frozen=True, slots=True)
class SessionCheckpoint:
    """One row of ``session_checkpoints``.

    ``prompt_count`` is the number of prompts this checkpoint covers (the deltas merged into it);
    ``memory_queries`` and ``recent_remembers`` are the (redacted) texts, oldest first.
    """

    id: int
    session_key: str
    harness: str | None
    project: str | None
    project_normalized: str | None
    trigger: str
    digest: str
    prompt_count: int
    memory_queries: tuple[str, ...]
    recent_remembers: tuple[str, ...]
    created_at: str


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What the digest needs about a session beyond the pending checkpoint.

    ``started_at``: ``sessions.started_at`` if the row exists, else the session's oldest
    checkpoint, else None. ``session_prompt_count``: ``sessions.prompt_count`` (0 when no row).
    ``checkpoint_prompts``: sum of ``prompt_count`` over the session's stored checkpoints.
    """

    started_at: str | None
    session_prompt_count: int
    checkpoint_prompts: int


def _json_list(raw: str | None) -> tuple[str, ...]:
    try:
        data = json.loads(raw or "[]")
    except (ValueError, TypeError):
        return ()
    return tuple(str(x) for x in data) if isinstance(data, list) else ()


def _row(r: sqlite3.Row) -> SessionCheckpoint:
    return SessionCheckpoint(
        id=r["id"],
        session_key=r["session_key"],
        harness=r["harness"],
        project=r["project"],
        project_normalized=r["project_normalized"],
        trigger=r["trigger"],
        digest=r["digest"],
        prompt_count=r["prompt_count"],
        memory_queries=_json_list(r["memory_queries"]),
        recent_remembers=_json_list(r["recent_remembers"]),
        created_at=r["created_at"],
    )


def insert(
    conn: sqlite3.Connection,
    *,
    session_key: str,
    harness: str | None,
    project: str | None,
    project_normalized: str | None,
    trigger: str,
    digest: str,
    prompt_count: int,
    memory_queries: Sequence[str],
    recent_remembers: Sequence[str],
    created_at: str,
) -> int:
    """Insert one checkpoint; returns its id.

    Raises:
        sqlite3.IntegrityError: ``trigger`` is not one of the five allowed values.
    """
    cur = conn.execute(
        """INSERT INTO session_checkpoints (session_key, harness, project, project_normalized, trigger,
               digest, prompt_count, memory_queries, recent_remembers, created_at)
           VALUES (?,?,?,?,?,?,?,?,?,?)""",
        (
            session_key,
            harness,
            project,
            project_normalized,
            trigger,
            digest,
            int(prompt_count),
            json.dumps(list(memory_queries), ensure_ascii=False),
            json.dumps(list(recent_remembers), ensure_ascii=False),
            created_at,
        ),
    )
    return inserted_rowid(cur)


def latest_for_session(conn: sqlite3.Connection, session_key: str) -> SessionCheckpoint | None:
    """The newest checkpoint of ``session_key``, or None."""
    r = conn.execute(
        f"SELECT {_COLUMNS} FROM session_checkpoints WHERE session_key = ? ORDER BY created_at DESC, id DESC LIMIT 1",
        (session_key,),
    ).fetchone()
    return _row(r) if r else None


def latest_for_project(conn: sqlite3.Connection, project_normalized: str) -> SessionCheckpoint | None:
    """The newest checkpoint of any session whose normalized project is ``project_normalized``."""
    r = conn.execute(
        f"SELECT {_COLUMNS} FROM session_checkpoints WHERE project_normalized = ? "
        "ORDER BY created_at DESC, id DESC LIMIT 1",
        (project_normalized,),
    ).fetchone()
    return _row(r) if r else None


def list_for_session(conn: sqlite3.Connection, session_key: str, limit: int | None = None) -> list[SessionCheckpoint]:
    """The checkpoints of ``session_key``, newest first (at most ``limit`` when given)."""
    sql = f"SELECT {_COLUMNS} FROM session_checkpoints WHERE session_key = ? ORDER BY created_at DESC, id DESC"
    params: tuple = (session_key,)
    if limit is not None:
        sql += " LIMIT ?"
        params += (max(0, int(limit)),)
    return [_row(r) for r in conn.execute(sql, params)]


def enforce_cap(conn: sqlite3.Connection, session_key: str, max_per_session: int) -> int:
    """Delete the oldest checkpoints of ``session_key`` beyond the newest ``max_per_session``.

    Returns the number of rows deleted.
    """
    cur = conn.execute(
        """DELETE FROM session_checkpoints WHERE session_key = ? AND id NOT IN (
               SELECT id FROM session_checkpoints WHERE session_key = ?
               ORDER BY created_at DESC, id DESC LIMIT ?)""",
        (session_key, session_key, max(0, int(max_per_session))),
    )
    return cur.rowcount


def prune_older_than(conn: sqlite3.Connection, days: float, now: datetime) -> int:
    """Hard-delete every checkpoint created more than ``days`` days before ``now``.

    Returns the number of rows deleted.
    """
    cutoff = to_iso(now - timedelta(days=days))
    return conn.execute("DELETE FROM session_checkpoints WHERE created_at < ?", (cutoff,)).rowcount


def count(conn: sqlite3.Connection, session_key: str | None = None) -> int:
    """Number of checkpoints, of one session or of all."""
    if session_key is None:
        return conn.execute("SELECT count(*) FROM session_checkpoints").fetchone()[0]
    return conn.execute("SELECT count(*) FROM session_checkpoints WHERE session_key = ?", (session_key,)).fetchone()[0]


def session_facts(conn: sqlite3.Connection, session_key: str) -> SessionFacts:
    """Start time and prompt totals of a session (see :class:`SessionFacts`)."""
    s = conn.execute("SELECT started_at, prompt_count FROM sessions WHERE session_key = ?", (session_key,)).fetchone()
    c = conn.execute(
        "SELECT min(created_at), coalesce(sum(prompt_count), 0) FROM session_checkpoints WHERE session_key = ?",
        (session_key,),
    ).fetchone()
    started = s["started_at"] if s else c[0]
    return SessionFacts(
        started_at=started, session_prompt_count=int(s["prompt_count"]) if s else 0, checkpoint_prompts=int(c[1])
    )
