"""One progress display for long CLI work (benchmarks, replays, imports)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: ``tick(stage, done, total)``: what long-running library code reports.
Tick = Callable[[str, int, int], None]


@contextmanager
def stage_progress(console: Console, first: str) -> Iterator[Tick]:
    """A transient progress bar on ``console``; yields the ``tick(stage, done, total)`` callback."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(first, total=None)
        yield lambda stage, done, total: progress.update(task, description=stage, completed=done, total=total)
