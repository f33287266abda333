"""SQL for prospective hints (memory-pipeline-v2.md "Prospective Indexing (Hints)").

``memory_hints`` rows link a hint string to its memory; ``memory_hints_fts`` indexes them with
BM25 (migration 0007). Functions take the caller's connection; :func:`replace` writes and must
run inside a write transaction (``Database.write``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from memlane.storage.fts import normalise


def replace(conn: sqlite3.Connection, memory_id: str, hints: Sequence[str], *, at: str) -> int:
    """Make ``hints`` the memory's only hints (idempotent re-runs). Returns the number stored."""
    conn.execute("DELETE FROM memory_hints WHERE memory_id = ?", (memory_id,))
    conn.executemany(
        "INSERT INTO memory_hints(memory_id, hint, created_at) VALUES (?, ?, ?)", [(memory_id, h, at) for h in hints]
    )
    return len(hints)


def for_memory(conn: sqlite3.Connection, memory_id: str) -> list[str]:
    """The memory's hints, in insertion order."""
    return [r[0] for r in conn.execute("SELECT hint FROM memory_hints WHERE memory_id = ? ORDER BY id", (memory_id,))]


def count(conn: sqlite3.Connection) -> int:
    """Hints stored, all memories."""
    return int(conn.execute("SELECT count(*) FROM memory_hints").fetchone()[0])


def search_raw(conn: sqlite3.Connection, expr: str, *, limit: int) -> list[tuple[int, float]]:
    """Hint BM25 search by memory: ``(memory seq, bm25)``, best (most negative) first, one pair
    per memory (its best hint), at most ``limit`` hint rows read.

    ``expr`` comes from :func:`memlane.storage.fts.match_expression` (the same expression as the
    content leg). No filters: the caller filters by seq with the in-memory index.
    """
    rows = conn.execute(
        """SELECT m.seq, min(f.s) AS s FROM (
               SELECT rowid, bm25(memory_hints_fts) AS s FROM memory_hints_fts
               WHERE memory_hints_fts MATCH ? ORDER BY s LIMIT ?) AS f
           JOIN memory_hints h ON h.id = f.rowid
           JOIN memories m ON m.id = h.memory_id
           GROUP BY m.seq ORDER BY s""",
        (expr, int(limit)),
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def search(conn: sqlite3.Connection, expr: str, *, limit: int) -> list[tuple[int, float]]:
    """:func:`search_raw` normalised like the content leg: each score divided by the best one,
    so the best hint match is 1.0 (see :func:`memlane.storage.fts.normalise`)."""
    return normalise(search_raw(conn, expr, limit=limit))
