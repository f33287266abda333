"""The Claude Code connector: what ``memlane hook <event>`` does, and ``connect``/``disconnect``.

Hook side (:func:`run_hook`): Claude Code pipes one JSON object to the hook command and reads
its stdout. For SessionStart and UserPromptSubmit a JSON
``{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`` adds context;
SessionEnd and PreCompact cannot add context, so nothing is printed for them. The hook fails
open: when the daemon is down, slow, or answers 5xx the event is spooled
(:mod:`memlane.connectors.spool`) and nothing is printed; bad input is logged to
``$MEMLANE_HOME/logs/hooks.log``. It never raises and never blocks Claude Code for long.

Settings side (:func:`connect`, :func:`disconnect`): adds/removes our four hooks in Claude
Code's ``settings.json`` and the user-scope ``memlane`` MCP server in ``~/.claude.json``,
keeping everything else, with a timestamped backup before any change and atomic writes.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from memlane.auth import CLIENT_HEADER, auth_headers
from memlane.config import Settings
from memlane.connectors.claude_settings import (  # noqa: F401 - re-exported
    HOOK_TIMEOUTS_S, MCP_NAME, ConnectResult, SettingsFileError, connect, default_claude_json_path,
    default_memlane_cmd, default_settings_path, disconnect,
)
from memlane.connectors.events import CLAUDE_CODE_NAMES, HookEvent, from_claude_code
from memlane.connectors.spool import replay_spool, spool_dir_for, spool_event
from memlane.providers.claude_cli import HOOKS_DISABLED_ENV
from memlane.connectors.transcript import (
    DEFAULT_MAX_BYTES, FEEDBACK_TAIL_BYTES, last_memory_feedback, read_transcript, transcript_text,
)

log = logging.getLogger("memlane.connectors")

ENDPOINTS = {
    "session-start": "/api/hooks/session-start",
    "user-prompt-submit": "/api/hooks/user-prompt-submit",
    "session-end": "/api/hooks/session-end",
    "pre-compact": "/api/hooks/pre-compaction",
}
REPLAY_BUDGET_S = 0.5        # wall clock spent replaying the spool before the live request
_handler: logging.handlers.RotatingFileHandler | None = None


# --- hook runner ------------------------------------------------------------------------------

def _setup_log(home: Path) -> None:
    """Send the connector's log lines to ``{home}/logs/hooks.log`` (rotated at 1 MB, 2 kept)."""
    global _handler
    path = str(Path(home) / "logs" / "hooks.log")
    if _handler is not None and _handler.baseFilename == os.path.abspath(path):
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=1_000_000, backupCount=2, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if _handler is not None:
        log.removeHandler(_handler)
        _handler.close()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    _handler = handler


def _utf8_tail(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    tail = data[-max_bytes:].decode("utf-8", errors="ignore")
    nl = tail.find("\n")
    return tail[nl + 1:] if 0 <= nl < len(tail) - 1 else tail


def build_body(event: HookEvent, *, transcript_roots: Sequence[Path] | None = None,
               max_transcript_bytes: int = DEFAULT_MAX_BYTES, max_body_bytes: int = 16 * 1024 * 1024) -> dict[str, Any]:
    """The JSON body for the daemon endpoint of ``event`` (``None`` fields left out).

    user-prompt-submit gets ``memory_feedback`` from the transcript's latest assistant message
    (last 2 MB read); session-end gets the rendered ``transcript`` (its most recent part, at
    most ``max_body_bytes // 2`` bytes). A refused transcript path simply adds nothing."""
    body: dict[str, Any] = {"session_key": event.session_key, "project": event.project,
                            "cwd": event.cwd, "harness": event.harness}
    if event.event == "session-start":
        body["source"] = event.source
    elif event.event == "user-prompt-submit":
        body["prompt"] = event.prompt
        raw = read_transcript(event.transcript_path, transcript_roots, tail_bytes=FEEDBACK_TAIL_BYTES)
        feedback = last_memory_feedback(raw) if raw else None
        if feedback:
            body["memory_feedback"] = feedback
    elif event.event == "session-end":
        body["reason"] = event.reason
        raw = read_transcript(event.transcript_path, transcript_roots, max_transcript_bytes)
        text = transcript_text(raw) if raw else ""
        if text:
            body["transcript"] = _utf8_tail(text, max(1024, max_body_bytes // 2))
    elif event.event == "pre-compact":
        body["trigger"] = event.trigger
        body["custom_instructions"] = event.custom_instructions
    return {k: v for k, v in body.items() if v is not None}


def run_hook(event_name: str, stdin_text: str, settings: Settings, *, timeout_s: float | None = None,
             transcript_roots: Sequence[Path] | None = None, replay_budget_s: float = REPLAY_BUDGET_S) -> str:
    """Handle one Claude Code hook call; returns what to print on stdout (often ``""``).

    Args:
        event_name: ``session-start`` | ``user-prompt-submit`` | ``session-end`` | ``pre-compact``.
        stdin_text: the JSON Claude Code wrote on stdin.
        settings: memlane settings (daemon URL, ``home`` for the spool and the log).
        timeout_s: per-request timeout, seconds; default ``settings.hook_timeout_s``
            (default 4 s).
        transcript_roots: where transcripts may be read from (default ``~/.claude/projects``).
        replay_budget_s: wall-clock budget for replaying spooled events first, seconds.

    Never raises: errors are logged to ``{home}/logs/hooks.log`` and give ``""``.
    """
    try:
        _setup_log(settings.home)
    except Exception:  # noqa: BLE001 - logging must not break the hook
        pass
    if os.environ.get(HOOKS_DISABLED_ENV):
        # Trigger: this Claude Code process is memlane's own LLM judge (providers.claude_cli).
        # Why: recording the judge as a user session would feed memlane its own output.
        # Outcome: the hook does nothing.
        return ""
    try:
        return _run_hook(event_name, stdin_text, settings, timeout_s, transcript_roots, replay_budget_s)
    except Exception:  # noqa: BLE001 - a hook never fails Claude Code
        log.exception("hook %s failed", event_name)
        return ""


def _run_hook(event_name: str, stdin_text: str, settings: Settings, timeout_s: float | None,
              roots: Sequence[Path] | None, replay_budget_s: float) -> str:
    try:
        payload = json.loads(stdin_text)
        event = from_claude_code(event_name, payload)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        log.warning("hook %s: bad input ignored: %s", event_name, exc)
        return ""
    body = build_body(event, transcript_roots=roots, max_body_bytes=settings.max_body_bytes)
    endpoint = ENDPOINTS[event.event]
    timeout = float(timeout_s or settings.hook_timeout_s)
    spool_dir = spool_dir_for(settings.home)
    headers = {CLIENT_HEADER: "hook", **auth_headers(settings.home)}
    with httpx.Client(base_url=settings.url, timeout=httpx.Timeout(timeout), trust_env=False,
                      headers=headers) as client:
        try:
            sent, failed = replay_spool(client, spool_dir, budget_s=replay_budget_s, timeout_s=timeout)
            if sent or failed:
                log.info("spool replay: %d sent, %d failed", sent, failed)
        except Exception:  # noqa: BLE001
            log.exception("spool replay failed")
        try:
            r = client.post(endpoint, content=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                            headers={"content-type": "application/json"})
        except httpx.HTTPError as exc:
            log.warning("hook %s: daemon at %s unavailable (%s); event spooled",
                        event.event, settings.url, exc.__class__.__name__)
            spool_event(spool_dir, endpoint, body)
            return ""
    if r.status_code >= 500:
        log.warning("hook %s: daemon answered HTTP %d; event spooled", event.event, r.status_code)
        spool_event(spool_dir, endpoint, body)
        return ""
    if r.status_code >= 300:
        log.warning("hook %s: daemon rejected the event: HTTP %d %s", event.event, r.status_code, r.text[:300])
        return ""
    try:
        data = r.json()
    except ValueError:
        log.warning("hook %s: daemon answer is not JSON", event.event)
        return ""
    inject = data.get("inject") if isinstance(data, dict) else None
    if event.event not in ("session-start", "user-prompt-submit") or not isinstance(inject, str) or not inject.strip():
        return ""
    return json.dumps({"hookSpecificOutput": {"hookEventName": CLAUDE_CODE_NAMES[event.event],
                                              "additionalContext": inject}})
