"""SQL for memory-to-memory relations (``memory_relations``, migration 0013).

A relation is a directed edge ``source_id -> target_id`` of one of :data:`RELATIONS` with a
``weight`` (default 1.0). The pair ``(source_id, target_id, relation)`` is unique: adding it again
updates the weight. Functions take the caller's connection; :func:`add` and :func:`remove` write and
must run inside a write transaction (``Database.write``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from memlane.errors import ValidationError

RELATIONS: tuple[str, ...] = ("validates", "required_with", "conflicts_with", "supersedes", "derived_from")


@dataclass(frozen=True, slots=True)
class Relation:
    """One stored relation row."""

    id: int
    source_id: str
    target_id: str
    relation: str
    weight: float
    created_at: str


def _check(relation: str) -> None:
    if relation not in RELATIONS:
        raise ValidationError(f"unknown relation {relation!r}; expected one of {', '.join(RELATIONS)}")


def add(
    conn: sqlite3.Connection, source_id: str, target_id: str, relation: str, *, weight: float = 1.0, at: str
) -> int:
    """Store ``source_id -relation-> target_id`` (upsert: an existing edge gets the new weight).

    Returns the row id. Raises :class:`ValidationError` for an unknown relation, a self-edge or a
    non-finite weight.
    """
    _check(relation)
    if source_id == target_id:
        raise ValidationError("a memory cannot be related to itself")
    if not (weight == weight and abs(weight) != float("inf")):
        raise ValidationError("relation weight must be a finite number")
    conn.execute(
        """INSERT INTO memory_relations(source_id, target_id, relation, weight, created_at)
           VALUES (?, ?, ?, ?, ?)
           ON CONFLICT(source_id, target_id, relation) DO UPDATE SET weight = excluded.weight""",
        (source_id, target_id, relation, float(weight), at),
    )
    row = conn.execute(
        "SELECT id FROM memory_relations WHERE source_id = ? AND target_id = ? AND relation = ?",
        (source_id, target_id, relation),
    ).fetchone()
    return int(row[0])


def _rows(cur: sqlite3.Cursor) -> list[Relation]:
    return [Relation(int(r[0]), r[1], r[2], r[3], float(r[4]), r[5]) for r in cur]


_COLS = "id, source_id, target_id, relation, weight, created_at"


def list_for(
    conn: sqlite3.Connection, memory_id: str, *, direction: str = "both", relation: str | None = None
) -> list[Relation]:
    """Relations touching ``memory_id``: ``direction`` is ``out`` (it is the source), ``in`` (it is
    the target) or ``both``; optionally only one ``relation``. Ordered by id."""
    if relation is not None:
        _check(relation)
    if direction not in ("out", "in", "both"):
        raise ValidationError("direction must be 'out', 'in' or 'both'")
    where, args = [], []
    if direction == "out":
        where.append("source_id = ?")
        args.append(memory_id)
    elif direction == "in":
        where.append("target_id = ?")
        args.append(memory_id)
    else:
        where.append("(source_id = ? OR target_id = ?)")
        args += [memory_id, memory_id]
    if relation is not None:
        where.append("relation = ?")
        args.append(relation)
    return _rows(conn.execute(f"SELECT {_COLS} FROM memory_relations WHERE {' AND '.join(where)} ORDER BY id", args))


def list_all(conn: sqlite3.Connection, *, limit: int = 1000, offset: int = 0) -> list[Relation]:
    """Every relation, by id, paged."""
    return _rows(
        conn.execute(f"SELECT {_COLS} FROM memory_relations ORDER BY id LIMIT ? OFFSET ?", (int(limit), int(offset)))
    )


def remove(conn: sqlite3.Connection, source_id: str, target_id: str, relation: str | None = None) -> int:
    """Delete the edge(s) ``source_id -> target_id`` (one ``relation`` or all). Returns rows removed."""
    if relation is not None:
        _check(relation)
        cur = conn.execute(
            "DELETE FROM memory_relations WHERE source_id = ? AND target_id = ? AND relation = ?",
            (source_id, target_id, relation),
        )
    else:
        cur = conn.execute("DELETE FROM memory_relations WHERE source_id = ? AND target_id = ?", (source_id, target_id))
    return cur.rowcount


def remove_memory(conn: sqlite3.Connection, memory_id: str) -> int:
    """Delete every relation touching ``memory_id`` (used when it is forgotten). Returns rows removed."""
    return conn.execute(
        "DELETE FROM memory_relations WHERE source_id = ? OR target_id = ?", (memory_id, memory_id)
    ).rowcount
