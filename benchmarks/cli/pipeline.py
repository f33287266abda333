"""``memlane bench pipeline``: extraction jobs per second, end to end, with a scripted instant LLM."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from benchmarks.cli.bench import DEFAULT_LOCOMO, bench_app, console, err
from benchmarks.report import out_path
from memlane.cli.progress import stage_progress


@bench_app.command("pipeline")
def pipeline(
    jobs: int = typer.Option(500, min=1, help="Memories (= extract jobs) per repeat."),
    repeats: int = typer.Option(3, min=1, help="Repeats, each on a fresh data directory; the median counts."),
    workers: int = typer.Option(
        2,
        min=1,
        max=16,
        help="Extraction workers (memory.pipelineV2.worker.concurrency; 2 = the default, one per core here).",
    ),
    embedding: str = typer.Option("none", help="none (BM25 candidates) or local (ONNX embedder)."),
    synchronous: str = typer.Option("FULL", help="SQLite synchronous: FULL (daemon default) or NORMAL."),
    data: Path = typer.Option(
        DEFAULT_LOCOMO, help="LoCoMo file whose real texts become the memories (a synthetic corpus when missing)."
    ),
    out: Path | None = typer.Option(None, help="JSON report path (default bench-results/...)."),
) -> None:
    """Enqueue N memories, let the extraction workers drain the queue against a loopback Ollama server
    that answers at once (valid extraction and decision JSON); report jobs/s (median of repeats)."""
    from benchmarks.pipeline import run_pipeline_bench
    from benchmarks.report import write_json

    if embedding not in ("none", "local") or synchronous not in ("FULL", "NORMAL"):
        err.print("[red]error:[/red] --embedding must be none or local; --synchronous FULL or NORMAL")
        raise typer.Exit(2)
    with stage_progress(err, "starting") as tick:
        try:
            report = run_pipeline_bench(
                jobs=jobs,
                repeats=repeats,
                workers=workers,
                embedding=embedding,
                synchronous=synchronous,
                data=data,
                progress=tick,
            )
        except RuntimeError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from None
    path = write_json(out_path(out, "bench-pipeline"), report)
    t = Table(
        title=f"pipeline v2 extraction: {jobs} jobs x {repeats}, {workers} worker(s), embedding "
        f"{embedding}, {report['cpus']} CPUs, corpus {report['corpus'].split(':')[0]}"
    )
    for col in ("repeat", "seconds", "jobs/s", "job p50 ms", "facts", "created", "deduped", "LLM calls", "status"):
        t.add_column(col)
    for i, r in enumerate(report["runs"], start=1):
        t.add_row(
            str(i),
            f"{r['seconds']:.2f}",
            f"{r['jobs_per_s']:.1f}",
            f"{r['job_latency_ms_p50']:.1f}",
            str(r["facts"]),
            str(r["created"]),
            str(r["deduped"]),
            str(r["llm_calls"]),
            str(r["status"]),
        )
    console.print(t)
    tot = report["totals"]
    verdict = "meets" if report["meets_target"] else "below"
    console.print(
        f"median {report['median_jobs_per_s']:.1f} jobs/s ({verdict} the target of "
        f"{report['target_jobs_per_s']:.0f}); totals: {tot['jobs']} jobs, {tot['facts']} facts, "
        f"{tot['created']} created, {tot['deduped']} deduped, {tot['llm_calls']} LLM calls in "
        f"{tot['seconds']:.1f} s"
    )
    console.print(f"report: {path}")
