"""``memlane replay ...``: real data through the whole session lifecycle of a real daemon."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from benchmarks.cli.bench import DEFAULT_LOCOMO
from benchmarks.report import out_path
from memlane.cli.progress import stage_progress

replay_app = typer.Typer(
    rich_markup_mode="markdown",
    help="Replay real data through the session lifecycle (the predictor's training data).",
    no_args_is_help=True,
)
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)


@replay_app.command("locomo")
def locomo(
    data: Path = typer.Option(DEFAULT_LOCOMO, help="Path of locomo10.json."),
    url: str | None = typer.Option(None, help="A running daemon; default: start one on a fresh directory."),
    keep: Path | None = typer.Option(None, help="Data directory to create and keep (without --url)."),
    max_conversations: int | None = typer.Option(None, help="Only the first N conversations."),
    max_questions: int | None = typer.Option(None, help="Only the first N questions per conversation."),
    out: Path | None = typer.Option(None, help="JSON report path."),
    extract: bool = typer.Option(
        False,
        "--extract",
        help="Instead: run pipeline v2 extraction over each "
        "session through the configured LLM provider; report facts, entities, "
        "decisions and dedup counts (exits 0 with a message when no provider).",
    ),
) -> None:
    """Each LoCoMo session as an agent session, each question as a short session with agent feedback."""
    from benchmarks.replay.locomo import run_replay

    if not data.is_file():
        err.print(f"[red]error:[/red] {data} not found (LoCoMo lives in ../shared/bench-data/locomo/)")
        raise typer.Exit(2)
    if extract:
        raise typer.Exit(_extract(data, keep=keep, max_conversations=max_conversations, out=out))
    if keep is not None and url is not None:
        err.print("[red]error:[/red] --keep starts its own daemon; do not combine it with --url")
        raise typer.Exit(2)
    with stage_progress(err, "starting") as tick:
        try:
            report = run_replay(
                data,
                url=url,
                max_conversations=max_conversations,
                max_questions=max_questions,
                keep=keep,
                progress=tick,
            )
        except (ValueError, RuntimeError) as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from None
    path = out_path(out, "replay-locomo")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))
    t = Table(
        title=f"LoCoMo replay: {report['conversations']} conversations in {report['seconds']:.0f} s "
        "(latency per phase, ms, through HTTP)"
    )
    for c in ("phase", "n", "p50", "p95", "max"):
        t.add_column(c)
    for phase, s in report["latency_ms"].items():
        t.add_row(phase, str(s["n"]), f"{s['p50']:.1f}", f"{s['p95']:.1f}", f"{s['max']:.1f}")
    console.print(t)
    c, s = report["counts"], report["sessions"]
    console.print(
        f"sessions: {c.get('sessions', 0)} conversation sessions with {c.get('prompts', 0)} prompts, "
        f"{c.get('question_sessions', 0)} question sessions; {c.get('ratings', 0)} agent ratings, "
        f"{c.get('evidence_shown', 0)} of them on evidence turns"
    )
    console.print(
        f"session_memories: {s['candidates']} rows, {s['injected']} injected, {s['fts_only']} fts_only, "
        f"{s['fts_hit_rows']} with prompt hits, {s['rated_rows']} rated by the agent; "
        f"labels: {s['labelled']} (positive > 0.5: {s['positive_labels']}, negative: "
        f"{s['negative_labels']}, mean {s['mean_label'] or 0:.3f})"
    )
    console.print(
        f"scores: {s['scores_by_scorer']}; mean score {s['mean_score'] or 0:.3f}, mean confidence "
        f"{s['mean_confidence'] or 0:.3f}; training-grade sessions (confidence >= 0.6): "
        f"{s['training_grade_sessions']}"
    )
    if report["data_dir"]:
        console.print(f"data kept in {report['data_dir']}")
    console.print(f"report: {path}")


def _extract(data: Path, *, keep: Path | None, max_conversations: int | None, out: Path | None) -> int:
    """The ``--extract`` run of ``memlane replay locomo``: run, print, write the JSON report.
    Returns the exit code: 0 (done, or no provider configured: said so), 1 (an error)."""
    from benchmarks.replay.extract import render, run_extract_replay
    from benchmarks.report import write_json

    try:
        with stage_progress(err, "starting") as tick:
            report = run_extract_replay(data, keep=keep, max_conversations=max_conversations, progress=tick)
    except (ValueError, RuntimeError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 1
    for line in render(report):
        console.print(line)
    if report.get("provider") is not None:
        console.print(f"report: {write_json(out_path(out, 'replay-locomo-extract'), report)}")
    return 0
