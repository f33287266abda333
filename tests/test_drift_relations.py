"""Memory relations storage (migration 0013): add/upsert, list by direction, remove, bad input."""

from __future__ import annotations

import sqlite3

import pytest

from memlane.errors import StorageError, ValidationError
from memlane.storage import relations

AT = "2026-01-01T00:00:00.000Z"


def test_add_list_remove(store):
    def write(conn):
        relations.add(conn, "a", "b", "validates", at=AT)
        relations.add(conn, "a", "c", "supersedes", weight=0.5, at=AT)
        relations.add(conn, "c", "a", "conflicts_with", at=AT)
        # same edge again: upsert of the weight, not a second row
        relations.add(conn, "a", "b", "validates", weight=0.25, at=AT)

    store.db.write(write)
    out = store.db.read(lambda c: relations.list_for(c, "a", direction="out"))
    assert [(r.target_id, r.relation, r.weight) for r in out] == [("b", "validates", 0.25), ("c", "supersedes", 0.5)]
    inn = store.db.read(lambda c: relations.list_for(c, "a", direction="in"))
    assert [(r.source_id, r.relation) for r in inn] == [("c", "conflicts_with")]
    assert len(store.db.read(lambda c: relations.list_for(c, "a"))) == 3
    assert len(store.db.read(lambda c: relations.list_for(c, "a", relation="validates"))) == 1
    assert store.db.write(lambda c: relations.remove(c, "a", "b")) == 1
    assert store.db.write(lambda c: relations.remove_memory(c, "a")) == 2
    assert store.db.read(lambda c: relations.list_all(c)) == []


def test_bad_input_is_a_validation_error(store):
    with pytest.raises(ValidationError):
        store.db.write(lambda c: relations.add(c, "a", "b", "likes", at=AT))
    with pytest.raises(ValidationError):
        store.db.write(lambda c: relations.add(c, "a", "a", "validates", at=AT))
    with pytest.raises(ValidationError):
        store.db.write(lambda c: relations.add(c, "a", "b", "validates", weight=float("nan"), at=AT))
    with pytest.raises(ValidationError):
        store.db.read(lambda c: relations.list_for(c, "a", direction="sideways"))


def test_schema_is_exactly_as_agreed(store):
    # the CHECK constraint holds even for SQL that bypasses the module
    with pytest.raises((sqlite3.IntegrityError, StorageError)):
        store.db.write(
            lambda c: c.execute(
                "INSERT INTO memory_relations(source_id, target_id, relation, created_at) VALUES ('x','y','nope',?)",
                (AT,),
            )
        )
    idx = store.db.read(
        lambda c: [
            r[0]
            for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'memory_relations'")
        ]
    )
    assert {"idx_memory_relations_source", "idx_memory_relations_target"} <= set(idx)
    cols = store.db.write(lambda c: [(r[1], r[2], r[3]) for r in c.execute("PRAGMA table_info(memory_relations)")])
    assert cols == [
        ("id", "INTEGER", 0),
        ("source_id", "TEXT", 1),
        ("target_id", "TEXT", 1),
        ("relation", "TEXT", 1),
        ("weight", "REAL", 1),
        ("created_at", "TEXT", 1),
    ]
