"""``memlane bench predictor``: does the predictor help (LoCoMo or a simulated user)?"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from benchmarks.cli.bench import DEFAULT_LOCOMO, bench_app, console, err
from benchmarks.report import out_path
from memlane.cli.progress import stage_progress


def _ci(d: dict[str, Any]) -> str:
    return f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def _locomo_table(title: str, summary: dict[str, Any]) -> Table:
    t = Table(title=title)
    for c in (
        "conversation",
        "n",
        "alpha",
        "NDCG@10 base",
        "pred",
        "fused",
        "fused-base [95% CI]",
        "R@5 base",
        "pred",
        "fused",
    ):
        t.add_column(c)
    rows = list(summary["per_conversation"].items()) + [("overall", summary["overall"])]
    for name, b in rows:
        if not b["n"]:
            continue
        t.add_row(
            name,
            str(b["n"]),
            f"{b['alpha_mean']:.2f}",
            f"{b['ndcg10_baseline']:.3f}",
            f"{b['ndcg10_predictor']:.3f}",
            f"{b['ndcg10_fused']:.3f}",
            _ci(b["ndcg10_fused_vs_baseline"]),
            f"{b['r5_baseline']:.3f}",
            f"{b['r5_predictor']:.3f}",
            f"{b['r5_fused']:.3f}",
        )
    return t


@bench_app.command("predictor")
def predictor(
    dataset: str = typer.Option("locomo", help="locomo or simulated."),
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Path of locomo10.json (locomo)."),
    out: Path | None = typer.Option(None, help="JSON report path (default bench-results/...)."),
    workdir: Path = typer.Option(
        Path("bench-results/predictor-work"), help="Stores, sidecar models and base models (reused between runs)."
    ),
    max_conversations: int | None = typer.Option(None, help="Only the first N conversations."),
    base: bool = typer.Option(True, "--base/--no-base", help="Also run the Phase 6 base-model path."),
    sessions: int = typer.Option(200, help="Simulated sessions (simulated)."),
    reuse: bool = typer.Option(False, "--reuse", help="LoCoMo: reuse the first pass kept in --workdir."),
    pool: int = typer.Option(
        50,
        min=10,
        max=200,
        help="LoCoMo: candidates per session (candidate_pool_size). 50: the "
        "recall's 50 hits; 100 (the daemon's default): those plus the top "
        "50 by effectiveScore the recall missed.",
    ),
    seed: int = typer.Option(0, help="Seed (exploration, bootstrap, simulated user)."),
    ranker_models: Path | None = typer.Option(
        None,
        "--ranker-models",
        help="LoCoMo: a directory of learned-ranker bases ranker-without-<conversation>.lgb.gz (memlane "
        "train ranker --exclude <conversation>); each conversation's predictor starts from the "
        "base trained without it, and the heuristic recall is reported beside it.",
    ),
    seeds: str | None = typer.Option(
        None,
        help="Simulated: several users in turn, e.g. 0-7 or "
        "0,1,4 (instead of --seed); each seed's report is saved "
        "beside the combined one.",
    ),
) -> None:
    """Baseline vs predictor vs fused ranking on held-out sessions, with paired bootstrap 95% CIs."""
    from benchmarks.report import write_json
    from memlane.embedding import LocalOnnxEmbedder

    if dataset not in ("locomo", "simulated"):
        err.print(f"[red]error:[/red] unknown dataset {dataset!r} (supported: locomo, simulated)")
        raise typer.Exit(2)
    if dataset == "locomo" and not data.is_file():
        err.print(f"[red]error:[/red] {data} not found (LoCoMo lives in ../shared/bench-data/locomo/)")
        raise typer.Exit(2)
    seed_list: list[int] = []
    if seeds is not None:
        from benchmarks.predictor_simulated_seeds import parse_seeds

        if dataset != "simulated":
            err.print("[red]error:[/red] --seeds runs several simulated users; use it with --dataset simulated")
            raise typer.Exit(2)
        try:
            seed_list = parse_seeds(seeds)
        except ValueError as exc:
            err.print(f"[red]error:[/red] --seeds: {exc}")
            raise typer.Exit(2) from exc
    embedder = LocalOnnxEmbedder()
    embedder.warmup()
    if seed_list:
        _simulated_seeds(seed_list, embedder, workdir, sessions, out)
        return
    if dataset == "simulated":
        from benchmarks.predictor_simulated import render, run_simulated

        with stage_progress(err, "simulated") as tick:
            report = run_simulated(embedder=embedder, workdir=workdir, sessions=sessions, seed=seed, progress=tick)
        path = write_json(out_path(out, "predictor-simulated"), report)
        render(console, report)
        console.print(f"report: {path}")
        return
    from benchmarks.predictor_locomo import PredictorBenchConfig, run

    if ranker_models is not None and not ranker_models.is_dir():
        err.print(f"[red]error:[/red] --ranker-models: {ranker_models} is not a directory")
        raise typer.Exit(2)
    cfg = PredictorBenchConfig(
        seed=seed,
        base=base,
        max_conversations=max_conversations,
        pool_size=pool,
        ranker_models=str(ranker_models) if ranker_models else "",
    )
    with stage_progress(err, "predictor") as tick:
        try:
            report = run(data, embedder=embedder, workdir=workdir, cfg=cfg, progress=tick, reuse=reuse)
        except (FileNotFoundError, ValueError) as exc:  # a missing base, or one trained on its conversation
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None
    path = write_json(out_path(out, "predictor-locomo"), report)
    console.print(_locomo_table("LoCoMo held-out questions: learned from scratch", report["from_scratch"]))
    t = report["from_scratch"]["targets"]
    console.print(
        f"targets: fused >= baseline + 0.05 overall: {t['fused_ge_baseline_plus_0.05']}; "
        f"no conversation below baseline - 0.01: {t['no_conversation_below_baseline_minus_0.01']} "
        f"(worst {report['from_scratch']['worst_conversation_fused_minus_baseline']:+.3f})"
    )
    fs = report["from_scratch"]
    if fs.get("worst_conversation_fused_minus_heuristic") is not None:
        o = fs["overall"]
        share = fs["fused_share_of_predictor_gain"]
        console.print(
            f"from the learned base (each conversation's trained without it): NDCG@10 heuristic "
            f"{o['ndcg10_heuristic']:.3f}, base {o['ndcg10_base']:.3f}, predictor "
            f"{o['ndcg10_predictor']:.3f}, fused {o['ndcg10_fused']:.3f}; fused share of the "
            f"predictor's gain {'n/a' if share is None else f'{share:.0%}'}; mean alpha "
            f"{o['alpha_mean']:.2f}; worst conversation fused - heuristic "
            f"{fs['worst_conversation_fused_minus_heuristic']:+.3f}; targets: "
            + ", ".join(f"{k} {v}" for k, v in t.items())
        )
    if "phase6" in report:
        console.print(_locomo_table("Phase 6: base model (other nine conversations), fine-tuned", report["phase6"]))
    console.print(f"{report['seconds']:.0f} s; report: {path}")


def _simulated_seeds(seed_list: list[int], embedder: Any, workdir: Path, sessions: int, out: Path | None) -> None:
    from benchmarks.predictor_simulated_seeds import render_seeds, run_seeds
    from benchmarks.report import write_json

    path = out_path(out, "predictor-simulated-seeds")

    def save(report: dict[str, Any]) -> None:
        write_json(path.with_name(f"{path.stem}-seed{report['seed']}.json"), report)

    with stage_progress(err, "simulated") as tick:
        report = run_seeds(
            seed_list, embedder=embedder, workdir=workdir, sessions=sessions, progress=tick, on_report=save
        )
    write_json(path, report)
    render_seeds(console, report)
    console.print(f"{report['seconds']:.0f} s; report: {path} (each seed's beside it, -seed<N>.json)")


@bench_app.command("predictor-latency")
def predictor_latency(
    scores: int = typer.Option(300, help="Score requests timed (each path)."),
    sessions: int = typer.Option(500, help="Labelled sessions for train_from_db."),
    epochs: int = typer.Option(50, help="Training epochs (early stopping off)."),
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Source of realistic text (LoCoMo)."),
    out: Path | None = typer.Option(None, help="JSON report path."),
) -> None:
    """Predictor cost: scoring 100 candidates in process and through the sidecar; train_from_db time."""
    from benchmarks.predictor_latency import run_predictor_latency
    from benchmarks.report import write_json

    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found")
        raise typer.Exit(2)
    with stage_progress(err, "predictor latency") as tick:
        report = run_predictor_latency(data, n_scores=scores, n_sessions=sessions, epochs=epochs, progress=tick)
    path = write_json(out_path(out, "predictor-latency"), report)
    t = Table(title="Predictor scoring of 100 candidates (ms)")
    for c in ("path", "n", "p50", "p95", "p99"):
        t.add_column(c)
    for name, key in (
        ("in process", "score_in_process_ms"),
        ("through the sidecar (client)", "score_sidecar_ms"),
        ("sidecar's own time", "score_sidecar_server_ms"),
    ):
        s = report[key]
        t.add_row(name, str(s["n"]), f"{s['p50']:.2f}", f"{s['p95']:.2f}", f"{s['p99']:.2f}")
    console.print(t)
    tr = report["train_from_db"]
    console.print(
        f"train_from_db: {tr['sessions']} sessions x {tr['epochs']} epochs, {tr['steps']} steps "
        f"({tr['stop_reason']}): load {tr['load_ms']:.0f} ms + training {tr['train_ms'] / 1000:.1f} s; "
        f"client wall {tr['client_s']:.1f} s"
    )
    console.print(f"report: {path}")


@bench_app.command("predictor-offline")
def predictor_offline(
    workdir: Path = typer.Option(
        Path("bench-results/predictor-work"), help="The --workdir of a LoCoMo `bench predictor` run."
    ),
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Path of locomo10.json."),
    out: Path | None = typer.Option(None, help="JSON report path."),
    dating: str = typer.Option(
        "asked",
        help="asked: sessions dated as the bench dates them "
        "(after the conversation); answerable: at the start of the "
        "LoCoMo session after the question's last evidence turn, "
        "pools cut to what was stored by then.",
    ),
    recency_weight: float = typer.Option(
        0.0, min=0.0, help="Baseline with the recall's recency boost of this weight (0: off, as the daemon)."
    ),
    recency_half_life: float = typer.Option(14.0, min=0.01, help="Its half-life (days)."),
    recency_grid: bool = typer.Option(
        False,
        "--recency-grid",
        help="Instead of the model: "
        "pick the recency boost's weight and half-life on the "
        "learning questions, report it on the held-out ones.",
    ),
    seed: int = typer.Option(0, help="Bootstrap seed."),
) -> None:
    """A listwise linear model over the logged features of a LoCoMo first pass, with and without age.

    Trained on the conversation's own learning sessions or on the other nine's, scored on the
    held-out questions; reads the stores only (docs/predictor.md). With --recency-grid: the
    recall's recency boost tuned on the learning questions instead (no model).
    """
    from benchmarks.predictor_offline import DATINGS, run
    from benchmarks.report import write_json

    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found (LoCoMo lives in ../shared/bench-data/locomo/)")
        raise typer.Exit(2)
    if dating not in DATINGS:
        err.print(f"[red]error:[/red] unknown --dating {dating!r} (supported: {', '.join(DATINGS)})")
        raise typer.Exit(2)
    if recency_grid:
        if recency_weight > 0:
            err.print("[red]error:[/red] --recency-grid searches the recency setting; drop --recency-weight")
            raise typer.Exit(2)
        _recency_grid(workdir, data, out, dating, seed)
        return
    recency = (recency_weight, recency_half_life) if recency_weight > 0 else None
    try:
        with stage_progress(err, "predictor offline") as tick:
            report = run(workdir, data, seed=seed, dating=dating, recency=recency, progress=tick)
    except (FileNotFoundError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    path = write_json(out_path(out, "predictor-offline"), report)
    baseline = "hybrid recall" + (f" + recency boost {recency_weight} / {recency_half_life} d" if recency else "")
    t = Table(
        title=f"Listwise linear model, held-out NDCG@10 minus baseline ({baseline}; sessions dated "
        f"{dating}; {report['held_out_questions']} questions)"
    )
    for c in ("variant", "trained on", "left out", "baseline", "model", "diff [95% CI]", "worst conversation"):
        t.add_column(c)
    for name, v in report["variants"].items():
        o = v["overall"]
        t.add_row(
            name,
            v["training_set"],
            ", ".join(v["left_out"]) or "-",
            f"{o['mean_b']:.3f}",
            f"{o['mean_a']:.3f}",
            _ci(o),
            f"{v['worst']:+.3f}",
        )
    console.print(t)
    alphas = list(next(iter(report["variants"].values()))["fused_minus_baseline_by_alpha"])
    f = Table(title="RRF of baseline and model at a fixed alpha (the baseline's weight): NDCG@10 minus baseline")
    for c in ("variant", *(f"alpha {a}" for a in alphas)):
        f.add_column(c)
    for name, v in report["variants"].items():
        f.add_row(name, *(f"{v['fused_minus_baseline_by_alpha'][a]:+.3f}" for a in alphas))
    console.print(f)
    console.print(f"report: {path}")


def _recency_grid(workdir: Path, data: Path, out: Path | None, dating: str, seed: int) -> None:
    from benchmarks.recency_grid import run_grid
    from benchmarks.report import write_json

    try:
        with stage_progress(err, "recency grid") as tick:
            report = run_grid(workdir, data, dating=dating, seed=seed, progress=tick)
    except (FileNotFoundError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    path = write_json(out_path(out, "predictor-offline-recency"), report)
    weights = sorted({p["weight"] for p in report["points"]})
    t = Table(
        title=f"Recency boost grid, mean NDCG@10 learning / held-out (sessions dated {dating}; "
        f"{report['learning_questions']} / {report['held_out_questions']} questions; no boost "
        f"{report['baseline']['learning']:.3f} / {report['baseline']['held_out']:.3f})"
    )
    t.add_column("half-life (d)")
    for w in weights:
        t.add_column(f"w {w:g}")
    cell = {(p["half_life_days"], p["weight"]): p for p in report["points"]}
    for h in sorted({p["half_life_days"] for p in report["points"]}):
        t.add_row(f"{h:g}", *(f"{cell[h, w]['learning']:.3f}/{cell[h, w]['held_out']:.3f}" for w in weights))
    console.print(t)
    p, o = report["picked"], report["oracle"]
    console.print(
        f"picked on the learning questions: weight {p['weight']:g}, half-life {p['half_life_days']:g} d; "
        f"held-out NDCG@10 minus the unboosted baseline {_ci(report['picked_held_out'])}"
    )
    console.print(
        f"oracle (best on the held-out questions themselves): weight {o['weight']:g}, half-life "
        f"{o['half_life_days']:g} d, {o['held_out'] - report['baseline']['held_out']:+.3f}"
    )
    console.print(f"report: {path}")


@bench_app.command("predictor-rolling")
def predictor_rolling(
    store: Path | None = typer.Option(
        None, help="A memlane store (memories.db, or its directory). Default: the daemon's own."
    ),
    embedding_model: str | None = typer.Option(
        None, help="Embedding model id of the vectors to read (default: the store's most common)."
    ),
    native_dim: int = typer.Option(0, min=0, help="Its width (with --embedding-model)."),
    min_train: int = typer.Option(20, min=1, help="Sessions before the first test block."),
    block: int = typer.Option(20, min=1, help="Sessions per test block (retrained before each)."),
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Train every block from scratch (default: from the previous block's weights, as the live model).",
    ),
    early: int = typer.Option(
        50, min=1, help="Also summarise the blocks trained on fewer than this many sessions (the first models)."
    ),
    out: Path | None = typer.Option(None, help="JSON report path."),
    seed: int = typer.Option(0, help="Engine initialisation and bootstrap seed."),
) -> None:
    """The predictor on a store's own past sessions: rolling-origin NDCG@10 against the baseline.

    Trains the engine (the sidecar's code) and a listwise linear ceiling on every session before
    each block of --block sessions and scores the block, with the stored labels as gains; reads
    the store only, so it runs beside the daemon (docs/predictor.md).
    """
    from benchmarks.predictor_rolling import run
    from benchmarks.report import write_json
    from memlane.config import Settings

    path = store if store is not None else Settings().db_path
    if path.is_dir():
        path = path / "memories.db"
    if embedding_model is not None and native_dim < 1:
        err.print("[red]error:[/red] --embedding-model needs --native-dim (the vectors' width)")
        raise typer.Exit(2)
    try:
        with stage_progress(err, "rolling evaluation") as tick:
            report = run(
                path,
                embedding_model=embedding_model,
                native_dim=native_dim,
                min_train=min_train,
                block=block,
                seed=seed,
                fresh=fresh,
                early=early,
                progress=tick,
            )
    except (FileNotFoundError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    except sqlite3.DatabaseError as exc:
        err.print(f"[red]error:[/red] {path} is not a readable memlane store ({exc})")
        raise typer.Exit(2) from exc
    written = write_json(out_path(out, "predictor-rolling"), report)
    t = Table(
        title=f"Rolling-origin NDCG@10 on {report['sessions']} logged sessions (stored labels as gains; "
        f"retrained every {report['block']})"
    )
    for c in ("trained on", "tested", "stage", "accepted", "baseline", "engine", "linear ceiling", "train (s)"):
        t.add_column(c)
    for r in report["blocks"]:
        t.add_row(
            str(r["trained"]),
            str(r["tested"]),
            r["stage"],
            "yes" if r["accepted"] else "no",
            f"{r['baseline']:.3f}",
            f"{r['engine']:.3f}",
            f"{r['ceiling']:.3f}",
            f"{r['train_s']:.1f}",
        )
    console.print(t)
    console.print(
        f"{report['tested']} sessions: engine minus baseline {_ci(report['engine_vs_baseline'])}, "
        f"ceiling minus baseline {_ci(report['ceiling_vs_baseline'])}, engine minus ceiling "
        f"{_ci(report['engine_vs_ceiling'])} (paired bootstrap 95 %)"
    )
    if report["engine_vs_baseline_early"] is not None:
        e = report["engine_vs_baseline_early"]
        console.print(
            f"blocks trained on fewer than {report['early']} sessions ({e['n']} sessions): "
            f"engine minus baseline {_ci(e)}"
        )
    console.print(f"report: {written}")
