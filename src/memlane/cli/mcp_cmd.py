"""``memlane mcp ...``: the MCP server for agents.

``memlane mcp serve`` speaks MCP over stdio and forwards every tool call to the running daemon
(it never opens the database). Register it with an agent, e.g. for Claude Code::

    claude mcp add memlane -- memlane mcp serve

The daemon itself also serves MCP over streamable HTTP at ``http://127.0.0.1:7437/mcp``.
"""

from __future__ import annotations

import typer
from rich.console import Console

from memlane.config import load_settings
from memlane.errors import MemlaneError

mcp_app = typer.Typer(
    rich_markup_mode="markdown",
    help="MCP server for agents (stdio, backed by the daemon).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)


@mcp_app.callback()
def _group() -> None:
    """MCP server for agents (stdio, backed by the daemon)."""


@mcp_app.command("serve")
def serve(
    url: str | None = typer.Option(
        None, "--url", help="Daemon URL (default http://127.0.0.1:7437, or MEMLANE_DAEMON_URL / MEMLANE_PORT)."
    ),
) -> None:
    """Serve the memory tools over stdio (stdout carries only MCP messages; logs go to stderr).

    Tool calls go to the daemon; while it is down, each tool answers with an error saying so.
    """
    from memlane.mcp.stdio import run_stdio

    try:
        settings = load_settings()
    except MemlaneError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    run_stdio(settings, url=url)
