"""The BM25 leg of hybrid recall, filtered by the in-memory index (ARCHITECTURE "The three
paths", 2), shared by recall and the pipeline's decision candidates.

FTS5 alone (``storage.fts.search_raw``, no join) fetches ``3 * n`` matches; the in-memory
index (``MemoryIndex.allowed``) applies the filters without a B-tree lookup per match. When
the filters leave fewer than ``n`` of a full page (restrictive filters), the filtered SQL join
(``storage.fts.search``) runs instead, so a restrictive filter never loses matches.
"""

from __future__ import annotations

from memlane.recall.memory_index import MemoryIndex
from memlane.storage import fts
from memlane.storage.db import Database

#: Raw FTS matches fetched per wanted candidate before index filtering.
FETCH_FACTOR = 3


def bm25_leg(db: Database, index: MemoryIndex, expr: str, n: int, filters: fts.Filters,
             context_weight: float) -> list[tuple[int, float]]:
    """Up to ``n`` ``(seq, score)`` pairs passing ``filters``, best first, scores in [0, 1]
    (each bm25 divided by the best kept one, ``fts.normalise``).

    Args:
        expr: an FTS5 expression from ``fts.match_expression``.
        n: candidates wanted.
        context_weight: BM25 column weight of the context column (content is 1.0).
    Raises:
        StorageError: SQLite failed.
    """
    fetch = n * FETCH_FACTOR
    raw = db.read(lambda c: fts.search_raw(c, expr, limit=fetch, context_weight=context_weight))
    keep = index.allowed([r[0] for r in raw], filters)
    rows = [r for r, k in zip(raw, keep) if k][:n]
    if len(rows) < n and len(raw) == fetch:
        return db.read(lambda c: fts.search(c, expr, limit=n, filters=filters, context_weight=context_weight,
                                            raw_expr=True))
    return fts.normalise(rows)
