"""SQL for the ``memories`` table and its history (storage layer: SQL only)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from memlane.storage.db import inserted_rowid
from memlane.storage.models import CandRow, HistoryEntry, IndexRow, Memory, NewMemory

_PATCHABLE = {
    "type",
    "content",
    "normalized_content",
    "content_hash",
    "context",
    "context_hash",
    "importance",
    "confidence",
    "project",
    "tags",
    "metadata",
    "pinned",
    "superseded_by",
    "embedding_model",
    "extraction_status",
    "source_type",
    "source_id",
    # V3 (migration 0014)
    "scope",
    "source",
    "work_unit_ref",
    "methodology",
    "related_files",
    "related_modules",
    "needs_review",
    "user_verified",
    "citation_text",
    "commit_sha",
    "decay_half_life_days",
    "stale_at",
    "type_fields",
}
_JSON_COLUMNS = {"metadata", "work_unit_ref", "type_fields"}
_LIST_COLUMNS = {"tags", "related_files", "related_modules"}


def get(conn: sqlite3.Connection, memory_id: str) -> Memory | None:
    """The memory with this id (deleted or not), or None."""
    row = conn.execute("SELECT * FROM memories WHERE id = ?", (memory_id,)).fetchone()
    return Memory.from_row(row) if row else None


def contents(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``id -> (content, created_at)`` for live or deleted memories (light: no JSON parsing)."""
    out: dict[str, tuple[str, str]] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(f"SELECT id, content, created_at FROM memories WHERE id IN ({marks})", chunk):
            out[r[0]] = (r[1], r[2])
    return out


def get_by_seqs(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, Memory]:
    """Memories by seq (FTS rowid)."""
    out: dict[int, Memory] = {}
    for start in range(0, len(seqs), 500):
        chunk = list(seqs[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(f"SELECT * FROM memories WHERE seq IN ({marks})", chunk):
            m = Memory.from_row(row)
            out[m.seq] = m
    return out


def live_briefs_by_seqs(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, tuple[str, str, str]]:
    """``seq -> (id, type, content)`` of the live (not deleted, not superseded) memories among
    ``seqs``: the few columns a candidate list needs, without building full :class:`Memory` rows."""
    out: dict[int, tuple[str, str, str]] = {}
    for start in range(0, len(seqs), 500):
        chunk = list(seqs[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(
            f"SELECT seq, id, type, content FROM memories WHERE seq IN ({marks}) "
            "AND is_deleted = 0 AND superseded_by IS NULL",
            chunk,
        ):
            out[r[0]] = (r[1], r[2], r[3])
    return out


def find_live_by_hash(conn: sqlite3.Connection, content_hash: str) -> Memory | None:
    """The live (not deleted) memory with this content hash, or None."""
    row = conn.execute("SELECT * FROM memories WHERE content_hash = ? AND is_deleted = 0", (content_hash,)).fetchone()
    return Memory.from_row(row) if row else None


def insert(conn: sqlite3.Connection, m: NewMemory) -> int:
    """Insert one memory (FTS follows by trigger); returns its seq.

    Raises:
        sqlite3.IntegrityError: a live memory already has this content_hash.
    """
    cur = conn.execute(
        """INSERT INTO memories (id, type, content, normalized_content, content_hash, context,
               context_hash, importance, confidence, project, tags, metadata, who, why,
               source_type, source_id, created_at, updated_at, pinned, embedding_model,
               scope, source, work_unit_ref, methodology, related_files, related_modules, needs_review,
               user_verified, citation_text, commit_sha, decay_half_life_days, type_fields)
           VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
        (
            m.id,
            m.type,
            m.content,
            m.normalized_content,
            m.content_hash,
            m.context,
            m.context_hash,
            m.importance,
            m.confidence,
            m.project,
            json.dumps(list(m.tags)),
            json.dumps(m.metadata),
            m.who,
            m.why,
            m.source_type,
            m.source_id,
            m.created_at,
            m.created_at,
            int(m.pinned),
            m.embedding_model,
            m.scope,
            m.source,
            json.dumps(m.work_unit_ref) if m.work_unit_ref is not None else None,
            m.methodology,
            json.dumps(list(m.related_files)),
            json.dumps(list(m.related_modules)),
            int(m.needs_review),
            int(m.user_verified),
            m.citation_text,
            m.commit_sha,
            m.decay_half_life_days,
            json.dumps(m.type_fields),
        ),
    )
    return inserted_rowid(cur)


def update_fields(conn: sqlite3.Connection, memory_id: str, fields: dict[str, Any], updated_at: str) -> None:
    """Set the given columns (only known ones) and ``updated_at``.

    Raises:
        ValueError: an unknown column name (a programming error).
        sqlite3.IntegrityError: the new content_hash collides with a live memory.
    """
    unknown = set(fields) - _PATCHABLE
    if unknown:
        raise ValueError(f"not patchable: {sorted(unknown)}")
    values = []
    for key, value in fields.items():
        if key in _LIST_COLUMNS:
            value = json.dumps(list(value))
        elif key in _JSON_COLUMNS:
            value = json.dumps(value) if value is not None else None
        elif key in ("pinned", "needs_review", "user_verified"):
            value = int(bool(value))
        values.append(value)
    assignments = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(
        f"UPDATE memories SET {assignments}, updated_at = ? WHERE id = ?",
        (*values, updated_at, memory_id),
    )


def set_deleted(conn: sqlite3.Connection, memory_id: str, deleted: bool, at: str) -> None:
    """Soft-delete (``deleted=True``) or recover a memory."""
    conn.execute(
        "UPDATE memories SET is_deleted = ?, deleted_at = ?, updated_at = ? WHERE id = ?",
        (int(deleted), at if deleted else None, at, memory_id),
    )


def touch(conn: sqlite3.Connection, ids: Iterable[str], at: str) -> None:
    """Rehearsal: bump access_count and last_accessed for recalled memories."""
    conn.executemany(
        "UPDATE memories SET access_count = access_count + 1, last_accessed = ? WHERE id = ?",
        [(at, i) for i in ids],
    )


def add_history(
    conn: sqlite3.Connection,
    memory_id: str,
    event: str,
    *,
    old_content: str | None = None,
    new_content: str | None = None,
    changes: dict[str, Any] | None = None,
    who: str | None = None,
    why: str | None = None,
    at: str,
) -> None:
    """Append one ``memory_history`` row."""
    conn.execute(
        """INSERT INTO memory_history (memory_id, event, old_content, new_content, changes, who, why, created_at)
           VALUES (?,?,?,?,?,?,?,?)""",
        (memory_id, event, old_content, new_content, json.dumps(changes or {}, default=str), who, why, at),
    )


def history(conn: sqlite3.Connection, memory_id: str) -> list[HistoryEntry]:
    """Every history row of a memory, oldest first."""
    rows = conn.execute("SELECT * FROM memory_history WHERE memory_id = ? ORDER BY id", (memory_id,)).fetchall()
    return [HistoryEntry.from_row(r) for r in rows]


def list_page(
    conn: sqlite3.Connection,
    *,
    limit: int,
    offset: int,
    project: str | None,
    type_: str | None,
    include_deleted: bool,
    order: str,
) -> tuple[list[Memory], int]:
    """One page of memories and the total count matching the filters.

    ``order`` is ``newest`` or ``oldest`` (by created_at, then seq).
    """
    where, args = ["1=1"], []
    if not include_deleted:
        where.append("is_deleted = 0")
    if project is not None:
        where.append("project = ?")
        args.append(project)
    if type_ is not None:
        where.append("type = ?")
        args.append(type_)
    clause = " AND ".join(where)
    direction = "DESC" if order == "newest" else "ASC"
    total = conn.execute(f"SELECT count(*) FROM memories WHERE {clause}", args).fetchone()[0]
    rows = conn.execute(
        f"SELECT * FROM memories WHERE {clause} ORDER BY created_at {direction}, seq {direction} LIMIT ? OFFSET ?",
        (*args, limit, offset),
    ).fetchall()
    return [Memory.from_row(r) for r in rows], int(total)


def live_count(conn: sqlite3.Connection) -> int:
    """Number of live (not deleted) memories, from the (project, is_deleted) index alone."""
    return int(conn.execute("SELECT count(*) FROM memories WHERE is_deleted = 0").fetchone()[0])


def stats(conn: sqlite3.Connection) -> dict[str, Any]:
    """Counts: live, deleted, superseded, pinned, by type, by project, embedded (any model)."""
    row = conn.execute(
        """SELECT count(*) AS total,
                  sum(is_deleted = 0) AS live, sum(is_deleted = 1) AS deleted,
                  sum(superseded_by IS NOT NULL) AS superseded, sum(pinned = 1 AND is_deleted = 0) AS pinned
           FROM memories"""
    ).fetchone()
    by_type = dict(
        conn.execute(
            "SELECT type, count(*) FROM memories WHERE is_deleted = 0 GROUP BY type ORDER BY 2 DESC"
        ).fetchall()
    )
    by_project = {
        (k if k is not None else ""): v
        for k, v in conn.execute(
            "SELECT project, count(*) FROM memories WHERE is_deleted = 0 GROUP BY project ORDER BY 2 DESC"
        ).fetchall()
    }
    by_model = {
        (k if k is not None else ""): v
        for k, v in conn.execute(
            "SELECT embedding_model, count(*) FROM memories WHERE is_deleted = 0 GROUP BY embedding_model"
        ).fetchall()
    }
    return {
        "total": row["total"] or 0,
        "live": row["live"] or 0,
        "deleted": row["deleted"] or 0,
        "superseded": row["superseded"] or 0,
        "pinned": row["pinned"] or 0,
        "by_type": by_type,
        "by_project": by_project,
        "by_embedding_model": by_model,
    }


def index_rows(conn: sqlite3.Connection, model: str | None) -> Iterable[IndexRow]:
    """Every memory with its content and context vectors for ``model`` (None where absent)."""
    cur = conn.execute(
        """SELECT m.seq, m.id, m.project, m.type, m.created_at, m.is_deleted,
                  e1.vector AS cv, e2.vector AS xv, m.superseded_by IS NOT NULL, m.importance, m.pinned,
                  m.access_count
           FROM memories m
           LEFT JOIN embeddings e1 ON e1.content_hash = m.content_hash AND e1.model = ?
           LEFT JOIN embeddings e2 ON e2.content_hash = m.context_hash AND e2.model = ?
           ORDER BY m.seq""",
        (model, model),
    )
    for r in cur:
        yield IndexRow(
            r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7], bool(r[8]), float(r[9]), bool(r[10]), int(r[11])
        )


def candidate_rows(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, CandRow]:
    """``seq -> CandRow`` of the memories ``seqs`` (deleted or not; unknown seqs absent), read as
    plain tuples in chunks of 500."""
    rows: dict[int, CandRow] = {}
    cur = conn.cursor()
    cur.row_factory = None  # plain tuples
    for start in range(0, len(seqs), 500):
        chunk = [int(x) for x in seqs[start : start + 500]]
        for r in cur.execute(
            f"SELECT seq, id, type, content, is_deleted FROM memories WHERE seq IN ({','.join('?' * len(chunk))})",
            chunk,
        ):
            rows[r[0]] = CandRow._make(r)
    return rows


def is_live(conn: sqlite3.Connection, memory_id: str) -> bool:
    """Whether the memory exists and is not deleted (superseded memories count as live)."""
    return conn.execute("SELECT 1 FROM memories WHERE id = ? AND is_deleted = 0", (memory_id,)).fetchone() is not None


def live_metadata(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
    """``(seq, id, metadata JSON text)`` of every live memory, in no particular order."""
    return [
        (int(r[0]), r[1], r[2]) for r in conn.execute("SELECT seq, id, metadata FROM memories WHERE is_deleted = 0")
    ]


def projects_and_contents(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[str | None, str]]:
    """``id -> (project, content)`` of the memories ``ids`` (deleted or not; unknown ids absent)."""
    out: dict[str, tuple[str | None, str]] = {}
    for i in range(0, len(ids), 500):
        chunk = list(ids[i : i + 500])
        for mid, stored, content in conn.execute(
            f"SELECT id, project, content FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk
        ):
            out[mid] = (stored, content)
    return out
