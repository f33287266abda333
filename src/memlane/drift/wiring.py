"""Wire :class:`memlane.drift.service.DriftService` into a container (issue 41)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlane.drift.service import DriftService

if TYPE_CHECKING:
    from memlane.container import Container


def wire(c: "Container") -> DriftService:
    """Build the drift service, load its state, and hook it into the write path (references on
    create, resolution on update, removal on forget), recall (retrieval rules, write-behind
    check) and sessions (no proactive injection of flagged memories). Settings are read at use
    time (``c.settings.drift``)."""
    svc = DriftService(c.db, c.recall.index, lambda: c.settings.drift, embedder=lambda: c.memories.embedder)
    svc.load()
    c.memories.created_hooks.append(svc.created_hook)
    c.memories.listeners.append(svc.on_memory_event)
    c.recall.drift = svc
    c.sessions.drift = svc
    c.drift = svc
    return svc
