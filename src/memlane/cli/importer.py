"""``memlane import``: JSON lines of memories, into a data directory or through the daemon.

The file is streamed: lines are read one at a time (a line longer than ``max_line_bytes`` is
reported and skipped without being held in memory) and memories are sent or written in
batches as they come, so memory is bounded by the batch (``batch`` memories or
:data:`BATCH_BYTES`) and the longest accepted line, whatever the input size. Pipes, FIFOs and
endless inputs work. Writing straight into a data directory takes the home's lock
(:mod:`memlane.homelock`): it is refused while a daemon (or another import) holds it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError as PydanticValidationError
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from memlane.cli.client import Client, DaemonError
from memlane.errors import MemlaneError, ValidationError
from memlane.schemas.models import MemoryIn

#: Longest line read (bytes, newline excluded): the daemon's default body cap, so an accepted
#: line can always be sent as one memory. A longer line is reported and skipped.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: A batch is sent / written once its lines reach this many bytes (or ``batch`` memories), so a
#: batch request stays under the daemon's body cap.
BATCH_BYTES = 8 * 1024 * 1024
#: Bytes read at a time while skipping the rest of an over-long line.
SKIP_CHUNK = 1024 * 1024
#: Bad lines kept with their messages in the report (all of them are counted).
MAX_ERRORS_KEPT = 1000
#: The most memories one batch may hold (the daemon's default ``max_batch``).
MAX_BATCH = 1000


def iter_lines(stream: BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None, int]]:
    """The lines of a binary stream, read lazily: ``(line number, line, bytes consumed)``.

    ``line`` is the raw line without its newline, or None for a line longer than ``max_bytes``:
    that is yielded as soon as ``max_bytes + 1`` bytes of it have been read, and the rest of it
    is then read and dropped in :data:`SKIP_CHUNK` pieces (memory stays bounded on an endless
    line). Line numbers start at 1; ``bytes consumed`` counts the newline and skipped bytes.
    """
    no = 0
    skipped = 0  # bytes of an over-long line dropped after it was yielded: counted with the next line
    while True:
        line = stream.readline(max_bytes + 1)
        if not line:
            return
        no += 1
        used, skipped = len(line) + skipped, 0
        if line.endswith(b"\n"):
            yield no, line[:-1], used
            continue
        if len(line) <= max_bytes:  # the last line, without a newline
            yield no, line, used
            return
        yield no, None, used
        while True:  # drop the rest of the over-long line
            rest = stream.readline(SKIP_CHUNK)
            skipped += len(rest)
            if not rest or rest.endswith(b"\n"):
                break


def parse_line(raw: bytes) -> MemoryIn | str:
    """One JSON line as a :class:`MemoryIn`, or the message saying why it is not one.

    A line may be a JSON object or a bare JSON string (the content). Invalid UTF-8 is replaced.
    """
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return "not JSON: nested too deeply"
    if isinstance(data, str):
        data = {"content": data}
    if not isinstance(data, dict):
        return "expected a JSON object"
    try:
        return MemoryIn.model_validate(data)
    except RecursionError:
        return "nested too deeply"
    except PydanticValidationError as exc:
        e = exc.errors()[0]
        return f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}"


def read_memories(stream: BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, MemoryIn | str, int]]:
    """``(line number, MemoryIn or error message, bytes consumed)`` for each non-blank line, lazily.

    Blank lines yield nothing but their bytes are counted in the next item's ``bytes consumed``.
    """
    pending = 0
    for no, raw, used in iter_lines(stream, max_bytes):
        pending += used
        if raw is None:
            yield no, f"line longer than {max_bytes} bytes: skipped", pending
        elif raw.strip():
            yield no, parse_line(raw), pending
        else:
            continue
        pending = 0


class _Report:
    """Counts of one import and the first :data:`MAX_ERRORS_KEPT` bad lines."""

    def __init__(self) -> None:
        self.created = self.deduplicated = self.bad = 0
        self.errors: list[tuple[int, str]] = []

    def error(self, no: int, message: str) -> None:
        self.bad += 1
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append((no, message))

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "deduplicated": self.deduplicated,
            "bad_lines": self.bad,
            "errors": sorted(self.errors),
        }


def _batches(
    stream: BinaryIO, report: _Report, batch: int, max_line_bytes: int, advance: Callable[[int], None]
) -> Iterator[list[tuple[int, MemoryIn]]]:
    """Good lines grouped into batches of at most ``batch`` memories / :data:`BATCH_BYTES`;
    bad lines go to ``report`` as they are met."""
    chunk: list[tuple[int, MemoryIn]] = []
    size = 0
    for no, item, used in read_memories(stream, max_line_bytes):
        advance(used)
        if isinstance(item, str):
            report.error(no, item)
            continue
        chunk.append((no, item))
        size += used
        if len(chunk) >= batch or size >= BATCH_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _progress(console: Console | None) -> Progress:
    return Progress(
        TextColumn("importing"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[memories]} memories"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _input_size(fh: BinaryIO) -> int | None:
    """The file's size for the progress bar; None for pipes, FIFOs and devices."""
    try:
        st = os.fstat(fh.fileno())
    except (OSError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def run_import(
    path: Path,
    *,
    data_dir: Path | None,
    url: str | None,
    batch: int = 256,
    console: Console | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    home: Path | None = None,
) -> dict[str, Any]:
    """Import a JSON-lines file (or FIFO / pipe), streaming it in batches.

    With ``data_dir`` the store is opened directly, under its lock; otherwise batches go to the
    daemon at ``url`` (with the token of ``home``, default the configured home). A batch the
    daemon rejects is retried item by item so only the bad lines are lost.

    Returns:
        ``{"created", "deduplicated", "bad_lines", "errors": [(line, message)]}``; ``errors``
        holds the first :data:`MAX_ERRORS_KEPT` bad lines sorted by line number, ``bad_lines``
        counts them all.

    Raises:
        ValidationError: ``batch`` outside 1..1000.
        HomeLocked: ``data_dir`` is held by a running daemon or another import (the message
            names it).
        DaemonUnavailable: no daemon at ``url`` (the message says how far the import got).
        MemlaneError: the store cannot be opened.
        OSError: the file cannot be opened.
    """
    if not 1 <= batch <= MAX_BATCH:
        raise ValidationError(f"batch must be between 1 and {MAX_BATCH}, got {batch}", details={"field": "batch"})
    report = _Report()
    with open(path, "rb") as fh:
        progress = _progress(console)
        with progress:
            task = progress.add_task("import", total=_input_size(fh), memories=0)

            def advance(n: int) -> None:
                progress.advance(task, n)

            def counted() -> None:
                progress.update(task, memories=report.created + report.deduplicated)

            batches = _batches(fh, report, batch, max_line_bytes, advance)
            if data_dir is not None:
                _into_store(data_dir, batches, report, counted)
            else:
                _through_daemon(url or "http://127.0.0.1:7437", home, batches, report, counted)
    return report.as_dict()


def _into_store(
    data_dir: Path, batches: Iterator[list[tuple[int, MemoryIn]]], report: _Report, counted: Callable[[], None]
) -> None:
    from memlane.config import load_settings
    from memlane.container import open_container
    from memlane.homelock import acquire

    with acquire(data_dir, "memlane import --data-dir", hint="stop it or use --url to import through it"):
        container = open_container(load_settings(home=data_dir))
        try:
            for chunk in batches:
                valid = []
                for no, item in chunk:
                    try:
                        valid.append(container.memories.validate(item.to_input()))
                    except MemlaneError as exc:
                        report.error(no, exc.message)
                results = container.memories.remember_many(valid) if valid else []
                created = sum(r.status == "created" for r in results)
                report.created += created
                report.deduplicated += len(results) - created
                counted()
        finally:
            container.close()


def _through_daemon(
    url: str,
    home: Path | None,
    batches: Iterator[list[tuple[int, MemoryIn]]],
    report: _Report,
    counted: Callable[[], None],
) -> None:
    from memlane.cli.client import DaemonUnavailable

    client = Client(url, timeout_s=300, home=home)
    try:
        for chunk in batches:
            payload = [item.model_dump() for _, item in chunk]
            try:
                res = client.request("POST", "/api/memory/remember", json={"memories": payload})
                report.created += res["created"]
                report.deduplicated += res["deduplicated"]
            except DaemonError:
                for (no, _), one in zip(chunk, payload):
                    try:
                        r = client.request("POST", "/api/memory/remember", json=one)
                        report.created += r["status"] == "created"
                        report.deduplicated += r["status"] == "deduplicated"
                    except DaemonError as exc:
                        if exc.status in (401, 403):  # refused as a whole (token, host): not this line's fault
                            raise
                        report.error(no, exc.message)
            counted()
    except DaemonUnavailable as exc:
        raise DaemonUnavailable(
            f"{exc.message} (imported so far: {report.created} new, "
            f"{report.deduplicated} duplicates, {report.bad} bad lines)"
        ) from exc
    finally:
        client.close()
