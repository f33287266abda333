"""The in-memory FTS5 statistics (memlane.recall.fts_cache): the BM25 and hint legs from the
snapshot equal the SQL ones on a real SQLite store, and a stale snapshot is never used."""

from __future__ import annotations

import random

import numpy as np
import pytest

from memlane.recall import fts_cache
from memlane.recall.bm25 import bm25_leg, cached_bm25_leg
from memlane.recall.fts_cache import FtsCache, parse_averages, read_varint
from memlane.recall.hints import cached_search_hints, search_hints
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.storage import hints as hints_sql
from memlane.storage.fts import Filters, match_expression
from memlane.storage.fts_stats import CONTENT, tokenizer_option

WORDS = [
    "deploy",
    "staging",
    "production",
    "running",
    "runner",
    "runs",
    "café",
    "naïve",
    "Über",
    "node.js",
    "c++",
    "postgres",
    "migration",
    "schema",
    "rollback",
    "tabs",
    "spaces",
    "review",
    "merge",
    "branch",
    "release",
    "caroline",
    "melanie",
    "painting",
    "camping",
    "adoption",
    "LGBTQ",
    "support",
    "group",
    "2023-05-07",
    "May",
    "June",
    "test",
    "tests",
    "tested",
]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _store(open_store, n: int = 300, seed: int = 1):
    rng = random.Random(seed)
    c = open_store()
    items = [
        RememberInput(
            content=f"{i} " + _text(rng, rng.randint(1, 25)),
            project=rng.choice([None, "a", "b"]),
            type=rng.choice(["fact", "decision"]),
            context=_text(rng, rng.randint(0, 12)) if i % 3 else None,
        )
        for i in range(n)
    ]
    results = c.memories.remember_many(items)
    ids = [r.id for r in results]
    c.db.write(
        lambda conn: [
            hints_sql.replace(conn, i, [_text(rng, rng.randint(1, 8)) for _ in range(3)], at="2025-01-01T00:00:00.000Z")
            for i in ids[: n // 2]
        ]
    )
    for i in ids[:10]:
        c.memories.delete(i)
    return c, rng


def _same_ranking(fast: list[tuple[int, float]], sql: list[tuple[int, float]]) -> None:
    """Same scores in the same order; the same seqs except among ties at the cut."""
    assert [v for _, v in fast] == pytest.approx([v for _, v in sql], rel=0, abs=1e-12)
    if not sql:
        return
    last = sql[-1][1]
    assert {s for s, v in fast if v != last} == {s for s, v in sql if v != last}
    assert all(dict(sql)[s] == v for s, v in fast if s in dict(sql))


QUERIES = [
    "deploy to production",
    "running runners",
    "cafe naive uber",
    "node.js and c++",
    "tests",
    "what did caroline paint in may",
    "support group",
    "no such word zzz",
    "release release branch",
    "2023 05 07",
    "schema migration rollback review",
]


@pytest.mark.parametrize("cw", [0.5, 0.3, 1.0, 0.0])
def test_bm25_leg_from_snapshot_equals_sql(open_store, cw: float) -> None:
    c, _ = _store(open_store)
    cache = FtsCache(c.db)
    assert cache.rebuild()
    filters = [
        Filters(),
        Filters(project="a"),
        Filters(project="a", include_global=True),
        Filters(types=("decision",)),
        Filters(include_deleted=True),
    ]
    for q in QUERIES:
        expr = match_expression(q)
        for f in filters:
            for n in (5, 50):
                sql = bm25_leg(c.db, c.recall.index, expr, n, f, cw)
                fast = cached_bm25_leg(cache, c.recall.index, expr, n, f, cw)
                assert fast is not None
                assert [s for _, s in fast] == pytest.approx([s for _, s in sql], rel=0, abs=1e-12), (q, f, n)
                _same_ranking(fast, sql)
    cache.close()


def test_hint_leg_from_snapshot_equals_sql(open_store) -> None:
    c, _ = _store(open_store)
    cache = FtsCache(c.db)
    assert cache.rebuild()
    for q in QUERIES:
        expr = match_expression(q)
        for f in (Filters(), Filters(project="b"), Filters(include_deleted=True)):
            for n in (3, 50):
                sql = search_hints(c.db, c.recall.index, expr, n, f)
                fast = cached_search_hints(cache, c.recall.index, expr, n, f)
                assert fast is not None
                _same_ranking(sorted(fast.items(), key=lambda kv: -kv[1]), sorted(sql.items(), key=lambda kv: -kv[1]))
    cache.close()


def test_raw_scores_are_fts5_bm25(open_store) -> None:
    c, _ = _store(open_store)
    cache = FtsCache(c.db)
    assert cache.rebuild()
    snap = cache.current()
    table = snap[CONTENT.name]
    for q in QUERIES:
        expr = match_expression(q)
        sql = dict(
            c.db.read(
                lambda conn: conn.execute(
                    "SELECT rowid, bm25(memories_fts, 1.0, 0.5) FROM memories_fts WHERE memories_fts MATCH ?", (expr,)
                ).fetchall()
            )
        )
        hit, bm = table.scores(cache.terms(expr, CONTENT.name), (1.0, 0.5))
        mine = dict(zip(table.rowids[hit].tolist(), bm.tolist()))
        assert mine == sql  # bit for bit: the same operations in the same order
    cache.close()


def test_stale_snapshot_is_not_used_until_rebuilt(open_store) -> None:
    c, _ = _store(open_store, n=50)
    cache = FtsCache(c.db)
    assert cache.rebuild()
    assert cache.current() is not None
    r = c.memories.remember(RememberInput(content="zebra crossing near the harbour"))
    expr = match_expression("zebra")
    assert cached_bm25_leg(cache, c.recall.index, expr, 10, Filters(), 0.5) is None  # stale: SQL answers
    cache.wait()  # the stale check scheduled a rebuild
    fast = cached_bm25_leg(cache, c.recall.index, expr, 10, Filters(), 0.5)
    m = c.memories.get(r.id)
    assert fast is not None and [s for s, _ in fast] == [m.seq]
    # a content update changes the postings too
    c.memories.update(r.id, {"content": "giraffe crossing"})
    assert cache.current() is None
    cache.wait()
    assert cache.rebuild()  # (a scheduled one waits for the spacing)
    assert cached_bm25_leg(cache, c.recall.index, expr, 10, Filters(), 0.5) == []
    assert [s for s, _ in cached_bm25_leg(cache, c.recall.index, match_expression("giraffe"), 10, Filters(), 0.5)] == [
        m.seq
    ]
    # hints written later
    c.db.write(lambda conn: hints_sql.replace(conn, r.id, ["where do animals cross"], at="2025-01-01T00:00:00.000Z"))
    assert cache.current() is None
    cache.wait()
    assert cache.rebuild()
    assert cached_search_hints(cache, c.recall.index, match_expression("animals"), 5, Filters()) == {m.seq: 1.0}
    cache.close()


def test_rebuilds_are_spaced(open_store) -> None:
    c, _ = _store(open_store, n=20)
    now = [100.0]
    cache = FtsCache(c.db, clock=lambda: now[0])
    assert cache.current() is None  # no snapshot yet: a rebuild starts
    cache.wait()
    assert cache.counters["rebuilds"] == 1 and cache.current() is not None
    c.memories.remember(RememberInput(content="one more"))
    assert cache.current() is None  # stale, but the last rebuild ended just now (clock frozen)
    cache.wait()
    assert cache.counters["rebuilds"] == 1
    now[0] += 60
    assert cache.current() is None
    cache.wait()
    assert cache.counters["rebuilds"] == 2 and cache.current() is not None
    cache.close()


def test_query_words_fts5_splits_fall_back_to_sql(open_store) -> None:
    c, _ = _store(open_store, n=20)
    cache = FtsCache(c.db)
    assert cache.rebuild()
    assert cache.terms('"running" OR "tests"', CONTENT.name) == ["run", "test"]
    assert cache.terms('"x" AND "y"', CONTENT.name) is None  # not the match_expression shape
    # a word the FTS5 tokenizer splits in two (a phrase query): SQL answers it
    assert cache.terms('"a\u00b7b"', CONTENT.name) in (None, ["a\u00b7b"])
    cache.close()


def test_rejects_a_snapshot_that_does_not_add_up(open_store, monkeypatch) -> None:
    c, _ = _store(open_store, n=20)
    cache = FtsCache(c.db)
    monkeypatch.setattr(fts_cache, "parse_averages", lambda block, cols: (1, 1))
    assert cache.rebuild() is False
    assert cache.counters["rejected"] == 1 and cache._snap is None
    cache.close()


def test_recall_uses_the_snapshot_in_large_stores(open_store, monkeypatch) -> None:
    monkeypatch.setattr("memlane.services.recall_service.FTS_CACHE_MIN_MEMORIES", 10)
    c, _ = _store(open_store, n=60)
    q = RecallQuery("deploy production caroline", limit=10, touch=False)
    before = [(h.memory.id, h.score) for h in c.recall.recall(q).hits]  # stale: SQL, rebuild starts
    c.recall.fts.wait()
    hits = c.recall.recall(q).hits
    assert c.recall.fts.counters["hit"] >= 1
    assert [(h.memory.id, h.score) for h in hits] == before


def test_tokenizer_option_and_varints() -> None:
    assert (
        tokenizer_option("CREATE VIRTUAL TABLE t USING fts5(a, tokenize='porter unicode61 remove_diacritics 2')")
        == "porter unicode61 remove_diacritics 2"
    )
    assert tokenizer_option("CREATE VIRTUAL TABLE t USING fts5(a)") == "unicode61"
    assert tokenizer_option("CREATE VIRTUAL TABLE t USING fts5(a, detail=column)") is None
    assert read_varint(bytes([0x05]), 0) == (5, 1)
    assert read_varint(bytes([0xCE, 0x10]), 0) == (10000, 2)
    assert parse_averages(bytes([0xCE, 0x10, 0x90, 0xFB, 0x53, 0x00]), 2) == (10000, (0x10 << 14 | 0x7B << 7 | 0x53))
    assert np.isfinite(fts_cache.K1 + fts_cache.B)


def test_serial_batch_runs_in_order_on_one_worker() -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from memlane.services.recall_service import SerialBatch

    seen: list[tuple[int, str]] = []

    def job(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        if i == 1:
            raise ValueError("boom")
        return i * 10

    batch = SerialBatch()
    futs = [batch.submit(job, i) for i in range(3)]
    with ThreadPoolExecutor(4, thread_name_prefix="t") as pool:
        batch.start(pool)
        assert futs[0].result() == 0 and futs[2].result() == 20
        with pytest.raises(ValueError):
            futs[1].result()
    assert [i for i, _ in seen] == [0, 1, 2] and len({n for _, n in seen}) == 1
    with pytest.raises(RuntimeError):
        batch.submit(job, 3)
    SerialBatch().start(None)  # nothing queued: no worker needed
