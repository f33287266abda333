"""An in-memory copy of the FTS5 statistics that ``bm25()`` reads, for the BM25 and hint legs.

Why: FTS5 computes ``bm25()`` row by row (a docsize lookup and a position-list walk per
matching row), and on a large store a question matches thousands of rows: the BM25 and hint
legs would take longer than the query embedding they overlap with. The same numbers from
numpy arrays cost a small fraction of that (docs/architecture.md, "Recall path").

What is kept, per FTS5 table (``memories_fts``: ``normalized_content``, ``context``;
``memory_hints_fts``: ``hint``): every row's rowid and size in tokens (all columns), and per term
its postings (row, token count per column). The tokens come from the table's own tokenizer
(the ``tokenize=`` option of its CREATE statement, run on a private in-memory FTS5 table of the
same SQLite library), so they are the ones FTS5 indexed.

:meth:`FtsTable.scores` is FTS5's ``bm25()`` (fts5_aux.c, k1 = 1.2, b = 0.75) with the same
double-precision operations in the same order: per phrase, ``idf = ln((N - n + 0.5) / (n + 0.5))``
(1e-6 when <= 0), ``f`` = the column weights summed once per instance, and ``score += idf * (f *
(k1 + 1)) / (f + k1 * (1 - b + b * D / avgdl))``; the value is ``-score``. Results are those of
the SQL (tests compare them), ties ordered by rowid.

Freshness: a snapshot records each table's FTS5 structure record (``<table>_data`` id 10, rewritten
by every committed change to the index) and is used only while both are unchanged (two
primary-key reads per recall). A stale or missing snapshot makes the caller use SQL and starts a
rebuild on a background thread (at most one at a time, and at most 25 % of the time: the next
starts no sooner than 3x the last one's duration after it ended). A rebuild reads every row of
both content tables in one read transaction, re-tokenises only rows whose text changed, and is
used only if its row and token totals equal FTS5's own (the ``averages`` record, id 1).
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from memlane.storage import fts_stats
from memlane.storage.db import Database
from memlane.storage.fts_stats import CONTENT, HINTS, Tokenizer

log = logging.getLogger(__name__)

#: FTS5 bm25 constants (fts5_aux.c).
K1 = 1.2
B = 0.75
#: A rebuild starts no sooner than this many times the last one's duration after it ended.
REBUILD_SPACING = 3.0
#: ... and no sooner than this after the last one started, seconds.
MIN_REBUILD_INTERVAL_S = 0.5
#: Query words whose tokens are cached (a query vocabulary, not the corpus).
MAX_CACHED_WORDS = 50_000

_PHRASE = re.compile(r'"([^"]*)"')


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """One SQLite varint at ``pos``: (value, next position)."""
    v = 0
    for i in range(8):
        b = buf[pos + i]
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, pos + i + 1
    return (v << 8) | buf[pos + 8], pos + 9


def parse_averages(block: bytes, columns: int) -> tuple[int, int]:
    """(rows, tokens over all columns) of an FTS5 averages record."""
    n_rows, pos = read_varint(block, 0)
    total = 0
    for _ in range(columns):
        t, pos = read_varint(block, pos)
        total += t
    return n_rows, total


class FtsTable:
    """One FTS5 table's bm25 statistics at one moment (see the module docstring).

    Args:
        n_rows, n_tokens: FTS5's row count and token total over all columns (its averages record).
        rowids: int64 [n] ascending, the rows holding at least one token; extra: int64 [n], each
            row's memory seq (-1: none); doc_len: float64 [n], tokens per row, all columns.
        vocab: term -> term id; ptr: int64 [terms + 1], term t's postings are ``ptr[t]:ptr[t+1]``;
        post_doc: int64 [postings] positions into ``rowids``; post_tf: int32 [postings, columns]
            the term's token count per column.
        structure: the FTS5 structure record this was read with.
    """

    def __init__(
        self,
        n_rows: int,
        n_tokens: int,
        rowids: np.ndarray,
        extra: np.ndarray,
        doc_len: np.ndarray,
        vocab: dict[str, int],
        ptr: np.ndarray,
        post_doc: np.ndarray,
        post_tf: np.ndarray,
        structure: bytes,
    ) -> None:
        self.n_rows, self.n_tokens = n_rows, n_tokens
        self.rowids, self.extra, self.doc_len = rowids, extra, doc_len
        self.vocab, self.ptr, self.post_doc, self.post_tf = vocab, ptr, post_doc, post_tf
        self.structure = structure
        avgdl = float(n_tokens) / float(n_rows) if n_rows else 1.0
        # k1 * (1 - b + b * D / avgdl) per row: the C expression's operations, in its order.
        self._len_part = K1 * ((1.0 - B) + (B * doc_len) / avgdl)

    def scores(self, terms: Sequence[str], weights: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """FTS5 ``bm25(table, *weights)`` of every row matching any of ``terms`` (one single-token
        phrase per term, OR-ed, in query order; a repeated term counts again, as in FTS5).

        Args:
            terms: FTS5 tokens (:meth:`FtsCache.terms`).
            weights: column weights (missing ones are 1.0).
        Returns:
            (positions into ``rowids`` int64 [k] ascending, bm25 float64 [k] <= 0: lower is better).
        """
        score = np.zeros(self.rowids.size, dtype=np.float64)
        matched = np.zeros(self.rowids.size, dtype=bool)  # a zero column weight still matches
        for term in terms:
            tid = self.vocab.get(term)
            if tid is None:
                continue
            s, e = int(self.ptr[tid]), int(self.ptr[tid + 1])
            docs, tf = self.post_doc[s:e], self.post_tf[s:e]
            idf = math.log((self.n_rows - (e - s) + 0.5) / ((e - s) + 0.5))
            if idf <= 0.0:
                idf = 1e-6
            f = np.zeros(e - s, dtype=np.float64)
            for c in range(tf.shape[1]):  # aFreq += w once per instance, column by column
                w = float(weights[c]) if c < len(weights) else 1.0
                col = tf[:, c]
                if w == 1.0:
                    f += col
                    continue
                for k in range(int(col.max(initial=0))):
                    f = np.where(col > k, f + w, f)
            score[docs] += idf * ((f * (K1 + 1.0)) / (f + self._len_part[docs]))
            matched[docs] = True
        hit = np.flatnonzero(matched)
        return hit, -score[hit]

    def top(self, hit: np.ndarray, bm25: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of ``(hit, bm25)`` (from :meth:`scores`), best first, ties by rowid."""
        if k <= 0:
            return hit[:0], bm25[:0]
        if hit.size > k:
            kth = np.partition(bm25, k - 1)[k - 1]
            sel = bm25 <= kth
            hit, bm25 = hit[sel], bm25[sel]
        order = np.lexsort((self.rowids[hit], bm25))[:k]
        return hit[order], bm25[order]


def build_table(
    per_column: list[list[tuple[str, str]]], n_rows: int, n_tokens: int, seq_of: dict[int, int] | None, structure: bytes
) -> FtsTable:
    """An :class:`FtsTable` from ``fts5vocab`` instance rows grouped by term, per column:
    ``[(term, "doc doc doc ...")]`` (one doc id per instance).

    Raises:
        ValueError: the postings' token total differs from ``n_tokens``, or more rows hold tokens
            than ``n_rows`` (the snapshot would not be FTS5's).
    """
    ncol = len(per_column)
    vocab: dict[str, int] = {}
    t_parts, d_parts, c_parts = [], [], []
    for c, rows in enumerate(per_column):
        if not rows:
            continue
        tids = np.fromiter((vocab.setdefault(term, len(vocab)) for term, _ in rows), dtype=np.int64, count=len(rows))
        counts = np.fromiter((text.count(" ") + 1 for _, text in rows), dtype=np.int64, count=len(rows))
        docs = np.fromstring(" ".join(text for _, text in rows), dtype=np.int64, sep=" ")
        if docs.size != int(counts.sum()):
            raise ValueError("unreadable fts5vocab doc list")
        t_parts.append(np.repeat(tids, counts))
        d_parts.append(docs)
        c_parts.append(np.full(docs.size, c, dtype=np.int64))
    if t_parts:
        T, D, C = (np.concatenate(x) for x in (t_parts, d_parts, c_parts))
    else:
        T = D = C = np.zeros(0, dtype=np.int64)
    # one entry per instance -> one per (term, doc, column) with its count -> one per (term, doc)
    order = np.lexsort((C, D, T))
    T, D, C = T[order], D[order], C[order]
    run = np.ones(T.size, dtype=bool)
    run[1:] = (T[1:] != T[:-1]) | (D[1:] != D[:-1]) | (C[1:] != C[:-1])
    starts = np.flatnonzero(run)
    N = np.diff(np.append(starts, T.size))
    T, D, C = T[starts], D[starts], C[starts]
    new = np.ones(T.size, dtype=bool)
    new[1:] = (T[1:] != T[:-1]) | (D[1:] != D[:-1])
    pair = np.cumsum(new) - 1
    tf = np.zeros((int(new.sum()), ncol), dtype=np.int32)
    tf[pair, C] = N
    ptid, pdoc = T[new], D[new]
    rowids = np.unique(pdoc)
    pos = np.searchsorted(rowids, pdoc)
    total = int(tf.sum())
    if total != n_tokens or rowids.size > n_rows:
        raise ValueError(f"postings hold {total} tokens in {rowids.size} rows, FTS5 {n_tokens} in {n_rows}")
    doc_len = np.bincount(pos, weights=tf.sum(axis=1), minlength=rowids.size).astype(np.float64)
    ptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(np.bincount(ptid, minlength=len(vocab)), out=ptr[1:])
    if seq_of is None:
        extra = rowids.copy()
    else:
        extra = np.fromiter((seq_of.get(r, -1) for r in rowids.tolist()), dtype=np.int64, count=rowids.size)
    return FtsTable(n_rows, n_tokens, rowids, extra, doc_len, vocab, ptr, pos, tf, structure)


class FtsCache:
    """Snapshots of the content and hint FTS5 tables (see the module docstring).

    Args:
        db: the database (freshness checks on its readers).
        path: the database file (rebuilds read it through their own read-only connection, which
            holds the ``fts5vocab`` tables); default ``db.path``.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, db: Database, path: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.path = str(path or db.path)
        self._clock = clock
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self._snap: dict[str, FtsTable] | None = None
        self._thread: threading.Thread | None = None
        self._next_at = -math.inf
        self._disabled: str | None = None
        self._conn: sqlite3.Connection | None = None
        self._tokenizers: dict[str, Tokenizer] = {}
        self._words: dict[tuple[str, str], tuple[str, ...]] = {}
        #: ``hit`` (snapshot used), ``stale`` (SQL answered, rebuild wanted), ``rebuilds``,
        #: ``rejected`` (a rebuild that did not match FTS5's totals), ``fallback`` (query shape).
        self.counters = {"hit": 0, "stale": 0, "rebuilds": 0, "rejected": 0, "fallback": 0}

    # -- freshness ---------------------------------------------------------------------
    def current(self) -> dict[str, FtsTable] | None:
        """The snapshot if both tables are unchanged since it was taken; else None (and a rebuild
        is scheduled). Never raises."""
        snap = self._snap
        try:
            if self._disabled is not None:
                return None
            if snap is not None:
                now = self.db.read(lambda c: [fts_stats.structure(c, t) for t in (CONTENT.name, HINTS.name)])
                if now == [snap[CONTENT.name].structure, snap[HINTS.name].structure]:
                    self.counters["hit"] += 1
                    return snap
            self.counters["stale"] += 1
            self.schedule()
        except Exception as exc:  # the SQL path answers
            log.warning("FTS snapshot check failed: %s", exc)
        return None

    def schedule(self) -> None:
        """Start a background rebuild unless one runs or the spacing has not passed."""
        with self._lock:
            if self._disabled is not None or (self._thread is not None and self._thread.is_alive()):
                return
            if self._clock() < self._next_at:
                return
            self._thread = threading.Thread(target=self._rebuild_logged, name="memlane-fts-cache", daemon=True)
            self._thread.start()

    def wait(self, timeout_s: float = 60.0) -> None:
        """Wait for a running rebuild (tests, warm-up)."""
        t = self._thread
        if t is not None:
            t.join(timeout_s)

    def _rebuild_logged(self) -> None:
        t0 = self._clock()
        try:
            self.rebuild()
        except Exception as exc:
            log.warning("FTS snapshot rebuild failed (SQL bm25 kept): %s", exc)
        finally:
            t1 = self._clock()
            self._next_at = max(t0 + MIN_REBUILD_INTERVAL_S, t1 + REBUILD_SPACING * (t1 - t0))

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = fts_stats.open_reader(self.path)
        return self._conn

    def rebuild(self) -> bool:
        """Take a new snapshot now, in the calling thread. Returns whether it is in use (False: a
        table uses options this does not model, or the postings did not add up to FTS5's totals).

        Raises:
            sqlite3.Error: SQLite failed.
        """
        with self._build_lock:
            raw = fts_stats.read_tables(self._connection(), (CONTENT, HINTS))
            options: dict[str, str] = {}
            for name, table in raw.items():
                if table.option is None:
                    self._disabled = f"{name}: missing or unsupported FTS5 options"
                    log.warning("FTS snapshot off: %s", self._disabled)
                    return False
                options[name] = table.option
            snap: dict[str, FtsTable] = {}
            for spec in (CONTENT, HINTS):
                t, option = raw[spec.name], options[spec.name]
                n_rows, n_tokens = parse_averages(t.averages, len(t.per_column)) if t.averages else (0, 0)
                try:
                    snap[spec.name] = build_table(list(t.per_column), n_rows, n_tokens, t.seq_of, t.structure)
                except ValueError as exc:
                    self.counters["rejected"] += 1
                    log.warning("FTS snapshot of %s not used: %s", spec.name, exc)
                    return False
                if option not in self._tokenizers:
                    self._tokenizers[option] = Tokenizer(option)
                self._tokenizers[spec.name] = self._tokenizers[option]
            self._snap = snap
            self.counters["rebuilds"] += 1
            return True

    # -- queries -----------------------------------------------------------------------
    def terms(self, expr: str, table: str) -> list[str] | None:
        """The one token of each phrase of ``expr`` (``"a" OR "b"``, from ``fts.match_expression``)
        in ``table``'s tokenizer, or None when the expression has another shape or a phrase is not
        exactly one token (the SQL path answers those)."""
        words = _phrases(expr)
        tok = self._tokenizers.get(table)
        if words is None or tok is None:
            self.counters["fallback"] += 1
            return None
        missing = [w for w in dict.fromkeys(words) if (table, w) not in self._words]
        if missing:
            if len(self._words) > MAX_CACHED_WORDS:
                self._words.clear()
            for w, toks in zip(missing, tok.words(missing)):
                self._words[(table, w)] = toks
        out = []
        for w in words:
            cached = self._words.get((table, w))
            if cached is None or len(cached) != 1:
                self.counters["fallback"] += 1
                return None
            out.append(cached[0])
        return out

    def close(self) -> None:
        """Close the connections (a running rebuild is waited for)."""
        self.wait()
        with self._build_lock:
            for t in set(self._tokenizers.values()):
                t.close()
            self._tokenizers.clear()
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _phrases(expr: str) -> list[str] | None:
    out = []
    for part in expr.split(" OR "):
        m = _PHRASE.fullmatch(part)
        if m is None:
            return None
        out.append(m.group(1))
    return out
