"""The named extension points of the core services: what the container passes to their
constructors so that other packages (the pipeline, the knowledge graph, recall hints, drift,
session scoring) take part in a remember, a change or a recall without the core services
importing them.

* :class:`MemoryCreatedHook` -- runs inside the remember transaction for each created memory
  (``MemoryService(created_hooks=...)``): SQL only, e.g. enqueueing a job or linking entities.
* :class:`MemoryListener` -- told after a committed update, delete, recover or supersede
  (``MemoryService(listeners=...)``).
* :class:`CreatedListener` -- told of the memories a write created, after its commit and
  indexing (``MemoryService(created_listeners=...)``), e.g. to queue write-behind work on them.
* :class:`DriftGuard` -- the drift step after recall ranking and the filter on what a
  session-start may inject (``RecallService(drift=...)``, ``SessionService(drift=...)``;
  :class:`memlane.drift.service.DriftService`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Protocol

from memlane.storage.models import Memory, NewMemory


class MemoryCreatedHook(Protocol):
    """Called as ``hook(conn, new_memory, at)`` for each created memory INSIDE its write
    transaction, after the raw row is inserted (``at``: the remember time, ISO-8601 UTC). SQL
    only (no network). An exception rolls the whole chunk back."""

    def __call__(self, conn: sqlite3.Connection, new: NewMemory, at: str, /) -> None: ...


class MemoryListener(Protocol):
    """Called as ``listener(event, memory)`` after a committed change; ``event`` is one of
    ``updated``, ``deleted``, ``recovered``, ``superseded``. An exception is logged, never raised
    to the caller."""

    def __call__(self, event: str, memory: Memory, /) -> None: ...


class CreatedListener(Protocol):
    """Called as ``listener(entries)`` with the index entries (``id``, ``seq``, ``project``,
    ``type``, ...) of the memories one write created, after it committed and they were indexed.
    It must return at once (queue work, never do it); an exception is logged, never raised to
    the caller."""

    def __call__(self, entries: Sequence[Any], /) -> None: ...


class DriftGuard(Protocol):
    """Stale or drifting memories (:class:`memlane.drift.service.DriftService`)."""

    def after_recall(self, hits: list[Any]) -> list[Any]:
        """Recall hits with the drift penalty and warning applied (same length or shorter)."""
        ...

    def injectable(self, memory_ids: Sequence[str]) -> list[str]:
        """The ids a session-start may inject proactively, in the given order."""
        ...

    def schedule_ids(self, memory_ids: Sequence[str]) -> None:
        """Queue a write-behind drift check of memories just shown."""
        ...

    def session_started(self, project: str | None) -> None:
        """A session started in ``project``: the periodic staleness sweep may run."""
        ...
