"""Query-term coverage: the share of a session context's terms a memory's own text contains.

The ``query_coverage`` signal of feature schema v6 (:mod:`memlane.predictor.features`):

    coverage(q, m) = |terms(q) ∩ terms(m)| / |terms(q)|

where ``terms(q)`` are the query words the recall's BM25 leg searches for
(:func:`memlane.storage.fts.query_tokens`: lowercased, stop words removed) and ``terms(m)``
those of the memory's content alone, both stemmed by the tokenizer ``memories_fts`` indexes
with (:data:`FTS_TOKENIZE`, Porter), so "deploys" covers "deploy". It is LETOR's "covered query
term ratio" of the body field (Qin et al. 2010, "LETOR: A benchmark collection for research on
learning to rank for information retrieval", features 6-10), here over the memory's content only.

Why the model needs it: the recall scores a memory by its content and the context indexed with
it (the turns before it, ``recall.context_weight``), so the turn that *follows* the one
holding an answer matches the question through its context nearly as well as the answer
itself. BM25 sums term weights and cannot say which of the question's terms the memory's own
text holds. docs/predictor.md, "Query-term coverage", has its gain on LoCoMo and the variants
that did less (content-only and context-only BM25, unstemmed and IDF-weighted coverage, the
content-only cosine).

Both paths compute it with :func:`query_coverage`: the daemon when it logs a session-start's
candidate signals, and training (:func:`memlane.predictor.dataset.load_sessions`) for sessions
logged before the signal existed, from the session's stored context and the memories' text.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from memlane.lru import LRUCache
from memlane.storage.fts import query_tokens
from memlane.storage.fts_stats import Tokenizer

__all__ = ["FTS_TOKENIZE", "QueryCoverage", "query_coverage"]

#: The ``tokenize=`` option of ``memories_fts`` (storage/migrations.py, 0001); a test reads it
#: back from a real store's schema.
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"

#: Memory texts whose term sets are kept (least recently used dropped first).
MAX_CACHED_TEXTS = 20_000


class QueryCoverage:
    """Stemmed query-term coverage with a bounded cache of memory term sets (thread-safe).

    Each distinct text is tokenised once by SQLite's own FTS5 tokenizer (an in-memory table,
    :class:`memlane.storage.fts_stats.Tokenizer`, ~30 us a text) and kept while among the
    :data:`MAX_CACHED_TEXTS` most recently used.
    """

    def __init__(self, max_cached: int = MAX_CACHED_TEXTS) -> None:
        self._tokenizer = Tokenizer(FTS_TOKENIZE)
        self._terms: LRUCache[str, frozenset[str]] = LRUCache(max(1, int(max_cached)))

    def terms(self, texts: Sequence[str]) -> list[frozenset[str]]:
        """The stemmed term set of each text (``len(texts)`` sets, in order)."""
        out = [self._terms.get(t) for t in texts]
        missing = [t for t, got in zip(texts, out) if got is None]
        if missing:
            unique = list(dict.fromkeys(missing))
            made = {t: frozenset(tokens) for t, tokens in zip(unique, self._tokenizer.words(unique))}
            for t, terms in made.items():
                self._terms.put(t, terms)
            out = [got if got is not None else made[t] for got, t in zip(out, texts)]
        return out  # type: ignore[return-value]

    def query_terms(self, query: str) -> frozenset[str]:
        """The stemmed terms of a query (those of :func:`memlane.storage.fts.query_tokens`)."""
        words = query_tokens(query or "")
        if not words:
            return frozenset()
        # each word tokenised alone, as the tokenizer reads a query's words; cached as texts are
        return frozenset().union(*self.terms(words))

    def coverage(self, query: str, texts: Sequence[str]) -> list[float]:
        """``[len(texts)]`` coverages in [0, 1] (module docstring); all 0.0 when the query has
        no term (empty, or only punctuation)."""
        q = self.query_terms(query)
        if not q or not texts:
            return [0.0] * len(texts)
        return [len(q & s) / len(q) for s in self.terms([t or "" for t in texts])]

    def close(self) -> None:
        self._tokenizer.close()


_shared: QueryCoverage | None = None
_shared_lock = threading.Lock()


def query_coverage(query: str, texts: Sequence[str]) -> list[float]:
    """:meth:`QueryCoverage.coverage` with one process-wide cache (daemon and training)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = QueryCoverage()
        shared = _shared
    return shared.coverage(query, texts)
