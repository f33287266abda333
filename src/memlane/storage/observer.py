"""SQL for the observer's scratchpad (``observer_events``, ``observer_signals``; migration 0015)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded tool call."""

    step: int
    tool_name: str
    file_path: str | None
    is_edit: bool
    error_hash: str | None
    ts_ms: int


def next_step(conn: sqlite3.Connection, session_key: str) -> int:
    """The step number the session's next tool call gets (1 for the first)."""
    row = conn.execute("SELECT max(step) FROM observer_events WHERE session_key = ?", (session_key,)).fetchone()
    return int(row[0] or 0) + 1


def add_event(conn: sqlite3.Connection, session_key: str, project: str | None, step: int, tool_name: str,
              file_path: str | None, is_edit: bool, error_hash: str | None, error_text: str | None,
              ts_ms: int) -> None:
    """Record one tool call."""
    conn.execute(
        """INSERT INTO observer_events (session_key, project, step, tool_name, file_path, is_edit, error_hash,
               error_text, ts_ms) VALUES (?,?,?,?,?,?,?,?,?)""",
        (session_key, project, step, tool_name, file_path, int(is_edit), error_hash, error_text, ts_ms))


def events(conn: sqlite3.Connection, session_key: str, since_step: int = 0) -> list[Event]:
    """The session's tool calls after ``since_step``, in order."""
    return [Event(r[0], r[1], r[2], bool(r[3]), r[4], int(r[5])) for r in conn.execute(
        """SELECT step, tool_name, file_path, is_edit, error_hash, ts_ms FROM observer_events
           WHERE session_key = ? AND step > ? ORDER BY step""", (session_key, since_step))]


def add_signals(conn: sqlite3.Connection, session_key: str, project: str | None, step: int,
                signals: list[tuple[str, dict[str, Any]]], at: str) -> None:
    """Store derived signals ``(type, data)``."""
    conn.executemany(
        """INSERT INTO observer_signals (session_key, project, step, signal_type, data, created_at)
           VALUES (?,?,?,?,?,?)""",
        [(session_key, project, step, t, json.dumps(d), at) for t, d in signals])


def signals(conn: sqlite3.Connection, *, session_key: str | None = None, project: str | None = None,
            signal_type: str | None = None) -> list[tuple[str, str, int, dict[str, Any]]]:
    """``(session_key, signal_type, step, data)`` rows, by id; filtered by session, project, type."""
    where, args = ["1=1"], []
    for col, v in (("session_key", session_key), ("project", project), ("signal_type", signal_type)):
        if v is not None:
            where.append(f"{col} = ?")
            args.append(v)
    return [(r[0], r[1], int(r[2]), json.loads(r[3])) for r in conn.execute(
        f"SELECT session_key, signal_type, step, data FROM observer_signals WHERE {' AND '.join(where)} ORDER BY id",
        args)]


def session_files(conn: sqlite3.Connection, session_key: str) -> list[str]:
    """The distinct files a session touched, in first-touch order."""
    return [r[0] for r in conn.execute(
        """SELECT file_path FROM observer_events WHERE session_key = ? AND file_path IS NOT NULL
           GROUP BY file_path ORDER BY min(step)""", (session_key,))]


def project_sessions(conn: sqlite3.Connection, project: str | None) -> dict[str, list[str]]:
    """``session -> distinct files touched`` for every observed session of ``project`` (None: all)."""
    out: dict[str, list[str]] = {}
    cond, args = ("project = ?", (project,)) if project is not None else ("1=1", ())
    for s, f in conn.execute(f"""SELECT session_key, file_path FROM observer_events WHERE {cond}
                                 AND file_path IS NOT NULL GROUP BY session_key, file_path""", args):
        out.setdefault(s, []).append(f)
    return out
