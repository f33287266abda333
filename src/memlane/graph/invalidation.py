"""Knowledge-graph invalidation (memory-system-v3-design.md "File Staleness Detection", layer 3;
docs/drift.md "Entity staleness").

An entity's attributes are facts the linker took from a memory (``entity_attributes.memory_id``).
When that memory stops holding, so do they: superseded -> the attributes are marked
``superseded`` (``superseded_by`` the superseding memory's attribute on the same entity and
aspect, when it has one), deleted -> ``deleted``; recovered -> the deleted ones are active again.
The drift service reads the invalidated attributes afterwards and flags the memories that
depend on them (:meth:`memlane.drift.service.DriftService.on_memory_event`), so this listener
comes before the drift service's in ``MemoryService.listeners``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from memlane.config.clock import now_iso
from memlane.storage import graph as graph_sql
from memlane.storage.db import Database

log = logging.getLogger(__name__)

#: Memory type never linked to entities (document chunks).
CHUNK_TYPE = "document_chunk"


class GraphInvalidation:
    """``MemoryService.listeners`` entry keeping entity attributes in step with their memories.

    Args:
        db: the database (migrated to 0005 or later).
        now: the clock, ISO-8601 UTC.
    """

    def __init__(self, db: Database, *, now: Callable[[], str] = now_iso) -> None:
        self.db = db
        self._now = now

    def on_memory_event(self, event: str, memory: Any) -> None:
        """``superseded`` / ``deleted``: the memory's active attributes become superseded /
        deleted; ``recovered``: its deleted attributes are active again. Other events: nothing.
        ``memory`` is ``Memory``-like (``id``, ``type``, ``superseded_by``)."""
        if memory.type == CHUNK_TYPE:
            return
        at = self._now()
        if event in ("superseded", "deleted"):
            status = "superseded" if event == "superseded" else "deleted"
            self.db.write(
                lambda c: graph_sql.invalidate_attributes_of_memory(
                    c, memory.id, status=status, superseded_by_memory=getattr(memory, "superseded_by", None), at=at
                )
            )
        elif event == "recovered":
            self.db.write(lambda c: graph_sql.restore_deleted_attributes_of_memory(c, memory.id, at=at))
