"""``memlane dashboard``: open the web dashboard with a one-time sign-in link.

Asks the running daemon (with the token from the home) for a login code, prints
``http://127.0.0.1:PORT/login?code=...`` and opens it in the default browser (``--no-open``:
print only). The link works once, within two minutes; the page it opens sets the session
cookie and moves to ``/`` (docs/dashboard.md).
"""

from __future__ import annotations

import webbrowser

import typer
from rich.console import Console

from memlane.cli.client import Client
from memlane.config import load_settings
from memlane.errors import MemlaneError

console = Console()
err = Console(stderr=True)


def dashboard(
    url: str | None = typer.Option(None, "--url", help="Daemon URL (default http://127.0.0.1:7437)."),
    open_browser: bool = typer.Option(True, "--open/--no-open", help="Open the link in the browser."),
) -> None:
    """Open the web dashboard: print (and open) a one-time sign-in link from the running daemon."""
    settings = load_settings()
    try:
        out = Client(url or settings.url, home=settings.home).request("POST", "/api/dashboard/login-code", json={})
    except MemlaneError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(out["url"], soft_wrap=True, highlight=False)
    err.print(f"one-time sign-in link, valid {out['expires_in_s']:.0f} s")
    if open_browser:
        webbrowser.open(out["url"])


from memlane.cli.main import app  # noqa: E402  (main imports this module once app exists)

app.command(name="dashboard")(dashboard)
