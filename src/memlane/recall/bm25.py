"""The BM25 leg of hybrid recall, filtered by the in-memory index (ARCHITECTURE "The three
paths", 2), shared by recall and the pipeline's decision candidates.

FTS5 alone (``storage.fts.search_raw``, no join) fetches ``3 * n`` matches; the in-memory
index (``MemoryIndex.allowed``) applies the filters without a B-tree lookup per match. When
the filters leave fewer than ``n`` of a full page (restrictive filters), the filtered SQL join
(``storage.fts.search``) runs instead, so a restrictive filter never loses matches.
"""

from __future__ import annotations

from memlane.recall.fts_cache import FtsCache
from memlane.recall.memory_index import MemoryIndex
from memlane.storage import fts
from memlane.storage.db import Database
from memlane.storage.fts_stats import CONTENT

#: Raw FTS matches fetched per wanted candidate before index filtering.
FETCH_FACTOR = 3


def bm25_leg(
    db: Database,
    index: MemoryIndex,
    expr: str,
    n: int,
    filters: fts.Filters,
    context_weight: float,
    *,
    cache: FtsCache | None = None,
) -> list[tuple[int, float]]:
    """Up to ``n`` ``(seq, score)`` pairs passing ``filters``, best first, scores in [0, 1]
    (each bm25 divided by the best kept one, ``fts.normalise``).

    Args:
        expr: an FTS5 expression from ``fts.match_expression``.
        n: candidates wanted.
        context_weight: BM25 column weight of the context column (content is 1.0).
        cache: in-memory FTS5 statistics (``memlane.recall.fts_cache``): the same scores without
            SQL while its snapshot is current; SQL otherwise.
    Raises:
        StorageError: SQLite failed.
    """
    if cache is not None:
        fast = cached_bm25_leg(cache, index, expr, n, filters, context_weight)
        if fast is not None:
            return fast
    fetch = n * FETCH_FACTOR
    raw = db.read(lambda c: fts.search_raw(c, expr, limit=fetch, context_weight=context_weight))
    keep = index.allowed([r[0] for r in raw], filters)
    rows = [r for r, k in zip(raw, keep) if k][:n]
    if len(rows) < n and len(raw) == fetch:
        return db.read(
            lambda c: fts.search(c, expr, limit=n, filters=filters, context_weight=context_weight, raw_expr=True)
        )
    return fts.normalise(rows)


def cached_bm25_leg(
    cache: FtsCache, index: MemoryIndex, expr: str, n: int, filters: fts.Filters, context_weight: float
) -> list[tuple[int, float]] | None:
    """:func:`bm25_leg` from ``cache``'s snapshot, or None when it cannot answer (no current
    snapshot, an expression it does not model). Same rows and scores as the SQL: the top
    ``3 n`` matches filtered by the index, or every match filtered when those keep fewer than
    ``n`` (ties ordered by seq)."""
    snap = cache.current()
    if snap is None:
        return None
    terms = cache.terms(expr, CONTENT.name)
    if terms is None:
        return None
    table = snap[CONTENT.name]
    hit, bm = table.scores(terms, (1.0, context_weight))
    top, tb = table.top(hit, bm, n * FETCH_FACTOR)
    seqs = table.rowids[top].tolist()
    keep = index.allowed(seqs, filters)
    rows = [(s, v) for s, v, k in zip(seqs, tb.tolist(), keep.tolist()) if k][:n]
    if len(rows) < n and hit.size > top.size:  # restrictive filters: every match, filtered
        ok = index.allowed(table.rowids[hit].tolist(), filters)
        top, tb = table.top(hit[ok], bm[ok], n)
        rows = list(zip(table.rowids[top].tolist(), tb.tolist()))
    return fts.normalise(rows)
