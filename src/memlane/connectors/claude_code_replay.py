"""A recorded Claude Code session transcript replayed as the hook inputs Claude Code sends.

Claude Code writes each session to ``~/.claude/projects/<project>/<session>.jsonl``, one JSON
object per line. The lines this module reads (other line types, such as ``progress``,
``system``, ``file-history-snapshot`` and ``queue-operation``, are skipped):

* an assistant line, ``{"type": "assistant", "message": {"id", "content": [blocks], "usage"}}``,
  whose ``tool_use`` blocks ``{"id", "name", "input"}`` are the calls the agent made;
* a user line whose content holds ``tool_result`` blocks ``{"tool_use_id", "content",
  "is_error"?}``: a call's answer, with Claude Code's structured answer in the line's
  ``toolUseResult`` (what its PostToolUse hook receives as ``tool_response``);
* a user line with a string content (or text blocks, no tool result), not ``isMeta``: a prompt
  the user submitted, unless it is a local slash command's record (``<command-name>``,
  ``<local-command-...>``) or an interruption notice (``[Request interrupted ...``), which never
  reach the UserPromptSubmit hook.

Each line also carries ``sessionId``, ``cwd`` and, on prompts, ``permissionMode``.

:func:`replay` turns them into :class:`ReplayEvent` s, in the order the hooks would have fired:

* ``SessionStart`` (source ``startup``; optional);
* ``UserPromptSubmit`` at each prompt; a ``<task-notification>`` line (Claude Code reporting a
  background task to the agent) and a slash command's record start a turn without being a prompt;
* per call that ran, ``PreToolUse`` then, for a ``Task`` call (a subagent), ``SubagentStop``
  (``agent_id`` = the answer's ``agentId``, ``agent_type`` = the call's ``subagent_type``), then
  ``PostToolUse`` (``tool_response`` = the line's ``toolUseResult``, else the result block's
  content) or, for a result with ``is_error``, ``PostToolUseFailure`` (``error`` = the result's
  text, ``is_interrupt`` false). Claude Code fires PreToolUse when the call starts; the replay
  emits it when the answer shows the call ran, so calls issued together come as pre/post pairs;
* ``Stop`` at the end of each turn the agent answered (its last assistant line), unless the user
  interrupted it (``[Request interrupted by user...]``: Claude Code runs no Stop hook then);
* ``SessionEnd`` (reason ``other``: the transcript does not record why the session ended).

Payloads carry the fields Claude Code sends (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``, ``tool_name``, ``tool_input``, ``tool_response`` / ``error``,
``tool_use_id``, ``permission_mode``, ``stop_hook_active``), so they go through
:func:`memlane.connectors.events.from_claude_code` like a live hook's stdin.

Not replayed, and counted in :class:`ReplayStats`: a call the user rejected at the permission
prompt (``toolUseResult`` ``"User rejected tool use"``: only its PreToolUse is replayed, the hook
runs before the permission prompt), a call Claude Code refused before running
it (its result wrapped in ``<tool_use_error>``: a file that does not exist, a string to replace
that is not in the file, a sibling call that errored), a call without an answer (the session was
cut off), an answer to an unknown call. The first two never ran, so no tool hook fired: in
transcripts that record the user's own hooks firing (``progress`` lines, ``hook_progress``), no
PostToolUse or PostToolUseFailure hook ran for them. A call the user's own PreToolUse hook blocked
is not marked in the transcript (its result is the hook's message, flagged ``is_error``): it is
replayed as a PostToolUseFailure, though Claude Code fires no post hook for it (docs/v3.md).
A line that is not JSON, or JSON but not an object, is a bad line: recorded with its number and
skipped, or with ``strict`` a :class:`TranscriptError`.

One transcript is one session: ``session_id`` is the first ``sessionId`` a line carries, else
the file's stem (Claude Code names the file after the session).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from memlane.connectors.events import CLAUDE_CODE_NAMES
from memlane.connectors.transcript import last_context_tokens

#: Longest transcript line read, bytes; a longer line is a bad line (its bytes are skipped).
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Bad lines kept with their messages (all are counted).
MAX_BAD_KEPT = 100
#: What Claude Code records as the answer of a call the user rejected at the permission prompt.
REJECTED_RESULT = "User rejected tool use"
#: How Claude Code wraps the answer of a call it refused before running it.
REFUSED_PREFIX = "<tool_use_error>"
_NOT_PROMPTS = ("<command-name>", "<command-message>", "<local-command-", "[Request interrupted", "<task-notification>")
#: User lines starting so begin a turn of the agent without being a prompt: Claude Code reporting
#: a background task, a slash command (a local one gets no answer, so its turn has no Stop).
TURN_STARTS = ("<task-notification>", "<command-message>", "<command-name>")
INTERRUPTED = "[Request interrupted by user"
#: The tool that runs a subagent: its answer is the subagent's end (SubagentStop).
SUBAGENT_TOOLS = frozenset({"Task", "Agent"})
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class TranscriptError(ValueError):
    """A transcript line that cannot be read (``strict`` replay); ``line`` is its 1-based number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@dataclass(frozen=True)
class ReplayEvent:
    """One hook call of the replayed session.

    Attributes:
        event: memlane's event name (``session-start``, ``user-prompt-submit``, ``post-tool-use``,
            ``post-tool-use-failure``, ``session-end``; :data:`memlane.connectors.events.EVENTS`).
        payload: the JSON object Claude Code writes on the hook's stdin for it.
        line: how many transcript lines existed when the hook fired (the line that completed
            the event; 0 for SessionStart; the line count for SessionEnd).
        timestamp: the ISO time of that line, when recorded.
        context_tokens: for a Stop, the context size when the turn ended (the latest assistant
            usage then, :func:`memlane.connectors.transcript.last_context_tokens`): what the Stop
            hook reads from the transcript as it is at that moment; else None.
    """

    event: str
    payload: dict[str, Any]
    line: int
    timestamp: str | None = None
    context_tokens: int | None = None


@dataclass
class ReplayStats:
    """What a replay saw besides its events.

    Attributes:
        session_id: the session's id (module docstring).
        lines: lines read (blank ones included).
        prompts, tool_calls, failed_calls, stops, subagent_stops: events of each kind produced
            (``tool_calls`` counts PostToolUse, ``failed_calls`` PostToolUseFailure).
        rejected: calls the user rejected (no hook fired).
        refused: calls Claude Code refused before running them (no hook fired).
        unanswered: calls without an answer in the transcript.
        orphan_results: answers whose call is not in the transcript.
        bad_lines: how many lines were not JSON objects; ``bad`` keeps the first
            :data:`MAX_BAD_KEPT` as ``(line, message)``.
        usage: assistant token usage summed over distinct messages (``message.id``; a message
            split over several lines repeats its usage, the last line's is counted):
            ``input_tokens``, ``output_tokens``, ``cache_creation_input_tokens``,
            ``cache_read_input_tokens``, and ``messages`` (how many carried usage).
    """

    session_id: str = ""
    lines: int = 0
    prompts: int = 0
    tool_calls: int = 0
    failed_calls: int = 0
    stops: int = 0
    subagent_stops: int = 0
    rejected: int = 0
    refused: int = 0
    unanswered: int = 0
    orphan_results: int = 0
    bad_lines: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The stats as JSON-ready data (``bad`` as ``[[line, message]]``)."""
        return {
            "session_id": self.session_id,
            "lines": self.lines,
            "prompts": self.prompts,
            "tool_calls": self.tool_calls,
            "failed_calls": self.failed_calls,
            "stops": self.stops,
            "subagent_stops": self.subagent_stops,
            "rejected": self.rejected,
            "refused": self.refused,
            "unanswered": self.unanswered,
            "orphan_results": self.orphan_results,
            "bad_lines": self.bad_lines,
            "bad": [list(b) for b in self.bad],
            "usage": dict(self.usage),
        }


def read_lines(stream: BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None, int]]:
    """The lines of a binary stream, lazily: ``(line number, line or None, bytes consumed)``.

    ``None`` stands for a line longer than ``max_bytes``, whose rest is read and dropped in
    1 MiB pieces (memory stays bounded). Line numbers start at 1."""
    no = 0
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        no += 1
        used = len(raw)
        if raw.endswith(b"\n") or len(raw) <= max_bytes:
            yield no, raw.rstrip(b"\r\n"), used
            continue
        while True:
            rest = stream.readline(1024 * 1024)
            used += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield no, None, used


def _text_of(content: Any) -> str:
    """The text of a tool result's or message's content: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""


def _user_text(entry: dict[str, Any], content: Any) -> str | None:
    """The text a person (or Claude Code) wrote into the main conversation on a user line; None
    for a meta, sidechain or compaction line and for tool results."""
    if entry.get("isMeta") or entry.get("isSidechain") or entry.get("isCompactSummary"):
        return None
    if isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return None
        text = _text_of(content)
    elif isinstance(content, str):
        text = content
    else:
        return None
    return text


def _is_prompt(text: str) -> bool:
    """Whether a user line's text was submitted as a prompt (module docstring)."""
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith(_NOT_PROMPTS)


class _Replayer:
    """The state of one replay: pending calls, the session's latest cwd and permission mode."""

    def __init__(self, transcript_path: str, default_session: str, strict: bool) -> None:
        self.path = transcript_path
        self.strict = strict
        self.stats = ReplayStats(session_id=default_session)
        self.pending: dict[str, tuple[str, dict[str, Any]]] = {}
        self.cwd: str | None = None
        self.mode: str | None = None
        self.usage: dict[str, dict[str, int]] = {}
        self.named = False
        # the current turn: answered by the agent, interrupted by the user, its latest line
        self.answered = False
        self.interrupted = False
        self.turn_line = 0
        # the latest main-conversation assistant line that reported usage (its text)
        self.usage_line: str | None = None

    def bad(self, no: int, message: str) -> None:
        if self.strict:
            raise TranscriptError(no, message)
        self.stats.bad_lines += 1
        if len(self.stats.bad) < MAX_BAD_KEPT:
            self.stats.bad.append((no, message))

    def base(self, hook: str, session_id: str, cwd: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "session_id": session_id,
            "transcript_path": self.path,
            "cwd": cwd or self.cwd or "",
            "hook_event_name": CLAUDE_CODE_NAMES[hook],
        }
        if self.mode is not None:
            out["permission_mode"] = self.mode
        return out

    def line(self, no: int, raw: bytes | None) -> Iterator[ReplayEvent]:
        self.stats.lines = no
        if raw is None:
            self.bad(no, f"line longer than {MAX_LINE_BYTES} bytes")
            return
        if not raw.strip():
            return
        text = raw.decode("utf-8", errors="replace")
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as exc:
            self.bad(no, f"not JSON: {exc.msg} (column {exc.colno})")
            return
        except RecursionError:
            self.bad(no, "not JSON: nested too deeply")
            return
        if not isinstance(entry, dict):
            self.bad(no, f"expected a JSON object, got {type(entry).__name__}")
            return
        sid = entry.get("sessionId")
        if not self.named and isinstance(sid, str) and sid.strip():
            self.stats.session_id, self.named = sid.strip(), True
        cwd = entry.get("cwd") if isinstance(entry.get("cwd"), str) and entry.get("cwd") else None
        if cwd:
            self.cwd = cwd
        mode = entry.get("permissionMode")
        if isinstance(mode, str) and mode:
            self.mode = mode
        message = entry.get("message")
        if not isinstance(message, dict):
            return
        content = message.get("content")
        ts = entry.get("timestamp") if isinstance(entry.get("timestamp"), str) else None
        kind = entry.get("type")
        if kind == "assistant":
            if not entry.get("isSidechain"):
                self.answered, self.interrupted, self.turn_line = True, False, no
                if isinstance(message.get("usage"), dict):
                    self.usage_line = text
            self._assistant(message, content)
        elif kind == "user":
            yield from self._user(no, entry, content, cwd, ts)

    def _assistant(self, message: dict[str, Any], content: Any) -> None:
        usage = message.get("usage")
        mid = message.get("id")
        if isinstance(usage, dict) and isinstance(mid, str):
            self.usage[mid] = {k: int(v) for k in _USAGE_KEYS if isinstance(v := usage.get(k), int)}
        if not isinstance(content, list):
            return
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                name, inp = b.get("name"), b.get("input")
                if isinstance(name, str) and name.strip():
                    self.pending[b["id"]] = (name, inp if isinstance(inp, dict) else {})

    def end_turn(self) -> Iterator[ReplayEvent]:
        """Stop for the turn now ending, when the agent answered it and it was not interrupted."""
        if self.answered and not self.interrupted:
            self.stats.stops += 1
            stop = {**self.base("stop", self.stats.session_id, None), "stop_hook_active": False}
            tokens = last_context_tokens(self.usage_line) if self.usage_line else None
            yield ReplayEvent("stop", stop, self.turn_line, None, tokens)
        self.answered, self.interrupted = False, False

    def _user(
        self, no: int, entry: dict[str, Any], content: Any, cwd: str | None, ts: str | None
    ) -> Iterator[ReplayEvent]:
        sid = self.stats.session_id
        text = _user_text(entry, content)
        if text is not None:
            stripped = text.strip()
            if stripped.startswith(INTERRUPTED):
                self.interrupted = True
            elif _is_prompt(text) or stripped.startswith(TURN_STARTS):
                yield from self.end_turn()
                if _is_prompt(text):
                    self.stats.prompts += 1
                    prompt = {**self.base("user-prompt-submit", sid, cwd), "prompt": text}
                    yield ReplayEvent("user-prompt-submit", prompt, no, ts)
            return
        if not isinstance(content, list):
            return
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results and not entry.get("isSidechain"):
            self.turn_line = no
        structured = entry.get("toolUseResult")
        for b in results:
            call = self.pending.pop(str(b.get("tool_use_id")), None)
            if call is None:
                self.stats.orphan_results += 1
                continue
            name, inp = call
            if b.get("is_error") and _text_of(b.get("content")).lstrip().startswith(REFUSED_PREFIX):
                self.stats.refused += 1
                continue
            call_id = b["tool_use_id"]
            pre = {**self.base("pre-tool-use", sid, cwd), "tool_name": name, "tool_input": inp, "tool_use_id": call_id}
            yield ReplayEvent("pre-tool-use", pre, no, ts)
            if structured == REJECTED_RESULT:
                self.stats.rejected += 1
                continue
            # one result per line is Claude Code's shape; toolUseResult answers that one
            answer = structured if structured is not None and len(results) == 1 else None
            if name in SUBAGENT_TOOLS and not b.get("is_error"):
                self.stats.subagent_stops += 1
                sub: dict[str, Any] = {**self.base("subagent-stop", sid, cwd), "stop_hook_active": False}
                if isinstance(answer, dict) and isinstance(answer.get("agentId"), str):
                    sub["agent_id"] = answer["agentId"]
                if isinstance(inp.get("subagent_type"), str):
                    sub["agent_type"] = inp["subagent_type"]
                yield ReplayEvent("subagent-stop", sub, no, ts)
            head = {**self.base("post-tool-use", sid, cwd), "tool_name": name, "tool_input": inp}
            if b.get("is_error"):
                self.stats.failed_calls += 1
                err = _text_of(b.get("content")) or (structured if isinstance(structured, str) else "") or "error"
                head.update(
                    hook_event_name=CLAUDE_CODE_NAMES["post-tool-use-failure"],
                    tool_use_id=call_id,
                    error=err,
                    is_interrupt=False,
                )
                yield ReplayEvent("post-tool-use-failure", head, no, ts)
            else:
                self.stats.tool_calls += 1
                head.update(tool_response=answer if answer is not None else b.get("content"), tool_use_id=call_id)
                yield ReplayEvent("post-tool-use", head, no, ts)

    def finish(self) -> None:
        self.stats.unanswered = len(self.pending)
        totals = {k: 0 for k in _USAGE_KEYS}
        for u in self.usage.values():
            for k, v in u.items():
                totals[k] += v
        self.stats.usage = {**totals, "messages": len(self.usage)} if self.usage else {}


def replay_lines(
    lines: Iterable[tuple[int, bytes | None]],
    *,
    transcript_path: str,
    default_session: str,
    session_start: bool = True,
    strict: bool = False,
    stats: ReplayStats | None = None,
) -> Iterator[ReplayEvent]:
    """The hook events of a transcript given as ``(line number, raw line or None)``, lazily.

    Args:
        lines: the transcript's lines (None: a line too long to read).
        transcript_path: the path the payloads name as ``transcript_path``.
        default_session: the session id when no line names one (the file's stem).
        session_start: begin with a SessionStart event.
        strict: raise on the first bad line instead of recording it.
        stats: filled in as the replay goes (complete once the iterator is exhausted).

    Raises:
        TranscriptError: ``strict`` and a line that is not a JSON object.
    """
    r = _Replayer(transcript_path, default_session, strict)
    if stats is not None:
        r.stats = stats
        stats.session_id = stats.session_id or default_session
    started = not session_start
    for no, raw in lines:
        for ev in r.line(no, raw):
            if not started:  # SessionStart carries the session id and cwd of the first event
                started = True
                yield _start(r, ev.payload["session_id"], ev.payload["cwd"])
            yield ev
    r.finish()
    if r.cwd is None:  # no line of a session at all: nothing started, nothing ends
        return
    if not started:
        yield _start(r, r.stats.session_id, r.cwd)
    yield from r.end_turn()
    end = {**r.base("session-end", r.stats.session_id, None), "reason": "other"}
    yield ReplayEvent("session-end", end, r.stats.lines, None)


def _start(r: _Replayer, session_id: str, cwd: str) -> ReplayEvent:
    return ReplayEvent("session-start", {**r.base("session-start", session_id, cwd), "source": "startup"}, 0, None)


def replay(
    path: str | os.PathLike[str],
    *,
    session_start: bool = True,
    strict: bool = False,
    stats: ReplayStats | None = None,
) -> Iterator[ReplayEvent]:
    """The hook events of the transcript file at ``path`` (:func:`replay_lines`), read lazily.

    Raises:
        OSError: the file cannot be opened or read.
        TranscriptError: ``strict`` and a bad line.
    """
    p = Path(path)
    with open(p, "rb") as fh:
        yield from replay_lines(
            ((no, raw) for no, raw, _ in read_lines(fh)),
            transcript_path=str(p.resolve()),
            default_session=p.stem,
            session_start=session_start,
            strict=strict,
            stats=stats,
        )
