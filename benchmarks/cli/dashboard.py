"""``memlane bench dashboard``: the dashboard's pages timed on a filled store (docs/dashboard.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from benchmarks.cli.bench import DEFAULT_LOCOMO, bench_app
from benchmarks.report import out_path
from memlane.cli.progress import stage_progress

console = Console(width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, soft_wrap=True)


@bench_app.command("dashboard")
def bench_dashboard(
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Path of locomo10.json."),
    memories: int = typer.Option(10_000, help="Memories in the store."),
    sessions: int = typer.Option(1_000, help="Sessions replayed through the hooks."),
    repeats: int = typer.Option(30, help="Requests per URL (after one warm-up)."),
    embedding: str = typer.Option("none", help="Embedding provider of the store: none (BM25) or local."),
    browser: bool = typer.Option(
        True,
        "--browser/--no-browser",
        help="Also time each page in Debian's chromium (Playwright) when it is installed.",
    ),
    keep: Path | None = typer.Option(None, help="Keep the store in this directory."),
    out: Path | None = typer.Option(None, help="JSON report path."),
) -> None:
    """The dashboard's pages and data endpoints: p95 server time on 10,000 memories and 1,000
    sessions (targets: 100 ms each, 50 ms for the memory list's first page; 1 s in the browser)."""
    from benchmarks.dashboard import run_dashboard_bench

    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found (LoCoMo lives in ../shared/bench-data/locomo/)")
        raise typer.Exit(2)
    with stage_progress(err, "filling") as tick:
        report = run_dashboard_bench(
            data,
            memories=memories,
            sessions=sessions,
            repeats=repeats,
            embedding=embedding,
            browser=browser,
            keep=keep,
            progress=tick,
        )
    path = out_path(out, "bench-dashboard")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))
    t = Table(
        title=f"dashboard: {report['memories']} memories, {report['sessions']} sessions "
        f"(embedding {report['embedding']}; fill {report['fill_s']:.0f} s), {report['repeats']} requests "
        "per URL, server time from Server-Timing"
    )
    for c in ("URL", "server p50 ms", "server p95 ms", "client p95 ms", "target", "ok"):
        t.add_column(c)
    for name, r in report["server"].items():
        t.add_row(
            name,
            f"{r['server_p50']:.1f}",
            f"{r['server_p95']:.1f}",
            f"{r['client_p95']:.1f}",
            f"<= {r['target_ms']:.0f}",
            "yes" if r["ok"] else "[red]no[/red]",
        )
    console.print(t)
    if report["browser"]:
        b = Table(title="in chromium: DOMContentLoaded / load after navigation, ms (target: usable within 1 s)")
        for c in ("page", "ready p50", "ready max", "load p50", "ok"):
            b.add_column(c)
        for name, r in report["browser"].items():
            b.add_row(
                name,
                f"{r['ready_p50']:.0f}",
                f"{r['ready_max']:.0f}",
                f"{r['load_p50']:.0f}",
                "yes" if r["ok"] else "[red]no[/red]",
            )
        console.print(b)
    console.print(f"report: {path}")
