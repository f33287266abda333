"""``memlane import``: JSON lines of memories, into a data directory or through the daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from memlane.api.schemas import MemoryIn
from memlane.cli.client import Client, DaemonError
from memlane.errors import MemlaneError


def read_lines(path: Path) -> tuple[list[tuple[int, MemoryIn]], list[tuple[int, str]]]:
    """Parse a JSON-lines file: (line number, MemoryIn) for good lines, (line number, message) for bad.

    Blank lines are skipped. A line may be a JSON object or a bare JSON string (the content).
    """
    good, bad = [], []
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                bad.append((no, f"not JSON: {exc.msg} at column {exc.colno}"))
                continue
            if isinstance(data, str):
                data = {"content": data}
            if not isinstance(data, dict):
                bad.append((no, "expected a JSON object"))
                continue
            try:
                good.append((no, MemoryIn.model_validate(data)))
            except PydanticValidationError as exc:
                e = exc.errors()[0]
                bad.append((no, f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}"))
    return good, bad


def run_import(path: Path, *, data_dir: Path | None, url: str | None, batch: int = 256,
               console: Console | None = None) -> dict[str, Any]:
    """Import a JSON-lines file; returns ``{"created", "deduplicated", "errors": [(line, msg)]}``.

    With ``data_dir`` the store is opened directly (no daemon may be running on it);
    otherwise batches go to the daemon at ``url``. A batch the daemon rejects is retried
    item by item so only the bad lines are lost.

    Raises:
        DaemonUnavailable: no daemon at ``url``.
    """
    good, errors = read_lines(path)
    created = dedup = 0
    progress = Progress(TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=console, transient=True)
    with progress:
        task = progress.add_task("import", total=len(good))
        if data_dir is not None:
            from memlane.config import load_settings
            from memlane.container import open_container

            container = open_container(load_settings(home=data_dir))
            try:
                valid = []
                for no, item in good:
                    try:
                        valid.append(container.memories.validate(item.to_input()))
                    except MemlaneError as exc:
                        errors.append((no, exc.message))
                        progress.advance(task)
                results = container.memories.remember_many(valid, progress=lambda n: progress.advance(task, n))
            finally:
                container.close()
            created = sum(r.status == "created" for r in results)
            dedup = len(results) - created
        else:
            client = Client(url or "http://127.0.0.1:7437", timeout_s=300)
            for start in range(0, len(good), batch):
                chunk = good[start:start + batch]
                payload = [item.model_dump() for _, item in chunk]
                try:
                    res = client.request("POST", "/api/memory/remember", json={"memories": payload})
                    created += res["created"]
                    dedup += res["deduplicated"]
                except DaemonError:
                    for (no, item), one in zip(chunk, payload):
                        try:
                            r = client.request("POST", "/api/memory/remember", json=one)
                            created += r["status"] == "created"
                            dedup += r["status"] == "deduplicated"
                        except DaemonError as exc:
                            errors.append((no, exc.message))
                progress.advance(task, len(chunk))
    errors.sort()
    return {"created": created, "deduplicated": dedup, "errors": errors}
