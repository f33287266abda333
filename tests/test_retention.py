"""Retention sweep against real database states: tombstones past the window (graph links,
embeddings, rows, FTS), history, completed and dead jobs, batch limits, the worker."""

from __future__ import annotations

import numpy as np

from memlane.pipeline.retention import RetentionWindows, RetentionWorker, sweep
from memlane.services.inputs import RememberInput
from memlane.storage import embeddings as emb_sql
from memlane.storage import jobs as J
from memlane.storage.fts import Filters, search
from memlane.storage.maintenance import fts_row_count

NOW = "2026-06-01T00:00:00.000Z"


def ago(days: float) -> str:
    return J.add_ms(NOW, -days * 86_400_000)


def remember(c, text: str) -> str:
    return c.memories.remember(RememberInput(content=text)).id


def tombstone(c, mid: str, days_ago: float) -> None:
    c.memories.delete(mid)
    c.db.write(lambda conn: conn.execute("UPDATE memories SET deleted_at = ? WHERE id = ?", (ago(days_ago), mid)))


def exists(c, table: str, where: str, *args) -> bool:
    return c.db.read(lambda conn: conn.execute(f"SELECT 1 FROM {table} WHERE {where}", args).fetchone()) is not None


def hash_of(c, mid: str) -> str:
    return c.memories.get(mid).content_hash


def add_entity(conn, eid: str, mentions: int) -> None:
    conn.execute(
        "INSERT INTO entities (id, name, canonical_name, mentions, created_at, updated_at) VALUES (?,?,?,?,?,?)",
        (eid, eid, eid.lower(), mentions, NOW, NOW),
    )


def mention(conn, mid: str, eid: str) -> None:
    conn.execute(
        "INSERT INTO memory_entity_mentions (memory_id, entity_id, created_at) VALUES (?,?,?)", (mid, eid, NOW)
    )


def test_expired_tombstones_are_purged_in_order_with_their_links(store):
    c = store
    old = remember(c, "zebrafish colony notes from the old lab")
    fresh = remember(c, "the fresh tombstone stays for now")
    live = remember(c, "a live memory about kiwis")
    tombstone(c, old, 31)
    tombstone(c, fresh, 29)
    vec = np.ones(4, dtype=np.float32) / 2
    c.db.write(lambda conn: emb_sql.upsert(conn, [(hash_of(c, old), vec), (hash_of(c, live), vec)], "m", NOW))

    def graph(conn):
        add_entity(conn, "E-Only", 1)
        add_entity(conn, "E-Shared", 2)
        add_entity(conn, "E-Other", 1)
        mention(conn, old, "E-Only")
        mention(conn, old, "E-Shared")
        mention(conn, live, "E-Shared")
        for rid, s, t in (("r1", "E-Only", "E-Other"), ("r2", "E-Shared", "E-Other")):
            conn.execute(
                "INSERT INTO relations (id, source_entity_id, target_entity_id, relation_type, created_at, "
                "updated_at) VALUES (?,?,?,'uses',?,?)",
                (rid, s, t, NOW, NOW),
            )

    c.db.write(graph)
    fts_before = c.db.read(fts_row_count)

    out = sweep(c.db, now=NOW)

    assert out["graph"]["mentions"] >= 2 and out["graph"]["entities"] >= 1 and out["graph"]["relations"] >= 1
    assert out["tombstones"] == 1 and out["embeddings"] == 1
    assert not exists(c, "memories", "id = ?", old)
    assert exists(c, "memories", "id = ?", fresh) and exists(c, "memories", "id = ?", live)
    assert not exists(c, "memory_entity_mentions", "memory_id = ?", old)
    assert not exists(c, "entities", "id = 'E-Only'") and not exists(c, "relations", "id = 'r1'")
    assert (
        c.db.read(lambda conn: conn.execute("SELECT mentions FROM entities WHERE id = 'E-Shared'").fetchone()[0]) == 1
    )
    assert exists(c, "relations", "id = 'r2'") and exists(c, "entities", "id = 'E-Other'")
    assert exists(c, "embeddings", "content_hash = ?", hash_of(c, live))  # the live memory keeps its vector
    assert not exists(c, "memory_history", "memory_id = ?", old)  # cascade
    assert c.db.read(fts_row_count) == fts_before - 1  # the FTS delete trigger ran
    hits = c.db.read(lambda conn: search(conn, "zebrafish", limit=5, filters=Filters(include_deleted=True)))
    assert hits == []


def test_a_vector_shared_with_a_kept_memory_survives(store):
    c = store
    a = remember(c, "shared content one")
    b = remember(c, "other content two")
    tombstone(c, a, 40)
    tombstone(c, b, 40)
    keeper, ha = remember(c, "live one with a context"), hash_of(c, a)
    c.db.write(lambda conn: conn.execute("UPDATE memories SET context_hash = ? WHERE id = ?", (ha, keeper)))
    c.db.write(
        lambda conn: emb_sql.upsert(
            conn, [(hash_of(c, a), np.ones(3, np.float32)), (hash_of(c, b), np.ones(3, np.float32))], "m", NOW
        )
    )
    hb = hash_of(c, b)
    out = sweep(c.db, now=NOW)
    assert out["tombstones"] == 2 and out["embeddings"] == 1
    assert exists(c, "embeddings", "content_hash = ?", ha) and not exists(c, "embeddings", "content_hash = ?", hb)


def test_a_tombstone_named_by_superseded_by_is_kept_and_a_recovered_one_untouched(store):
    c = store
    newer = remember(c, "the newer fact")
    older = remember(c, "the older fact")
    c.db.write(lambda conn: conn.execute("UPDATE memories SET superseded_by = ? WHERE id = ?", (newer, older)))
    tombstone(c, newer, 60)
    out = sweep(c.db, now=NOW)
    assert out["tombstones"] == 0 and exists(c, "memories", "id = ?", newer)


def test_history_and_jobs_windows(store):
    c = store
    mid = remember(c, "memory with a long history")

    def setup(conn):
        conn.execute("UPDATE memory_history SET created_at = ? WHERE memory_id = ?", (ago(181), mid))
        conn.execute(
            "INSERT INTO memory_history (memory_id, event, created_at) VALUES (?, 'updated', ?)", (mid, ago(179))
        )
        ids = {}
        for name, status, days in (
            ("done-old", "completed", 15),
            ("done-new", "completed", 13),
            ("dead-old", "dead", 31),
            ("dead-new", "dead", 29),
            ("pending-old", "pending", 99),
        ):
            jid = J.enqueue(conn, "test", at=ago(days), dedup_key=name)
            conn.execute("UPDATE memory_jobs SET status = ?, updated_at = ? WHERE id = ?", (status, ago(days), jid))
            ids[name] = jid
        return ids

    ids = c.db.write(setup)
    out = sweep(c.db, now=NOW)
    assert out["history"] >= 1 and out["completed_jobs"] == 1 and out["dead_jobs"] == 1
    events = [h.event for h in c.memories.history(mid)]
    assert events == ["updated"]
    left = {j.dedup_key for j in c.db.read(lambda conn: J.list_jobs(conn, job_type="test"))}
    assert left == {"done-new", "dead-new", "pending-old"}
    assert ids


def test_each_step_is_batch_limited_and_the_rest_waits(store):
    c = store
    ids = [remember(c, f"expired memory number {i}") for i in range(5)]
    for i in ids:
        tombstone(c, i, 100)
    assert sweep(c.db, now=NOW, limit=2)["tombstones"] == 2
    assert sweep(c.db, now=NOW, limit=2)["tombstones"] == 2
    assert sweep(c.db, now=NOW, limit=2)["tombstones"] == 1
    assert sweep(c.db, now=NOW, limit=2)["tombstones"] == 0


def test_custom_windows_and_the_worker(store):
    c = store
    mid = remember(c, "deleted three days ago")
    tombstone(c, mid, 3)
    assert sweep(c.db, now=NOW)["tombstones"] == 0
    w = RetentionWorker(c.db, windows=RetentionWindows(tombstone_days=2), now=lambda: NOW)
    assert w.run_once() is False  # sleeps the full interval either way
    t = w.telemetry()
    assert t["sweeps"] == 1 and t["purged"] >= 1 and t["last_result"]["tombstones"] == 1
    assert t["next_delay_ms"] == 6 * 3600 * 1000
    assert not exists(c, "memories", "id = ?", mid)


def test_deleted_documents_past_the_window_are_purged(store):
    c = store
    doc = c.documents.create(content="A document about to be deleted.")
    c.documents.delete(doc.id)
    c.db.write(lambda conn: conn.execute("UPDATE documents SET deleted_at = ? WHERE id = ?", (ago(31), doc.id)))
    assert sweep(c.db, now=NOW)["documents"] == 1
    assert not exists(c, "documents", "id = ?", doc.id)
