"""The observer's first half (seed memory-system-v3-design.md section 5; docs/v3.md): tool calls in, signals and the
crash-safe scratchpad, and the inference rules' candidates out.

Each tool call is written to ``observer_events`` as it arrives, with the signals it completes
(``observer_signals``), in one transaction: a daemon killed mid-session keeps everything seen so
far. Signals (seed "Signal Taxonomy"):

* ``file_access``: a call that accessed a file of the project (:func:`accessed_file`: Read, Edit,
  Write, MultiEdit, NotebookEdit; a Grep or Glob only within one file).
* ``co_access``: that file and each other file touched within the previous :data:`CO_STEPS` steps.
* ``error_retry``: a failed call, with how many times this tool failed with the same error.
* ``backtrack``: an edit of a file already edited within the previous :data:`BACKTRACK_STEPS`
  steps; ``cascading_change`` when other files were edited in between, else ``wrong_assumption``.
* ``sequence``: a run of three tools seen again in the session, with its count.
* ``time_anomaly``: a file read for the :data:`READS_ANOMALY`-th time in the session, never edited.

Work steps (migration 0018): :meth:`Observer.step_end` records a boundary when the agent's turn
ends (Claude Code's Stop hook) or a subagent finishes (SubagentStop); a Task tool call (the parent's
view of a subagent's task) gets one when it starts (:meth:`Observer.note_start`) and one when it
returns (:meth:`Observer.record`), so the task is a step of its own. The
promotion's validation filter reads them (memlane.v3.promotion). :meth:`Observer.note_start`
keeps a call's start (PreToolUse) in memory so its PostToolUse gets a ``duration_ms``.

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
from memlane.errors import ValidationError
from memlane.lru import LRUCache
from memlane.projectroot import work_tree_root
from memlane.redact import redact
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
#: Claude Code's tools that run a subagent (``Task``; ``Agent`` in newer versions): their return
#: ends a work step.
TASK_TOOLS = frozenset({"Task", "Agent"})
#: Call starts (PreToolUse) held in memory waiting for their PostToolUse.
MAX_PENDING_STARTS = 4096
#: A start older than this (ms) before its end is not that call's start: no duration.
MAX_DURATION_MS = 24 * 3600 * 1000


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


#: Tools whose ``file_path`` / ``notebook_path`` names the file they read or write (any other
#: tool with one of those keys, an MCP tool's for instance, counts the same way).
FILE_PATH_KEYS = ("file_path", "notebook_path")
#: Tools whose ``path`` is a search scope: a file access only when it names a file.
SEARCH_TOOLS = frozenset({"Grep", "Glob"})


def accessed_file(tool_name: str, tool_input: Any, cwd: str | None) -> str | None:
    """The project file a tool call accessed, relative to its work tree's root (docs/v3.md, "Which
    tool calls are file accesses"), or None.

    ``file_path`` / ``notebook_path`` (Read, Edit, Write, MultiEdit, NotebookEdit) name a file; a
    Grep's or Glob's ``path`` is a search scope and counts only when it is an existing regular file
    (a Grep in one file); any other key (Bash's command, a search's results) names none. The path
    must lie under the root of ``cwd``'s work tree (:func:`memlane.projectroot.work_tree_root`):
    an absolute path elsewhere (``/tmp/...``), a ``..`` escape or the root itself is no file of
    the project. Without ``cwd`` only a relative path is kept.

    Raises:
        ValidationError: a path with a NUL or a lone surrogate.
    """
    if not isinstance(tool_input, dict):
        return None
    keys = ("path",) if tool_name in SEARCH_TOOLS else FILE_PATH_KEYS
    raw = next((v for k in keys if isinstance(v := tool_input.get(k), str) and v.strip()), None)
    if raw is None:
        return None
    check_str(raw, "tool_input.path")
    if cwd is None:
        if os.path.isabs(raw):
            return None
        rel = posixpath.normpath(raw.replace(os.sep, "/"))
        return None if rel in (".", "..") or rel.startswith("../") else rel
    root = work_tree_root(cwd, resolve=False)
    full = os.path.normpath(os.path.join(os.path.abspath(cwd), os.path.expanduser(raw)))
    rel = os.path.relpath(full, root)
    if rel == "." or rel == ".." or rel.startswith(".." + os.sep):
        return None
    if tool_name in SEARCH_TOOLS and not os.path.isfile(full):
        return None
    return rel.replace(os.sep, "/")


class Observer:
    """Records tool calls and derives signals; suggests memories from them."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # (session, tool_use_id or tool name) -> start time (ms) of a call not yet ended. In memory
        # only: a daemon restart between a call's start and its end loses that call's duration.
        self._starts: LRUCache[tuple[str, str], int] = LRUCache(MAX_PENDING_STARTS)

    def note_start(
        self,
        session_key: str,
        tool_name: str,
        tool_use_id: str | None,
        ts_ms: int | None = None,
        *,
        project: str | None = None,
    ) -> None:
        """Remember when a tool call started (PreToolUse): its end (:meth:`record`) gets a duration.
        A Task / Agent call's start ends a work step (the calls before the subagent's task).

        Raises:
            ValidationError: an empty session or tool name, a bad project.
        """
        check_str(session_key, "session_id", max_chars=200)
        check_str(tool_name, "tool_name", max_chars=100)
        if project is not None:
            check_str(project, "project", max_chars=200)
        ts = int(time.time() * 1000) if ts_ms is None else int(ts_ms)
        self._starts.put((session_key, tool_use_id or tool_name), ts)
        if tool_name in TASK_TOOLS:
            self.db.write(lambda c: obs_sql.add_step(c, session_key, project, "task", ts))

    def step_end(
        self,
        session_key: str,
        kind: str,
        *,
        project: str | None = None,
        agent_id: str | None = None,
        agent_type: str | None = None,
        ts_ms: int | None = None,
        context_tokens: int | None = None,
    ) -> dict[str, Any]:
        """Record a work-step boundary (``kind``: ``stop`` or ``subagent_stop``) after the session's
        last recorded tool call, with the context size then (``context_tokens``, from the transcript).

        Returns:
            ``{"last_step": int, "failed": bool}``: the step it closes (0: no call recorded yet) and
            whether that step's last call failed.

        Raises:
            ValidationError: an empty session id, a kind other than stop / subagent_stop, a bad project.
        """
        check_str(session_key, "session_id", max_chars=200)
        if kind not in ("stop", "subagent_stop"):
            raise ValidationError("kind: expected stop or subagent_stop", details={"field": "kind"})
        if project is not None:
            check_str(project, "project", max_chars=200)
        ts = int(time.time() * 1000) if ts_ms is None else int(ts_ms)

        def job(conn: Any) -> dict[str, Any]:
            last = obs_sql.add_step(
                conn,
                session_key,
                project,
                kind,
                ts,
                agent_id=agent_id,
                agent_type=agent_type,
                context_tokens=context_tokens,
            )
            outcomes = obs_sql.call_outcomes(conn, session_key)
            return {"last_step": last, "failed": bool(outcomes) and outcomes[-1][1]}

        return self.db.write(job)

    def steps(self, session_key: str) -> list[dict[str, Any]]:
        """The session's work steps, in order: ``[{"first_step", "last_step", "end", "failed"}]``
        (``end``: the boundary's kind, ``open`` for calls after the last boundary;
        see :func:`segments`)."""
        check_str(session_key, "session_id", max_chars=200)
        ends = self.db.read(lambda c: obs_sql.step_ends(c, session_key))
        outcomes = self.db.read(lambda c: obs_sql.call_outcomes(c, session_key))
        return [seg.as_dict() for seg in segments(ends, outcomes)]

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
        tool_use_id: str | None = None,
        payload_chars: int | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """Record one tool call (``error``: the failure text when it failed; ``ts_ms``: when it
        ended, default now; ``tool_use_id`` pairs it with its start; ``payload_chars``: the size of
        its hook input, for the context cost) and return the signals it
        completed, ``[(type, data)]``. A call whose start was noted (:meth:`note_start`) gets its
        ``duration_ms``; a Task / Agent call ends a work step.

        Raises:
            ValidationError: an empty session or tool name, a bad file path or project.
        """
        check_str(session_key, "session_id", max_chars=200)
        check_str(tool_name, "tool_name", max_chars=100)
        if project is not None:
            check_str(project, "project", max_chars=200)
        if error is not None:  # tool output: cleaned and redacted (a failing command may print a secret), never refused
            error = error[:MAX_ERROR_CHARS].replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
            error = redact(error) if error.strip() else "error"
        path = accessed_file(tool_name, tool_input, cwd)
        ts = int(time.time() * 1000) if ts_ms is None else int(ts_ms)
        is_edit = tool_name in EDIT_TOOLS and path is not None
        err_hash = hashlib.sha256(f"{tool_name}\x00{error}".encode()).hexdigest()[:16] if error else None
        at = now_iso()
        start = self._starts.pop((session_key, tool_use_id or tool_name))
        duration = ts - start if start is not None and 0 <= ts - start <= MAX_DURATION_MS else None

        def job(conn: Any) -> list[tuple[str, dict[str, Any]]]:
            step = obs_sql.next_step(conn, session_key)
            history = obs_sql.events(conn, session_key)
            obs_sql.add_event(
                conn,
                session_key,
                project,
                step,
                tool_name,
                path,
                is_edit,
                err_hash,
                error,
                ts,
                tool_use_id,
                duration,
                payload_chars,
            )
            sig = derive(history, obs_sql.Event(step, tool_name, path, is_edit, err_hash, ts, duration), error)
            obs_sql.add_signals(conn, session_key, project, step, sig, at)
            if tool_name in TASK_TOOLS:
                obs_sql.add_step(conn, session_key, project, "task", ts, last_step=step)
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
        access: dict[str, Any] = {
            "file_path": ev.file_path,
            "tool_name": ev.tool_name,
            "step_index": ev.step,
            "timestamp": ev.ts_ms,
        }
        if ev.duration_ms is not None:
            access["duration_ms"] = ev.duration_ms
        out.append(("file_access", access))
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
                # the step count stays out of the text: two re-edits of one file are one observation
                else f"[observer] {d['edited_file_path']} was edited again within {BACKTRACK_STEPS} steps of "
                "an edit: the first edit rested on a wrong assumption"
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


class Segment:
    """One work step of a session: its tool calls ``first_step..last_step`` (inclusive), how it
    ended (``end``: ``stop``, ``subagent_stop``, ``task``, or ``open`` after the last boundary) and
    whether its last call failed."""

    __slots__ = ("first_step", "last_step", "end", "failed")

    def __init__(self, first_step: int, last_step: int, end: str, failed: bool) -> None:
        self.first_step = first_step
        self.last_step = last_step
        self.end = end
        self.failed = failed

    def as_dict(self) -> dict[str, Any]:
        return {"first_step": self.first_step, "last_step": self.last_step, "end": self.end, "failed": self.failed}


def segments(ends: list[tuple[int, str]], outcomes: list[tuple[int, bool]]) -> list[Segment]:
    """Cut a session's calls ``outcomes`` (``(step, failed)`` in order) at its boundaries ``ends``
    (``(last_step, kind)`` in order) into work steps; a boundary with no call since the previous
    one makes no step. Without a boundary the whole session is one ``open`` step."""
    out: list[Segment] = []
    i = 0
    for last, kind in ends:
        calls = []
        while i < len(outcomes) and outcomes[i][0] <= last:
            calls.append(outcomes[i])
            i += 1
        if calls:
            out.append(Segment(calls[0][0], calls[-1][0], kind, calls[-1][1]))
    if i < len(outcomes):
        out.append(Segment(outcomes[i][0], outcomes[-1][0], "open", outcomes[-1][1]))
    return out


def abandoned(segs: list[Segment]) -> list[Segment]:
    """The work steps that ended in failure and were abandoned: a failed step followed, later in
    the session, by a step that did not fail (the work was retried or taken another way and then
    went on; seed section 5, "Validation filter": "signals associated with approaches that were
    tried and abandoned"). A failed step with no passing step after it is not abandoned: it is
    how the session ended, and the session's own outcome decides."""
    out: list[Segment] = []
    passed_later = False
    for seg in reversed(segs):
        if seg.failed and passed_later:
            out.append(seg)
        passed_later = passed_later or not seg.failed
    return out[::-1]


def check_payload_error(tool_response: Any) -> str | None:
    """The failure text of a PostToolUse ``tool_response`` (``is_error``/``error``), or None."""
    if isinstance(tool_response, dict) and (tool_response.get("is_error") or tool_response.get("error")):
        text = tool_response.get("error") or tool_response.get("content") or "error"
        return str(text)[:MAX_ERROR_CHARS]
    return None
