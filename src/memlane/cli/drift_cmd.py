"""``memlane drift list|resolve``, ``memlane stale scan`` (through the running daemon; docs/drift.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memlane.cli.client import client_for
from memlane.errors import MemlaneError

drift_app = typer.Typer(
    help="Memories that may no longer match the world (drift, stale files, signals).", no_args_is_help=True
)
stale_app = typer.Typer(help="File staleness of memories' file references.", no_args_is_help=True)

# Reports are often redirected to a file: keep the tables readable there too.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)

UrlOpt = typer.Option(None, "--url", help="Daemon URL (default http://127.0.0.1:7437 or MEMLANE_PORT).")


def _fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(1)


@drift_app.command("list")
def list_errors(
    error_type: str | None = typer.Option(
        None, "--type", help="memory_drift, memory_stale_file, memory_stale_entity or memory_external_signal."
    ),
    memory: str | None = typer.Option(None, "--memory", help="Only this memory's rows."),
    resolved: str = typer.Option("false", help="false (open, default), true or all."),
    limit: int = typer.Option(50, min=1, max=1000, help="Most rows, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw JSON answer."),
    url: str | None = UrlOpt,
) -> None:
    """List prediction errors (unresolved by default) with the memory each is about."""
    params = {"resolved": resolved, "limit": limit}
    if error_type:
        params["error_type"] = error_type
    if memory:
        params["memory_id"] = memory
    try:
        r = client_for(url).request("GET", "/api/drift/errors", params=params)
    except MemlaneError as exc:
        _fail(exc)
        return
    if as_json:
        console.print_json(json.dumps(r))
        return
    t = Table(title=f"{len(r['items'])} prediction errors")
    for col in ("id", "type", "target", "distance", "detected", "resolved", "memory", "content"):
        t.add_column(col, overflow="fold")
    for i in r["items"]:
        t.add_row(
            str(i["error_id"]),
            i["error_type"],
            escape(i["target"]),
            f"{i['cosine_distance']:.3f}",
            i["detected_at"],
            i["resolved_at"] or "",
            i["memory_id"][:8],
            escape(i["memory"]["content"][:120]),
        )
    console.print(t)


@drift_app.command("resolve")
def resolve(
    error_id: int = typer.Argument(..., help="The error id (from `memlane drift list`)."), url: str | None = UrlOpt
) -> None:
    """Dismiss one open prediction error (a false positive)."""
    try:
        client_for(url).request("POST", f"/api/drift/errors/{error_id}/resolve")
    except MemlaneError as exc:
        _fail(exc)
    console.print(f"resolved {error_id}")


@stale_app.command("scan")
def scan(
    project: Path | None = typer.Option(None, "--project", help="One project root (default: all)."),
    url: str | None = UrlOpt,
) -> None:
    """Sweep every file reference now: renamed files (git) are followed, missing ones marked stale."""
    body = {"project": str(project.resolve())} if project is not None else {}
    try:
        r = client_for(url).request("POST", "/api/stale/scan", json=body)
    except MemlaneError as exc:
        _fail(exc)
        return
    console.print(
        f"checked {r['checked']} file references: {r['missing']} missing, {r['renamed']} renamed "
        f"(followed), {r['stale']} stale; {r['git']} git repositories read"
    )
    for mid, old, new in r["renames"]:
        console.print(f"  renamed  {mid[:8]}  {escape(old)} -> {escape(new)}")
    for mid, path, reason in r["stale_files"]:
        console.print(f"  stale    {mid[:8]}  {escape(path)} {reason}")
