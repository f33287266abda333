"""``memlane drift list|resolve``, ``memlane stale scan`` (through the running daemon) and
``memlane bench drift`` (docs/drift.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from memlane.cli.bench import _out_path, bench_app, console, err
from memlane.cli.client import client_for
from memlane.config import load_settings
from memlane.errors import MemlaneError

DEFAULT_DRIFT_DATA = Path("../shared/bench-data/drift/httpx")

drift_app = typer.Typer(help="Memories that may no longer match the world (drift, stale files, signals).",
                        no_args_is_help=True)
stale_app = typer.Typer(help="File staleness of memories' file references.", no_args_is_help=True)

UrlOpt = typer.Option(None, "--url", help="Daemon URL (default http://127.0.0.1:7437 or MEMLANE_PORT).")


def _fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(1)


@drift_app.command("list")
def list_errors(error_type: Optional[str] = typer.Option(None, "--type", help="memory_drift, memory_stale_file, "
                                                         "memory_stale_entity or memory_external_signal."),
                memory: Optional[str] = typer.Option(None, "--memory", help="Only this memory's rows."),
                resolved: str = typer.Option("false", help="false (open, default), true or all."),
                limit: int = typer.Option(50, min=1, max=1000, help="Most rows, newest first."),
                as_json: bool = typer.Option(False, "--json", help="Print the raw JSON answer."),
                url: Optional[str] = UrlOpt) -> None:
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
        t.add_row(str(i["error_id"]), i["error_type"], escape(i["target"]), f"{i['cosine_distance']:.3f}",
                  i["detected_at"], i["resolved_at"] or "", i["memory_id"][:8], escape(i["memory"]["content"][:120]))
    console.print(t)


@drift_app.command("resolve")
def resolve(error_id: int = typer.Argument(..., help="The error id (from `memlane drift list`)."),
            url: Optional[str] = UrlOpt) -> None:
    """Dismiss one open prediction error (a false positive)."""
    try:
        client_for(url).request("POST", f"/api/drift/errors/{error_id}/resolve")
    except MemlaneError as exc:
        _fail(exc)
    console.print(f"resolved {error_id}")


@stale_app.command("scan")
def scan(project: Optional[Path] = typer.Option(None, "--project", help="One project root (default: all)."),
         url: Optional[str] = UrlOpt) -> None:
    """Sweep every file reference now: renamed files (git) are followed, missing ones marked stale."""
    body = {"project": str(project.resolve())} if project is not None else {}
    try:
        r = client_for(url).request("POST", "/api/stale/scan", json=body)
    except MemlaneError as exc:
        _fail(exc)
        return
    console.print(f"checked {r['checked']} file references: {r['missing']} missing, {r['renamed']} renamed "
                  f"(followed), {r['stale']} stale; {r['git']} git repositories read")
    for mid, old, new in r["renames"]:
        console.print(f"  renamed  {mid[:8]}  {escape(old)} -> {escape(new)}")
    for mid, path, reason in r["stale_files"]:
        console.print(f"  stale    {mid[:8]}  {escape(path)} {reason}")


@bench_app.command("drift")
def bench_drift(data: Path = typer.Option(DEFAULT_DRIFT_DATA, help="The httpx drift data (MANIFEST.md)."),
                tune_pair: int = typer.Option(0, min=0, max=2, help="Pair the threshold is chosen on "
                                              "(0 = 0.13->0.18, 1 = 0.18->0.23, 2 = 0.23->0.28)."),
                threshold: Optional[float] = typer.Option(None, help="Threshold the detector runs with "
                                                          "(default: drift.threshold)."),
                chunk_size: Optional[int] = typer.Option(None, help="documents.chunkSize for the ingest "
                                                         "(default: the setting's default)."),
                out: Optional[Path] = typer.Option(None, help="JSON report path (default bench-results/...).")) -> None:
    """Drift detection and file staleness on real documentation edits (httpx, four releases)."""
    from memlane.bench.drift import run_drift_bench
    from memlane.bench.report import write_json
    from memlane.embedding.local_onnx import LocalOnnxEmbedder

    if not (data / "MANIFEST.md").exists():
        err.print(f"[red]error:[/red] no drift data at {data}")
        raise typer.Exit(2)
    t = load_settings().drift.threshold if threshold is None else threshold
    emb = LocalOnnxEmbedder()
    try:
        emb.warmup()
        report = run_drift_bench(data, embedder=emb, threshold=t, tune_pair=tune_pair, chunk_size=chunk_size,
                                 progress=lambda s: err.print(s))
    finally:
        emb.close()
    path = write_json(_out_path(out, "bench-drift"), report)
    tab = Table(title=f"drift detection (threshold {t:g}; threshold chosen on {report['tune_pair']}: "
                      f"{report['tuned_threshold']:.4f})")
    for col in ("pair", "role", "memories", "drifted", "AUROC", f"P@{t:g}", f"R@{t:g}", "P@chosen", "R@chosen"):
        tab.add_column(col)
    for r in report["pairs"]:
        tab.add_row(r["pair"], r["role"], str(r["memories"]), str(r["drifted"]), f"{r['auroc']:.3f}",
                    f"{r['precision']:.2f}", f"{r['recall']:.2f}", f"{r['tuned_precision']:.2f}",
                    f"{r['tuned_recall']:.2f}")
    console.print(tab)
    st = Table(title="file staleness (pages deleted / renamed between releases, real git)")
    for col in ("pair", "pages", "deleted", "P/R deleted", "renamed", "P/R renamed"):
        st.add_column(col)
    for r in report["staleness"]:
        st.add_row(r["pair"], str(r["pages"]), str(len(r["deleted"])), "%.2f/%.2f" % tuple(r["deleted_pr"]),
                   str(len(r["renamed"])), "%.2f/%.2f" % tuple(r["renamed_pr"]))
    console.print(st)
    console.print(f"report: {path}")


@bench_app.command("drift-latency")
def bench_drift_latency(memories: int = typer.Option(10_000, min=100, help="Memories in the store."),
                        queries: int = typer.Option(300, min=10, help="Queries, each run with drift on and off."),
                        data: Path = typer.Option(Path("../shared/bench-data/locomo/locomo10.json"),
                                                  help="LoCoMo file (the texts of `bench latency`)."),
                        out: Optional[Path] = typer.Option(None, help="JSON report path.")) -> None:
    """Recall p50 with drift on vs off on one store in the same minutes (paired, in process), and the
    retrieval rules' cost on 10 hits with 3 flagged."""
    from memlane.bench.drift_latency import run_drift_latency
    from memlane.bench.report import write_json
    from memlane.embedding.local_onnx import LocalOnnxEmbedder

    emb = LocalOnnxEmbedder()
    try:
        emb.warmup()
        r = run_drift_latency(data, n_memories=memories, n_queries=queries, embedder=emb)
    finally:
        emb.close()
    path = write_json(_out_path(out, "bench-drift-latency"), r)
    console.print(f"{r['memories']} memories ({r['memories_with_references']} with references), {r['queries']} "
                  f"queries: recall p50 drift on {r['p50_on_ms']:.2f} ms, off {r['p50_off_ms']:.2f} ms, paired "
                  f"median difference {r['paired_median_diff_ms']:+.3f} ms; retrieval rules on 10 hits with 3 "
                  f"flagged {r['after_recall_us_10_hits_3_flagged']:.1f} us; load {r['load_avg'][0]:.1f}")
    console.print(f"report: {path}")
