"""``memlane bench drift`` and ``memlane bench drift-latency`` (issue 41; docs/drift.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from benchmarks.cli.bench import bench_app, console, err
from benchmarks.report import out_path
from memlane.config import load_settings

DEFAULT_DRIFT_DATA = Path("../shared/bench-data/drift/httpx")


@bench_app.command("drift")
def bench_drift(
    data: Path = typer.Option(DEFAULT_DRIFT_DATA, help="The httpx drift data (MANIFEST.md)."),
    tune_pair: int = typer.Option(
        0, min=0, max=2, help="Pair the threshold is chosen on (0 = 0.13->0.18, 1 = 0.18->0.23, 2 = 0.23->0.28)."
    ),
    threshold: float | None = typer.Option(None, help="Threshold the detector runs with (default: drift.threshold)."),
    chunk_size: int | None = typer.Option(
        None, help="documents.chunkSize for the ingest (default: the setting's default)."
    ),
    out: Path | None = typer.Option(None, help="JSON report path (default bench-results/...)."),
) -> None:
    """Drift detection and file staleness on real documentation edits (httpx, four releases)."""
    from benchmarks.drift import run_drift_bench
    from benchmarks.report import write_json
    from memlane.embedding.local_onnx import LocalOnnxEmbedder

    if not (data / "MANIFEST.md").exists():
        err.print(f"[red]error:[/red] no drift data at {data}")
        raise typer.Exit(2)
    t = load_settings().drift.threshold if threshold is None else threshold
    emb = LocalOnnxEmbedder()
    try:
        emb.warmup()
        report = run_drift_bench(
            data, embedder=emb, threshold=t, tune_pair=tune_pair, chunk_size=chunk_size, progress=lambda s: err.print(s)
        )
    finally:
        emb.close()
    path = write_json(out_path(out, "bench-drift"), report)
    tab = Table(
        title=f"drift detection (threshold {t:g}; threshold chosen on {report['tune_pair']}: "
        f"{report['tuned_threshold']:.4f})"
    )
    for col in ("pair", "role", "memories", "drifted", "AUROC", f"P@{t:g}", f"R@{t:g}", "P@chosen", "R@chosen"):
        tab.add_column(col)
    for r in report["pairs"]:
        tab.add_row(
            r["pair"],
            r["role"],
            str(r["memories"]),
            str(r["drifted"]),
            f"{r['auroc']:.3f}",
            f"{r['precision']:.2f}",
            f"{r['recall']:.2f}",
            f"{r['tuned_precision']:.2f}",
            f"{r['tuned_recall']:.2f}",
        )
    console.print(tab)
    console.print(
        f"similarity drop alone (no slot changes): threshold chosen {report['drop_only_threshold']:.4f}, P/R "
        + ", ".join(f"{r['drop_only_precision']:.2f}/{r['drop_only_recall']:.2f}" for r in report["pairs"])
        + "; slot changes flagged: "
        + ", ".join(str(len(r["slot_changes"])) for r in report["pairs"])
    )
    st = Table(title="file staleness (pages deleted / renamed between releases, real git)")
    for col in ("pair", "pages", "deleted", "P/R deleted", "renamed", "P/R renamed"):
        st.add_column(col)
    for r in report["staleness"]:
        st.add_row(
            r["pair"],
            str(r["pages"]),
            str(len(r["deleted"])),
            "{:.2f}/{:.2f}".format(*r["deleted_pr"]),
            str(len(r["renamed"])),
            "{:.2f}/{:.2f}".format(*r["renamed_pr"]),
        )
    console.print(st)
    console.print(f"report: {path}")


@bench_app.command("drift-latency")
def bench_drift_latency(
    memories: int = typer.Option(10_000, min=100, help="Memories in the store."),
    queries: int = typer.Option(300, min=10, help="Queries, each run with drift on and off."),
    data: Path = typer.Option(
        Path("../shared/bench-data/locomo/locomo10.json"), help="LoCoMo file (the texts of `bench latency`)."
    ),
    out: Path | None = typer.Option(None, help="JSON report path."),
) -> None:
    """Recall p50 with drift on vs off on one store in the same minutes (paired, in process), and the
    retrieval rules' cost on 10 hits with 3 flagged."""
    from benchmarks.drift_latency import run_drift_latency
    from benchmarks.report import write_json
    from memlane.embedding.local_onnx import LocalOnnxEmbedder

    emb = LocalOnnxEmbedder()
    try:
        emb.warmup()
        r = run_drift_latency(data, n_memories=memories, n_queries=queries, embedder=emb)
    finally:
        emb.close()
    path = write_json(out_path(out, "bench-drift-latency"), r)
    console.print(
        f"{r['memories']} memories ({r['memories_with_references']} with references), {r['queries']} "
        f"queries: recall p50 drift on {r['p50_on_ms']:.2f} ms, off {r['p50_off_ms']:.2f} ms, paired "
        f"median difference {r['paired_median_diff_ms']:+.3f} ms; retrieval rules on 10 hits with 3 "
        f"flagged {r['after_recall_us_10_hits_3_flagged']:.1f} us; load {r['load_avg'][0]:.1f}"
    )
    console.print(f"report: {path}")
