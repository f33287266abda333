"""SQL for the active-loop integration (memlane.v3.active; docs/v3.md "Active loop"): the memories a
commit may be linked to, a project's prefetch patterns, a work unit's earlier outcomes, and the files
of a project's latest observed session."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

#: ``memories.source_type`` of a memory written on behalf of a session (``source_id`` = its key).
SESSION_SOURCE_TYPE = "session"


@dataclass(frozen=True, slots=True)
class Untagged:
    """A live memory without a commit SHA: its id, related files and ``source_id``."""

    id: str
    related_files: list[str]
    source_type: str | None
    source_id: str | None


def session_start_iso(conn: sqlite3.Connection, session_key: str) -> str | None:
    """When a session began (ISO-8601): its session-start hook's ``started_at``, else None."""
    row = conn.execute("SELECT started_at FROM sessions WHERE session_key = ?", (session_key,)).fetchone()
    return row[0] if row is not None else None


def session_first_ms(conn: sqlite3.Connection, session_key: str) -> int | None:
    """The epoch milliseconds of a session's first observed tool call, else None."""
    row = conn.execute("SELECT min(ts_ms) FROM observer_events WHERE session_key = ?", (session_key,)).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else None


def untagged_between(conn: sqlite3.Connection, project: str | None, since: str, until: str) -> list[Untagged]:
    """Live memories of ``project`` (None: memories without a project) created in [since, until]
    (ISO-8601 strings, compared as text like every ``created_at``) that have no ``commit_sha``."""
    cond = "project = ?" if project is not None else "project IS NULL"
    rows = conn.execute(
        f"""SELECT id, related_files, source_type, source_id FROM memories
            WHERE {cond} AND is_deleted = 0 AND commit_sha IS NULL AND created_at >= ? AND created_at <= ?
            ORDER BY created_at""",
        (*([project] if project is not None else []), since, until),
    ).fetchall()
    return [Untagged(r[0], list(json.loads(r[1] or "[]")), r[2], r[3]) for r in rows]


def prefetch_patterns(
    conn: sqlite3.Connection, project: str | None, min_confidence: float
) -> list[tuple[str, float, dict[str, Any]]]:
    """Live, unsuperseded ``prefetch_pattern`` memories of ``project`` (and those without a project)
    with confidence >= ``min_confidence``: ``[(id, confidence, type_fields)]``, most confident first."""
    cond = "(project = ? OR project IS NULL)" if project is not None else "project IS NULL"
    # INDEXED BY: in a store of one dominant type, ANALYZE's statistics make the planner scan the
    # table (12 ms at 4,000 memories) although prefetch patterns are a handful
    rows = conn.execute(
        f"""SELECT id, confidence, type_fields FROM memories INDEXED BY idx_memories_type
            WHERE type = 'prefetch_pattern' AND {cond} AND is_deleted = 0 AND superseded_by IS NULL
              AND confidence >= ? ORDER BY confidence DESC, created_at DESC""",
        (*([project] if project is not None else []), min_confidence),
    ).fetchall()
    return [(r[0], float(r[1]), json.loads(r[2] or "{}")) for r in rows]


def outcome_count(conn: sqlite3.Connection, methodology: str, hierarchy: list[str]) -> int:
    """How many ``work_unit_outcome`` memories (deleted ones included: a retry happened either way)
    were recorded for exactly this work unit."""
    return int(
        conn.execute(
            """SELECT count(*) FROM memories WHERE type = 'work_unit_outcome' AND methodology = ?
           AND json_extract(work_unit_ref, '$.hierarchy') = ?""",
            (methodology, json.dumps(hierarchy, separators=(",", ":"))),
        ).fetchone()[0]
    )


def latest_session_edits(
    conn: sqlite3.Connection, project: str | None, exclude: str, *, look_back: int = 10
) -> list[str]:
    """The files edited (else touched) in ``project``'s most recently started session other than
    ``exclude`` that the observer saw (of its latest ``look_back`` sessions), in first-touch order;
    [] when there is none. Reads the ``sessions`` index (project, started_at) and each session's
    events by key: no scan of the project's events."""
    keys = [
        r[0]
        for r in conn.execute(
            """SELECT session_key FROM sessions WHERE project IS ? AND session_key != ?
           ORDER BY started_at DESC LIMIT ?""",
            (project, exclude, look_back),
        )
    ]
    for key in keys:
        files = conn.execute(
            """SELECT file_path, max(is_edit) FROM observer_events WHERE session_key = ? AND file_path IS NOT NULL
               GROUP BY file_path ORDER BY min(step)""",
            (key,),
        ).fetchall()
        if files:
            edited = [f for f, e in files if e]
            return edited or [f for f, _ in files]
    return []


def known_files(conn: sqlite3.Connection, project: str, paths: list[str]) -> list[str]:
    """Those of ``paths`` the project's co-access graph knows (``coaccess_files``), in the given order."""
    out: list[str] = []
    for p in paths:
        if (
            p not in out
            and conn.execute(
                "SELECT 1 FROM coaccess_files WHERE project = ? AND file_path = ?", (project, p)
            ).fetchone()
        ):
            out.append(p)
    return out


@dataclass(frozen=True, slots=True)
class FileWarning:
    """A memory that warns about a file (proactive injection before a tool call)."""

    id: str
    type: str
    content: str
    confidence: float


def file_warnings(
    conn: sqlite3.Connection,
    project: str | None,
    paths: list[str],
    types: tuple[str, ...],
    *,
    min_confidence: float,
    min_access_count: int,
    limit: int,
) -> list[FileWarning]:
    """Live, unsuperseded memories of ``types`` for ``project`` (and those without a project) whose
    ``related_files`` hold one of ``paths``, with confidence >= ``min_confidence`` that are
    user-verified or were accessed at least ``min_access_count`` times; most confident first, at
    most ``limit``."""
    if not paths or not types:
        return []
    cond = "(project = ? OR project IS NULL)" if project is not None else "project IS NULL"
    type_marks = ",".join("?" * len(types))
    path_marks = ",".join("?" * len(paths))
    rows = conn.execute(
        f"""SELECT id, type, content, confidence FROM memories INDEXED BY idx_memories_type
            WHERE type IN ({type_marks}) AND {cond} AND is_deleted = 0 AND superseded_by IS NULL
              AND confidence >= ? AND (user_verified = 1 OR access_count >= ?)
              AND EXISTS (SELECT 1 FROM json_each(memories.related_files) WHERE value IN ({path_marks}))
            ORDER BY confidence DESC, created_at DESC LIMIT ?""",
        (*types, *([project] if project is not None else []), min_confidence, min_access_count, *paths, limit),
    ).fetchall()
    return [FileWarning(r[0], r[1], r[2], float(r[3])) for r in rows]
