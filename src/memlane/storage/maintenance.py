"""SQL of the embedding tracker, the maintenance diagnostics and the repairs
(memory-pipeline-v2.md "Embedding Tracker", "Maintenance Worker").

Reads take any connection; writes run inside the caller's write transaction. Timestamps are
ISO-8601 UTC strings (ms, ``Z``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memlane.storage.models import IndexRow

# -- embedding tracker --------------------------------------------------------------------

_NEEDS_VECTOR = """m.is_deleted = 0 AND (
    m.embedding_model IS NULL OR m.embedding_model != :model
    OR NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.content_hash = m.content_hash AND e.model = :model)
    OR (m.context_hash IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM embeddings x WHERE x.content_hash = m.context_hash AND x.model = :model)))"""


@dataclass(frozen=True, slots=True)
class StaleMemory:
    """A live memory whose vectors for the current model are missing or whose
    ``embedding_model`` names another model (never embedded, content changed, model switched)."""

    seq: int
    id: str
    content: str
    context: str | None
    content_hash: str
    context_hash: str | None
    embedding_model: str | None


def stale_memories(
    conn: sqlite3.Connection, model: str, *, limit: int, exclude: Sequence[str] = ()
) -> list[StaleMemory]:
    """Up to ``limit`` memories needing vectors of ``model``, most recently updated first,
    skipping the ids in ``exclude`` (e.g. those that just failed)."""
    skip = list(exclude)[:900]
    params: dict[str, object] = {"model": model, "limit": int(limit), **{f"x{i}": v for i, v in enumerate(skip)}}
    extra = f" AND m.id NOT IN ({', '.join(f':x{i}' for i in range(len(skip)))})" if skip else ""
    sql = (
        f"SELECT m.seq, m.id, m.content, m.context, m.content_hash, m.context_hash, m.embedding_model "
        f"FROM memories m WHERE {_NEEDS_VECTOR}{extra} ORDER BY m.updated_at DESC, m.seq DESC LIMIT :limit"
    )
    return [StaleMemory(*r) for r in conn.execute(sql, params)]


def count_stale(conn: sqlite3.Connection, model: str) -> int:
    """How many live memories need vectors of ``model``."""
    return int(conn.execute(f"SELECT count(*) FROM memories m WHERE {_NEEDS_VECTOR}", {"model": model}).fetchone()[0])


def set_embedding_model(conn: sqlite3.Connection, ids: Iterable[str], model: str) -> None:
    """Record ``model`` as the memories' embedding model (``updated_at`` untouched: not an edit)."""
    conn.executemany("UPDATE memories SET embedding_model = ? WHERE id = ?", [(model, i) for i in ids])


def index_rows_for(conn: sqlite3.Connection, ids: Sequence[str], model: str) -> list[IndexRow]:
    """What the in-memory index needs of these memories, with their vectors of ``model``."""
    out: list[IndexRow] = []
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(
            f"""SELECT m.seq, m.id, m.project, m.type, m.created_at, m.is_deleted, e1.vector, e2.vector,
                           m.superseded_by IS NOT NULL, m.importance, m.pinned, m.access_count
                    FROM memories m
                    LEFT JOIN embeddings e1 ON e1.content_hash = m.content_hash AND e1.model = ?
                    LEFT JOIN embeddings e2 ON e2.content_hash = m.context_hash AND e2.model = ?
                    WHERE m.id IN ({marks})""",
            (model, model, *chunk),
        ):
            out.append(
                IndexRow(
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    bool(r[5]),
                    r[6],
                    r[7],
                    bool(r[8]),
                    float(r[9]),
                    bool(r[10]),
                    int(r[11]),
                )
            )
    return out


# -- diagnostics --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HealthCounts:
    """Raw counts behind a diagnostics report.

    Attributes:
        jobs_total / jobs_dead / jobs_pending / stale_leases: ``memory_jobs`` rows (stale = leased
            past ``leased_until``).
        memories_total / memories_live / memories_deleted: ``memories`` rows.
        fts_rows: documents indexed by ``memories_fts`` (it indexes every row, deleted or not).
        missing_vectors: live memories lacking vectors of the current model (0 without a model).
    """

    jobs_total: int
    jobs_dead: int
    jobs_pending: int
    stale_leases: int
    memories_total: int
    memories_live: int
    memories_deleted: int
    fts_rows: int
    missing_vectors: int


def health_counts(conn: sqlite3.Connection, *, now: str, model: str | None) -> HealthCounts:
    """The counts of :class:`HealthCounts` (read only)."""
    # Counted per status on idx_jobs_lease (covering) and stale leases on idx_jobs_status, not
    # by reading every job row (docs/decisions.md, Indexes).
    by_status = dict(conn.execute("SELECT status, count(*) FROM memory_jobs GROUP BY status").fetchall())
    stale = conn.execute(
        "SELECT count(*) FROM memory_jobs WHERE status = 'leased' AND leased_until IS NOT NULL AND leased_until < ?",
        (now,),
    ).fetchone()[0]
    j = (sum(by_status.values()), by_status.get("dead", 0), by_status.get("pending", 0), stale)
    m = conn.execute(
        "SELECT count(*), coalesce(sum(is_deleted = 0), 0), coalesce(sum(is_deleted = 1), 0) FROM memories"
    ).fetchone()
    return HealthCounts(
        int(j[0]),
        int(j[1]),
        int(j[2]),
        int(j[3]),
        int(m[0]),
        int(m[1]),
        int(m[2]),
        fts_row_count(conn),
        count_stale(conn, model) if model else 0,
    )


def fts_row_count(conn: sqlite3.Connection) -> int:
    """Rows indexed by ``memories_fts`` (its ``docsize`` shadow table: one row per document)."""
    return int(conn.execute("SELECT count(*) FROM memories_fts_docsize").fetchone()[0])


def memory_row_count(conn: sqlite3.Connection) -> int:
    """Rows of ``memories`` (deleted ones included: the FTS index holds them too)."""
    return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])


# -- repairs ------------------------------------------------------------------------------


def newest_current(conn: sqlite3.Connection, limit: int) -> list[tuple[int, str, int, float]]:
    """``(seq, id, pinned, importance)`` of the ``limit`` newest memories neither deleted nor
    superseded, newest first (the dedup repair's batch)."""
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT seq, id, pinned, importance FROM memories WHERE is_deleted = 0 AND superseded_by IS NULL "
            "ORDER BY seq DESC LIMIT ?",
            (int(limit),),
        )
    ]


def requeue_dead(conn: sqlite3.Connection, *, now: str, limit: int) -> int:
    """Return up to ``limit`` dead jobs (oldest first) to ``pending`` with a fresh attempt count,
    unless an equal job (type + dedup key) is already pending or leased. Returns how many."""
    ids = [
        r[0]
        for r in conn.execute(
            """SELECT d.id FROM memory_jobs d WHERE d.status = 'dead' AND (d.dedup_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM memory_jobs o WHERE o.job_type = d.job_type AND o.dedup_key = d.dedup_key
               AND o.status IN ('pending', 'leased'))) ORDER BY d.updated_at, d.id LIMIT ?""",
            (int(limit),),
        )
    ]
    seen: set[tuple] = set()
    n = 0
    for jid in ids:
        t, key = conn.execute("SELECT job_type, dedup_key FROM memory_jobs WHERE id = ?", (jid,)).fetchone()
        if key is not None and (t, key) in seen:  # two dead copies of one job: revive one
            continue
        seen.add((t, key))
        conn.execute(
            "UPDATE memory_jobs SET status = 'pending', attempts = 0, run_after = NULL, leased_until = NULL, "
            "error = 'requeued by maintenance: ' || coalesce(error, ''), updated_at = ? WHERE id = ?",
            (now, jid),
        )
        n += 1
    return n


def fts_rebuild(conn: sqlite3.Connection) -> None:
    """Rebuild ``memories_fts`` from the ``memories`` table (FTS5 ``rebuild`` command)."""
    conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
