"""``python -m memlane`` = the ``memlane`` CLI."""

from memlane.cli.main import main

main()
