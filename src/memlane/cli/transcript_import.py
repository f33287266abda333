"""``memlane import --format claude-code``: seed memlane from past Claude Code sessions.

Each transcript (``~/.claude/projects/<project>/<session>.jsonl``) is replayed
(:mod:`memlane.connectors.claude_code_replay`) and its hook events go to the daemon through the
same translation a live hook uses (:func:`memlane.connectors.events.from_claude_code`, then
:func:`memlane.hookclient.build_body`):

* every answered tool call -> ``/api/v3/observer/tool-use`` (PostToolUse / PostToolUseFailure):
  the observer's scratchpad and signals;
* the end of each turn (Stop) and of each subagent (SubagentStop) -> ``/api/v3/observer/step-end``:
  the work-step boundaries the promotion's validation filter reads;
* then the session's end -> ``/api/hooks/session-end``, with the transcript: the transcript is
  stored and summarised like a live session's, and the observer's session end runs (the files
  into the co-access graph, the promotion pipeline).

SessionStart and UserPromptSubmit are not sent: both run recall and record the memories they
would inject, and a past session never saw them, so the session's end would score injections
that did not happen (the predictor learns from those labels). PreToolUse is not sent either: it
times the call's start (a replay has no real timing) and would note tool warnings the agent never
saw.

Idempotent: a session the daemon already knows (``GET /api/sessions/{id}`` answers 200: imported
before, or recorded live by the hooks) is skipped; so is one whose tool calls the observer
already holds without a session end (a session still running, or an import cut off before its
end), so that no call is counted twice. The observer times calls as they arrive, so an imported
session's calls are dated at the import (dwell times and time deltas are the replay's, and the
promotion's recency counts them as new).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from memlane.cli.client import Client, DaemonError, DaemonUnavailable
from memlane.connectors.claude_code_replay import ReplayStats, read_lines, replay_lines
from memlane.connectors.events import STOP_EVENTS, TOOL_EVENTS, from_claude_code
from memlane.errors import ValidationError
from memlane.hookclient import ENDPOINTS, build_body

#: Events the import sends (module docstring: why not session-start and user-prompt-submit).
SENT_EVENTS = (*TOOL_EVENTS, *STOP_EVENTS, "session-end")
#: Problems kept with their messages in the report (all are counted).
MAX_PROBLEMS_KEPT = 1000
#: Seconds one request may take (a session end with a large transcript included).
REQUEST_TIMEOUT_S = 120.0


@dataclass
class ImportReport:
    """What :func:`import_transcripts` did.

    Attributes:
        imported: sessions sent (their tool calls and their end).
        skipped: ``[(file, session id, why)]`` for sessions already known to the daemon.
        tool_calls, failed_calls: tool-call events sent (failed calls included in ``tool_calls``).
        steps: work-step boundaries sent (Stop and SubagentStop).
        signals: observer signals those calls completed.
        bad_lines: transcript lines that were not JSON objects.
        rejected: events the daemon refused (a 4xx other than 401/403).
        problems: the first :data:`MAX_PROBLEMS_KEPT` bad lines and refusals as
            ``(file, line, message)``.
        usage: assistant token usage summed over the imported sessions
            (:class:`memlane.connectors.claude_code_replay.ReplayStats`).
    """

    imported: int = 0
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    tool_calls: int = 0
    failed_calls: int = 0
    steps: int = 0
    signals: int = 0
    bad_lines: int = 0
    rejected: int = 0
    problems: list[tuple[str, int, str]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)

    def problem(self, file: str, line: int, message: str) -> None:
        """Record a bad line or refused event (``line`` 0: the file as a whole); only the first
        :data:`MAX_PROBLEMS_KEPT` are kept."""
        if len(self.problems) < MAX_PROBLEMS_KEPT:
            self.problems.append((file, line, message))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data (tuples as lists)."""
        return {
            "imported": self.imported,
            "skipped": [list(s) for s in self.skipped],
            "tool_calls": self.tool_calls,
            "failed_calls": self.failed_calls,
            "steps": self.steps,
            "signals": self.signals,
            "bad_lines": self.bad_lines,
            "rejected": self.rejected,
            "problems": [list(p) for p in self.problems],
            "usage": dict(self.usage),
        }


def transcript_files(path: Path) -> list[Path]:
    """``path`` itself, or the session transcripts directly in a directory (``*.jsonl``, sorted by
    name; a subagent's ``agent-*.jsonl`` belongs to its parent session and is left out).

    Raises:
        ValidationError: ``path`` is neither a regular file nor a directory, or the directory
            holds no transcript.
    """
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if p.is_file() and not p.name.startswith("agent-"))
        if not files:
            raise ValidationError(f"no Claude Code transcript (*.jsonl) in {path}", details={"field": "path"})
        return files
    if not path.is_file():
        raise ValidationError(f"not a file or directory: {path}", details={"field": "path"})
    return [path]


def _size(fh: BinaryIO) -> int:
    try:
        st = os.fstat(fh.fileno())
    except (OSError, ValueError):
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _known(client: Client, session_id: str) -> str | None:
    """Why the daemon already has ``session_id`` (module docstring), or None when it does not."""
    try:
        client.request("GET", f"/api/sessions/{session_id}")
        return "the daemon already has this session (imported before, or recorded by the hooks)"
    except DaemonError as exc:
        if exc.status != 404:
            raise
    signals = client.request("GET", "/api/v3/observer/signals", params={"session_id": session_id})["signals"]
    if signals:
        return "the observer holds tool calls of this session but no session end (still running, or a cut-off import)"
    return None


def _add_usage(report: ImportReport, stats: ReplayStats) -> None:
    for k, v in stats.usage.items():
        report.usage[k] = report.usage.get(k, 0) + v


def _import_one(
    client: Client,
    path: Path,
    report: ImportReport,
    advance: Callable[[int], None],
) -> None:
    """Replay one transcript into the daemon (module docstring)."""
    name = str(path)
    stats = ReplayStats()
    with open(path, "rb") as fh:

        def lines() -> Iterator[tuple[int, bytes | None]]:
            for no, raw, used in read_lines(fh):
                advance(used)
                yield no, raw

        events = replay_lines(
            lines(),
            transcript_path=str(path.resolve()),
            default_session=path.stem,
            session_start=False,
            stats=stats,
        )
        checked = False
        for ev in events:
            if ev.event not in SENT_EVENTS:
                continue
            if not checked:
                checked = True
                why = _known(client, stats.session_id)
                if why is not None:
                    report.skipped.append((name, stats.session_id, why))
                    advance(_size(fh) - fh.tell())
                    return
            try:
                hook = from_claude_code(ev.event, ev.payload)
            except ValueError as exc:
                report.rejected += 1
                report.problem(name, ev.line, f"{ev.event}: {exc}")
                continue
            # as the live hook would build it then: the input's size, the context at the turn's end
            # (the hook reads the transcript as it is at that moment; here the file holds the whole session)
            body = build_body(
                hook,
                transcript_roots=[path.resolve().parent],
                payload_chars=len(json.dumps(ev.payload, ensure_ascii=False)),
            )
            if ev.event == "stop":
                body.pop("context_tokens", None)
                if ev.context_tokens is not None:
                    body["context_tokens"] = ev.context_tokens
            try:
                res = client.request("POST", ENDPOINTS[ev.event], json=body)
            except DaemonError as exc:
                if exc.status is None or exc.status in (401, 403) or exc.status >= 500:
                    raise  # refused as a whole (token, host) or a daemon failure: not this event's fault
                report.rejected += 1
                report.problem(name, ev.line, f"{hook.event} refused: {exc.message}")
                continue
            if ev.event in TOOL_EVENTS:
                report.tool_calls += 1
                report.failed_calls += ev.event == "post-tool-use-failure"
                report.signals += len(res.get("signals", []))
            elif ev.event in STOP_EVENTS:
                report.steps += 1
    report.bad_lines += stats.bad_lines
    for no, message in stats.bad:
        report.problem(name, no, message)
    if checked:
        report.imported += 1
        _add_usage(report, stats)
    else:
        report.problem(name, 0, "no Claude Code session in this file (no line with a working directory)")


def import_transcripts(
    path: Path,
    *,
    url: str,
    home: Path | None = None,
    console: Console | None = None,
) -> ImportReport:
    """Import one Claude Code transcript, or every transcript of a project directory, through the
    daemon at ``url`` (with the token of ``home``, default the configured home).

    Raises:
        ValidationError: ``path`` holds no transcript.
        DaemonUnavailable: no daemon at ``url`` (the message says how far the import got).
        DaemonError: the daemon refused the token or the host (401/403), or failed (5xx).
        OSError: a transcript cannot be opened or read.
    """
    files = transcript_files(path)
    report = ImportReport()
    client = Client(url, timeout_s=REQUEST_TIMEOUT_S, home=home)
    progress = Progress(
        TextColumn("importing"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[sessions]}/{task.fields[files]} sessions"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    try:
        with progress:
            task = progress.add_task("import", total=sum(p.stat().st_size for p in files), sessions=0, files=len(files))
            for i, p in enumerate(files, 1):
                _import_one(client, p, report, lambda n: progress.advance(task, n))
                progress.update(task, sessions=i)
    except DaemonUnavailable as exc:
        raise DaemonUnavailable(
            f"{exc.message} (imported so far: {report.imported} sessions, {report.tool_calls} tool calls)"
        ) from exc
    finally:
        client.close()
    return report
