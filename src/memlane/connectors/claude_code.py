"""The Claude Code connector: what ``memlane hook <event>`` does, and ``connect``/``disconnect``.

Hook side (:func:`run_hook`): Claude Code pipes one JSON object to the hook command and reads
its stdout. For SessionStart and UserPromptSubmit a JSON
``{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`` adds context;
SessionEnd and PreCompact cannot add context, so nothing is printed for them. The hook fails
open: when the daemon is down, slow, or answers 5xx the event is spooled
(:mod:`memlane.connectors.spool`) and nothing is printed; bad input is logged to
``$MEMLANE_HOME/logs/hooks.log``. It never raises and never blocks Claude Code for long.

Settings side (:func:`connect`, :func:`disconnect`): adds/removes our six hooks (:data:`HOOK_TIMEOUTS_S`) in Claude
Code's ``settings.json`` and the user-scope ``memlane`` MCP server in ``~/.claude.json``,
keeping everything else, with a timestamped backup before any change and atomic writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memlane.config import Settings
from memlane.connectors.claude_settings import (  # noqa: F401 - re-exported
    HOOK_TIMEOUTS_S,
    MCP_NAME,
    ConnectResult,
    SettingsFileError,
    connect,
    default_claude_json_path,
    default_hook_cmd,
    default_memlane_cmd,
    default_settings_path,
    disconnect,
)
from memlane.hookclient import (  # noqa: F401 - re-exported: the one implementation of a hook call
    ENDPOINTS,
    HOOKS_DISABLED_ENV,
    REPLAY_BUDGET_S,
    HookTarget,
    build_body,
    run,
    setup_log,
)

# --- hook runner ------------------------------------------------------------------------------


def run_hook(
    event_name: str,
    stdin_text: str,
    settings: Settings,
    *,
    timeout_s: float | None = None,
    transcript_roots: Sequence[Path] | None = None,
    replay_budget_s: float = REPLAY_BUDGET_S,
) -> str:
    """Handle one Claude Code hook call; returns what to print on stdout (often ``""``).

    The same call as the light client (:func:`memlane.hookclient.run`), with the daemon URL,
    home, timeout and body cap taken from ``settings`` instead of being looked up.

    Args:
        event_name: ``session-start`` | ``user-prompt-submit`` | ``session-end`` | ``pre-compact``
            | ``post-tool-use`` | ``post-tool-use-failure``.
        stdin_text: the JSON Claude Code wrote on stdin.
        settings: memlane settings (daemon URL, ``home`` for the spool and the log).
        timeout_s: per-request timeout, seconds; default ``settings.hook_timeout_s``
            (default 4 s).
        transcript_roots: where transcripts may be read from (default ``~/.claude/projects``).
        replay_budget_s: wall-clock budget for replaying spooled events first, seconds.

    Never raises: errors are logged to ``{home}/logs/hooks.log`` and give ``""``.
    """
    target = HookTarget(
        settings.home, settings.url, float(timeout_s or settings.hook_timeout_s), settings.max_body_bytes
    )
    return run(event_name, stdin_text, target, transcript_roots=transcript_roots, replay_budget_s=replay_budget_s)
