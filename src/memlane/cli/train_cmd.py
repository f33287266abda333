"""``memlane train ...``: models trained from public data (the learned ranker)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from memlane.cli.progress import stage_progress

train_app = typer.Typer(
    rich_markup_mode="markdown",
    no_args_is_help=True,
    help="Train models from public data (the learned ranker from LoCoMo).",
)
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)

DEFAULT_LOCOMO = Path("../shared/bench-data/locomo/locomo10.json")


@train_app.command("ranker")
def ranker(
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Path of locomo10.json."),
    out: Path = typer.Option(
        Path("ranker-locomo.lgb.gz"), help="Model file to write (use it with recall.ranker_model)."
    ),
    workdir: Path | None = typer.Option(
        None, help="Keep the per-conversation stores here and reuse them next time (default: temporary)."
    ),
    exclude: list[str] = typer.Option([], "--exclude", help="Leave this conversation out (repeatable)."),
    rounds: int | None = typer.Option(None, help="Boosting rounds (default: the shipped model's)."),
    threads: int = typer.Option(2, help="LightGBM threads."),
) -> None:
    """Build the training set from LoCoMo (every question's recall candidates, evidence turns
    labelled) and train the LightGBM lambdarank model the learned ranker uses; writes a
    versioned model file with its feature schema."""
    from memlane.embedding import LocalOnnxEmbedder
    from memlane.ranker import features as F
    from memlane.ranker.locomo import load_locomo
    from memlane.ranker.model import header_for, save
    from memlane.ranker.train import PARAMS, ROUNDS, collect, train

    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found (LoCoMo lives in ../shared/bench-data/locomo/)")
        raise typer.Exit(2)
    try:
        convs = load_locomo(data)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    unknown = sorted(set(exclude) - {c.id for c in convs})
    if unknown:
        err.print(f"[red]error:[/red] unknown conversation(s) {unknown}")
        raise typer.Exit(2)
    convs = [c for c in convs if c.id not in exclude]
    t0 = time.perf_counter()
    embedder = LocalOnnxEmbedder()
    embedder.warmup()
    tmp = tempfile.TemporaryDirectory(prefix="memlane-train-") if workdir is None else None
    root = Path(tmp.name) if tmp else workdir
    try:
        with stage_progress(err, "locomo") as tick:
            pools = collect(convs, root, embedder, progress=tick)  # type: ignore[arg-type]
    finally:
        embedder.close()
        if tmp:
            tmp.cleanup()
    t_collect = time.perf_counter() - t0
    t1 = time.perf_counter()
    booster = train(pools, rounds=rounds or ROUNDS, threads=threads)
    t_train = time.perf_counter() - t1
    used = sum(bool(len(p.dia_ids) and p.labels.any()) for p in pools)
    header = header_for(
        trained_on=[c.id for c in convs],
        embedding_model=embedder.model_id,
        params={**PARAMS, "rounds": rounds or ROUNDS},
        extra={
            "questions": len(pools),
            "questions_with_evidence_in_pool": used,
            "pool_size": max((len(p.dia_ids) for p in pools), default=0),
        },
    )
    path = save(out, booster, header)
    gains = booster.feature_importance("gain")
    top = sorted(zip(F.FEATURES, gains), key=lambda kv: -kv[1])[:10]
    console.print(
        escape(
            f"trained on {len(convs)} conversations ({', '.join(c.id for c in convs)}): "
            f"{used} of {len(pools)} questions have an evidence turn among their candidates"
        )
    )
    console.print(
        f"recall + features: {t_collect:.1f} s (store building included); training: {t_train:.1f} s; "
        f"total {time.perf_counter() - t0:.1f} s"
    )
    console.print(
        escape(
            f"model: {path} ({path.stat().st_size / 1024:.0f} KiB, feature schema "
            f"v{F.SCHEMA_VERSION}, {len(F.FEATURES)} features)"
        )
    )
    console.print("top features by gain: " + ", ".join(f"{n} {g:.0f}" for n, g in top))
