"""SQL for the observer's scratchpad (``observer_events``, ``observer_signals``; migration 0015) and
its work steps (``observer_steps``; migration 0018)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

#: ``observer_signals.processed``: not yet finalized, promoted by a passing finalize, discarded by
#: a failing one (memlane.v3.promotion). Discarded signals never feed an inference again.
PENDING, PROMOTED, DISCARDED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded tool call."""

    step: int
    tool_name: str
    file_path: str | None
    is_edit: bool
    error_hash: str | None
    ts_ms: int
    duration_ms: int | None = None


def next_step(conn: sqlite3.Connection, session_key: str) -> int:
    """The step number the session's next tool call gets (1 for the first)."""
    row = conn.execute("SELECT max(step) FROM observer_events WHERE session_key = ?", (session_key,)).fetchone()
    return int(row[0] or 0) + 1


def add_event(
    conn: sqlite3.Connection,
    session_key: str,
    project: str | None,
    step: int,
    tool_name: str,
    file_path: str | None,
    is_edit: bool,
    error_hash: str | None,
    error_text: str | None,
    ts_ms: int,
    tool_use_id: str | None = None,
    duration_ms: int | None = None,
    payload_chars: int | None = None,
) -> None:
    """Record one tool call (``duration_ms``: from its PreToolUse, when seen; ``payload_chars``: the
    size of its hook input)."""
    conn.execute(
        """INSERT INTO observer_events (session_key, project, step, tool_name, file_path, is_edit, error_hash,
               error_text, ts_ms, tool_use_id, duration_ms, payload_chars) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""",
        (
            session_key,
            project,
            step,
            tool_name,
            file_path,
            int(is_edit),
            error_hash,
            error_text,
            ts_ms,
            tool_use_id,
            duration_ms,
            payload_chars,
        ),
    )


def events(conn: sqlite3.Connection, session_key: str, since_step: int = 0) -> list[Event]:
    """The session's tool calls after ``since_step``, in order."""
    return [
        Event(r[0], r[1], r[2], bool(r[3]), r[4], int(r[5]), None if r[6] is None else int(r[6]))
        for r in conn.execute(
            """SELECT step, tool_name, file_path, is_edit, error_hash, ts_ms, duration_ms FROM observer_events
           WHERE session_key = ? AND step > ? ORDER BY step""",
            (session_key, since_step),
        )
    ]


def add_signals(
    conn: sqlite3.Connection,
    session_key: str,
    project: str | None,
    step: int,
    signals: list[tuple[str, dict[str, Any]]],
    at: str,
) -> None:
    """Store derived signals ``(type, data)``."""
    conn.executemany(
        """INSERT INTO observer_signals (session_key, project, step, signal_type, data, created_at)
           VALUES (?,?,?,?,?,?)""",
        [(session_key, project, step, t, json.dumps(d), at) for t, d in signals],
    )


def signals(
    conn: sqlite3.Connection,
    *,
    session_key: str | None = None,
    project: str | None = None,
    signal_type: str | None = None,
    kept_only: bool = False,
    pending_only: bool = False,
) -> list[tuple[str, str, int, dict[str, Any]]]:
    """``(session_key, signal_type, step, data)`` rows, by id; filtered by session, project, type;
    ``kept_only`` leaves out signals a validation discarded, ``pending_only`` keeps the unprocessed."""
    where: list[str] = ["1=1"]
    args: list[Any] = []
    if kept_only:
        where.append("processed != ?")
        args.append(DISCARDED)
    if pending_only:
        where.append("processed = ?")
        args.append(PENDING)
    for col, v in (("session_key", session_key), ("project", project), ("signal_type", signal_type)):
        if v is not None:
            where.append(f"{col} = ?")
            args.append(v)
    return [
        (r[0], r[1], int(r[2]), json.loads(r[3]))
        for r in conn.execute(
            f"SELECT session_key, signal_type, step, data FROM observer_signals WHERE {' AND '.join(where)} ORDER BY id",
            args,
        )
    ]


def session_files(conn: sqlite3.Connection, session_key: str, *, skip_steps: list[int] | None = None) -> list[str]:
    """The distinct files a session touched, in first-touch order, leaving out the calls at ``skip_steps``."""
    skip = sorted(set(skip_steps or []))
    return [
        r[0]
        for r in conn.execute(
            f"""SELECT file_path FROM observer_events WHERE session_key = ? AND file_path IS NOT NULL
           AND step NOT IN ({",".join("?" * len(skip))}) GROUP BY file_path ORDER BY min(step)""",
            (session_key, *skip),
        )
    ]


def project_sessions(conn: sqlite3.Connection, project: str | None, *, kept_only: bool = False) -> dict[str, list[str]]:
    """``session -> distinct files touched`` for every observed session of ``project`` (None: all);
    ``kept_only`` leaves out the calls whose signals a validation discarded (a failed session's,
    an abandoned work step's)."""
    out: dict[str, list[str]] = {}
    args: list[Any] = [project] if project is not None else []
    cond = "e.project = ?" if project is not None else "1=1"
    if kept_only:
        cond += """ AND NOT EXISTS (SELECT 1 FROM observer_signals s WHERE s.session_key = e.session_key
                                    AND s.step = e.step AND s.processed = ?)"""
        args.append(DISCARDED)
    for s, f in conn.execute(
        f"""SELECT e.session_key, e.file_path FROM observer_events e WHERE {cond}
                                 AND e.file_path IS NOT NULL GROUP BY e.session_key, e.file_path""",
        args,
    ):
        out.setdefault(s, []).append(f)
    return out


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One observed session, for promotion: its project, steps, pending signals, edited files (in
    first-edit order), the time of its last call (ms) and whether that call failed."""

    project: str | None
    steps: int
    pending_signals: int
    edited_files: list[str]
    last_ms: int
    last_failed: bool


def session_summary(conn: sqlite3.Connection, session_key: str) -> SessionSummary | None:
    """The session's :class:`SessionSummary`; None when no tool call of it was recorded."""
    row = conn.execute(
        """SELECT max(step), max(project), max(ts_ms) FROM observer_events WHERE session_key = ?""", (session_key,)
    ).fetchone()
    if row is None or row[0] is None:
        return None
    last = conn.execute(
        """SELECT error_hash FROM observer_events WHERE session_key = ? ORDER BY step DESC LIMIT 1""", (session_key,)
    ).fetchone()
    pending = conn.execute(
        "SELECT count(*) FROM observer_signals WHERE session_key = ? AND processed = ?", (session_key, PENDING)
    ).fetchone()[0]
    edited = [
        r[0]
        for r in conn.execute(
            """SELECT file_path FROM observer_events WHERE session_key = ? AND is_edit = 1 AND file_path IS NOT NULL
           GROUP BY file_path ORDER BY min(step)""",
            (session_key,),
        )
    ]
    return SessionSummary(row[1], int(row[0]), int(pending), edited, int(row[2] or 0), last[0] is not None)


def mark_session(conn: sqlite3.Connection, session_key: str, state: int) -> int:
    """Set the session's pending signals to ``state`` (PROMOTED or DISCARDED); returns how many."""
    return conn.execute(
        "UPDATE observer_signals SET processed = ? WHERE session_key = ? AND processed = ?",
        (state, session_key, PENDING),
    ).rowcount


def signals_with_time(
    conn: sqlite3.Connection, *, project: str | None, kept_only: bool
) -> list[tuple[str, str, int, dict[str, Any], str]]:
    """``(session_key, signal_type, step, data, created_at)`` of ``project`` (None: every project), by
    id; ``kept_only`` leaves out discarded signals."""
    where: list[str] = []
    args: list[Any] = []
    if project is not None:
        where.append("project = ?")
        args.append(project)
    if kept_only:
        where.append("processed != ?")
        args.append(DISCARDED)
    cond = " AND ".join(where) or "1=1"
    return [
        (r[0], r[1], int(r[2]), json.loads(r[3]), r[4])
        for r in conn.execute(
            f"SELECT session_key, signal_type, step, data, created_at FROM observer_signals WHERE {cond} ORDER BY id",
            args,
        )
    ]


def observer_memory(
    conn: sqlite3.Connection, project: str | None, mem_type: str, key_files: list[str], module: str | None = None
) -> str | None:
    """The id of the project's newest live ``observer_inferred`` memory of ``mem_type`` about the
    same thing, or None: with ``module``, the one whose ``type_fields.module_trigger`` is it (a
    prefetch pattern); else the one whose ``related_files`` start with ``key_files`` (1 or 2 paths)."""
    if module is not None:
        conds, args = "json_extract(type_fields, '$.module_trigger') = ?", [module]
    else:
        conds = " AND ".join(f"json_extract(related_files, '$[{i}]') = ?" for i in range(len(key_files)))
        args = list(key_files)
    row = conn.execute(
        f"""SELECT id FROM memories INDEXED BY idx_memories_type
            WHERE type = ? AND project IS ? AND source = 'observer_inferred' AND is_deleted = 0
              AND superseded_by IS NULL AND {conds} ORDER BY created_at DESC LIMIT 1""",
        (mem_type, project or None, *args),
    ).fetchone()
    return None if row is None else str(row[0])


def stored_hashes(conn: sqlite3.Connection, hashes: list[str]) -> set[str]:
    """Which of the content hashes belong to a live memory."""
    if not hashes:
        return set()
    marks = ",".join("?" * len(hashes))
    return {
        r[0]
        for r in conn.execute(
            f"SELECT content_hash FROM memories WHERE is_deleted = 0 AND content_hash IN ({marks})", hashes
        )
    }


# --- work steps (migration 0018) ---------------------------------------------------------------

#: ``observer_steps.kind``: the agent's turn ended, a subagent finished, a Task tool call returned.
STEP_KINDS = ("stop", "subagent_stop", "task")


def add_step(
    conn: sqlite3.Connection,
    session_key: str,
    project: str | None,
    kind: str,
    ts_ms: int,
    *,
    last_step: int | None = None,
    agent_id: str | None = None,
    agent_type: str | None = None,
    context_tokens: int | None = None,
) -> int:
    """Record a work-step boundary after ``last_step`` (default: the session's last recorded tool
    call, 0 when none) with the context size then (``context_tokens``, when known); returns that step."""
    if last_step is None:
        row = conn.execute("SELECT max(step) FROM observer_events WHERE session_key = ?", (session_key,)).fetchone()
        last_step = int(row[0] or 0)
    conn.execute(
        """INSERT INTO observer_steps (session_key, project, last_step, kind, agent_id, agent_type, ts_ms,
               context_tokens) VALUES (?,?,?,?,?,?,?,?)""",
        (session_key, project, last_step, kind, agent_id, agent_type, ts_ms, context_tokens),
    )
    return last_step


def step_ends(conn: sqlite3.Connection, session_key: str) -> list[tuple[int, str]]:
    """The session's work-step boundaries ``(last_step, kind)``, in step order."""
    return [
        (int(r[0]), r[1])
        for r in conn.execute(
            "SELECT last_step, kind FROM observer_steps WHERE session_key = ? ORDER BY last_step, id", (session_key,)
        )
    ]


def call_outcomes(conn: sqlite3.Connection, session_key: str) -> list[tuple[int, bool]]:
    """``(step, failed)`` of each recorded tool call of the session, in order."""
    return [
        (int(r[0]), r[1] is not None)
        for r in conn.execute(
            "SELECT step, error_hash FROM observer_events WHERE session_key = ? ORDER BY step", (session_key,)
        )
    ]


def mark_steps(conn: sqlite3.Connection, session_key: str, steps: list[int], state: int) -> int:
    """Set the pending signals of the session completed at ``steps`` to ``state``; returns how many."""
    total = 0
    for start in range(0, len(steps), 500):
        chunk = steps[start : start + 500]
        marks = ",".join("?" * len(chunk))
        total += conn.execute(
            f"""UPDATE observer_signals SET processed = ? WHERE session_key = ? AND processed = ?
                AND step IN ({marks})""",
            (state, session_key, PENDING, *chunk),
        ).rowcount
    return total


# --- context cost (migration 0019) -------------------------------------------------------------


def session_tokens(conn: sqlite3.Connection, session_key: str) -> tuple[int | None, int | None]:
    """``(largest context_tokens of the session's steps, sum of its calls' payload_chars)``; each
    None when nothing was recorded."""
    ctx = conn.execute(
        "SELECT max(context_tokens) FROM observer_steps WHERE session_key = ?", (session_key,)
    ).fetchone()[0]
    chars = conn.execute(
        "SELECT sum(payload_chars) FROM observer_events WHERE session_key = ?", (session_key,)
    ).fetchone()[0]
    return (None if ctx is None else int(ctx)), (None if chars is None else int(chars))


def add_cost_samples(
    conn: sqlite3.Connection, project: str, session_key: str, modules: list[str], tokens: int, basis: str, at: str
) -> None:
    """One sample per module for the session (a session ended again replaces its samples)."""
    conn.executemany(
        """INSERT OR REPLACE INTO context_cost_samples (project, module, session_key, tokens, basis, created_at)
           VALUES (?,?,?,?,?,?)""",
        [(project, m, session_key, tokens, basis, at) for m in modules],
    )


def cost_samples(conn: sqlite3.Connection, project: str, module: str, limit: int) -> list[int]:
    """The module's newest ``limit`` samples (tokens), newest first."""
    return [
        int(r[0])
        for r in conn.execute(
            """SELECT tokens FROM context_cost_samples WHERE project = ? AND module = ?
               ORDER BY created_at DESC, rowid DESC LIMIT ?""",
            (project, module, limit),
        )
    ]


def trim_cost_samples(conn: sqlite3.Connection, keep: int, *, dry_run: bool = False) -> int:
    """Delete every module's samples beyond its newest ``keep``; returns how many (would be) deleted."""
    older = """SELECT rowid FROM (SELECT rowid, row_number() OVER (PARTITION BY project, module
                 ORDER BY created_at DESC, rowid DESC) AS rn FROM context_cost_samples) WHERE rn > ?"""
    if dry_run:
        return int(conn.execute(f"SELECT count(*) FROM ({older})", (keep,)).fetchone()[0])
    return conn.execute(f"DELETE FROM context_cost_samples WHERE rowid IN ({older})", (keep,)).rowcount


def context_cost_memory(conn: sqlite3.Connection, project: str, module: str) -> str | None:
    """The id of the project's live ``context_cost`` memory for ``module`` (the newest), or None."""
    row = conn.execute(
        """SELECT id FROM memories INDEXED BY idx_memories_type
           WHERE type = 'context_cost' AND project IS ? AND is_deleted = 0 AND superseded_by IS NULL
             AND json_extract(type_fields, '$.module') = ? ORDER BY created_at DESC LIMIT 1""",
        (project or None, module),
    ).fetchone()
    return None if row is None else str(row[0])
