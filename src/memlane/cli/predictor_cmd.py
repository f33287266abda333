"""``memlane predictor ...``: the sidecar process and a view of the daemon's predictor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

predictor_app = typer.Typer(
    rich_markup_mode="markdown", help="The predictive memory scorer (sidecar and status).", no_args_is_help=True
)
console = Console()


@predictor_app.command("serve")
def serve(
    db: Path | None = typer.Option(None, "--db", help="The daemon's database (opened read-only)."),
    model_dir: Path = typer.Option(..., "--model-dir", help="Directory of model.bin."),
    embedding_model: str = typer.Option(..., "--embedding-model", help="Embedding model id the vectors come from."),
    native_dim: int = typer.Option(..., "--native-dim", min=1, max=8192, help="Embedding vector width."),
    base_weights: Path | None = typer.Option(None, "--base-weights", help="Phase 6 base checkpoint."),
    threads: int = typer.Option(1, "--threads", min=1, max=64, help="torch threads."),
) -> None:
    """Run the predictor sidecar: JSON-RPC 2.0, one request per line on stdin (spawned by the daemon)."""
    import logging
    import sys

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s predictor %(levelname)s %(message)s")
    from memlane.predictor.sidecar import serve as run

    raise typer.Exit(
        run(
            db_path=str(db) if db else None,
            model_dir=str(model_dir),
            embedding_model_id=embedding_model,
            native_dim=native_dim,
            base_weights=str(base_weights) if base_weights else None,
            threads=threads,
        )
    )


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f}"


def _margin_guard(state: dict[str, Any]) -> str:
    """The margin guard's reading of a status ``state`` (:func:`memlane.predictor.policy.margin_guard_reason`)."""
    from memlane.config import predictor as C
    from memlane.predictor import policy

    ps = policy.PolicyState.from_dict(state)
    window = ps.recent_margins[-C.MARGIN_WINDOW :]
    mean = f"last {len(window)} margins average {sum(window) / len(window):+.3f}" if window else "no margins yet"
    why = policy.margin_guard_reason(ps)
    return f"{mean}; " + (f"holds alpha at 1: {why}" if why else "lets the success rate decide alpha")


def status_table(st: dict[str, Any]) -> Table:
    """The ``/api/predictor/status`` object as a two-column table (what a person reads first).

    Args:
        st: the daemon's predictor status (``PredictorService.status``).

    Raises:
        KeyError: ``st`` lacks ``phase`` or ``state`` (not a predictor status).
    """
    s = st["state"]
    t = Table(title=escape(st.get("status_line") or "predictor"), show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("phase", f"{st['phase']} (alpha {float(st.get('alpha', 1.0)):.2f}: the baseline's weight in the fusion)")
    t.add_row(
        "success rate",
        f"{float(s.get('success_rate', 0.0)):.2f} "
        "(EMA of wins over the baseline, NDCG@10, ties left out); "
        f"margin EMA {float(s.get('margin_ema', 0.0)):+.3f}",
    )
    t.add_row("margin guard", _margin_guard(s))
    t.add_row(
        "sessions",
        f"{s.get('training_sessions', 0)} training-grade, {s.get('comparisons', 0)} compared, "
        f"{st.get('scored_sessions', 0)} scored, {st.get('score_errors', 0)} score errors (baseline served)",
    )
    trained = f"model v{s.get('model_version', 0)}" + (
        f", trained {s['last_trained']}" if s.get("last_trained") else ", not trained yet"
    )
    t.add_row("model", trained + (" (retraining now)" if st.get("training") else ""))
    runs = st.get("training_runs")
    if runs:
        why = runs.get("rejected_by_reason") or {}
        t.add_row(
            "training runs",
            f"{runs.get('total', 0)} runs, {runs.get('accepted', 0)} accepted, "
            f"{runs.get('rejected', 0)} rejected, the old model kept serving (gates {why.get('gates', 0)}, "
            f"no validation gain {why.get('no_validation_gain', 0)}, error {why.get('error', 0)})",
        )
    t.add_row("drift resets", str(s.get("drift_resets", 0)) + (" (drifting: retraining)" if s.get("drifting") else ""))
    kinds = st.get("score_error_kinds") or {}
    if kinds:
        deadline = st.get("score_timeout_ms")
        t.add_row(
            "score errors",
            ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            + (f" (deadline {float(deadline):g} ms)" if deadline is not None else ""),
        )
    lat = st.get("score_latency_ms") or {}
    t.add_row(
        "score latency",
        f"p50 {_ms(lat.get('p50'))} / p95 {_ms(lat.get('p95'))} ms over {lat.get('n', 0)} requests (daemon side)",
    )
    side = st.get("sidecar")
    if side is None:
        t.add_row("sidecar", "off (predictor.enabled is false)" if not st.get("enabled") else "not started")
    else:
        health = (
            "disabled"
            if side.get("disabled")
            else "ready"
            if side.get("ready")
            else "starting"
            if side.get("alive")
            else "not running: no model yet (the untrained model scores in the daemon)"
            if side.get("state") == "dormant"
            else "stopped (predictor.enabled is false)"
            if side.get("state") == "stopped"
            else "down"
        )
        t.add_row(
            "sidecar",
            f"{health}, pid {side.get('pid') or '-'}, {side.get('restarts', 0)} restarts, "
            f"{side.get('crashes_last_hour', 0)} crashes in the last hour",
        )
        errors = side.get("error_counts") or {}
        if errors:
            t.add_row("sidecar errors", ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    rates = s.get("project_rates") or {}
    if rates:
        t.add_row(
            "per project", ", ".join(f"{p}: {float(ema):.2f} over {int(n)}" for p, (ema, n) in sorted(rates.items()))
        )
    return t


@predictor_app.command("status")
def status(
    url: str | None = typer.Option(None, "--url", help="Daemon URL."),
    as_json: bool = typer.Option(False, "--json", help="Print the daemon's whole status object."),
) -> None:
    """The daemon's predictor: phase, alpha, success rate, model version, training runs (accepted /
    rejected by reason), score errors by kind, sidecar health."""
    from memlane.cli.client import client_for

    st = client_for(url).request("GET", "/api/predictor/status")
    if as_json:
        console.print_json(json.dumps(st))
    else:
        console.print(status_table(st))


@predictor_app.command("train")
def train(url: str | None = typer.Option(None, "--url", help="Daemon URL.")) -> None:
    """Ask the daemon to retrain now on the stored sessions (gated; waits for the result)."""
    from memlane.cli.client import client_for

    console.print_json(json.dumps(client_for(url).request("POST", "/api/predictor/train", json={})))
