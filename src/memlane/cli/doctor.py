"""``memlane doctor``: find (and with ``--fix`` tighten) paths in the home that other users can
read or change (:mod:`memlane.fileperms`).

Exit status: 0 when nothing is wrong (after ``--fix``: nothing is left), 1 when a problem
remains, 2 when the home cannot be examined.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from memlane.fileperms import check_private, fix_private

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _home(home: Path | None) -> Path:
    """``--home``, else the settings' home; a broken config.yaml falls back to the default home."""
    if home is not None:
        return home.expanduser()
    from memlane.config import default_home, load_settings
    from memlane.errors import MemlaneError

    try:
        return load_settings().home
    except MemlaneError as exc:
        err.print(f"[yellow]warning:[/yellow] settings not loaded ({escape(str(exc))}); checking {default_home()}")
        return default_home()


def doctor(
    fix: bool = typer.Option(False, "--fix", help="Remove group and other permissions from every path reported."),
    home: Path | None = typer.Option(None, "--home", help="Data directory (default $MEMLANE_HOME or ~/.memlane)."),
    as_json: bool = typer.Option(False, "--json", help="Print {home, problems, fixed} as JSON."),
) -> None:
    """Check that nobody but you can read or change memlane's data directory: the home must be
    0700 and everything in it private (files 0600, directories 0700). Exits 1 while a problem
    remains; --fix tightens them."""
    path = _home(home)
    if not path.exists():
        err.print(f"[red]error:[/red] {escape(str(path))} does not exist")
        raise typer.Exit(2)
    if not path.is_dir():
        err.print(f"[red]error:[/red] {escape(str(path))} is not a directory")
        raise typer.Exit(2)
    fixed = fix_private(path) if fix else []
    problems = check_private(path)
    if as_json:
        console.print_json(
            json.dumps(
                {
                    "home": str(path),
                    "fixed": [str(p) for p in fixed],
                    "problems": [
                        {"path": str(p.path), "mode": f"{p.mode:04o}", "expected": f"{p.expected:04o}", "kind": p.kind}
                        for p in problems
                    ],
                }
            )
        )
    else:
        for path in fixed:
            console.print(f"fixed: {escape(str(path))}")
        for p in problems:
            console.print(f"[red]problem:[/red] {escape(p.describe())}")
        if problems:
            hint = "" if fix else f" Fix: memlane doctor --fix --home {path}"
            console.print(
                f"{len(problems)} path(s) in {escape(str(path))} can be read or changed by other users." + escape(hint)
            )
        else:
            console.print(f"ok: {escape(str(path))} is private (directories 0700, files 0600)")
    raise typer.Exit(1 if problems else 0)
