"""``memlane token``: show where the per-install API token lives, print it, or rotate it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from memlane.auth import ensure_token, rotate_token, token_path
from memlane.config import load_settings

token_app = typer.Typer(
    help="The per-install API token ($MEMLANE_HOME/token, mode 0600).", no_args_is_help=True, add_completion=False
)
_out = Console()
_err = Console(stderr=True)
_HOME = typer.Option(None, "--home", help="Data directory (default $MEMLANE_HOME or ~/.memlane).")


def _home(home: Path | None) -> Path:
    return home if home is not None else load_settings().home


@token_app.command("path")
def path_cmd(home: Path | None = _HOME) -> None:
    """Print the token file's path."""
    _out.print(str(token_path(_home(home))), highlight=False)


@token_app.command("show")
def show_cmd(home: Path | None = _HOME) -> None:
    """Print the token (created if missing), e.g. for a client on another machine."""
    typer.echo(ensure_token(_home(home)))


@token_app.command("rotate")
def rotate_cmd(home: Path | None = _HOME) -> None:
    """Replace the token with a new random one. A running daemon accepts only the new one
    within a second; memlane's own clients read it from the file at their next call."""
    h = _home(home)
    try:
        rotate_token(h)
    except OSError as exc:
        _err.print(f"[red]error:[/red] cannot write {token_path(h)}: {exc}")
        raise typer.Exit(1) from None
    _err.print(f"new token written to {token_path(h)} (mode 0600)")
