"""``python -m memlane`` = the ``memlane`` CLI."""

from memlane.cli.main import app

app()
