"""Knowledge graph persistence (memory-pipeline-v2.md "Knowledge Graph"): migration 0005,
persist_extraction's entity, mention, confidence and relation rules, UNIQUE name collisions,
idempotent re-processing, non-fatal failure, classification jobs. Real SQLite files."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from memlane.errors import StorageError
from memlane.graph import persist_extraction
from memlane.graph.store import CLASSIFY_JOB, DEFAULT_CONFIDENCE, resolve_entity
from memlane.services.inputs import RememberInput
from memlane.storage import graph as graph_sql

AT = "2026-01-01T00:00:00.000Z"


@pytest.fixture
def store(open_store):
    """A BM25-only store whose inline linker and extraction queue are off (only what the test
    writes is in the graph)."""
    return open_store(memory={"pipelineV2": {"enabled": False, "graph": {"enabled": False}}})


def remember(c, content: str) -> str:
    return c.memories.remember(RememberInput(content=content)).id


def persist(c, memory_id: str, entities: Any = (), relations: Any = ()) -> dict:
    return c.db.write(
        lambda conn: persist_extraction(
            conn, memory_id=memory_id, entities=list(entities), relations=list(relations), at=AT
        )
    )


def rows(c, sql: str, *args: Any) -> list[dict]:
    return c.db.read(lambda conn: [dict(r) for r in conn.execute(sql, args)])


def test_migration_creates_tables_and_unique_names(store) -> None:
    tables = {r["name"] for r in rows(store, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"entities", "relations", "memory_entity_mentions", "entity_aspects", "entity_attributes"} <= tables
    applied = [r["name"] for r in rows(store, "SELECT name FROM schema_migrations")]
    assert "0005_knowledge_graph" in applied

    def dup(conn: sqlite3.Connection) -> None:
        graph_sql.insert_entity(conn, entity_id="a", name="Redis", canonical="redis", entity_type="tool", at=AT)
        graph_sql.insert_entity(conn, entity_id="b", name="Redis", canonical="redis2", entity_type="tool", at=AT)

    with pytest.raises(StorageError, match="UNIQUE constraint failed: entities.name"):
        store.db.write(dup)


def test_entities_match_on_canonical_name_and_count_memories(store) -> None:
    m1, m2 = remember(store, "first memory about postgres"), remember(store, "second memory about postgres")
    out = persist(store, m1, entities=[{"name": "PostgreSQL", "type": "tool"}])
    assert out["entities_created"] == 1 and out["mentions"] == 1 and out["error"] is None
    out = persist(store, m2, entities=[{"name": "  postgresql ", "type": "Tool"}])
    assert out["entities_created"] == 0 and out["mentions"] == 1
    ents = rows(store, "SELECT * FROM entities")
    assert len(ents) == 1
    e = ents[0]
    assert (e["name"], e["canonical_name"], e["entity_type"], e["mentions"]) == ("PostgreSQL", "postgresql", "tool", 2)
    links = rows(store, "SELECT memory_id, mention_text FROM memory_entity_mentions ORDER BY mention_text")
    assert {(r["memory_id"], r["mention_text"]) for r in links} == {(m1, "PostgreSQL"), (m2, "  postgresql ")}


def test_reprocessing_a_memory_is_idempotent_for_links_and_mentions(store) -> None:
    m = remember(store, "the api talks to redis")
    for _ in range(3):
        persist(store, m, entities=[{"name": "Redis"}, {"name": "API"}])
    assert [r["mentions"] for r in rows(store, "SELECT mentions FROM entities")] == [1, 1]
    assert len(rows(store, "SELECT * FROM memory_entity_mentions")) == 2


def test_mention_confidence_rules(store) -> None:
    m = remember(store, "a memory with triples")
    persist(
        store,
        m,
        entities=[{"name": "Alpha"}, {"name": "Omega"}, {"name": "Gamma", "confidence": 7}],
        relations=[
            {"source": "Alpha", "target": "Beta", "relation": "uses", "confidence": 0.9},
            {"source": "Beta", "target": "Delta", "relation": "uses", "confidence": 0.3},
        ],
    )
    conf = {r["mention_text"]: r["confidence"] for r in rows(store, "SELECT * FROM memory_entity_mentions")}
    # An entity without a confidence takes its best triple's (Alpha) or the default (Omega);
    # out-of-range values are clamped (Gamma); triples' endpoints get the triple's confidence, the
    # first link of a pair winning (INSERT OR IGNORE: Beta keeps 0.9).
    assert conf == {"Alpha": 0.9, "Omega": DEFAULT_CONFIDENCE, "Gamma": 1.0, "Beta": 0.9, "Delta": 0.3}


def test_relation_repeat_increments_mentions_and_averages_confidence(store) -> None:
    m1, m2, m3 = (remember(store, f"memory number {i}") for i in range(3))
    rel = {"source": "Memlane", "target": "SQLite", "relation": "Uses"}
    persist(store, m1, relations=[{**rel, "confidence": 0.9}])
    persist(store, m2, relations=[{**rel, "confidence": 0.6}])
    out = persist(store, m3, relations=[{**rel, "relationship": "uses", "confidence": 0.3}])
    assert out["relations_updated"] == 1
    (r,) = rows(store, "SELECT * FROM relations")
    assert r["relation_type"] == "uses" and r["strength"] == 1.0 and r["mentions"] == 3
    assert r["confidence"] == pytest.approx((0.9 + 0.6 + 0.3) / 3)


def test_unique_name_collision_falls_back_to_existing_row(store) -> None:
    m = remember(store, "postgres alias")

    def alias(conn: sqlite3.Connection) -> None:  # name "Postgres" owned by canonical "postgresql"
        graph_sql.insert_entity(
            conn, entity_id="pg", name="Postgres", canonical="postgresql", entity_type="tool", at=AT
        )

    store.db.write(alias)
    out = persist(store, m, entities=[{"name": "Postgres"}])
    assert out["error"] is None and out["entities_created"] == 0
    (e,) = rows(store, "SELECT id, mentions FROM entities")
    assert e == {"id": "pg", "mentions": 1}
    assert store.db.write(lambda conn: resolve_entity(conn, "Postgres", at=AT)) == "pg"


def test_invalid_items_are_skipped_and_caps_apply(store) -> None:
    m = remember(store, "messy extraction output")
    out = persist(
        store,
        m,
        entities=[
            {"name": ""},
            "Redis",
            {"type": "tool"},
            {"name": "x"},
            *[{"name": f"Entity {i}"} for i in range(60)],
        ],
        relations=[
            {"source": "A1", "target": "", "relation": "r"},
            {"source": "Same", "target": " same", "relation": "is"},
            None,
        ],
    )
    assert out["skipped"] == 4 + 3
    assert len(rows(store, "SELECT * FROM entities")) == 50 - 4 + 1  # 50 used, 4 invalid; "Same" resolved once


def test_untyped_entity_gets_a_type_later_but_a_type_is_never_replaced(store) -> None:
    m = remember(store, "typed later")
    persist(store, m, entities=[{"name": "Bob"}])
    assert rows(store, "SELECT entity_type FROM entities")[0]["entity_type"] == "extracted"
    persist(store, m, entities=[{"name": "Bob", "type": "person"}])
    persist(store, m, entities=[{"name": "Bob", "type": "tool"}, {"name": "Eve", "type": "wizard"}])
    types = {r["name"]: r["entity_type"] for r in rows(store, "SELECT name, entity_type FROM entities")}
    assert types == {"Bob": "person", "Eve": "extracted"}


def test_relations_become_unclassified_attributes_and_queue_classification(store) -> None:
    m = remember(store, "the daemon uses sqlite and fastapi")
    out = persist(
        store,
        m,
        relations=[
            {"source": "Daemon", "target": "SQLite", "relation": "uses"},
            {"source": "Daemon", "target": "FastAPI", "relation": "uses"},
        ],
    )
    assert out["attributes"] == 2 and out["classify_jobs"] == 1
    attrs = rows(store, "SELECT content, aspect_id, kind, source FROM entity_attributes ORDER BY content")
    assert [(a["content"], a["aspect_id"], a["source"]) for a in attrs] == [
        ("uses FastAPI", None, "extraction"),
        ("uses SQLite", None, "extraction"),
    ]
    jobs = rows(store, "SELECT job_type, dedup_key, status FROM memory_jobs WHERE job_type = ?", CLASSIFY_JOB)
    daemon = rows(store, "SELECT id FROM entities WHERE name = 'Daemon'")[0]["id"]
    assert jobs == [{"job_type": CLASSIFY_JOB, "dedup_key": daemon, "status": "pending"}]
    persist(store, m, relations=[{"source": "Daemon", "target": "SQLite", "relation": "uses"}])
    assert len(rows(store, "SELECT * FROM entity_attributes")) == 2  # same fact: not duplicated


def test_failure_is_non_fatal_and_rolls_back_only_the_graph(store) -> None:
    m = remember(store, "kept")

    def job(conn: sqlite3.Connection) -> dict:
        conn.execute("UPDATE memories SET why = 'caller write' WHERE id = ?", (m,))
        return persist_extraction(conn, memory_id="no-such-memory", entities=[{"name": "Orphan"}], relations=[], at=AT)

    out = store.db.write(job)
    assert out["error"] and "FOREIGN KEY" in out["error"] and out["mentions"] == 0
    assert rows(store, "SELECT * FROM entities") == []
    assert rows(store, "SELECT why FROM memories WHERE id = ?", m)[0]["why"] == "caller write"
