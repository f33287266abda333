"""Frozen dataclasses returned by the storage layer (no sqlite3.Row leaves storage)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class MemoryBody:
    """What a writer says about a memory: the memory record's fields, declared once.

    ``services.inputs.RememberInput`` (a remember request) and :class:`NewMemory` (a row to
    insert) extend it, :class:`Memory` (a stored row) extends NewMemory; the API's ``MemoryIn``
    and ``MemoryOut`` are derived from RememberInput and Memory. ``context`` is text around the
    memory (e.g. the preceding conversation turns): indexed by both recall legs, not part of the
    content or its hash.
    """

    content: str
    type: str = "fact"
    importance: float = 0.5
    confidence: float = 1.0
    project: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    who: str | None = None
    why: str | None = None
    source_type: str | None = None
    source_id: str | None = None
    pinned: bool = False
    context: str | None = None
    # V3 (migration 0014; memlane.v3.model checks them)
    source: str = "agent_explicit"
    work_unit_ref: dict[str, Any] | None = None
    related_files: tuple[str, ...] = ()
    related_modules: tuple[str, ...] = ()
    needs_review: bool = False
    user_verified: bool = False
    citation_text: str | None = None
    commit_sha: str | None = None
    decay_half_life_days: float | None = None
    type_fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class NewMemory(MemoryBody):
    """A memory ready to insert: its body normalised (``content`` is the stored text) and hashed
    by the service, with its id, creation time and scope settled."""

    id: str
    normalized_content: str
    content_hash: str
    context_hash: str | None = None
    created_at: str = ""
    embedding_model: str | None = None
    scope: str = "global"
    methodology: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory(NewMemory):
    """One row of ``memories``: the record's fields (:class:`NewMemory`) plus the row's state.
    Timestamps are ISO-8601 UTC strings."""

    seq: int
    updated_at: str
    last_accessed: str | None
    access_count: int
    is_deleted: bool
    deleted_at: str | None
    superseded_by: str | None
    extraction_status: str
    # V3 (migration 0014)
    stale_at: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Memory:
        """Build from a ``SELECT * FROM memories`` row."""
        d = dict(row)
        d["tags"] = tuple(json.loads(d["tags"] or "[]"))
        d["metadata"] = json.loads(d["metadata"] or "{}")
        d["pinned"] = bool(d["pinned"])
        d["is_deleted"] = bool(d["is_deleted"])
        if "scope" in d:
            d["work_unit_ref"] = json.loads(d["work_unit_ref"]) if d["work_unit_ref"] else None
            d["related_files"] = tuple(json.loads(d["related_files"] or "[]"))
            d["related_modules"] = tuple(json.loads(d["related_modules"] or "[]"))
            d["needs_review"] = bool(d["needs_review"])
            d["user_verified"] = bool(d["user_verified"])
            d["type_fields"] = json.loads(d["type_fields"] or "{}")
        return cls(**d)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One row of ``memory_history``."""

    id: int
    memory_id: str
    event: str
    old_content: str | None
    new_content: str | None
    changes: dict[str, Any]
    who: str | None
    why: str | None
    created_at: str

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> HistoryEntry:
        d = dict(row)
        d["changes"] = json.loads(d["changes"] or "{}")
        return cls(**d)


@dataclass(frozen=True, slots=True)
class IndexRow:
    """What the in-memory index needs of one memory (see recall.memory_index)."""

    seq: int
    id: str
    project: str | None
    type: str
    created_at: str
    is_deleted: bool
    content_vector: bytes | None
    context_vector: bytes | None
    is_superseded: bool = False
    importance: float = 0.5
    pinned: bool = False
    access_count: int = 0


class CandRow(NamedTuple):
    """What the recall stages and the graph boost read of a candidate memory
    (:func:`memlane.storage.memories.candidate_rows`)."""

    seq: int
    id: str
    type: str
    content: str
    is_deleted: int
