"""SQL for ``documents`` and ``document_memories`` (memory-pipeline-v2.md "Document Ingest").

Storage layer: SQL only, frozen dataclasses out. Functions that write run inside the caller's
write transaction (``Database.write``). Timestamps are ISO-8601 UTC strings (ms, ``Z``).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

#: Every status a document can have, in processing order (``failed`` ends any of them).
STATUSES = ("queued", "fetching", "chunking", "embedding", "done", "failed")

_COLUMNS = (
    "id, source_type, source_url, title, content_type, byte_length, project, tags, status, error, "
    "attempts, chunk_count, job_id, created_at, updated_at, completed_at, deleted_at"
)


@dataclass(frozen=True, slots=True)
class Document:
    """One ``documents`` row. ``raw_content`` is only loaded by :func:`get` with ``content=True``."""

    id: str
    source_type: str
    source_url: str | None
    title: str | None
    content_type: str | None
    byte_length: int | None
    project: str | None
    tags: tuple[str, ...]
    status: str
    error: str | None
    attempts: int
    chunk_count: int
    job_id: int | None
    created_at: str
    updated_at: str
    completed_at: str | None
    deleted_at: str | None
    memory_count: int = 0
    raw_content: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Document:
        d = dict(row)
        d["tags"] = tuple(json.loads(d["tags"] or "[]"))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def as_dict(self) -> dict[str, Any]:
        """JSON-able view without ``raw_content``."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "raw_content"}
        out["tags"] = list(self.tags)
        return out


@dataclass(frozen=True, slots=True)
class DocumentChunk:
    """One chunk of a document: its index and the memory that holds it."""

    chunk_index: int
    memory_id: str
    content: str
    is_deleted: bool


def insert(
    conn: sqlite3.Connection,
    *,
    id: str,
    source_type: str,
    source_url: str | None,
    title: str | None,
    raw_content: str | None,
    byte_length: int | None,
    project: str | None,
    tags: tuple[str, ...],
    at: str,
) -> None:
    """Insert a ``queued`` document."""
    conn.execute(
        "INSERT INTO documents (id, source_type, source_url, title, raw_content, byte_length, project, tags, "
        "status, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?, 'queued', ?, ?)",
        (id, source_type, source_url, title, raw_content, byte_length, project, json.dumps(list(tags)), at, at),
    )


def set_job(conn: sqlite3.Connection, document_id: str, job_id: int) -> None:
    """Record the ingest job of a document."""
    conn.execute("UPDATE documents SET job_id = ? WHERE id = ?", (job_id, document_id))


def _memory_count_sql() -> str:
    return (
        "(SELECT count(DISTINCT dm.memory_id) FROM document_memories dm JOIN memories m ON m.id = dm.memory_id "
        "WHERE dm.document_id = documents.id AND m.is_deleted = 0) AS memory_count"
    )


def get(conn: sqlite3.Connection, document_id: str, *, content: bool = False) -> Document | None:
    """The document (deleted or not), or None; ``content=True`` also loads ``raw_content``."""
    cols = _COLUMNS + (", raw_content" if content else "")
    r = conn.execute(f"SELECT {cols}, {_memory_count_sql()} FROM documents WHERE id = ?", (document_id,)).fetchone()
    return Document.from_row(r) if r else None


def list_page(
    conn: sqlite3.Connection, *, limit: int, offset: int, status: str | None = None, include_deleted: bool = False
) -> tuple[list[Document], int]:
    """A page of documents, newest first, and the total matching count."""
    where, args = ["1=1"], []
    if not include_deleted:
        where.append("deleted_at IS NULL")
    if status is not None:
        where.append("status = ?")
        args.append(status)
    clause = " AND ".join(where)
    total = conn.execute(f"SELECT count(*) FROM documents WHERE {clause}", args).fetchone()[0]
    rows = conn.execute(
        f"SELECT {_COLUMNS}, {_memory_count_sql()} FROM documents WHERE {clause} "
        "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
        (*args, limit, offset),
    ).fetchall()
    return [Document.from_row(r) for r in rows], int(total)


def set_status(
    conn: sqlite3.Connection,
    document_id: str,
    status: str,
    *,
    at: str,
    error: str | None = None,
    clear_error: bool = False,
) -> None:
    """Move a document to ``status`` (one of :data:`STATUSES`); ``done`` also sets ``completed_at``.

    ``error`` is stored when given (truncated to 2,000 chars); ``clear_error`` erases an old one.

    Raises:
        ValueError: an unknown status (a programming error).
    """
    if status not in STATUSES:
        raise ValueError(f"unknown document status {status!r}")
    sets, args = ["status = ?", "updated_at = ?"], [status, at]
    if error is not None:
        sets.append("error = ?")
        args.append(error[:2000])
    elif clear_error:
        sets.append("error = NULL")
    if status == "done":
        sets.append("completed_at = ?")
        args.append(at)
    conn.execute(f"UPDATE documents SET {', '.join(sets)} WHERE id = ?", (*args, document_id))


def start_attempt(conn: sqlite3.Connection, document_id: str, *, at: str) -> None:
    """Count one processing attempt and move the document to ``fetching``."""
    conn.execute(
        "UPDATE documents SET attempts = attempts + 1, status = 'fetching', updated_at = ? WHERE id = ?",
        (at, document_id),
    )


def set_fetched(
    conn: sqlite3.Connection,
    document_id: str,
    *,
    content: str,
    content_type: str | None,
    byte_length: int,
    title: str | None,
    at: str,
) -> None:
    """Store a fetched body (so a retry need not fetch again); the title only backfills a missing one."""
    conn.execute(
        "UPDATE documents SET raw_content = ?, content_type = ?, byte_length = ?, "
        "title = COALESCE(title, ?), updated_at = ? WHERE id = ?",
        (content, content_type, byte_length, title, at, document_id),
    )


def set_chunk_count(conn: sqlite3.Connection, document_id: str, n: int, *, at: str) -> None:
    """Record how many chunks the content was split into."""
    conn.execute("UPDATE documents SET chunk_count = ?, updated_at = ? WHERE id = ?", (n, at, document_id))


def mark_deleted(conn: sqlite3.Connection, document_id: str, *, at: str) -> None:
    """Soft-delete a document (the row and its links stay)."""
    conn.execute("UPDATE documents SET deleted_at = ?, updated_at = ? WHERE id = ?", (at, at, document_id))


def link(conn: sqlite3.Connection, document_id: str, chunk_index: int, memory_id: str, *, at: str) -> None:
    """Record that ``memory_id`` holds chunk ``chunk_index`` (a re-link replaces the memory)."""
    conn.execute(
        "INSERT INTO document_memories (document_id, memory_id, chunk_index, created_at) "
        "VALUES (?,?,?,?) ON CONFLICT(document_id, chunk_index) DO UPDATE SET "
        "memory_id = excluded.memory_id",
        (document_id, memory_id, chunk_index, at),
    )


def linked_chunks(conn: sqlite3.Connection, document_id: str) -> dict[int, str]:
    """``chunk_index -> memory_id`` of the chunks already written for a document."""
    return {
        int(i): m
        for i, m in conn.execute(
            "SELECT chunk_index, memory_id FROM document_memories WHERE document_id = ?", (document_id,)
        )
    }


def chunks(conn: sqlite3.Connection, document_id: str, *, limit: int, offset: int) -> list[DocumentChunk]:
    """A page of a document's chunks in order, with their memories' content."""
    rows = conn.execute(
        "SELECT dm.chunk_index, dm.memory_id, m.content, m.is_deleted FROM document_memories dm "
        "JOIN memories m ON m.id = dm.memory_id WHERE dm.document_id = ? ORDER BY dm.chunk_index LIMIT ? OFFSET ?",
        (document_id, limit, offset),
    ).fetchall()
    return [DocumentChunk(int(r[0]), r[1], r[2], bool(r[3])) for r in rows]


def exclusive_live_memories(conn: sqlite3.Connection, document_id: str) -> list[str]:
    """Live memories linked to this document and to no other live (not deleted) document:
    those deleting the document may soft-delete."""
    return [
        r[0]
        for r in conn.execute(
            """SELECT DISTINCT dm.memory_id FROM document_memories dm JOIN memories m ON m.id = dm.memory_id
           WHERE dm.document_id = ? AND m.is_deleted = 0 AND NOT EXISTS (
               SELECT 1 FROM document_memories o JOIN documents d ON d.id = o.document_id
               WHERE o.memory_id = dm.memory_id AND o.document_id != dm.document_id AND d.deleted_at IS NULL)""",
            (document_id,),
        )
    ]
