"""The observer's first half (seed memory-system-v3-design.md section 5; docs/v3.md): tool calls in, signals and the
crash-safe scratchpad, and the inference rules' candidates out.

Each tool call is written to ``observer_events`` as it arrives, with the signals it completes
(``observer_signals``), in one transaction: a daemon killed mid-session keeps everything seen so
far. Signals (seed "Signal Taxonomy"):

* ``file_access``: a call that names a file (Read, Edit, Write, MultiEdit, NotebookEdit, Grep, Glob).
* ``co_access``: that file and each other file touched within the previous :data:`CO_STEPS` steps.
* ``error_retry``: a failed call, with how many times this tool failed with the same error.
* ``backtrack``: an edit of a file already edited within the previous :data:`BACKTRACK_STEPS`
  steps; ``cascading_change`` when other files were edited in between, else ``wrong_assumption``.
* ``sequence``: a run of three tools seen again in the session, with its count.
* ``time_anomaly``: a file read for the :data:`READS_ANOMALY`-th time in the session, never edited.

:meth:`Observer.inferences` applies the seed's inference rules to a project's signals and returns
the memories they suggest with a structured template text; :mod:`memlane.v3.promotion` turns them
into memories after validation.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from collections import Counter, defaultdict
from typing import Any

from memlane.config.clock import now_iso
from memlane.storage import observer as obs_sql
from memlane.storage.db import Database
from memlane.v3.model import check_str

CO_STEPS = 3
BACKTRACK_STEPS = 5
READS_ANOMALY = 4
ERROR_REPEATS = 3
CO_ACCESS_SESSIONS = 3
PREFETCH_SHARE = 0.8
PREFETCH_MIN_SESSIONS = 3
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
FILE_KEYS = ("file_path", "notebook_path", "path")
MAX_ERROR_CHARS = 500


def _rel(path: str, cwd: str | None) -> str:
    """``path`` relative to ``cwd`` when it is an absolute path inside it (POSIX separators)."""
    if cwd and os.path.isabs(path):
        try:
            rel = os.path.relpath(path, cwd)
        except ValueError:
            return path
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return path


def file_of(tool_input: Any, cwd: str | None = None) -> str | None:
    """The file a tool call names (``file_path``, ``notebook_path`` or ``path``), relative to ``cwd``."""
    if not isinstance(tool_input, dict):
        return None
    for k in FILE_KEYS:
        v = tool_input.get(k)
        if isinstance(v, str) and v.strip():
            return _rel(check_str(v, f"tool_input.{k}"), cwd)
    return None


class Observer:
    """Records tool calls and derives signals; suggests memories from them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        session_key: str,
        tool_name: str,
        tool_input: Any = None,
        *,
        project: str | None = None,
        cwd: str | None = None,
        error: str | None = None,
        ts_ms: int | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """Record one tool call (``error``: the failure text when it failed) and return the signals
        it completed, ``[(type, data)]``.

        Raises:
            ValidationError: an empty session or tool name, a bad file path or project.
        """
        check_str(session_key, "session_id", max_chars=200)
        check_str(tool_name, "tool_name", max_chars=100)
        if project is not None:
            check_str(project, "project", max_chars=200)
        if error is not None:  # tool output: cleaned, never refused
            error = error[:MAX_ERROR_CHARS].replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
            error = error if error.strip() else "error"
        path = file_of(tool_input, cwd)
        ts = int(time.time() * 1000) if ts_ms is None else int(ts_ms)
        is_edit = tool_name in EDIT_TOOLS and path is not None
        err_hash = hashlib.sha256(f"{tool_name}\x00{error}".encode()).hexdigest()[:16] if error else None
        at = now_iso()

        def job(conn: Any) -> list[tuple[str, dict[str, Any]]]:
            step = obs_sql.next_step(conn, session_key)
            history = obs_sql.events(conn, session_key)
            obs_sql.add_event(conn, session_key, project, step, tool_name, path, is_edit, err_hash, error, ts)
            sig = derive(history, obs_sql.Event(step, tool_name, path, is_edit, err_hash, ts), error)
            obs_sql.add_signals(conn, session_key, project, step, sig, at)
            return sig

        return self.db.write(job)

    def signals(self, session_key: str) -> list[dict[str, Any]]:
        """The scratchpad of one session: every signal, in order."""
        check_str(session_key, "session_id", max_chars=200)
        rows = self.db.read(lambda c: obs_sql.signals(c, session_key=session_key))
        return [{"type": t, "step": s, **d} for _, t, s, d in rows]

    def has_events(self, session_key: str) -> bool:
        """Whether any tool call of the session was recorded."""
        return self.db.read(lambda c: obs_sql.session_summary(c, session_key)) is not None

    def last_call_failed(self, session_key: str) -> bool:
        """Whether the session's last recorded tool call failed (False when none was recorded)."""
        info = self.db.read(lambda c: obs_sql.session_summary(c, session_key))
        return info is not None and info.last_failed

    def session_files(self, session_key: str) -> list[str]:
        """The distinct files a session touched, in first-touch order."""
        return self.db.read(lambda c: obs_sql.session_files(c, session_key))

    def inferences(self, project: str | None = None) -> list[dict[str, Any]]:
        """The seed's inference rules over a project's kept signals (not those a failed validation
        discarded): ``[{"type", "content",
        "related_files", "rule", "evidence"}]``; ``content`` is the structured template text (no
        LLM synthesis is built)."""
        rows = self.db.read(lambda c: obs_sql.signals(c, project=project, kept_only=True))
        per_session = self.db.read(lambda c: obs_sql.project_sessions(c, project, kept_only=True))
        return infer(rows, per_session)


def derive(history: list[obs_sql.Event], ev: obs_sql.Event, error: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The signals ``ev`` completes given the session's earlier events ``history`` (oldest first)."""
    out: list[tuple[str, dict[str, Any]]] = []
    if ev.file_path is not None:
        out.append(
            (
                "file_access",
                {"file_path": ev.file_path, "tool_name": ev.tool_name, "step_index": ev.step, "timestamp": ev.ts_ms},
            )
        )
        seen: set[str] = set()
        for h in reversed(history):
            if ev.step - h.step > CO_STEPS:
                break
            if h.file_path and h.file_path != ev.file_path and h.file_path not in seen:
                seen.add(h.file_path)
                out.append(
                    (
                        "co_access",
                        {
                            "file_a": h.file_path,
                            "file_b": ev.file_path,
                            "time_delta_ms": ev.ts_ms - h.ts_ms,
                            "step_delta": ev.step - h.step,
                        },
                    )
                )
    if ev.is_edit:
        between: set[str] = set()
        for h in reversed(history):
            if ev.step - h.step > BACKTRACK_STEPS:
                break
            if h.is_edit and h.file_path == ev.file_path:
                cause = "cascading_change" if between else "wrong_assumption"
                out.append(
                    (
                        "backtrack",
                        {
                            "edited_file_path": ev.file_path,
                            "re_edited_within_steps": ev.step - h.step,
                            "likely_cause": cause,
                            "edited_between": sorted(between),
                        },
                    )
                )
                break
            if h.is_edit and h.file_path:
                between.add(h.file_path)
    if ev.error_hash is not None:
        n = 1 + sum(1 for h in history if h.error_hash == ev.error_hash)
        out.append(
            (
                "error_retry",
                {"tool_name": ev.tool_name, "error_message": error, "error_hash": ev.error_hash, "retry_count": n},
            )
        )
    tools = [h.tool_name for h in history] + [ev.tool_name]
    if len(tools) >= 3:
        tri = tuple(tools[-3:])
        freq = sum(1 for i in range(len(tools) - 2) if tuple(tools[i : i + 3]) == tri)
        if freq >= 2:
            out.append(("sequence", {"tool_sequence": list(tri), "frequency": freq}))
    if ev.tool_name == "Read" and ev.file_path is not None:
        same = [h for h in history if h.file_path == ev.file_path]
        reads = [h for h in same if h.tool_name == "Read"]
        if len(reads) + 1 == READS_ANOMALY and not any(h.is_edit for h in same):
            out.append(
                (
                    "time_anomaly",
                    {"file_path": ev.file_path, "read_count": READS_ANOMALY, "dwell_ms": ev.ts_ms - reads[0].ts_ms},
                )
            )
    return out


def infer(rows: list[tuple[str, str, int, dict[str, Any]]], per_session: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Apply the inference rules (seed "Memory Inference Rules") to signal rows ``(session, type,
    step, data)`` and each session's files; see :meth:`Observer.inferences`."""
    out: list[dict[str, Any]] = []
    pairs: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s, t, _, d in rows:
        if t == "co_access":
            a, b = sorted((d["file_a"], d["file_b"]))
            pairs[(a, b)].add(s)
    for (a, b), sessions in sorted(pairs.items()):
        if len(sessions) >= CO_ACCESS_SESSIONS:
            out.append(
                {
                    "type": "causal_dependency",
                    "rule": "co_access_3_sessions",
                    "related_files": [a, b],
                    "content": f"[observer] {a} and {b} are used together: accessed within {CO_STEPS} steps "
                    f"of each other in {len(sessions)} sessions.",
                    "evidence": {"sessions": len(sessions)},
                }
            )
    for s, t, _, d in rows:
        if t == "time_anomaly":
            out.append(
                {
                    "type": "module_insight",
                    "rule": "read_4_without_edit",
                    "related_files": [d["file_path"]],
                    "content": f"[observer] {d['file_path']} was read {d['read_count']} times in one session "
                    "without being edited: it may be confusing or poorly structured.",
                    "evidence": {"session": s, "dwell_ms": d["dwell_ms"]},
                }
            )
        elif t == "error_retry" and d["retry_count"] == ERROR_REPEATS:
            out.append(
                {
                    "type": "error_pattern",
                    "rule": "same_error_3_times",
                    "related_files": [],
                    "content": f"[observer] {d['tool_name']} failed {ERROR_REPEATS} times in one session with: "
                    f"{d['error_message']}",
                    "evidence": {"session": s, "error_hash": d["error_hash"]},
                }
            )
        elif t == "backtrack":
            cascading = d["likely_cause"] == "cascading_change"
            files = [d["edited_file_path"], *d.get("edited_between", [])] if cascading else [d["edited_file_path"]]
            text = (
                f"[observer] editing {d['edited_file_path']} required paired edits in "
                f"{', '.join(d.get('edited_between', []))} before it was edited again"
                if cascading
                else f"[observer] {d['edited_file_path']} was edited again within {d['re_edited_within_steps']} "
                "steps: the first edit rested on a wrong assumption"
            )
            out.append(
                {
                    "type": "gotcha",
                    "rule": "backtrack_cascading" if cascading else "re_edit_within_5",
                    "related_files": files,
                    "content": text + ".",
                    "evidence": {"session": s},
                }
            )
    modules: dict[str, list[set[str]]] = defaultdict(list)
    for files in per_session.values():
        by_mod: dict[str, set[str]] = defaultdict(set)
        for f in files:
            by_mod[posixpath.dirname(f)].add(f)
        for mod, fs in by_mod.items():
            modules[mod].append(fs)
    for mod, mod_sessions in sorted(modules.items()):
        if len(mod_sessions) < PREFETCH_MIN_SESSIONS:
            continue
        counts = Counter(f for fs in mod_sessions for f in fs)
        always = sorted(f for f, n in counts.items() if n / len(mod_sessions) > PREFETCH_SHARE)
        if always:
            out.append(
                {
                    "type": "prefetch_pattern",
                    "rule": "accessed_in_80pct_of_module_sessions",
                    "related_files": always,
                    "content": f"[observer] work in {mod or 'the project root'} reads {', '.join(always)} in more "
                    f"than {int(PREFETCH_SHARE * 100)} % of its sessions ({len(mod_sessions)} sessions).",
                    "type_fields": {
                        "module_trigger": mod or ".",
                        "always_read_files": always,
                        "session_count": len(mod_sessions),
                    },
                    "evidence": {"sessions": len(mod_sessions)},
                }
            )
    return out


def check_payload_error(tool_response: Any) -> str | None:
    """The failure text of a PostToolUse ``tool_response`` (``is_error``/``error``), or None."""
    if isinstance(tool_response, dict) and (tool_response.get("is_error") or tool_response.get("error")):
        text = tool_response.get("error") or tool_response.get("content") or "error"
        return str(text)[:MAX_ERROR_CHARS]
    return None
