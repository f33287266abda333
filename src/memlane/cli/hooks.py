"""``memlane hook <event>`` (run by Claude Code) and ``memlane connect|disconnect claude-code``.

The hook commands read Claude Code's hook JSON on stdin, print what Claude Code should see
(often nothing) and always exit 0: a memory daemon that is down or slow must never break
or stall the agent. Problems go to ``$MEMLANE_HOME/logs/hooks.log``.
"""

from __future__ import annotations

import os
import shlex
import sys
from datetime import datetime
from pathlib import Path

import typer

from memlane.connectors.events import EVENTS

MAX_STDIN_BYTES = 16 * 1024 * 1024

hook_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Claude Code hook commands: read the hook JSON on stdin, print the answer, always exit 0.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
connect_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Connect memlane to an agent harness (hooks and MCP server).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
disconnect_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Remove memlane's hooks and MCP server from an agent harness.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _log_early(message: str) -> None:
    """Log before settings exist (e.g. a broken config.yaml) to the default home's hooks.log."""
    try:
        from memlane.config import default_home
        from memlane.fileperms import open_private, private_dir

        path = default_home() / "logs" / "hooks.log"
        private_dir(path.parent)
        with open_private(path, "a") as f:
            f.write(f"{datetime.now().isoformat(timespec='seconds')} ERROR memlane.cli.hooks: {message}\n")
    except Exception:  # noqa: BLE001
        pass


def _run(event: str, timeout: float | None) -> None:
    out = ""
    os.umask(0o077)  # private files: the spool, hooks.log and any directory this hook creates
    try:
        stdin = sys.stdin
        raw = b"" if stdin is None or stdin.isatty() else stdin.buffer.read(MAX_STDIN_BYTES)
        from memlane.config import load_settings
        from memlane.connectors.claude_code import run_hook

        try:
            settings = load_settings()
        except Exception as exc:  # noqa: BLE001 - a broken config must not break the agent
            _log_early(f"hook {event}: settings could not be loaded: {exc}")
            raise typer.Exit(0) from None
        if timeout is not None:
            timeout = min(max(timeout, 0.1), 50.0)
        out = run_hook(event, raw.decode("utf-8", errors="replace"), settings, timeout_s=timeout)
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001
        _log_early(f"hook {event}: {exc.__class__.__name__}: {exc}")
    if out:
        try:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
        except Exception:  # noqa: BLE001 - e.g. Claude Code closed the pipe
            pass
    raise typer.Exit(0)


def _make_hook_command(event: str):  # noqa: ANN202
    def command(
        timeout: float | None = typer.Option(
            None, "--timeout", help="Per-request timeout to the daemon, seconds (default 4; 0.1..50)."
        ),
    ) -> None:
        _run(event, timeout)

    command.__doc__ = f"Handle Claude Code's {event} hook (stdin JSON in, hook JSON out; exit 0)."
    return command


for _event in EVENTS:
    hook_app.command(_event)(_make_hook_command(_event))


@connect_app.callback()
def _connect_group() -> None:
    """Connect memlane to an agent harness (hooks and MCP server)."""


@disconnect_app.callback()
def _disconnect_group() -> None:
    """Remove memlane's hooks and MCP server from an agent harness."""


SettingsOpt = typer.Option(None, "--settings", help="Claude Code settings file (default ~/.claude/settings.json).")
ClaudeJsonOpt = typer.Option(
    None, "--claude-json", help="Claude Code user config with MCP servers (default ~/.claude.json)."
)


def _report(result) -> None:  # noqa: ANN001
    typer.echo(f"{result.settings_path}:")
    for event, action in result.hooks.items():
        typer.echo(f"  hook {event}: {action}")
    if result.claude_json_path is not None:
        typer.echo(f"{result.claude_json_path}:")
        typer.echo(f"  MCP server memlane: {result.mcp}")
        if result.mcp == "skipped":
            typer.echo("  (an existing 'memlane' MCP server was not written by memlane; left as is)")
    for backup in result.backups:
        typer.echo(f"backup: {backup}")
    if not result.changed:
        typer.echo("nothing changed")


@connect_app.command("claude-code")
def connect_claude_code(
    settings: Path | None = SettingsOpt,
    claude_json: Path | None = ClaudeJsonOpt,
    command: str | None = typer.Option(
        None,
        "--command",
        help="How Claude Code should start memlane, e.g. "
        "'/opt/memlane/bin/memlane' (default: the absolute path of this memlane).",
    ),
    mcp: bool = typer.Option(True, "--mcp/--no-mcp", help="Also register the MCP server."),
) -> None:
    """Add memlane's SessionStart, UserPromptSubmit, SessionEnd, PreCompact, PostToolUse and
    PostToolUseFailure hooks to Claude Code (idempotent, other hooks kept, backup first) and
    register the memlane MCP server.

    The hooks run the light client with this memlane's Python without site ('python -S -I -c
    ...', standard library only, starts in milliseconds; another install given with --command
    gets its memlane-hook script); the MCP server runs 'memlane mcp serve'."""
    from memlane.connectors.claude_code import SettingsFileError, connect, default_memlane_cmd, default_settings_path

    cmd = shlex.split(command) if command else default_memlane_cmd()
    try:
        result = connect(settings or default_settings_path(), cmd, claude_json_path=claude_json, register_mcp=mcp)
    except (SettingsFileError, OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    _report(result)
    if result.changed:
        typer.echo("Restart Claude Code (or run /hooks) to load the changes.")


@disconnect_app.command("claude-code")
def disconnect_claude_code(
    settings: Path | None = SettingsOpt,
    claude_json: Path | None = ClaudeJsonOpt,
    mcp: bool = typer.Option(True, "--mcp/--no-mcp", help="Also remove the MCP server."),
) -> None:
    """Remove only memlane's hooks (commands running memlane-hook, memlane.hookclient or 'memlane
    hook') and its MCP server from Claude Code; everything else is left as it was (backup first)."""
    from memlane.connectors.claude_code import SettingsFileError, default_settings_path, disconnect

    try:
        result = disconnect(settings or default_settings_path(), claude_json_path=claude_json, unregister_mcp=mcp)
    except (SettingsFileError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    _report(result)
