"""SQL for the knowledge graph tables of migration 0005 (storage layer: SQL only).

memory-pipeline-v2.md "Knowledge Graph", "Inline Entity Linker", "Structural Classification",
"Aspect Feedback", "Graph-Augmented Search". Writers take the caller's connection and must run
inside its write transaction (``Database.write``); readers work on any connection. Rows come
back as frozen dataclasses. Timestamps are ISO-8601 UTC strings (``...Z``), sortable as text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Bound parameters per ``IN (...)`` chunk (SQLite's default limit is 32,766; stay small).
_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Entity:
    """One row of ``entities``; ``mentions`` = memories linked to it."""

    id: str
    name: str
    canonical_name: str
    entity_type: str
    description: str | None
    mentions: int
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class Relation:
    """One row of ``relations`` (``neighbour_name`` filled by :func:`entity_relations`)."""

    id: str
    source_entity_id: str
    target_entity_id: str
    relation_type: str
    strength: float
    mentions: int
    confidence: float
    created_at: str
    updated_at: str
    source_name: str | None = None
    target_name: str | None = None


@dataclass(frozen=True, slots=True)
class Mention:
    """One memory <-> entity link, with a preview of the memory (``content``, ``is_deleted``)."""

    memory_id: str
    entity_id: str
    mention_text: str | None
    confidence: float
    created_at: str
    content: str | None = None
    is_deleted: bool = False


@dataclass(frozen=True, slots=True)
class Aspect:
    """One row of ``entity_aspects``; ``attributes`` = its active attributes (list queries)."""

    id: str
    entity_id: str
    name: str
    canonical_name: str
    weight: float
    created_at: str
    updated_at: str
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class Attribute:
    """One row of ``entity_attributes`` (``aspect_name`` joined in by list queries)."""

    id: str
    entity_id: str
    aspect_id: str | None
    memory_id: str | None
    kind: str
    content: str
    normalized_content: str
    confidence: float
    importance: float
    status: str
    superseded_by: str | None
    source: str
    created_at: str
    updated_at: str
    aspect_name: str | None = None


def _of(cls: Any, row: sqlite3.Row) -> Any:
    d = dict(row)
    return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _marks(n: int) -> str:
    return ",".join("?" * n)


# -- entities ---------------------------------------------------------------------------------
def entity_by_canonical(conn: sqlite3.Connection, canonical: str) -> Entity | None:
    """The entity whose ``canonical_name`` is ``canonical``, or None."""
    row = conn.execute("SELECT * FROM entities WHERE canonical_name = ?", (canonical,)).fetchone()
    return _of(Entity, row) if row else None


def entity_by_name(conn: sqlite3.Connection, name: str) -> Entity | None:
    """The entity whose ``name`` is exactly ``name``, or None."""
    row = conn.execute("SELECT * FROM entities WHERE name = ?", (name,)).fetchone()
    return _of(Entity, row) if row else None


def get_entity(conn: sqlite3.Connection, entity_id: str) -> Entity | None:
    """The entity with this id, or None."""
    row = conn.execute("SELECT * FROM entities WHERE id = ?", (entity_id,)).fetchone()
    return _of(Entity, row) if row else None


def insert_entity(
    conn: sqlite3.Connection, *, entity_id: str, name: str, canonical: str, entity_type: str, at: str
) -> None:
    """Insert an entity with ``mentions = 0``.

    Raises:
        sqlite3.IntegrityError: ``name`` or ``canonical_name`` is taken (the statement is undone,
            the transaction goes on).
    """
    conn.execute(
        "INSERT INTO entities (id, name, canonical_name, entity_type, mentions, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, 0, ?, ?)",
        (entity_id, name, canonical, entity_type, at, at),
    )


def set_entity_type(conn: sqlite3.Connection, entity_id: str, entity_type: str, at: str) -> None:
    """Set an entity's type."""
    conn.execute("UPDATE entities SET entity_type = ?, updated_at = ? WHERE id = ?", (entity_type, at, entity_id))


def add_entity_mentions(conn: sqlite3.Connection, entity_id: str, n: int, at: str) -> None:
    """``mentions += n`` (floored at 0)."""
    conn.execute("UPDATE entities SET mentions = max(0, mentions + ?), updated_at = ? WHERE id = ?", (n, at, entity_id))


def insert_mention(
    conn: sqlite3.Connection, *, memory_id: str, entity_id: str, mention_text: str | None, confidence: float, at: str
) -> bool:
    """Link a memory to an entity (INSERT OR IGNORE); True when a new link was written."""
    cur = conn.execute(
        "INSERT OR IGNORE INTO memory_entity_mentions (memory_id, entity_id, mention_text, "
        "confidence, created_at) VALUES (?, ?, ?, ?, ?)",
        (memory_id, entity_id, mention_text, confidence, at),
    )
    return cur.rowcount > 0


def entities_by_canonical(conn: sqlite3.Connection, names: Sequence[str], limit: int) -> list[tuple[str, int]]:
    """``(id, mentions)`` of entities whose canonical name is one of ``names``, most mentioned
    first, at most ``limit`` (an indexed lookup: the UNIQUE index on canonical_name)."""
    if not names:
        return []
    names = list(names)[:_CHUNK]
    rows = conn.execute(
        f"SELECT id, mentions FROM entities WHERE canonical_name IN ({_marks(len(names))}) "
        "ORDER BY mentions DESC, id LIMIT ?",
        (*names, limit),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def neighbours(conn: sqlite3.Connection, entity_ids: Sequence[str], limit: int) -> list[str]:
    """Entity ids one hop away through ``relations`` in either direction, not in ``entity_ids``,
    strongest relations first, at most ``limit``."""
    if not entity_ids:
        return []
    ids = list(entity_ids)[:_CHUNK]
    m = _marks(len(ids))
    rows = conn.execute(
        f"""SELECT other FROM (
                SELECT target_entity_id AS other, mentions, confidence FROM relations WHERE source_entity_id IN ({m})
                UNION ALL
                SELECT source_entity_id AS other, mentions, confidence FROM relations WHERE target_entity_id IN ({m}))
            WHERE other NOT IN ({m})
            GROUP BY other ORDER BY max(mentions * confidence) DESC, other LIMIT ?""",
        (*ids, *ids, *ids, limit),
    ).fetchall()
    return [r[0] for r in rows]


def linked_seqs(conn: sqlite3.Connection, seqs: Sequence[int], entity_ids: Sequence[str]) -> list[int]:
    """The live memories among ``seqs`` linked to any of ``entity_ids`` (rowid lookups, then
    primary-key probes on the mentions: the cost follows the pool size, never a hub's fan-out)."""
    if not entity_ids:
        return []
    ents = list(entity_ids)[:_CHUNK]
    seqs = list(seqs)
    out: list[int] = []
    for start in range(0, len(seqs), _CHUNK):
        chunk = seqs[start : start + _CHUNK]
        out.extend(
            r[0]
            for r in conn.execute(
                f"SELECT m.seq FROM memories m WHERE m.seq IN ({_marks(len(chunk))}) AND m.is_deleted = 0 AND EXISTS "
                f"(SELECT 1 FROM memory_entity_mentions mm WHERE mm.memory_id = m.id AND mm.entity_id IN "
                f"({_marks(len(ents))}))",
                (*chunk, *ents),
            )
        )
    return out


def memory_ids_of_entities(conn: sqlite3.Connection, entity_ids: Sequence[str], limit: int) -> list[str]:
    """Distinct live memory ids linked to any of ``entity_ids``, newest first, at most ``limit``."""
    if not entity_ids:
        return []
    ids = list(entity_ids)[:_CHUNK]
    rows = conn.execute(
        f"""SELECT DISTINCT m.id, m.created_at FROM memory_entity_mentions mm JOIN memories m ON m.id = mm.memory_id
            WHERE mm.entity_id IN ({_marks(len(ids))}) AND m.is_deleted = 0 ORDER BY m.created_at DESC LIMIT ?""",
        (*ids, limit),
    ).fetchall()
    return [r[0] for r in rows]


def entities_of_ids(conn: sqlite3.Connection, entity_ids: Sequence[str]) -> dict[str, Entity]:
    """``id -> Entity`` for the given ids (missing ids are absent)."""
    out: dict[str, Entity] = {}
    ids = list(entity_ids)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        for row in conn.execute(f"SELECT * FROM entities WHERE id IN ({_marks(len(chunk))})", chunk):
            out[row["id"]] = _of(Entity, row)
    return out


def list_entities(
    conn: sqlite3.Connection, *, q: str | None, entity_type: str | None, limit: int, offset: int
) -> tuple[list[Entity], int]:
    """A page of entities (most mentioned first) and the total count; ``q`` is a case-insensitive
    substring of the canonical name (``%`` and ``_`` are literal)."""
    where, args = [], []
    if q:
        esc = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append("canonical_name LIKE ? ESCAPE '\\'")
        args.append(f"%{esc}%")
    if entity_type:
        where.append("entity_type = ?")
        args.append(entity_type)
    w = f"WHERE {' AND '.join(where)}" if where else ""
    total = conn.execute(f"SELECT count(*) FROM entities {w}", args).fetchone()[0]
    rows = conn.execute(
        f"SELECT * FROM entities {w} ORDER BY mentions DESC, canonical_name LIMIT ? OFFSET ?", (*args, limit, offset)
    ).fetchall()
    return [_of(Entity, r) for r in rows], total


def entity_mentions(conn: sqlite3.Connection, entity_id: str, limit: int, offset: int = 0) -> list[Mention]:
    """The entity's memory links, newest first, ``limit`` from ``offset``, with the memory's
    content (read in order from ``idx_mentions_entity_created``, migration 0016)."""
    rows = conn.execute(
        """SELECT mm.*, m.content, m.is_deleted FROM memory_entity_mentions mm
           JOIN memories m ON m.id = mm.memory_id WHERE mm.entity_id = ? ORDER BY mm.created_at DESC, mm.memory_id
           LIMIT ? OFFSET ?""",
        (entity_id, limit, offset),
    ).fetchall()
    return [_of(Mention, r) for r in rows]


def entity_mention_count(conn: sqlite3.Connection, entity_id: str) -> int:
    """How many memories the entity is linked to (``idx_mentions_entity``, covering)."""
    return int(
        conn.execute("SELECT count(*) FROM memory_entity_mentions WHERE entity_id = ?", (entity_id,)).fetchone()[0]
    )


def entity_relations(conn: sqlite3.Connection, entity_id: str, limit: int) -> list[Relation]:
    """Relations from or to the entity, most mentioned first, with both names."""
    rows = conn.execute(
        """SELECT r.*, s.name AS source_name, t.name AS target_name FROM relations r
           JOIN entities s ON s.id = r.source_entity_id JOIN entities t ON t.id = r.target_entity_id
           WHERE r.source_entity_id = ? OR r.target_entity_id = ?
           ORDER BY r.mentions DESC, r.id LIMIT ?""",
        (entity_id, entity_id, limit),
    ).fetchall()
    return [_of(Relation, r) for r in rows]


# -- relations --------------------------------------------------------------------------------
def get_relation(conn: sqlite3.Connection, source_id: str, target_id: str, relation_type: str) -> Relation | None:
    """The relation (source, target, type), or None."""
    row = conn.execute(
        "SELECT * FROM relations WHERE source_entity_id = ? AND target_entity_id = ? AND relation_type = ?",
        (source_id, target_id, relation_type),
    ).fetchone()
    return _of(Relation, row) if row else None


def insert_relation(
    conn: sqlite3.Connection,
    *,
    relation_id: str,
    source_id: str,
    target_id: str,
    relation_type: str,
    strength: float,
    confidence: float,
    at: str,
) -> None:
    """Insert a relation with ``mentions = 1``."""
    conn.execute(
        "INSERT INTO relations (id, source_entity_id, target_entity_id, relation_type, strength, mentions, "
        "confidence, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)",
        (relation_id, source_id, target_id, relation_type, strength, confidence, at, at),
    )


def update_relation(conn: sqlite3.Connection, relation_id: str, *, mentions: int, confidence: float, at: str) -> None:
    """Set a relation's mention count and confidence."""
    conn.execute(
        "UPDATE relations SET mentions = ?, confidence = ?, updated_at = ? WHERE id = ?",
        (mentions, confidence, at, relation_id),
    )


# -- aspects and attributes -------------------------------------------------------------------
def upsert_aspect(
    conn: sqlite3.Connection, *, aspect_id: str, entity_id: str, name: str, canonical: str, at: str
) -> str:
    """The id of the entity's aspect ``canonical`` (created with weight 0.5 when new; an existing
    one only gets ``updated_at``)."""
    conn.execute(
        "INSERT INTO entity_aspects (id, entity_id, name, canonical_name, weight, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, 0.5, ?, ?) ON CONFLICT(entity_id, canonical_name) DO UPDATE SET "
        "updated_at = excluded.updated_at",
        (aspect_id, entity_id, name, canonical, at, at),
    )
    return conn.execute(
        "SELECT id FROM entity_aspects WHERE entity_id = ? AND canonical_name = ?", (entity_id, canonical)
    ).fetchone()[0]


def aspects_of_entity(conn: sqlite3.Connection, entity_id: str) -> list[Aspect]:
    """The entity's aspects, heaviest first, with their active attribute counts."""
    rows = conn.execute(
        """SELECT a.*, (SELECT count(*) FROM entity_attributes x WHERE x.aspect_id = a.id AND x.status = 'active')
                  AS attributes
           FROM entity_aspects a WHERE a.entity_id = ? ORDER BY a.weight DESC, a.canonical_name""",
        (entity_id,),
    ).fetchall()
    return [_of(Aspect, r) for r in rows]


def active_attribute_exists(conn: sqlite3.Connection, entity_id: str, aspect_id: str | None, normalized: str) -> bool:
    """An active attribute of the entity with this normalized content (under this aspect) exists."""
    return (
        conn.execute(
            "SELECT 1 FROM entity_attributes WHERE entity_id = ? AND aspect_id IS ? "
            "AND normalized_content = ? AND status = 'active' LIMIT 1",
            (entity_id, aspect_id, normalized),
        ).fetchone()
        is not None
    )


def insert_attribute(
    conn: sqlite3.Connection,
    *,
    attribute_id: str,
    entity_id: str,
    aspect_id: str | None,
    memory_id: str | None,
    kind: str,
    content: str,
    normalized: str,
    confidence: float,
    importance: float,
    source: str,
    at: str,
) -> None:
    """Insert an active attribute."""
    conn.execute(
        "INSERT INTO entity_attributes (id, entity_id, aspect_id, memory_id, kind, content, "
        "normalized_content, confidence, importance, status, source, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?)",
        (
            attribute_id,
            entity_id,
            aspect_id,
            memory_id,
            kind,
            content,
            normalized,
            confidence,
            importance,
            source,
            at,
            at,
        ),
    )


def attributes_of_entity(
    conn: sqlite3.Connection,
    entity_id: str,
    *,
    aspect_id: str | None = None,
    kind: str | None = None,
    status: str | None = "active",
    limit: int = 100,
    offset: int = 0,
) -> list[Attribute]:
    """The entity's attributes, newest first, with their aspect's name; filters are optional."""
    where, args = ["x.entity_id = ?"], [entity_id]
    for col, v in (("x.aspect_id", aspect_id), ("x.kind", kind), ("x.status", status)):
        if v is not None:
            where.append(f"{col} = ?")
            args.append(v)
    rows = conn.execute(  # one status, no other filter: in order from idx_attributes_entity_created (0016)
        f"""SELECT x.*, a.name AS aspect_name FROM entity_attributes x LEFT JOIN entity_aspects a ON a.id = x.aspect_id
            WHERE {" AND ".join(where)} ORDER BY x.created_at DESC, x.id LIMIT ? OFFSET ?""",
        (*args, limit, offset),
    ).fetchall()
    return [_of(Attribute, r) for r in rows]


def attribute_count(conn: sqlite3.Connection, entity_id: str, *, status: str | None = "active") -> int:
    """How many attributes the entity has (of one status, or all with None)."""
    if status is None:
        return int(
            conn.execute("SELECT count(*) FROM entity_attributes WHERE entity_id = ?", (entity_id,)).fetchone()[0]
        )
    return int(
        conn.execute(
            "SELECT count(*) FROM entity_attributes WHERE entity_id = ? AND status = ?", (entity_id, status)
        ).fetchone()[0]
    )


def unclassified_attributes(conn: sqlite3.Connection, entity_id: str, limit: int) -> list[Attribute]:
    """Active attributes of the entity with no aspect yet, oldest (then first inserted) first, at most
    ``limit``."""
    rows = conn.execute(
        "SELECT * FROM entity_attributes WHERE entity_id = ? AND aspect_id IS NULL "
        "AND status = 'active' ORDER BY created_at, rowid LIMIT ?",
        (entity_id, limit),
    ).fetchall()
    return [_of(Attribute, r) for r in rows]


def classify_attribute(
    conn: sqlite3.Connection, attribute_id: str, *, aspect_id: str, kind: str, importance: float, at: str
) -> None:
    """Fill in an attribute's aspect, kind and importance."""
    conn.execute(
        "UPDATE entity_attributes SET aspect_id = ?, kind = ?, importance = ?, updated_at = ? WHERE id = ?",
        (aspect_id, kind, importance, at, attribute_id),
    )


# -- aspect feedback --------------------------------------------------------------------------
def ended_sessions_without_feedback(conn: sqlite3.Connection, limit: int) -> list[str]:
    """Keys of ended sessions not yet in ``aspect_feedback_sessions``, oldest end first."""
    rows = conn.execute(
        "SELECT s.session_key FROM sessions s WHERE s.status = 'ended' AND NOT EXISTS "
        "(SELECT 1 FROM aspect_feedback_sessions f WHERE f.session_key = s.session_key) "
        "ORDER BY s.ended_at, s.session_key LIMIT ?",
        (limit,),
    ).fetchall()
    return [r[0] for r in rows]


def fts_confirmations_by_aspect(conn: sqlite3.Connection, session_key: str) -> dict[str, int]:
    """``aspect_id -> sum of fts_hit_count`` over the session's memories with at least one FTS hit,
    through their active, classified attributes (each aspect counted once per memory)."""
    rows = conn.execute(
        """SELECT aspect_id, sum(hits) FROM (
               SELECT DISTINCT x.aspect_id AS aspect_id, sm.memory_id, sm.fts_hit_count AS hits
               FROM session_memories sm JOIN entity_attributes x ON x.memory_id = sm.memory_id
               WHERE sm.session_key = ? AND sm.fts_hit_count > 0 AND x.status = 'active' AND x.aspect_id IS NOT NULL)
           GROUP BY aspect_id""",
        (session_key,),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def add_aspect_weight(
    conn: sqlite3.Connection, aspect_id: str, delta: float, *, min_weight: float, max_weight: float, at: str
) -> bool:
    """``weight = clamp(weight + delta, min, max)``; True when the aspect exists."""
    cur = conn.execute(
        "UPDATE entity_aspects SET weight = min(?, max(?, weight + ?)), updated_at = ? WHERE id = ?",
        (max_weight, min_weight, delta, at, aspect_id),
    )
    return cur.rowcount > 0


def record_session_feedback(
    conn: sqlite3.Connection, session_key: str, *, confirmations: int, aspects: int, at: str
) -> None:
    """Remember that the session's feedback was applied (idempotent)."""
    conn.execute(
        "INSERT OR IGNORE INTO aspect_feedback_sessions (session_key, confirmations, aspects, applied_at) "
        "VALUES (?, ?, ?, ?)",
        (session_key, confirmations, aspects, at),
    )


def decay_stale_aspects(conn: sqlite3.Connection, *, stale_before: str, rate: float, min_weight: float, at: str) -> int:
    """``weight = max(min_weight, weight - rate)`` for aspects not updated since ``stale_before``
    and above ``min_weight``; returns how many decayed."""
    cur = conn.execute(
        "UPDATE entity_aspects SET weight = max(?, weight - ?), updated_at = ? WHERE updated_at < ? AND weight > ?",
        (min_weight, rate, at, stale_before, min_weight),
    )
    return cur.rowcount


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Row counts of the graph tables."""
    out = {}
    for t in ("entities", "relations", "memory_entity_mentions", "entity_aspects", "entity_attributes"):
        out[t] = conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
    return out


@dataclass(frozen=True, slots=True)
class InvalidatedAttribute:
    """An attribute that stopped holding because the memory it came from was superseded or
    deleted: its entity (id, name), aspect (id, name, both None without one) and text."""

    attribute_id: str
    entity_id: str
    entity_name: str
    aspect_id: str | None
    aspect_name: str | None
    content: str
    status: str


def invalidate_attributes_of_memory(
    conn: sqlite3.Connection, memory_id: str, *, status: str, superseded_by_memory: str | None, at: str
) -> list[InvalidatedAttribute]:
    """Mark the active attributes written from ``memory_id`` ``status`` (``superseded`` or
    ``deleted``); a superseded one points (``superseded_by``) at the active attribute of the
    superseding memory on the same entity and aspect, when there is one. Returns them."""
    if status not in ("superseded", "deleted"):
        raise ValueError(f"status: superseded or deleted, not {status!r}")
    rows = conn.execute(
        """SELECT a.id, a.entity_id, e.name, a.aspect_id, s.name, a.content FROM entity_attributes a
           JOIN entities e ON e.id = a.entity_id LEFT JOIN entity_aspects s ON s.id = a.aspect_id
           WHERE a.memory_id = ? AND a.status = 'active' ORDER BY a.created_at, a.rowid""",
        (memory_id,),
    ).fetchall()
    out = []
    for aid, eid, ename, asp, aname, content in rows:
        by = None
        if superseded_by_memory is not None and status == "superseded":
            r = conn.execute(
                "SELECT id FROM entity_attributes WHERE memory_id = ? AND entity_id = ? AND aspect_id IS ? "
                "AND status = 'active' ORDER BY created_at, rowid LIMIT 1",
                (superseded_by_memory, eid, asp),
            ).fetchone()
            by = r[0] if r else None
        conn.execute(
            "UPDATE entity_attributes SET status = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
            (status, by, at, aid),
        )
        out.append(InvalidatedAttribute(aid, eid, ename, asp, aname, content, status))
    return out


def restore_deleted_attributes_of_memory(conn: sqlite3.Connection, memory_id: str, *, at: str) -> int:
    """A recovered memory's attributes that its deletion marked ``deleted`` are active again.
    Returns how many."""
    return conn.execute(
        "UPDATE entity_attributes SET status = 'active', updated_at = ? WHERE memory_id = ? AND status = 'deleted'",
        (at, memory_id),
    ).rowcount


def invalidated_attributes_of_memory(conn: sqlite3.Connection, memory_id: str) -> list[InvalidatedAttribute]:
    """The attributes written from ``memory_id`` that are no longer active (superseded or deleted)."""
    rows = conn.execute(
        """SELECT a.id, a.entity_id, e.name, a.aspect_id, s.name, a.content, a.status FROM entity_attributes a
           JOIN entities e ON e.id = a.entity_id LEFT JOIN entity_aspects s ON s.id = a.aspect_id
           WHERE a.memory_id = ? AND a.status IN ('superseded', 'deleted') ORDER BY a.created_at, a.rowid""",
        (memory_id,),
    ).fetchall()
    return [InvalidatedAttribute(*r) for r in rows]


def memory_entities(conn: sqlite3.Connection, memory_id: str) -> list[tuple[str, str]]:
    """``(entity id, entity name)`` of every entity the memory is linked to, in link order."""
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT e.id, e.name FROM memory_entity_mentions mm JOIN entities e ON e.id = mm.entity_id "
            "WHERE mm.memory_id = ? ORDER BY mm.created_at, e.name",
            (memory_id,),
        )
    ]
