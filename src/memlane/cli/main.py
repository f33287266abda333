"""The ``memlane`` command line (typer). Each command validates, calls one library method
or one daemon endpoint, and formats; the library never prints."""

from __future__ import annotations

import gc
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memlane import __version__
from memlane.cli import v3_cmd
from memlane.cli.client import client_for
from memlane.cli.doctor import doctor
from memlane.cli.hooks import connect_app, disconnect_app, hook_app
from memlane.cli.lazy import lazy_typer
from memlane.cli.mcp_cmd import mcp_app
from memlane.cli.predictor_cmd import predictor_app
from memlane.cli.token_cmd import token_app
from memlane.cli.train_cmd import train_app
from memlane.config import load_settings, public_settings
from memlane.errors import MemlaneError

app = typer.Typer(
    rich_markup_mode="markdown",
    name="memlane",
    help="Local-first memory daemon for AI agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# defined by the benchmarks package beside memlane's sources, imported only when used
app.add_typer(
    lazy_typer("benchmarks.cli", "bench_app", help="Benchmarks on real data (retrieval quality, latency, throughput)."),
    name="bench",
)
app.add_typer(train_app, name="train")
app.add_typer(
    lazy_typer(
        "benchmarks.cli",
        "replay_app",
        help="Replay real data through the session lifecycle (the predictor's training data).",
    ),
    name="replay",
)
app.add_typer(hook_app, name="hook")
app.add_typer(connect_app, name="connect")
app.add_typer(disconnect_app, name="disconnect")
app.add_typer(mcp_app, name="mcp")
app.add_typer(predictor_app, name="predictor")
app.add_typer(token_app, name="token")
import memlane.cli.dashboard_cmd  # noqa: E402,F401  (registers `memlane dashboard` on app)
from memlane.cli.drift_cmd import drift_app, stale_app  # noqa: E402

app.add_typer(drift_app, name="drift")
app.add_typer(stale_app, name="stale")
app.add_typer(v3_cmd.memories_app, name="memories")
app.add_typer(v3_cmd.coaccess_app, name="coaccess")
app.command(name="doctor")(doctor)
console = Console()
err = Console(stderr=True, soft_wrap=True)


def _settings(home: Path | None = None, **over: Any):  # noqa: ANN202
    kwargs = {k: v for k, v in over.items() if v is not None}
    if home is not None:
        kwargs["home"] = home
    return load_settings(**kwargs)


def _fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(1)


HomeOpt = typer.Option(None, "--home", help="Data directory (default $MEMLANE_HOME or ~/.memlane).")
UrlOpt = typer.Option(None, "--url", help="Daemon URL (default http://127.0.0.1:7437 or MEMLANE_PORT).")


@app.command()
def version() -> None:
    """Print the memlane version."""
    console.print(__version__)


@app.command()
def serve(
    host: str | None = typer.Option(None, help="Bind address (default 127.0.0.1)."),
    port: int | None = typer.Option(None, help="TCP port (default 7437)."),
    home: Path | None = HomeOpt,
) -> None:
    """Run the daemon in the foreground (HTTP API on 127.0.0.1:7437 by default)."""
    from memlane.api.app import create_app
    from memlane.api.guard import bind_warnings
    from memlane.cli.serving import run_server
    from memlane.container import open_container
    from memlane.fileperms import set_private_umask, warn_if_loose
    from memlane.homelock import acquire as acquire_home
    from memlane.procinfo import return_large_blocks

    set_private_umask()  # whatever the daemon creates in the home is 0600 / 0700
    return_large_blocks()  # freed model-load temporaries go back to the system (memlane.procinfo)
    try:
        settings = _settings(home, host=host, port=port)
        logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        # httpx logs every request at INFO (an LLM or embedding call: several per extraction
        # job, full URL); failures reach the log as memlane's own errors. Shown at debug only.
        logging.getLogger("httpx").setLevel(logging.DEBUG if settings.log_level == "debug" else logging.WARNING)
        for warning in bind_warnings(settings.host, settings.require_token):
            err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
        # One process per home (memlane.homelock): a second daemon or a direct import would keep
        # its own index and miss this one's writes. Held until the process ends.
        home_lock = acquire_home(
            settings.home,
            "memlane serve",
            url=f"http://{settings.host}:{settings.port}",
            hint="stop it first, or give this daemon another --home",
        )
        err.print(f"memlane {__version__}: data in {settings.home}, loading the embedding model...")
        container = open_container(settings, warmup=True, start_workers=True)
        warn_if_loose(settings.home, logging.getLogger("memlane.serve"))  # an older or hand-made home
    except MemlaneError as exc:
        _fail(exc)
        return
    # Trigger: SIGTERM (kill, systemd stop). uvicorn shuts the server down gracefully, then
    # restores the previous handler and raises the signal again. Why: with the default handler
    # the process died right there, before container.close(): a job leased by a worker stayed
    # leased until the lease timeout (5 min), and predictor records waiting for their scores
    # were dropped. Outcome: the re-raised SIGTERM becomes SystemExit(0) and the finally runs.
    signal.signal(signal.SIGTERM, _exit_after_sigterm)
    try:
        app_ = create_app(container)
        # The daemon is loaded (models, index, caches: hundreds of thousands of tracked objects),
        # and every full collection would walk them all while a request waits: they move to
        # the permanent generation, and later collections see only what requests create
        # (Python docs, gc.freeze; docs/decisions.md, "Threads").
        gc.collect()
        gc.freeze()
        err.print(f"memlane listening on http://{settings.host}:{settings.port} (OpenAPI at /docs)")
        # The judge stops as soon as the shutdown begins: requests waiting on it answer at once.
        run_server(
            app_,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            on_shutdown=container.sessions.stop_judge,
        )
    finally:
        container.close()
        home_lock.release()


def _exit_after_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM handler of ``memlane serve`` (re-raised by uvicorn after its graceful shutdown)."""
    raise SystemExit(0)


@app.command()
@v3_cmd.v3_options("remember")
def remember(
    content: str = typer.Argument(..., help="The memory text ('-' reads stdin)."),
    type_: str = typer.Option("fact", "--type", help="Memory type."),
    importance: float = typer.Option(0.5, help="Importance in [0, 1]."),
    project: str | None = typer.Option(None, help="Project scope."),
    tag: list[str] = typer.Option([], "--tag", help="A tag (repeatable)."),
    pinned: bool = typer.Option(False, help="Pin the memory."),
    url: str | None = UrlOpt,
    **v3: Any,
) -> None:
    """Store one memory through the running daemon (V3 fields: docs/v3.md)."""
    if content == "-":
        content = sys.stdin.read()
    try:
        r = client_for(url).request(
            "POST",
            "/api/memory/remember",
            json={
                "content": content,
                "type": type_,
                "importance": importance,
                "project": project,
                "tags": tag,
                "pinned": pinned,
                "who": "cli",
                **v3_cmd.remember_fields(**v3),
            },
        )
    except MemlaneError as exc:
        _fail(exc)
        return
    console.print(f"{r['status']} {r['id']}" + ("" if r["embedded"] else " (no vector yet)"))


@app.command()
@v3_cmd.v3_options("recall")
def recall(
    query: str = typer.Argument(..., help="What to look for (any text)."),
    limit: int = typer.Option(10, "--limit", "-k", help="Results, 1..1000."),
    project: str | None = typer.Option(None, help="Only this project."),
    type_: list[str] = typer.Option([], "--type", help="Only these types (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw JSON answer."),
    url: str | None = UrlOpt,
    **v3: Any,
) -> None:
    """Recall memories through the running daemon (V3 conditions: docs/v3.md)."""
    where = v3_cmd.recall_where(**v3)
    try:
        r = client_for(url).request(
            "POST",
            "/api/v3/recall" if where else "/api/memory/recall",
            json={"query": query, "limit": limit, "project": project, "types": type_, **where},
        )
    except MemlaneError as exc:
        _fail(exc)
        return
    if as_json:
        console.print_json(json.dumps(r))
        return
    table = Table(title=f"{len(r['results'])} results ({r['took_ms']:.1f} ms, legs: {', '.join(r['legs']) or 'none'})")
    for col in ("score", "id", "type", "created", "content"):
        table.add_column(col, overflow="fold")
    for h in r["results"]:
        table.add_row(f"{h['score']:.3f}", h["id"][:8], h["type"], h["created_at"][:10], h["content"][:300])
    console.print(table)


@app.command()
def status(url: str | None = UrlOpt) -> None:
    """Daemon health and store statistics."""
    try:
        c = client_for(url)
        health = c.request("GET", "/health")
        stats = c.request("GET", "/api/memories", params={"limit": 1})["stats"]
    except MemlaneError as exc:
        _fail(exc)
        return
    console.print(f"[green]ok[/green] memlane {health['version']} up {health['uptime_s']:.0f}s, db {health['db_path']}")
    console.print(
        f"memories: {stats['live']} live, {stats['deleted']} deleted, {stats['pinned']} pinned; "
        f"embedding model {stats['embedding_model']} ({stats['indexed']} indexed)"
    )
    if stats["by_type"]:
        console.print("by type: " + ", ".join(f"{k} {v}" for k, v in stats["by_type"].items()))
    procs = health.get("processes")
    if isinstance(procs, dict):
        console.print("resident memory: " + _process_line(procs))


def _mib(n: Any) -> str:
    return f"{n / 2**20:.0f} MiB" if isinstance(n, (int, float)) else "?"


def _process_line(procs: dict[str, Any]) -> str:
    """``/health``'s ``processes`` as one line: each process's resident memory (now, peak) and the total."""
    d = procs.get("daemon") or {}
    parts = [f"daemon {_mib(d.get('rss_bytes'))} (pid {d.get('pid')}, peak {_mib(d.get('peak_rss_bytes'))})"]
    total = d.get("rss_bytes") or 0
    s = procs.get("predictor_sidecar")
    if s is None:
        parts.append("predictor sidecar off (predictor.enabled is false)")
    elif s.get("pid"):
        parts.append(
            f"predictor sidecar {_mib(s.get('rss_bytes'))} (pid {s['pid']}, {s.get('state')}, "
            f"peak {_mib(s.get('peak_rss_bytes'))})"
        )
        total += s.get("rss_bytes") or 0
    else:
        why = {"dormant": "no model yet", "stopped": "predictor disabled"}.get(s.get("state"), s.get("state"))
        parts.append(f"predictor sidecar not running ({why})")
    return ", ".join(parts) + f"; total {_mib(total)}"


@app.command("config")
def config_cmd(
    home: Path | None = HomeOpt,
    bind_keys: bool = typer.Option(
        False,
        "--bind-keys",
        help="Send each configured API key to its section's current base URL "
        "from now on (a key is otherwise sent only where it was first used). Restart the daemon after.",
    ),
) -> None:
    """Print the effective settings (defaults < config.yaml < MEMLANE_* environment)."""
    try:
        s = _settings(home)
        if bind_keys:
            from memlane.key_binding import bind_keys as bind

            bound = bind(s)
            for section, origin in bound.items():
                console.print(f"{section}.api_key: bound to {escape(origin)}")
            if not bound:
                console.print("no API key is configured for a provider that sends one; nothing bound")
            return
    except (MemlaneError, OSError) as exc:
        _fail(exc)
        return
    console.print_json(json.dumps(public_settings(s)))


@app.command("import")
def import_cmd(
    path: Path = typer.Argument(
        ...,
        exists=True,
        help="JSON lines, one memory per line; with --format claude-code a session transcript or a "
        "project directory of them (~/.claude/projects/PROJECT).",
    ),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Write directly into this data directory instead of via the daemon."
    ),
    batch: int = typer.Option(256, help="Memories per request / transaction."),
    fmt: str = typer.Option(
        "memories",
        "--format",
        help="memories (JSON lines of memories) or claude-code (Claude Code session transcripts, "
        "replayed through the daemon's hooks).",
    ),
    url: str | None = UrlOpt,
) -> None:
    """Import memories from JSON lines (each line: {"content": ..., optional fields as in the API}),
    or seed memlane from past Claude Code sessions (`--format claude-code`).

    Bad lines are reported with their line numbers and skipped; the rest are imported."""
    if fmt == "claude-code":
        _import_transcripts(path, data_dir, url)
        return
    if fmt != "memories":
        _fail(ValueError(f"--format must be memories or claude-code, got {fmt!r}"))
    if path.is_dir():
        _fail(ValueError(f"{path} is a directory: memories are imported from a file"))
    from memlane.cli.importer import run_import

    try:
        report = run_import(
            path,
            data_dir=data_dir,
            url=url or (None if data_dir else _settings().url),
            home=None if data_dir else _settings().home,
            batch=batch,
            console=err,
        )
    except (MemlaneError, OSError) as exc:
        _fail(exc)
        return
    console.print(
        f"imported {report['created']} new, {report['deduplicated']} duplicates, {report['bad_lines']} bad lines"
    )
    for line_no, msg in report["errors"][:20]:
        err.print(f"  line {line_no}: {msg}")
    if report["errors"]:
        raise typer.Exit(1)


def _import_transcripts(path: Path, data_dir: Path | None, url: str | None) -> None:
    """``memlane import --format claude-code``: through the daemon only (its hooks do the work)."""
    from memlane.cli.transcript_import import import_transcripts

    if data_dir is not None:
        _fail(ValueError("--format claude-code imports through the daemon: --data-dir does not apply"))
    try:
        rep = import_transcripts(path, url=url or _settings().url, home=_settings().home, console=err)
    except (MemlaneError, OSError) as exc:
        _fail(exc)
        return
    console.print(
        f"imported {rep.imported} sessions ({rep.tool_calls} tool calls, {rep.failed_calls} failed, "
        f"{rep.signals} observer signals, {rep.steps} work steps ended), skipped {len(rep.skipped)} already known, "
        f"{rep.bad_lines} bad lines, {rep.rejected} refused events"
    )
    if rep.usage:
        u = rep.usage
        console.print(
            f"token usage of the imported sessions: {u['input_tokens']} input, {u['output_tokens']} output, "
            f"{u['cache_read_input_tokens']} cache read, {u['cache_creation_input_tokens']} cache write "
            f"({u['messages']} assistant messages)"
        )
    for file, sid, why in rep.skipped[:20]:
        err.print(f"  skipped {escape(file)} (session {escape(sid)}): {why}")
    for file, line, msg in rep.problems[:20]:
        err.print(f"  {escape(file)} line {line}: {escape(msg)}")
    if rep.problems:
        raise typer.Exit(1)


def main() -> None:
    """The ``memlane`` console script: :data:`app`, with any :class:`MemlaneError` a command
    lets through (a store that cannot be opened, a bad path given to a bench) printed as one
    ``error:`` line on stderr and exit status 1 instead of a traceback."""
    try:
        app()
    except MemlaneError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise SystemExit(1) from None
