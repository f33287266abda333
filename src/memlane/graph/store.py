"""Knowledge graph persistence (memory-pipeline-v2.md "Knowledge Graph").

Rules:

* Entities match on ``canonical_name`` (lowercase, whitespace collapsed); a new one is inserted
  with its original casing as ``name``. A UNIQUE collision on ``name`` (or on the canonical name,
  a concurrent insert) falls back to the existing row.
* ``entities.mentions`` counts the memories linked to the entity: it grows by one each time a
  new ``memory_entity_mentions`` row is written, so re-processing a memory (INSERT OR IGNORE on
  the link) changes nothing, and the retention worker can decrement it per purged link.
* Mention links store ``mention_text`` (the raw string before canonicalisation) and a confidence
  in [0, 1]: for extraction, an entity's own confidence when given, else the highest confidence
  of the triples naming it, else :data:`DEFAULT_CONFIDENCE` (0.5); for the inline linker
  :data:`memlane.graph.linker.LINKER_CONFIDENCE` (0.8). The first link of a (memory, entity)
  pair wins (INSERT OR IGNORE).
* Relations: one row per (source, target, relation type), ``strength`` fixed at 1.0; a repeat
  increments ``mentions`` and sets ``confidence = (old * n + new) / (n + 1)``. Self-relations
  (same canonical name) are dropped.
* Each relation also becomes an unclassified attribute of its source entity ("<relation>
  <target>"), and a ``structural_classify`` job is queued for that entity
  (seed "Structural Classification").

Everything here is SQL on the caller's connection inside the caller's write transaction.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from typing import Any

from memlane.graph import names
from memlane.storage import graph as graph_sql
from memlane.storage import jobs as jobs_sql
from memlane.storage.db import savepoint

log = logging.getLogger(__name__)

#: Confidence of a mention or relation when the extractor gave none (seed: relations default 0.5).
DEFAULT_CONFIDENCE = 0.5
#: Strength of every pipeline-extracted relation (seed).
RELATION_STRENGTH = 1.0
#: Caps per extraction (seed "Extraction Stage": entities capped at 50 per input).
MAX_ENTITIES = 50
MAX_RELATIONS = 50
#: Longest relation type kept, characters.
MAX_RELATION_CHARS = 100
#: Job type of the structural classification worker.
CLASSIFY_JOB = "structural_classify"


def resolve_entity(conn: sqlite3.Connection, raw_name: str, *, at: str, entity_type: str = names.UNTYPED) -> str | None:
    """The id of the entity named ``raw_name``, inserted when new; None for a name too short.

    A typed ``entity_type`` replaces ``extracted`` on an existing entity (never another type).
    Mentions are not counted here (see :func:`link_memory`).
    """
    return resolve_entity_created(conn, raw_name, at=at, entity_type=entity_type)[0]


def resolve_entity_created(
    conn: sqlite3.Connection, raw_name: str, *, at: str, entity_type: str = names.UNTYPED
) -> tuple[str | None, bool]:
    """:func:`resolve_entity` and whether the entity was inserted by this call."""
    name = names.clean_name(raw_name)
    canonical = names.canonical_name(name)
    if len(canonical) < names.MIN_NAME_CHARS:
        return None, False
    found = graph_sql.entity_by_canonical(conn, canonical)
    if found is None:
        new_id = str(uuid.uuid4())
        try:
            graph_sql.insert_entity(
                conn, entity_id=new_id, name=name, canonical=canonical, entity_type=entity_type, at=at
            )
            return new_id, True
        except sqlite3.IntegrityError:
            # Trigger: UNIQUE(name) or UNIQUE(canonical_name) refused the insert.
            # Why: another spelling already owns this name (seed: "handled gracefully").
            # Outcome: the existing row is used; its mentions grow when the memory is linked.
            found = graph_sql.entity_by_name(conn, name) or graph_sql.entity_by_canonical(conn, canonical)
            if found is None:
                raise
    if entity_type != names.UNTYPED and found.entity_type == names.UNTYPED:
        graph_sql.set_entity_type(conn, found.id, entity_type, at)
    return found.id, False


def link_memory(
    conn: sqlite3.Connection, *, memory_id: str, entity_id: str, mention_text: str | None, confidence: float, at: str
) -> bool:
    """Link a memory to an entity (idempotent); a new link adds one to the entity's mentions.
    Returns whether the link is new."""
    new = graph_sql.insert_mention(
        conn,
        memory_id=memory_id,
        entity_id=entity_id,
        mention_text=(mention_text or None) and mention_text[: names.MAX_NAME_CHARS],
        confidence=_unit(confidence),
        at=at,
    )
    if new:
        graph_sql.add_entity_mentions(conn, entity_id, 1, at)
    return new


def upsert_relation(
    conn: sqlite3.Connection, *, source_id: str, target_id: str, relation_type: str, confidence: float, at: str
) -> bool:
    """Insert the relation or fold a repeat into it (mentions + 1, running-average confidence).
    Returns True when the relation is new."""
    confidence = _unit(confidence)
    old = graph_sql.get_relation(conn, source_id, target_id, relation_type)
    if old is None:
        graph_sql.insert_relation(
            conn,
            relation_id=str(uuid.uuid4()),
            source_id=source_id,
            target_id=target_id,
            relation_type=relation_type,
            strength=RELATION_STRENGTH,
            confidence=confidence,
            at=at,
        )
        return True
    n = old.mentions
    graph_sql.update_relation(
        conn, old.id, mentions=n + 1, confidence=(old.confidence * n + confidence) / (n + 1), at=at
    )
    return False


def enqueue_classification(conn: sqlite3.Connection, entity_id: str, *, at: str) -> int:
    """Queue structural classification of the entity's unclassified attributes (one pending or
    leased job per entity: dedup key = entity id). Returns the job id."""
    return jobs_sql.enqueue(conn, CLASSIFY_JOB, at=at, dedup_key=entity_id, payload={"entity_id": entity_id})


def persist_extraction(
    conn: sqlite3.Connection, *, memory_id: str, entities: list[dict], relations: list[dict], at: str
) -> dict:
    """Persist one memory's extracted entities and relation triples (seed "Knowledge Graph").

    Runs inside the caller's write transaction, in a SAVEPOINT: a failure here is logged and
    rolled back to the savepoint, never raised, so the caller's fact writes stay (seed: "graph
    persistence failure is non-fatal"). The caller gates on ``pipeline_v2.graph.enabled``.

    Args:
        conn: the write connection, inside ``Database.write``.
        memory_id: the memory the entities were extracted from (must exist).
        entities: ``{"name": str, "type"?: str, "confidence"?: float}``; at most 50 used.
        relations: ``{"source": str, "target": str, "relation": str (or "relationship"),
            "confidence"?: float in [0, 1]}``; at most 50 used.
        at: the write time (ISO-8601 UTC).
    Returns:
        ``{"entities": distinct entities linked, "entities_created", "mentions": new links,
        "relations_created", "relations_updated", "attributes": unclassified attributes added,
        "classify_jobs", "skipped": invalid items, "error": str | None}``.
    """
    out: dict[str, Any] = {
        "entities": 0,
        "entities_created": 0,
        "mentions": 0,
        "relations_created": 0,
        "relations_updated": 0,
        "attributes": 0,
        "classify_jobs": 0,
        "skipped": 0,
        "error": None,
    }
    try:
        with savepoint(conn, "graph_persist"):
            _persist(conn, memory_id, entities or [], relations or [], at, out)
    except Exception as exc:  # non-fatal by contract
        log.warning("graph persistence for memory %s failed: %s", memory_id, exc)
        out = {k: (0 if isinstance(v, int) else v) for k, v in out.items()}
        out["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return out


def _persist(
    conn: sqlite3.Connection, memory_id: str, entities: list, relations: list, at: str, out: dict[str, Any]
) -> None:
    linked: set[str] = set()
    types: dict[str, str] = {}
    triples = [_triple(r) for r in list(relations)[:MAX_RELATIONS]]
    best: dict[str, float] = {}  # canonical name -> highest confidence of a triple naming it
    for t in triples:
        if t is None:
            continue
        for named in t[:2]:
            c = names.canonical_name(named)
            best[c] = max(best.get(c, 0.0), t[3])
    for e in list(entities)[:MAX_ENTITIES]:
        name = e.get("name") if isinstance(e, dict) else None
        if not isinstance(name, str) or not name.strip():
            out["skipped"] += 1
            continue
        etype = names.entity_type(e.get("type"))
        types[names.canonical_name(name)] = etype
        eid, created = resolve_entity_created(conn, name, at=at, entity_type=etype)
        out["entities_created"] += created
        if eid is None:
            out["skipped"] += 1
            continue
        conf = _confidence(e) if "confidence" in e else best.get(names.canonical_name(name), DEFAULT_CONFIDENCE)
        out["mentions"] += link_memory(
            conn, memory_id=memory_id, entity_id=eid, mention_text=name, confidence=conf, at=at
        )
        linked.add(eid)
    classify: set[str] = set()
    for triple in triples:
        if triple is None:
            out["skipped"] += 1
            continue
        src, tgt, rel, conf = triple
        sid, c1 = resolve_entity_created(
            conn, src, at=at, entity_type=types.get(names.canonical_name(src), names.UNTYPED)
        )
        tid, c2 = resolve_entity_created(
            conn, tgt, at=at, entity_type=types.get(names.canonical_name(tgt), names.UNTYPED)
        )
        out["entities_created"] += c1 + c2
        if sid is None or tid is None or sid == tid:
            out["skipped"] += 1
            continue
        for eid, text in ((sid, src), (tid, tgt)):
            out["mentions"] += link_memory(
                conn, memory_id=memory_id, entity_id=eid, mention_text=text, confidence=conf, at=at
            )
            linked.add(eid)
        out[
            "relations_created"
            if upsert_relation(conn, source_id=sid, target_id=tid, relation_type=rel, confidence=conf, at=at)
            else "relations_updated"
        ] += 1
        content = f"{rel} {names.clean_name(tgt)}"
        normalized = names.canonical_name(content)
        if not graph_sql.active_attribute_exists(conn, sid, None, normalized):
            graph_sql.insert_attribute(
                conn,
                attribute_id=str(uuid.uuid4()),
                entity_id=sid,
                aspect_id=None,
                memory_id=memory_id,
                kind="attribute",
                content=content,
                normalized=normalized,
                confidence=conf,
                importance=0.5,
                source="extraction",
                at=at,
            )
            out["attributes"] += 1
            classify.add(sid)
    for eid in sorted(classify):
        enqueue_classification(conn, eid, at=at)
    out["classify_jobs"] = len(classify)
    out["entities"] = len(linked)


def _triple(r: Any) -> tuple[str, str, str, float] | None:
    if not isinstance(r, dict):
        return None
    src, tgt = r.get("source"), r.get("target")
    rel = r.get("relation", r.get("relationship"))
    if not (
        isinstance(src, str)
        and isinstance(tgt, str)
        and isinstance(rel, str)
        and src.strip()
        and tgt.strip()
        and rel.strip()
    ):
        return None
    rel = " ".join(rel.split()).lower()[:MAX_RELATION_CHARS]
    return src, tgt, rel, _confidence(r)


def _confidence(d: dict) -> float:
    v = d.get("confidence")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return DEFAULT_CONFIDENCE
    return _unit(float(v))


def _unit(v: float) -> float:
    if v != v:  # NaN
        return DEFAULT_CONFIDENCE
    return min(1.0, max(0.0, float(v)))
