"""The memory store on real SQLite files: schema, PRAGMAs, remember/dedup, update, delete,
recover, history, list, stats, FTS sync and the embedding-failure path."""

from __future__ import annotations

import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from conftest import free_port, row_snapshot
from memlane.errors import Conflict, NotFound, PayloadTooLarge, ValidationError
from memlane.normalize import content_hash
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.storage import fts
from memlane.storage.db import Database
from memlane.storage.migrations import MIGRATIONS, migrate


def bm25_ids(c, query: str, **filters) -> list[str]:
    """Ids the BM25 leg alone returns (the storage layer, no recall merge)."""
    f = fts.Filters(**filters)
    rows = c.db.read(lambda conn: fts.search(conn, query, limit=100, filters=f))
    seqs = [s for s, _ in rows]
    return c.db.read(
        lambda conn: [conn.execute("SELECT id FROM memories WHERE seq = ?", (s,)).fetchone()[0] for s in seqs]
    )


def history_events(c, memory_id: str) -> list[str]:
    return [h.event for h in c.memories.history(memory_id)]


# -- schema, migrations, PRAGMAs --------------------------------------------------------------


def test_migrations_recorded_and_idempotent(open_store, tmp_path):
    home = tmp_path / "h"
    c = open_store(home=home)
    names = c.db.read(lambda conn: [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")])
    assert names == [name for name, _ in MIGRATIONS]
    assert migrate(c.db) == []  # nothing pending on the same connection
    tables = c.db.read(lambda conn: {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")})
    assert {"memories", "embeddings", "memories_fts", "memory_history", "schema_migrations"} <= tables
    mid = c.memories.remember(RememberInput("survives a reopen")).id
    c.close()

    c2 = open_store(home=home)  # reopen: migrations not re-applied, data intact
    names2 = c2.db.read(lambda conn: [r[0] for r in conn.execute("SELECT name FROM schema_migrations")])
    assert names2 == names
    assert migrate(c2.db) == []
    assert c2.memories.get(mid).content == "survives a reopen"


def test_db_file_lives_in_home(store):
    assert store.db.path == store.settings.home / "memories.db"
    assert store.db.path.is_file()


def test_pragmas(open_store):
    c = open_store(busy_timeout_ms=4321)

    def pragmas(conn):
        return {
            p: conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
        }

    w = c.db.write(pragmas)
    r = c.db.read(pragmas)
    assert w["journal_mode"] == "wal" and r["journal_mode"] == "wal"
    assert w["foreign_keys"] == 1 and r["foreign_keys"] == 1
    assert w["busy_timeout"] == 4321 and r["busy_timeout"] == 4321
    assert w["synchronous"] == 2  # FULL
    # the file itself is in WAL mode for any other opener
    conn = sqlite3.connect(c.db.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_synchronous_normal_setting(open_store):
    c = open_store(sqlite_synchronous="NORMAL")
    assert c.db.write(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0]) == 1


def test_readers_are_query_only(store):
    from memlane.errors import StorageError

    with pytest.raises(StorageError):
        store.db.read(lambda conn: conn.execute("DELETE FROM memories"))


# -- remember and dedup -------------------------------------------------------------------------


def test_remember_stores_all_fields(store):
    r = store.memories.remember(
        RememberInput(
            "  The user   prefers tabs.  ",
            type="preference",
            importance=0.9,
            confidence=0.8,
            project="p1",
            tags=("style", "editor"),
            metadata={"k": [1, 2]},
            who="agent",
            why="observed",
            source_type="session",
            source_id="s-1",
            created_at="2024-05-01T12:00:00+02:00",
            pinned=True,
            context="we talked about editors",
        )
    )
    assert r.status == "created" and not r.embedded
    assert r.content_hash == content_hash("the user prefers tabs")
    m = store.memories.get(r.id)
    assert m.content == "The user prefers tabs."
    assert m.normalized_content == "the user prefers tabs"
    assert (m.type, m.importance, m.confidence, m.project) == ("preference", 0.9, 0.8, "p1")
    assert m.tags == ("style", "editor") and m.metadata == {"k": [1, 2]}
    assert (m.who, m.why, m.source_type, m.source_id) == ("agent", "observed", "session", "s-1")
    assert m.created_at == "2024-05-01T10:00:00.000Z"
    assert m.pinned and not m.is_deleted and m.embedding_model is None
    assert m.context == "we talked about editors"
    h = store.memories.history(r.id)
    assert [e.event for e in h] == ["created"]
    assert (h[0].who, h[0].why, h[0].new_content) == ("agent", "observed", "The user prefers tabs.")


def test_exact_duplicate_returns_existing_id(store):
    first = store.memories.remember(RememberInput("Deploys go through staging first."))
    dup = store.memories.remember(
        RememberInput(
            "  deploys GO through   staging first!!", who="bot", why="again", source_type="import", source_id="x"
        )
    )
    assert dup.status == "deduplicated"
    assert dup.id == first.id and dup.content_hash == first.content_hash
    assert store.memories.list()[1] == 1
    h = store.memories.history(first.id)
    assert [e.event for e in h] == ["created", "deduplicated"]
    assert (h[1].who, h[1].why) == ("bot", "again")
    assert h[1].new_content == "deploys GO through staging first!!"
    assert h[1].changes == {"source_type": "import", "source_id": "x"}
    # the stored content is the first one's
    assert store.memories.get(first.id).content == "Deploys go through staging first."


def test_dedup_within_one_batch(store):
    items = [
        RememberInput(t) for t in ["alpha one", "beta two", "Alpha one.", "alpha   ONE", "gamma three", "beta two"]
    ]
    res = store.memories.remember_many(items)
    assert [r.status for r in res] == ["created", "created", "deduplicated", "deduplicated", "created", "deduplicated"]
    assert res[0].id == res[2].id == res[3].id
    assert res[1].id == res[5].id
    assert len({r.id for r in res}) == 3
    assert store.memories.list()[1] == 3
    assert history_events(store, res[0].id) == ["created", "deduplicated", "deduplicated"]


def test_batch_over_write_chunk(store):
    from memlane.services.memory_service import WRITE_CHUNK

    n = WRITE_CHUNK + 20
    items = [RememberInput(f"memory number {i % (n - 10)}") for i in range(n)]  # last 10 repeat
    seen = []
    res = store.memories.remember_many(items, progress=seen.append)
    assert sum(seen) == n
    assert sum(r.status == "created" for r in res) == n - 10
    assert [res[i].id for i in range(10)] == [res[n - 10 + i].id for i in range(10)]


def test_batch_validation_writes_nothing(store):
    with pytest.raises(ValidationError):
        store.memories.remember_many([RememberInput("fine"), RememberInput("   ")])
    assert store.memories.list()[1] == 0


@pytest.mark.parametrize(
    "bad",
    [
        RememberInput(""),
        RememberInput(" \n\t "),
        RememberInput("a\x00b"),
        RememberInput("x\ud800y"),
        RememberInput("ok", importance=1.5),
        RememberInput("ok", confidence=-0.1),
        RememberInput("ok", importance=float("nan")),
        RememberInput("ok", type=""),
        RememberInput("ok", tags=("",)),
        RememberInput("ok", created_at="yesterday"),
        RememberInput("ok", created_at="9999-12-31T23:59:59-01:00"),  # overflows when moved to UTC
        RememberInput("ok", who="\udc00"),
        RememberInput("ok", project="p" * 513),
    ],
)
def test_remember_rejects_bad_input(store, bad):
    with pytest.raises((ValidationError, PayloadTooLarge)):
        store.memories.remember(bad)
    assert store.memories.list()[1] == 0


def test_content_size_cap(open_store):
    c = open_store(max_content_chars=50)
    c.memories.remember(RememberInput("x" * 50))
    with pytest.raises(PayloadTooLarge) as exc:
        c.memories.remember(RememberInput("y" * 51))
    assert exc.value.status == 413 and exc.value.details["limit"] == 50


def test_old_created_at_is_stored_canonically(vstore):
    """Years < 1000 must keep four digits, or the timestamp can't be parsed back."""
    r = vstore.memories.remember(RememberInput("an ancient fact", created_at="0999-03-04T05:06:07"))
    assert vstore.memories.get(r.id).created_at == "0999-03-04T05:06:07.000Z"
    hits = vstore.recall.recall(RecallQuery("ancient fact", since="0900-01-01")).hits
    assert [h.memory.id for h in hits] == [r.id]


# -- get / update -------------------------------------------------------------------------------


def test_get_unknown_id(store):
    with pytest.raises(NotFound) as exc:
        store.memories.get("no-such-id")
    assert exc.value.status == 404
    with pytest.raises(NotFound):
        store.memories.history("no-such-id")
    with pytest.raises(NotFound):
        store.memories.update("no-such-id", {"type": "x"})
    with pytest.raises(NotFound):
        store.memories.delete("no-such-id")
    with pytest.raises(NotFound):
        store.memories.recover("no-such-id")


def test_update_content_rehashes_and_records_history(store):
    r = store.memories.remember(RememberInput("The build uses make."))
    before = store.memories.get(r.id)
    m = store.memories.update(
        r.id, {"content": "  The build uses   ninja. ", "importance": 0.7, "tags": ["b"]}, who="alice", why="migrated"
    )
    assert m.content == "The build uses ninja."
    assert m.content_hash == content_hash("the build uses ninja") != before.content_hash
    assert m.normalized_content == "the build uses ninja"
    assert m.importance == 0.7 and m.tags == ("b",)
    assert m.updated_at >= before.updated_at and m.created_at == before.created_at
    h = store.memories.history(r.id)[-1]
    assert (h.event, h.who, h.why) == ("updated", "alice", "migrated")
    assert (h.old_content, h.new_content) == ("The build uses make.", "The build uses ninja.")
    assert h.changes["content"] == ["The build uses make.", "The build uses ninja."]
    assert h.changes["importance"] == [0.5, 0.7]
    assert h.changes["tags"] == [[], ["b"]]
    # the old content is free again: remembering it creates a new memory
    again = store.memories.remember(RememberInput("The build uses make."))
    assert again.status == "created" and again.id != r.id


def test_update_conflict_on_duplicate_content(store):
    a = store.memories.remember(RememberInput("first memory"))
    b = store.memories.remember(RememberInput("second memory"))
    snap = row_snapshot(store)
    with pytest.raises(Conflict) as exc:
        store.memories.update(b.id, {"content": "FIRST memory."})
    assert exc.value.status == 409 and exc.value.details["duplicate_of"] == a.id
    assert row_snapshot(store) == snap  # rolled back, no history row
    # same content (normalised) as itself is not a conflict
    m = store.memories.update(a.id, {"content": "First Memory"})
    assert m.content == "First Memory" and m.content_hash == a.content_hash


@pytest.mark.parametrize(
    "patch",
    [
        {"id": "x"},
        {"content_hash": "0" * 64},
        {"content": ""},
        {"content": "   "},
        {"importance": 2},
        {"importance": True},
        {"type": None},
        {"type": ""},
        {"tags": "notalist"},
        {"tags": [""]},
        {"metadata": []},
        {"content": "a\x00"},
        {"context": "\ud800"},
    ],
)
def test_update_rejects_bad_patch(store, patch):
    r = store.memories.remember(RememberInput("patch target"))
    snap = row_snapshot(store)
    with pytest.raises(ValidationError):
        store.memories.update(r.id, patch)
    assert row_snapshot(store) == snap


def test_update_rejects_bad_actor(store):
    r = store.memories.remember(RememberInput("actor target"))
    snap = row_snapshot(store)
    with pytest.raises(ValidationError):
        store.memories.update(r.id, {"importance": 0.1}, who="\ud800")
    with pytest.raises(ValidationError):
        store.memories.delete(r.id, why="a\x00b")
    assert row_snapshot(store) == snap


def test_update_deleted_memory_conflicts(store):
    r = store.memories.remember(RememberInput("soon gone"))
    store.memories.delete(r.id)
    with pytest.raises(Conflict):
        store.memories.update(r.id, {"importance": 0.1})


# -- delete / recover --------------------------------------------------------------------------


def test_soft_delete_and_recover_with_history(store):
    r = store.memories.remember(RememberInput("The staging db is on port 5433.", project="infra"))
    d = store.memories.delete(r.id, who="bob", why="stale")
    assert d.is_deleted and d.deleted_at is not None
    assert store.memories.get(r.id).is_deleted  # row is still there
    assert store.memories.list()[1] == 0
    assert store.memories.list(include_deleted=True)[1] == 1
    with pytest.raises(Conflict):
        store.memories.delete(r.id)
    rec = store.memories.recover(r.id, who="carol", why="still valid")
    assert not rec.is_deleted and rec.deleted_at is None
    with pytest.raises(Conflict):
        store.memories.recover(r.id)
    h = store.memories.history(r.id)
    assert [e.event for e in h] == ["created", "deleted", "recovered"]
    assert (h[1].who, h[1].why, h[1].old_content) == ("bob", "stale", "The staging db is on port 5433.")
    assert (h[2].who, h[2].why) == ("carol", "still valid")


def test_deleted_content_can_be_remembered_again_then_recover_conflicts(store):
    old = store.memories.remember(RememberInput("Use Python 3.12"))
    store.memories.delete(old.id)
    new = store.memories.remember(RememberInput("use python 3.12!"))
    assert new.status == "created" and new.id != old.id
    with pytest.raises(Conflict) as exc:
        store.memories.recover(old.id)
    assert exc.value.details["duplicate_of"] == new.id
    assert store.memories.get(old.id).is_deleted
    # once the new one is deleted, the old one can come back
    store.memories.delete(new.id)
    assert not store.memories.recover(old.id).is_deleted
    # and remembering the content now dedups onto the recovered one
    assert store.memories.remember(RememberInput("USE PYTHON 3.12")).id == old.id


def test_deleted_excluded_from_recall_unless_asked(store):
    keep = store.memories.remember(RememberInput("kubernetes cluster upgrade notes"))
    gone = store.memories.remember(RememberInput("kubernetes ingress controller notes"))
    store.memories.delete(gone.id)
    ids = [h.memory.id for h in store.recall.recall(RecallQuery("kubernetes notes")).hits]
    assert ids == [keep.id]
    ids = {h.memory.id for h in store.recall.recall(RecallQuery("kubernetes notes", include_deleted=True)).hits}
    assert ids == {keep.id, gone.id}
    store.memories.recover(gone.id)
    ids = {h.memory.id for h in store.recall.recall(RecallQuery("kubernetes notes")).hits}
    assert ids == {keep.id, gone.id}


# -- list and stats ----------------------------------------------------------------------------


def test_list_pagination_order_filters_and_stats(store):
    ids = []
    for i in range(7):
        ids.append(
            store.memories.remember(
                RememberInput(
                    f"note {i}",
                    type="fact" if i % 2 else "decision",
                    project="a" if i < 4 else None,
                    created_at=f"2024-01-0{i + 1}T00:00:00Z",
                    pinned=i == 0,
                )
            ).id
        )
    store.memories.delete(ids[6])
    page1, total = store.memories.list(limit=3)
    page2, _ = store.memories.list(limit=3, offset=3)
    page3, _ = store.memories.list(limit=3, offset=6)
    assert total == 6
    assert [m.id for m in page1 + page2] == ids[5::-1]
    assert page3 == []
    oldest, _ = store.memories.list(limit=2, order="oldest")
    assert [m.id for m in oldest] == ids[:2]
    assert store.memories.list(project="a")[1] == 4
    assert store.memories.list(type_="decision")[1] == 3  # 0, 2, 4 (6 is deleted)
    assert store.memories.list(include_deleted=True)[1] == 7
    s = store.memories.stats()
    assert (s["total"], s["live"], s["deleted"], s["pinned"]) == (7, 6, 1, 1)
    assert s["by_type"] == {"fact": 3, "decision": 3}
    assert s["by_project"] == {"a": 4, "": 2}
    assert s["embedding_model"] is None and s["indexed"] == 0
    assert s["vectors_by_model"] == {}


def test_stats_empty_store(store):
    s = store.memories.stats()
    assert (s["total"], s["live"], s["deleted"], s["superseded"], s["pinned"]) == (0, 0, 0, 0, 0)


# -- FTS sync ------------------------------------------------------------------------------------


def test_fts_follows_update_via_triggers(store):
    r = store.memories.remember(RememberInput("The cache lives in redis", context="ops chat about memcached"))
    assert bm25_ids(store, "redis") == [r.id]
    assert bm25_ids(store, "memcached") == [r.id]
    store.memories.update(r.id, {"content": "The cache lives in valkey"})
    assert bm25_ids(store, "redis") == []
    assert bm25_ids(store, "valkey") == [r.id]
    assert bm25_ids(store, "memcached") == [r.id]  # context untouched
    store.memories.update(r.id, {"context": "nothing relevant"})
    assert bm25_ids(store, "memcached") == []
    assert bm25_ids(store, "relevant") == [r.id]
    store.memories.update(r.id, {"context": None})
    assert bm25_ids(store, "relevant") == []
    assert store.db.write(fts.integrity_ok)
    # a non-text update leaves FTS alone and consistent
    store.memories.update(r.id, {"importance": 0.9, "project": "x"})
    assert bm25_ids(store, "valkey") == [r.id]
    assert store.db.write(fts.integrity_ok)


def test_fts_integrity_after_many_operations(store):
    ids = [r.id for r in store.memories.remember_many([RememberInput(f"item {i} word{i}") for i in range(30)])]
    for i in ids[:10]:
        store.memories.update(i, {"content": f"changed {i}"})
    for i in ids[10:20]:
        store.memories.delete(i)
    for i in ids[10:15]:
        store.memories.recover(i)
    assert store.db.write(fts.integrity_ok)
    assert bm25_ids(store, "word25") == [ids[25]]
    assert bm25_ids(store, "word5") == []


def test_fts_rows_removed_on_hard_delete(store):
    r = store.memories.remember(RememberInput("ephemeral zebra"))
    store.db.write(lambda conn: conn.execute("DELETE FROM memories WHERE id = ?", (r.id,)))
    assert bm25_ids(store, "zebra") == []
    assert store.db.write(fts.integrity_ok)
    # history rows went with it (ON DELETE CASCADE with foreign_keys on)
    assert store.db.read(lambda conn: conn.execute("SELECT count(*) FROM memory_history").fetchone()[0]) == 0


# -- embedding failure ------------------------------------------------------------------------------


def test_embedding_failure_stores_memory_without_vector(open_store, tmp_path):
    emb = {"provider": "ollama", "base_url": f"http://127.0.0.1:{free_port()}", "timeout_s": 0.5}
    c = open_store(embedding=emb)
    r = c.memories.remember(RememberInput("The release train leaves on Thursdays.", context="release chat"))
    assert r.status == "created" and r.embedded is False
    m = c.memories.get(r.id)
    assert m.embedding_model is None
    assert c.db.read(lambda conn: conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]) == 0
    res = c.recall.recall(RecallQuery("release train"))
    assert res.legs == ("bm25",)
    assert [h.memory.id for h in res.hits] == [r.id]
    assert res.hits[0].vector_score is None
    # updates survive the failure too
    m2 = c.memories.update(r.id, {"content": "The release train leaves on Fridays."})
    assert m2.embedding_model is None and m2.content.endswith("Fridays.")
    assert c.memories.stats()["embedding_model"] == "ollama:all-MiniLM-L6-v2"


def test_vectors_stored_and_reloaded(open_store, tmp_path, shared_embedder):
    home = tmp_path / "vh"
    c = open_store(home=home, embedding="local")
    r = c.memories.remember(RememberInput("Vectors persist across restarts.", context="some context"))
    assert r.embedded
    assert c.memories.get(r.id).embedding_model == shared_embedder.model_id
    s = c.memories.stats()
    assert s["indexed"] == 1 and s["vectors_by_model"] == {shared_embedder.model_id: 2}  # content + context
    c.close()
    c2 = open_store(home=home, embedding="local")
    assert c2.memories.stats()["indexed"] == 1
    res = c2.recall.recall(RecallQuery("do the embeddings survive a reboot"))
    assert "vector" in res.legs
    assert res.hits and res.hits[0].memory.id == r.id and res.hits[0].vector_score > 0


def test_dedup_reuses_existing_vector(vstore):
    a = vstore.memories.remember(RememberInput("shared vector text"))
    vstore.memories.delete(a.id)
    b = vstore.memories.remember(RememberInput("Shared vector text."))
    assert b.status == "created" and b.embedded
    n = vstore.db.read(lambda conn: conn.execute("SELECT count(*) FROM embeddings").fetchone()[0])
    assert n == 1  # keyed by content hash


@pytest.mark.parametrize(
    "kw", [{"limit": 0}, {"limit": -1}, {"offset": -1}, {"offset": 2**64}, {"limit": 2**63}, {"limit": True}]
)
def test_list_rejects_bad_paging(store, kw):
    with pytest.raises(ValidationError):
        store.memories.list(**kw)


def test_list_huge_offset_is_empty(store):
    store.memories.remember(RememberInput("only one"))
    assert store.memories.list(offset=2**63 - 1) == ([], 1)


def test_session_gap_read_uses_the_started_at_index(tmp_path):
    """Migration 0010: the session-start's ``last_session_start`` is an index seek, not a scan."""
    from memlane.storage import predictor as pred_sql
    from memlane.storage.migrations import migrate

    db = Database(tmp_path / "m.db", read_pool_size=1)
    try:
        migrate(db)
        plan = db.read(
            lambda c: " ".join(
                str(r[3])
                for r in c.execute(
                    "EXPLAIN QUERY PLAN SELECT max(started_at) FROM sessions WHERE started_at < ? AND started = 1",
                    ("2026-01-01",),
                )
            )
        )
        assert "idx_sessions_started" in plan and "SCAN" not in plan
        db.write(
            lambda c: c.executemany(
                "INSERT INTO sessions (session_key, started_at, started) VALUES (?, ?, ?)",
                [("a", "2026-01-01T00:00:00Z", 1), ("b", "2026-01-02T00:00:00Z", 0), ("c", "2026-01-03T00:00:00Z", 1)],
            )
        )
        assert (
            db.read(lambda c: pred_sql.last_session_start(c, before="2026-01-03T00:00:00Z")) == "2026-01-01T00:00:00Z"
        )
    finally:
        db.close()


# -- batch remember: chunk k+1 embedded while chunk k is written -----------------------------------


def test_batch_chunks_embedded_while_written_store_the_single_text_vectors(vstore, shared_embedder):
    """Three write chunks through the real model: every memory created, embedded and indexed, its
    stored content and context vectors those of the text embedded alone, a duplicate of a text of
    the first chunk in the last one deduplicated, results in input order."""
    from memlane.services.memory_service import WRITE_CHUNK, context_text
    from memlane.storage import embeddings as emb_sql

    n = 2 * WRITE_CHUNK + 5
    items = [
        RememberInput(
            f"Note {i}: the deploy of service {i % 7} moved to slot {i}.", context=f"chat {i}" if i % 3 == 0 else None
        )
        for i in range(n)
    ]
    items.append(RememberInput(items[1].content))
    seen: list[int] = []
    res = vstore.memories.remember_many(items, progress=seen.append)
    assert sum(seen) == n + 1
    assert [r.status for r in res] == ["created"] * n + ["deduplicated"]
    assert res[-1].id == res[1].id and all(r.embedded for r in res)
    assert [vstore.memories.get(r.id).content for r in res[:n]] == [i.content for i in items[:n]]
    stats = vstore.memories.stats()
    assert stats["indexed"] == n
    assert stats["vectors_by_model"] == {shared_embedder.model_id: n + len(range(0, n, 3))}
    for i in (0, WRITE_CHUNK - 1, WRITE_CHUNK, 2 * WRITE_CHUNK + 3):
        m = vstore.memories.get(res[i].id)
        texts = {m.content_hash: m.content}
        if m.context:
            texts[m.context_hash] = context_text(m.content, m.context)
        stored = vstore.db.read(lambda c, t=texts: emb_sql.get_vectors(c, list(t), shared_embedder.model_id))
        for h, text in texts.items():
            np.testing.assert_allclose(stored[h], shared_embedder.embed([text])[0], atol=1e-5)
        vec, has = vstore.memories.index.vectors_of([m.seq])
        assert has[0]
        np.testing.assert_allclose(vec[0], stored[m.content_hash], atol=1e-6)


def test_batch_embedding_failure_of_a_later_chunk_keeps_the_earlier_vectors(open_store):
    """A real HTTP embedder (Ollama's protocol, a loopback server) answers the first chunk's call
    and fails the second's: the first chunk is stored with vectors, the second without, all of
    them indexed."""
    from memlane.services.memory_service import WRITE_CHUNK

    calls: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append(len(body["input"]))
            if len(calls) == 1:
                reply = json.dumps({"embeddings": [[1.0, float(k), 0.5] for k in range(len(body["input"]))]}).encode()
                self.send_response(200)
            else:
                reply = b'{"error": "model unloaded"}'
                self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        c = open_store(embedding={"provider": "ollama", "base_url": f"http://127.0.0.1:{httpd.server_address[1]}"})
        n = WRITE_CHUNK + 10
        res = c.memories.remember_many([RememberInput(f"memory {i} about the rollout") for i in range(n)])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert calls == [WRITE_CHUNK, 10]
    assert [r.embedded for r in res] == [True] * WRITE_CHUNK + [False] * 10
    assert all(r.status == "created" for r in res)
    stats = c.memories.stats()
    assert stats["vectors_by_model"] == {"ollama:all-MiniLM-L6-v2": WRITE_CHUNK}
    assert c.memories.index.size == n and stats["indexed"] == WRITE_CHUNK  # indexed: with a content vector
    assert c.memories.index.vectors_of([c.memories.get(r.id).seq for r in res])[1].tolist() == [r.embedded for r in res]
    assert c.memories.get(res[-1].id).embedding_model is None
