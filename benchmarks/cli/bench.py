"""``memlane bench ...``: the benchmark commands (LoCoMo retrieval, HTTP latency)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal, cast

import typer
from rich.console import Console

from benchmarks.report import out_path
from memlane.cli.progress import stage_progress

bench_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Benchmarks on real data (retrieval quality, latency, throughput).",
    no_args_is_help=True,
)
# Reports are often redirected to a file: keep the tables readable there too.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)

DEFAULT_LOCOMO = Path("../shared/bench-data/locomo/locomo10.json")


@bench_app.command("retrieval")
def retrieval(
    dataset: str = typer.Option("locomo", help="Dataset name (only locomo)."),
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Path of locomo10.json."),
    out: Path | None = typer.Option(None, help="JSON report path (default bench-results/...)."),
    context_turns: int = typer.Option(2, help="Preceding turns of the same session indexed as context."),
    alpha: float | None = typer.Option(None, help="Vector weight (default: settings, 0.7)."),
    context_weight: float | None = typer.Option(None, help="Context weight (default: settings)."),
    bm25_only: bool = typer.Option(False, "--bm25-only", help="No embeddings: the BM25 leg alone."),
    max_conversations: int | None = typer.Option(None, help="Only the first N conversations."),
    workdir: Path | None = typer.Option(
        None, help="Keep the per-conversation stores here (a complete one is reused next time)."
    ),
    ranker: str | None = typer.Option(None, help="learned | heuristic (default: the shipped recall.ranker)."),
    cv: str | None = typer.Option(
        None,
        help="conversation: the learned ranker by leave-one-conversation-out (implied when the "
        "model was trained on a conversation under test).",
    ),
    ablate: bool = typer.Option(False, "--ablate", help="With the learned ranker: also each feature group left out."),
) -> None:
    """LoCoMo retrieval: R@5/10/25/50, recall_any/all, NDCG@10 at turn and session level, with the
    shipped settings (the stages on are printed); the learned ranker beside the heuristic one."""
    from benchmarks.report import reference_table, render_table, write_json
    from benchmarks.retrieval import RetrievalConfig, run

    if dataset != "locomo":
        err.print(f"[red]error:[/red] unknown dataset {dataset!r} (supported: locomo)")
        raise typer.Exit(2)
    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found (LoCoMo lives in ../shared/bench-data/locomo/)")
        raise typer.Exit(2)
    embedder = None
    if not bm25_only:
        from memlane.embedding import LocalOnnxEmbedder

        embedder = LocalOnnxEmbedder()
        embedder.warmup()
    if ranker not in (None, "learned", "heuristic") or cv not in (None, "conversation"):
        err.print("[red]error:[/red] --ranker is learned or heuristic; --cv is conversation")
        raise typer.Exit(2)
    ranker_choice = cast(Literal["learned", "heuristic"] | None, ranker)  # checked just above
    cfg = RetrievalConfig(
        context_turns=context_turns,
        alpha=alpha,
        context_weight=context_weight,
        use_vectors=not bm25_only,
        max_conversations=max_conversations,
        ranker=ranker_choice,
        cv=cv,
        ablate=ablate,
    )
    with stage_progress(err, "locomo") as tick:
        try:
            report = run(data, embedder=embedder, config=cfg, workdir=workdir, progress=tick)
        except ValueError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None
    path = write_json(out_path(out, "locomo-retrieval"), report)
    from rich.markup import escape

    from benchmarks.report import render_ablation
    from benchmarks.retrieval import describe_stages

    console.print(escape("stages: " + describe_stages(report["stages"])))
    state = report["ranker"]
    if report["heuristic_metrics"] is not None:
        console.print(
            render_table(
                report["heuristic_metrics"], reference=False, title="LoCoMo retrieval, heuristic ranking (percent)"
            )
        )
        console.print(
            render_table(report["metrics"], title=f"LoCoMo retrieval, learned ranker: {state['evaluation']} (percent)")
        )
        console.print(escape(f"learned ranker: {state['note'] if 'note' in state else state['evaluation']}"))
        lat_r = state.get("rerank_latency_ms")
        if lat_r:
            console.print(
                f"learned stage in process (features + model, {lat_r['candidates_p50']:.0f} candidates): "
                f"p50 {lat_r['warm']['p50']:.2f} ms warm, {lat_r['cold']['p50']:.2f} ms with a cold "
                f"text cache; p95 {lat_r['warm']['p95']:.2f} ms warm"
            )
        if report.get("ablation"):
            console.print(render_ablation(report["ablation"], report["metrics"]))
    else:
        console.print(render_table(report["metrics"]))
        if state.get("note"):
            console.print(escape(state["note"]))
    console.print(reference_table())
    ing, lat = report["ingest"], report["recall_latency_ms"]
    console.print(
        f"questions scored: {report['metrics']['overall']['n']} "
        f"(excluded, no evidence: {report['metrics']['overall']['excluded']}); "
        f"dropped evidence ids: {report['dropped_evidence_ids']}; "
        f"turns deduplicated on ingest: {report['deduplicated_turns']}"
    )
    if ing["memories"]:
        console.print(
            f"ingest: {ing['memories']} memories in {ing['seconds']:.1f} s = "
            f"{ing['memories_per_s']:.0f} memories/s (embeddings included)"
        )
    if ing["reused_memories"]:
        console.print(f"stores reused from --workdir: {ing['reused_memories']} turns")
    console.print(
        f"recall (in process, k=50): p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms over {lat['n']} queries"
    )
    console.print(f"report: {path}")


@bench_app.command("latency")
def latency(
    memories: int = typer.Option(10_000, help="Memories in the store before measuring."),
    queries: int = typer.Option(300, help="Recall requests measured."),
    remembers: int = typer.Option(300, help="Single remember requests measured."),
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Source of realistic text (LoCoMo)."),
    port: int = typer.Option(0, help="Daemon port (0 = pick a free one)."),
    pipeline_stages: bool | None = typer.Option(
        None,
        "--pipeline-stages/--no-pipeline-stages",
        help="Recall with hints (synthetic, 3 per memory), graph boost and dampening on "
        "(plus each stage's in-process overhead), or all off; default: the configured defaults.",
    ),
    reranker: bool = typer.Option(
        False, "--reranker/--no-reranker", help="With --pipeline-stages: the reranker on too (off by default)."
    ),
    ranker_paired: bool = typer.Option(
        False,
        "--ranker-paired",
        help="Also time each query with the learned ranker and with the "
        "heuristic one, alternating, on the same daemon.",
    ),
    out: Path | None = typer.Option(None, help="JSON report path."),
) -> None:
    """Start a real daemon, fill it, and measure remember and recall latency over HTTP."""
    from benchmarks.latency import run_latency

    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found")
        raise typer.Exit(2)
    with stage_progress(err, "starting daemon") as tick:
        report = run_latency(
            data,
            n_memories=memories,
            n_queries=queries,
            n_remembers=remembers,
            port=port,
            progress=tick,
            pipeline_stages=pipeline_stages,
            reranker=reranker,
            ranker_paired=ranker_paired,
        )
    path = out_path(out, "latency")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    from rich.table import Table

    t = Table(title=f"HTTP latency with {report['store_size']} memories (ms)")
    for c in ("operation", "n", "p50", "p95", "p99", "mean"):
        t.add_column(c)
    for name in ("recall", "remember"):
        s = report[name]
        t.add_row(name, str(s["n"]), f"{s['p50']:.1f}", f"{s['p95']:.1f}", f"{s['p99']:.1f}", f"{s['mean']:.1f}")
    console.print(t)
    f = report["fill"]
    console.print(
        f"fill: {f['memories']} memories in {f['seconds']:.1f} s = {f['memories_per_s']:.0f} memories/s "
        f"(batches of {f['batch']} over HTTP, embeddings included)"
    )
    b = report["job_backlog"]
    console.print(
        f"recall timed once the daemon's job queue drained: {b['initial']} jobs queued after the fill, "
        f"waited {b['waited_s']} s, {b['left']} left; predictor sidecar ready after {b['predictor_wait_s']} s more"
    )
    pr = report.get("recall_by_ranker")
    if pr:
        console.print(
            f"recall, same queries, alternating: learned p50 {pr['learned']['p50']:.1f} ms (p95 "
            f"{pr['learned']['p95']:.1f}), heuristic p50 {pr['heuristic']['p50']:.1f} ms (p95 "
            f"{pr['heuristic']['p95']:.1f}); paired median difference {pr['paired_median_diff_ms']:.1f} ms; "
            f"answered: {pr['answered']}"
        )
    if report["pipeline_stages"] is not None:
        from benchmarks.stages import render_stages

        console.print(render_stages(report["pipeline_stages"]))
    console.print(f"report: {path}")


@bench_app.command("sessions")
def sessions(
    memories: int = typer.Option(4_000, help="Memories in the store (one project)."),
    sessions_: int = typer.Option(100, "--sessions", help="Sessions driven (each: start, prompts, end)."),
    prompts: int = typer.Option(3, help="Prompts per session."),
    gap: float = typer.Option(0.5, help="Seconds between a session's end and the next start."),
    store: Path | None = typer.Option(
        None, help="Keep the filled store here and reuse it next time (100k takes long to embed)."
    ),
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Source of realistic text (LoCoMo)."),
    predictor: bool = typer.Option(
        True, "--predictor/--no-predictor", help="Run the predictor sidecar (scores every session-start)."
    ),
    alpha: float | None = typer.Option(
        None,
        min=0.0,
        max=0.999,
        help="Seed an earned predictor state with this alpha (< 1): every start waits for the "
        "predictor's scores and fuses them (the predictor active). Default: a fresh store "
        "(cold start, alpha 1: the start answers before the scores).",
    ),
    phase: str | None = typer.Option(
        None,
        help="Send this phase (e.g. coding) with every start and prompt: times the phase-weighted "
        "ranking. Default: no phase.",
    ),
    out: Path | None = typer.Option(None, help="JSON report path."),
) -> None:
    """Session-start and prompt-submit latency through a real daemon, and the candidate pool size."""
    from benchmarks.sessions import run_sessions

    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found")
        raise typer.Exit(2)
    with stage_progress(err, "preparing") as tick:
        report = run_sessions(
            data,
            n_memories=memories,
            n_sessions=sessions_,
            prompts_per_session=prompts,
            store=store,
            gap_s=gap,
            predictor=predictor,
            alpha=alpha,
            phase=phase,
            progress=tick,
        )
    path = out_path(out, f"sessions-{memories}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    from rich.table import Table

    t = Table(title=f"Hook latency through HTTP with {report['store_size']} memories (ms)")
    for c in ("hook", "n", "p50", "p95", "p99", "max"):
        t.add_column(c)
    for name in ("session_start", "prompt_submit", "session_end"):
        s = report[name]
        t.add_row(name, str(s["n"]), f"{s['p50']:.1f}", f"{s['p95']:.1f}", f"{s['p99']:.1f}", f"{s['max']:.1f}")
    console.print(t)
    console.print(
        f"candidate pool: max {report['max_candidate_pool']}, mean {report['mean_candidate_pool']:.1f}; "
        f"injected per session: mean {report['mean_injected']:.1f}"
    )
    p = report["predictor"]
    console.print(
        f"predictor: {'on' if p['enabled'] else 'off'}; sessions scored {p['scored_sessions']}, "
        f"score errors (baseline served) {p['score_errors']}, phase {p['phase']}, alpha {p.get('alpha')}"
    )
    if isinstance(report.get("processes"), dict):
        from memlane.cli.main import _process_line

        console.print("resident memory after the run: " + _process_line(report["processes"]))
    console.print(f"report: {path}")


@bench_app.command("hooks")
def hooks(
    runs: int = typer.Option(
        20,
        min=1,
        help="Measured rounds of the new command and the floor "
        "(a round: session-start, user-prompt-submit, pre-compact, pre-tool-use, post-tool-use, "
        "subagent-stop, stop, session-end).",
    ),
    old_runs: int = typer.Option(
        5, "--old-runs", min=0, help="Measured rounds of the old 'memlane hook' (seconds per call)."
    ),
    memories: int = typer.Option(200, min=1, help="Memories in the daemon's store."),
    embedding: str = typer.Option("local", help="The daemon's embedding provider: local | none."),
    out: Path | None = typer.Option(None, help="JSON report path."),
) -> None:
    """The hook commands as Claude Code runs them (a new shell and process per call, the payload
    on stdin) through a real daemon and with it down: the light memlane-hook, the old 'memlane
    hook', a raw HTTP client (curl) as the floor and 'python -c pass' as a reference. Wall p50/p95, CPU
    and peak memory per process."""
    from rich.table import Table

    from benchmarks.hooks import run_hooks

    if embedding not in ("local", "none"):
        err.print("[red]error:[/red] --embedding is local or none")
        raise typer.Exit(2)
    with stage_progress(err, "hooks") as tick:
        report = run_hooks(runs=runs, old_runs=old_runs, memories=memories, embedding=embedding, progress=tick)
    path = out_path(out, "hooks")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    for state, title in (("up", "daemon up"), ("down", "daemon down (every run: exit 0, nothing printed, spooled)")):
        t = Table(title=f"Hook commands, {title}: wall ms and peak MiB per process")
        for c in ("event", "command", "runs", "p50 ms", "p95 ms", "max ms", "CPU p50 ms", "peak MiB", "x floor p50"):
            t.add_column(c)
        for event, per in report[state].items():
            for name in ("new", "old", "floor", "python"):
                if name not in per:
                    continue
                s = per[name]
                ratio = report["ratios_p50_to_floor"][state][event].get(name)
                t.add_row(
                    event,
                    name,
                    str(s["runs"]),
                    f"{s['ms']['p50']:.1f}",
                    f"{s['ms']['p95']:.1f}",
                    f"{s['ms']['max']:.1f}",
                    f"{s['cpu_ms']['p50']:.1f}",
                    "-" if s["peak_mib"] is None else f"{s['peak_mib']['max']:.1f}",
                    "" if ratio is None else f"{ratio:g}",
                )
        console.print(t)
    for name, cmd in report["commands"].items():
        console.print(f"{name}: {cmd}")
    m = report["machine"]
    console.print(
        f"machine: {m['cpus']} CPUs, load average {m['loadavg_start'][0]:.1f} at the start and "
        f"{m['loadavg_end'][0]:.1f} at the end (1 min)"
    )
    met = report["targets_met"]
    console.print("targets (new command): " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in met.items()))
    console.print(f"report: {path}")


@bench_app.command("security")
def security(out: Path | None = typer.Option(None, help="JSON report path.")) -> None:
    """Try the attacks of issue "Secure by default" against real daemons on a temporary home:
    DNS rebinding, no token, cross-origin and body-less POSTs, forbidden config keys, SSRF,
    injection framing, secrets at rest, another user, two daemons on one home. Prints each
    attack and its outcome; exits 1 if any succeeded."""
    from rich.markup import escape
    from rich.table import Table

    from benchmarks.security import run as run_security

    report = run_security(progress=lambda m: err.print(f"[dim]{escape(m)}...[/dim]"))
    path = out_path(out, "security")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    t = Table(title="memlane bench security (a daemon with default settings; target: 0 succeeded)")
    for c in ("group", "attack", "outcome", "result"):
        t.add_column(c, overflow="fold")
    for a in report["attacks"]:
        result = "[red]SUCCEEDED[/red]" if a["succeeded"] else "skipped" if a["succeeded"] is None else "refused"
        t.add_row(escape(a["group"]), escape(a["attack"]), escape(a["outcome"]), result)
    console.print(t)
    cost = report["guard_cost"]
    console.print(
        f"attacks: {len(report['attacks'])}, succeeded {report['succeeded']}, refused {report['refused']}, "
        f"skipped {report['skipped']}"
    )
    console.print(
        f"request guard cost: median {cost['median_ms']:.4f} ms per request "
        f"({cost['guarded_median_ms']:.4f} guarded vs {cost['bare_median_ms']:.4f} bare, "
        f"{cost['calls']:.0f} calls each)"
    )
    console.print(f"report: {path}")
    if report["succeeded"]:
        raise typer.Exit(1)
