"""memlane.lru.LRUCache: capacity, recency order, and consistency under concurrent use."""

from __future__ import annotations

import threading

import pytest

from memlane.lru import LRUCache
from memlane.predictor.coverage import QueryCoverage


def test_the_least_recently_used_entry_goes_first():
    c: LRUCache[str, int] = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1  # "a" is now the most recent
    c.put("c", 3)  # drops "b"
    assert "b" not in c and c.get("a") == 1 and c.get("c") == 3 and len(c) == 2
    c.put("a", 10)  # a re-put refreshes and replaces
    c.put("d", 4)  # drops "c"
    assert c.get("a") == 10 and c.get("c") is None and c.get("d") == 4


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="maxsize"):
        LRUCache(0)


def test_concurrent_puts_never_exceed_capacity():
    c: LRUCache[int, int] = LRUCache(50)

    def worker(base: int) -> None:
        for i in range(2000):
            c.put(base + i % 300, i)
            c.get(base + (i * 7) % 300)

    threads = [threading.Thread(target=worker, args=(t * 1000,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(c) == 50


def test_query_coverage_keeps_at_most_its_capacity_of_term_sets():
    cov = QueryCoverage(max_cached=2)
    first = cov.terms(["running dogs", "the cat", "running dogs"])
    assert first[0] == first[2] == frozenset({"run", "dog"})
    cov.terms(["a third text"])
    assert len(cov._terms) == 2 and "the cat" in cov._terms and "running dogs" not in cov._terms
