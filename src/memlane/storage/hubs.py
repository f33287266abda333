"""SQL for hub dampening (memory-pipeline-v2.md "Post-Fusion Dampening", stage 2).

Reads the knowledge graph's ``memory_entity_mentions`` (``memory_id``, ``entity_id``), which
the graph migration creates; every function returns empty results while that table is absent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

MENTIONS_TABLE = "memory_entity_mentions"


def has_mentions(conn: sqlite3.Connection) -> bool:
    """True when the entity-mentions table exists with ``memory_id`` and ``entity_id`` columns."""
    cols = {r[1] for r in conn.execute(f"PRAGMA table_info({MENTIONS_TABLE})")}
    return {"memory_id", "entity_id"} <= cols


def entity_degrees(conn: sqlite3.Connection) -> dict[str, int]:
    """``entity_id -> mention count`` (rows of ``memory_entity_mentions`` per entity)."""
    if not has_mentions(conn):
        return {}
    return {
        str(r[0]): int(r[1])
        for r in conn.execute(f"SELECT entity_id, count(*) FROM {MENTIONS_TABLE} GROUP BY entity_id")
    }


def entities_of(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> dict[str, set[str]]:
    """``memory_id -> {entity_id}`` of the given memories (memories without mentions absent; all
    absent when the table does not exist)."""
    out: dict[str, set[str]] = {}
    for start in range(0, len(memory_ids), 500):
        chunk = list(memory_ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        try:
            rows = conn.execute(
                f"SELECT memory_id, entity_id FROM {MENTIONS_TABLE} WHERE memory_id IN ({marks})", chunk
            ).fetchall()
        except sqlite3.OperationalError:  # no graph table (yet)
            return {}
        for mid, eid in rows:
            out.setdefault(str(mid), set()).add(str(eid))
    return out
