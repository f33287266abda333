"""The harness-neutral hook event and the mapping from Claude Code's hook input.

Claude Code runs a hook command with one JSON object on stdin. Fields used here (from the
Claude Code hooks reference, code.claude.com/docs/en/hooks):

* every event: ``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``,
  ``permission_mode`` (sent with session-start and prompt-submit: plan mode is the planning phase
  of the project's methodology, docs/v3.md; a non-string is ignored) (plus ``model``... which
  are ignored);
* ``SessionStart``: ``source`` (startup | resume | clear | compact);
* ``UserPromptSubmit``: ``prompt``;
* ``SessionEnd``: ``reason`` (clear | logout | prompt_input_exit | other, ...);
* ``PreCompact``: ``trigger`` (manual | auto) and ``custom_instructions``;
* ``PostToolUse`` (after a tool call that succeeded): ``tool_name``, ``tool_input`` (an object),
  ``tool_response`` (any JSON) and ``tool_use_id``;
* ``PostToolUseFailure`` (after one that failed): ``tool_name``, ``tool_input``, ``tool_use_id``,
  ``error`` (the failure text) and ``is_interrupt``; mapped with
  ``tool_response = {"is_error": True, "error": error}``, the failed-call shape the observer reads;
* ``PreToolUse`` (before a tool call runs): ``tool_name``, ``tool_input``, ``tool_use_id``;
* ``Stop`` (the main agent finished its turn) and ``SubagentStop`` (a subagent finished its
  task): ``stop_hook_active``; SubagentStop also ``agent_id`` and ``agent_type`` in newer versions.

Unknown extra fields are ignored; a missing ``session_id``, a missing ``prompt`` on
UserPromptSubmit, a missing ``tool_name`` on a tool-call event, or a field of the wrong type is a
:class:`ValueError` naming the field.
"""

from __future__ import annotations

import os

from memlane.projectroot import project_root

# The light hook client (memlane.hookclient) imports this module: typing, collections and
# pathlib stay out of its start-up (TYPE_CHECKING = False is the idiom type checkers read as
# typing.TYPE_CHECKING).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

EVENTS = (
    "session-start",
    "user-prompt-submit",
    "session-end",
    "pre-compact",
    "post-tool-use",
    "post-tool-use-failure",
    "pre-tool-use",
    "stop",
    "subagent-stop",
)
#: The events after a tool call (the observer's feed of recorded calls).
TOOL_EVENTS = ("post-tool-use", "post-tool-use-failure")
#: The events that end a work step: the agent's turn, a subagent's task.
STOP_EVENTS = ("stop", "subagent-stop")

#: Our event name -> Claude Code's ``hook_event_name``.
CLAUDE_CODE_NAMES = {
    "session-start": "SessionStart",
    "user-prompt-submit": "UserPromptSubmit",
    "session-end": "SessionEnd",
    "pre-compact": "PreCompact",
    "post-tool-use": "PostToolUse",
    "post-tool-use-failure": "PostToolUseFailure",
    "pre-tool-use": "PreToolUse",
    "stop": "Stop",
    "subagent-stop": "SubagentStop",
}
_FROM_CLAUDE_CODE = {v: k for k, v in CLAUDE_CODE_NAMES.items()}


_HOOK_EVENT_FIELDS = (
    "event",
    "session_key",
    "cwd",
    "project",
    "prompt",
    "source",
    "reason",
    "trigger",
    "custom_instructions",
    "transcript_path",
    "harness",
    "tool_name",
    "tool_input",
    "tool_response",
    "permission_mode",
    "tool_use_id",
    "agent_id",
    "agent_type",
)


# A small slotted class rather than a frozen dataclass (`dataclasses` imports `inspect`, with
# ast, dis and tokenize) or a namedtuple (`collections`, with heapq, keyword, operator, reprlib):
# both were among the largest imports of the light hook client's start-up (docs/hooks.md).
class HookEvent:
    """One hook call, independent of the harness that made it (immutable, compared by value).

    Built by keyword (or position, in the order below); fields after ``project`` default to
    ``None`` and ``harness`` to ``"claude-code"``. Setting or deleting an attribute raises
    ``AttributeError``. A tool-call event carries JSON objects, so hashing it raises
    ``TypeError``.

    Attributes:
        event: one of :data:`EVENTS`.
        session_key: the harness's session id (Claude Code's ``session_id``).
        cwd: the absolute working directory of the session.
        project: the project of ``cwd`` (:func:`find_project_root`: the git root containing it,
            the main work tree for every worktree of one repository, else ``cwd`` itself); an
            absolute path string.
        prompt: the submitted prompt (user-prompt-submit only).
        source: why the session started (startup | resume | clear | compact).
        reason: why the session ended.
        trigger: what started a compaction (manual | auto).
        custom_instructions: the user's ``/compact`` instructions, if any.
        transcript_path: the harness's transcript file as given (not yet checked or read).
        harness: the harness name sent to the daemon (default ``claude-code``).
        tool_name: the tool that ran (tool-call events only), e.g. ``Read``, ``Bash``.
        tool_input: the tool's arguments, a JSON object (tool-call events only).
        tool_response: what the tool answered, any JSON value (post-tool-use); for
            post-tool-use-failure ``{"is_error": True, "error": <text>}``.
        permission_mode: Claude Code's permission mode (``default``, ``plan``...), or None.
        tool_use_id: Claude Code's id of the tool call (pre- and post-tool-use), pairing a call's
            start with its end; None when absent.
        agent_id: the subagent that stopped (subagent-stop, newer Claude Code versions), or None.
        agent_type: the subagent's type (subagent-stop), or None.
    """

    __slots__ = _HOOK_EVENT_FIELDS
    # the slots' types, for type checkers (annotations only: no class attributes)
    event: str
    session_key: str
    cwd: str
    project: str
    prompt: str | None
    source: str | None
    reason: str | None
    trigger: str | None
    custom_instructions: str | None
    transcript_path: str | None
    harness: str
    tool_name: str | None
    tool_input: dict[str, Any] | None
    tool_response: Any
    permission_mode: str | None
    tool_use_id: str | None
    agent_id: str | None
    agent_type: str | None

    def __init__(
        self,
        event: str,
        session_key: str,
        cwd: str,
        project: str,
        prompt: str | None = None,
        source: str | None = None,
        reason: str | None = None,
        trigger: str | None = None,
        custom_instructions: str | None = None,
        transcript_path: str | None = None,
        harness: str = "claude-code",
        tool_name: str | None = None,
        tool_input: dict[str, Any] | None = None,
        tool_response: Any = None,
        permission_mode: str | None = None,
        tool_use_id: str | None = None,
        agent_id: str | None = None,
        agent_type: str | None = None,
    ) -> None:
        values = (
            event,
            session_key,
            cwd,
            project,
            prompt,
            source,
            reason,
            trigger,
            custom_instructions,
            transcript_path,
            harness,
            tool_name,
            tool_input,
            tool_response,
            permission_mode,
            tool_use_id,
            agent_id,
            agent_type,
        )
        for name, value in zip(_HOOK_EVENT_FIELDS, values):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"HookEvent is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"HookEvent is immutable: cannot delete {name!r}")

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in _HOOK_EVENT_FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HookEvent):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(_HOOK_EVENT_FIELDS, self._values()))
        return f"HookEvent({fields})"


def normalize_event_name(name: str) -> str:
    """``session-start`` or ``SessionStart`` -> ``session-start``.

    Raises:
        ValueError: not one of the supported events (:data:`EVENTS`).
    """
    if name in EVENTS:
        return name
    if name in _FROM_CLAUDE_CODE:
        return _FROM_CLAUDE_CODE[name]
    raise ValueError(f"unknown hook event {name!r}; expected one of {', '.join(EVENTS)}")


def find_project_root(cwd: str | os.PathLike[str]) -> str:
    """The project of a session working in ``cwd``: :func:`memlane.projectroot.project_root` (the
    nearest ancestor holding a ``.git`` entry, or the repository's main work tree for a linked
    worktree, else ``cwd``); always an absolute path string."""
    return project_root(cwd)


def _opt_str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"hook input field {key!r} must be a string, got {type(value).__name__}")
    return value


def from_claude_code(event_name: str, payload: dict[str, Any]) -> HookEvent:
    """Map Claude Code's hook stdin JSON (already decoded) to a :class:`HookEvent`.

    Args:
        event_name: our name (``session-start``...) or Claude Code's (``SessionStart``...).
        payload: the decoded stdin object.

    Raises:
        ValueError: ``payload`` is not an object; ``session_id`` is missing or empty;
            ``prompt`` is missing on user-prompt-submit; ``tool_name`` is missing on a
            tool-call event (pre- or post-tool-use) or ``tool_input`` is not an object; a field has the wrong type; or
            ``hook_event_name`` names a different event than ``event_name``.
    """
    event = normalize_event_name(event_name)
    if not isinstance(payload, dict):
        raise ValueError(f"hook input must be a JSON object, got {type(payload).__name__}")
    declared = _opt_str(payload, "hook_event_name")
    if declared and declared != CLAUDE_CODE_NAMES[event]:
        raise ValueError(f"hook input is for {declared!r} but the command is for {CLAUDE_CODE_NAMES[event]!r}")
    session_id = _opt_str(payload, "session_id")
    if not session_id or not session_id.strip():
        raise ValueError("hook input has no 'session_id'")
    cwd = _opt_str(payload, "cwd") or os.getcwd()
    cwd = os.path.abspath(os.path.expanduser(cwd))
    prompt = _opt_str(payload, "prompt")
    if event == "user-prompt-submit" and prompt is None:
        raise ValueError("UserPromptSubmit hook input has no 'prompt'")
    tool_name, tool_input = None, None
    tool_response: Any = None
    if event in TOOL_EVENTS or event == "pre-tool-use":
        tool_name = _opt_str(payload, "tool_name")
        if not tool_name or not tool_name.strip():
            raise ValueError(f"{CLAUDE_CODE_NAMES[event]} hook input has no 'tool_name'")
        tool_input = payload.get("tool_input")
        if tool_input is None:
            tool_input = {}
        if not isinstance(tool_input, dict):
            raise ValueError(f"hook input field 'tool_input' must be an object, got {type(tool_input).__name__}")
        if event == "post-tool-use":
            tool_response = payload.get("tool_response")
        elif event == "post-tool-use-failure":
            tool_response = {"is_error": True, "error": _opt_str(payload, "error") or "tool call failed"}
    return HookEvent(
        event=event,
        session_key=session_id.strip(),
        cwd=cwd,
        project=find_project_root(cwd),
        prompt=prompt if event == "user-prompt-submit" else None,
        source=_opt_str(payload, "source") if event == "session-start" else None,
        reason=_opt_str(payload, "reason") if event == "session-end" else None,
        trigger=_opt_str(payload, "trigger") if event == "pre-compact" else None,
        custom_instructions=_opt_str(payload, "custom_instructions") if event == "pre-compact" else None,
        transcript_path=_opt_str(payload, "transcript_path") or None,
        tool_name=tool_name,
        tool_input=tool_input,
        tool_response=tool_response,
        # a hint only: a malformed mode never fails the hook
        permission_mode=mode if isinstance(mode := payload.get("permission_mode"), str) else None,
        # identifiers that only pair or label events: a malformed one is dropped, never fatal
        tool_use_id=_hint(payload, "tool_use_id"),
        agent_id=_hint(payload, "agent_id") if event == "subagent-stop" else None,
        agent_type=_hint(payload, "agent_type") if event == "subagent-stop" else None,
    )


def _hint(payload: dict[str, Any], key: str) -> str | None:
    """``payload[key]`` when it is a non-empty string of at most 200 characters, else None."""
    value = payload.get(key)
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None
