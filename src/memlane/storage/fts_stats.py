"""SQL that reads FTS5's own statistics, for the in-memory bm25 copy of ``memlane.recall.fts_cache``.

What is read, per FTS5 table (``memories_fts``, ``memory_hints_fts``): its CREATE statement's
``tokenize`` option, its structure record (``<table>_data`` id 10, rewritten by every committed
change to the index), its averages record (id 1: row count and token totals), every token
instance through an ``fts5vocab`` ``instance`` table grouped by term per column, and for the
hint table the memory seq of each row. :class:`Tokenizer` runs SQLite's FTS5 tokenizer on
arbitrary words through a private in-memory FTS5 table.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass

#: Structure and averages records of an FTS5 ``_data`` table.
STRUCTURE_ID = 10
AVERAGES_ID = 1

_TOKENIZE = re.compile(r"""tokenize\s*=\s*(?:'((?:[^']|'')*)'|"((?:[^"]|"")*)")""", re.IGNORECASE)


@dataclass(frozen=True)
class TableSpec:
    """One FTS5 table: its name, and the SQL mapping its rowids to memory seqs (None: the rowid is
    the seq)."""

    name: str
    seq_sql: str | None = None


CONTENT = TableSpec("memories_fts")
HINTS = TableSpec("memory_hints_fts", "SELECT h.id, m.seq FROM memory_hints h JOIN memories m ON m.id = h.memory_id")


@dataclass(frozen=True)
class RawTable:
    """What :func:`read_tables` read of one FTS5 table.

    Attributes:
        option: its ``tokenize`` option (:func:`tokenizer_option`); None when the table is missing
            or uses options that change what bm25 reads (then the other fields are empty).
        structure: its structure record (b"" when absent).
        averages: its averages record (b"" when absent).
        per_column: per column, ``[(term, "doc doc ...")]``, one doc id per token instance.
        seq_of: rowid -> memory seq (None: the rowid is the seq).
    """

    option: str | None
    structure: bytes = b""
    averages: bytes = b""
    per_column: tuple[list[tuple[str, str]], ...] = ()
    seq_of: dict[int, int] | None = None


def tokenizer_option(create_sql: str) -> str | None:
    """The ``tokenize`` option of an FTS5 CREATE statement (``unicode61`` when absent), or None when
    the table uses an option that changes what bm25 reads (``detail``, ``columnsize``)."""
    low = create_sql.lower()
    if "detail" in low or "columnsize" in low:
        return None
    m = _TOKENIZE.search(create_sql)
    if m is None:
        return "unicode61"
    return m.group(1).replace("''", "'") if m.group(1) is not None else m.group(2).replace('""', '"')


def structure(conn: sqlite3.Connection, table: str) -> bytes:
    """The FTS5 structure record of ``table`` (b"" when absent)."""
    row = conn.execute(f'SELECT block FROM "{table}_data" WHERE id = ?', (STRUCTURE_ID,)).fetchone()
    return bytes(row[0]) if row else b""


def open_reader(path: str) -> sqlite3.Connection:
    """A read-only autocommit connection to the database file ``path`` (it holds the temporary
    ``fts5vocab`` tables of :func:`read_tables`).

    Raises:
        sqlite3.Error: the file cannot be opened.
    """
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def read_tables(conn: sqlite3.Connection, specs: Sequence[TableSpec]) -> dict[str, RawTable]:
    """Read every table of ``specs`` in one read transaction (one consistent moment).

    Stops at the first table whose option is None (missing, or unsupported options): that table's
    entry is ``RawTable(None)`` and later tables are not read.

    Args:
        conn: a connection from :func:`open_reader` (autocommit).
    Returns:
        table name -> :class:`RawTable`.
    Raises:
        sqlite3.Error: SQLite failed.
    """
    out: dict[str, RawTable] = {}
    conn.execute("BEGIN")
    try:
        for spec in specs:
            row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (spec.name,)).fetchone()
            option = tokenizer_option(row[0]) if row else None
            if option is None:
                out[spec.name] = RawTable(None)
                return out
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{spec.name}")')]
            vocab = f"temp.memlane_vocab_{spec.name}"
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, '{spec.name}', 'instance')")
            avg = conn.execute(f'SELECT block FROM "{spec.name}_data" WHERE id = ?', (AVERAGES_ID,)).fetchone()
            per_col = tuple(
                conn.execute(
                    f"SELECT term, group_concat(doc, ' ') FROM {vocab} WHERE col = ? GROUP BY term", (col,)
                ).fetchall()
                for col in cols
            )
            seq_of = dict(conn.execute(spec.seq_sql).fetchall()) if spec.seq_sql else None
            out[spec.name] = RawTable(
                option, structure(conn, spec.name), bytes(avg[0]) if avg else b"", per_col, seq_of
            )
    finally:
        conn.execute("COMMIT")
    return out


class Tokenizer:
    """FTS5 tokenisation by SQLite itself: a private in-memory FTS5 table with a given
    ``tokenize`` option, read back through ``fts5vocab`` (instance). Thread-safe (one lock)."""

    def __init__(self, option: str) -> None:
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        opt = option.replace("'", "''")
        self._conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(c, tokenize='{opt}')")
        self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")

    def words(self, words: Sequence[str]) -> list[tuple[str, ...]]:
        """The tokens of each word, in order (what FTS5 makes of the quoted phrase ``"word"``)."""
        got: dict[int, list[tuple[int, str]]] = {}
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany("INSERT INTO t(rowid, c) VALUES (?, ?)", list(enumerate(words)))
                for term, doc, offset in self._conn.execute("SELECT term, doc, offset FROM v"):
                    got.setdefault(doc, []).append((offset, term))
            finally:
                self._conn.execute("ROLLBACK")
        return [tuple(t for _, t in sorted(got.get(i, []))) for i in range(len(words))]

    def close(self) -> None:
        """Close the private connection."""
        with self._lock:
            self._conn.close()
