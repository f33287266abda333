"""``memlane predictor ...``: the sidecar process and a view of the daemon's predictor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

predictor_app = typer.Typer(rich_markup_mode="markdown", help="The predictive memory scorer (sidecar and status).", no_args_is_help=True)
console = Console()


@predictor_app.command("serve")
def serve(
    db: Optional[Path] = typer.Option(None, "--db", help="The daemon's database (opened read-only)."),
    model_dir: Path = typer.Option(..., "--model-dir", help="Directory of model.bin."),
    embedding_model: str = typer.Option(..., "--embedding-model", help="Embedding model id the vectors come from."),
    native_dim: int = typer.Option(..., "--native-dim", min=1, max=8192, help="Embedding vector width."),
    base_weights: Optional[Path] = typer.Option(None, "--base-weights", help="Phase 6 base checkpoint."),
    threads: int = typer.Option(1, "--threads", min=1, max=64, help="torch threads."),
) -> None:
    """Run the predictor sidecar: JSON-RPC 2.0, one request per line on stdin (spawned by the daemon)."""
    import logging
    import sys

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s predictor %(levelname)s %(message)s")
    from memlane.predictor.sidecar import serve as run

    raise typer.Exit(run(db_path=str(db) if db else None, model_dir=str(model_dir), embedding_model_id=embedding_model,
                         native_dim=native_dim, base_weights=str(base_weights) if base_weights else None,
                         threads=threads))


@predictor_app.command("status")
def status(url: Optional[str] = typer.Option(None, "--url", help="Daemon URL.")) -> None:
    """The daemon's predictor: phase, alpha, success rate, model version, sidecar health."""
    from memlane.cli.main import _client

    console.print_json(json.dumps(_client(url).request("GET", "/api/predictor/status")))


@predictor_app.command("train")
def train(url: Optional[str] = typer.Option(None, "--url", help="Daemon URL.")) -> None:
    """Ask the daemon to retrain now on the stored sessions (gated; waits for the result)."""
    from memlane.cli.main import _client

    console.print_json(json.dumps(_client(url).request("POST", "/api/predictor/train", json={})))
