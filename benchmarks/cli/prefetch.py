"""``memlane bench prefetch``: the co-access graph against co-change baselines (docs/v3.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from benchmarks.cli.bench import bench_app
from benchmarks.cli.bench import console as _out
from benchmarks.cli.bench import err as _err
from memlane.errors import MemlaneError


@bench_app.command("prefetch")
def bench_prefetch(
    data: Path = typer.Option(Path("../shared/bench-data/cochange"), help="The cochange data directory (MANIFEST.md)."),
    git: bool = typer.Option(
        True,
        "--git/--no-git",
        help="Bootstrap through a real git repository (git fast-import, then git log) or from the recorded changes.",
    ),
    online: bool = typer.Option(False, help="Also learn each scored commit after scoring it."),
    out: Path | None = typer.Option(None, help="JSON report path (default bench-results/)."),
) -> None:
    """Co-access graph vs the co-change-count and import baselines on httpx's history: bootstrap
    from the commits up to 0.23.0, then for each later commit give its first file and predict the
    rest (recall@5, recall@10, MRR; per-commit time)."""
    from datetime import datetime

    from benchmarks.prefetch import run

    try:
        report = run(data, use_git=git, online=online, progress=lambda m: _err.print(f"[dim]{escape(m)}...[/dim]"))
    except MemlaneError as exc:
        _err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    path = out or Path("bench-results") / f"prefetch-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    b = report["bootstrap"]
    _out.print(
        f"bootstrap ({b['source']}): {b['commits']} commits -> {b['files']} files, {b['edges']} edges "
        f"in {b['total_ms']:.0f} ms",
        highlight=False,
    )
    for label, s in report["sets"].items():
        t = Table(title=f"{label}: {s['commits']} commits after 0.23.0" + (" (online)" if report["online"] else ""))
        for col in ("method", "recall@5", "recall@10", "MRR"):
            t.add_column(col)
        for name, m in s["methods"].items():
            t.add_row(name, f"{m['recall@5']:.4f}", f"{m['recall@10']:.4f}", f"{m['mrr']:.4f}")
        _out.print(t)
        ms = s["ms_per_commit"]
        _out.print(
            f"graph prediction per commit: p50 {ms['p50']:.3f} ms, p95 {ms['p95']:.3f} ms, max {ms['max']:.3f} ms",
            highlight=False,
        )
    _out.print(f"report: {path}", highlight=False)
