"""Pydantic request and response models: the HTTP edge only (services use dataclasses).

Requests are strict (no silent type coercion) and forbid unknown fields, so a typo or a
wrong type is a 422 naming the field rather than a silently ignored value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memlane.services.inputs import RememberInput, RememberResult
from memlane.storage.models import HistoryEntry, Memory


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class MemoryIn(_Strict):
    """One memory to remember."""

    content: str = Field(..., description="The memory text (normalised: whitespace collapsed).")
    type: str = Field("fact", description="Memory type, e.g. fact, preference, decision, constraint.")
    importance: float = Field(0.5, description="Importance in [0, 1].")
    confidence: float = Field(1.0, description="Confidence in [0, 1].")
    project: str | None = Field(None, description="Project scope; null = global.")
    tags: list[str] = Field(default_factory=list, description="Free tags.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free JSON metadata.")
    who: str | None = Field(None, description="Who wrote it (agent, user, tool).")
    why: str | None = Field(None, description="Why it was written.")
    source_type: str | None = Field(None, description="Kind of source (session, document, import...).")
    source_id: str | None = Field(None, description="Id within the source.")
    created_at: str | None = Field(None, description="ISO-8601 creation time; default now.")
    pinned: bool = Field(False, description="Pinned memories are always candidates for injection.")
    context: str | None = Field(
        None, description="Surrounding text (e.g. preceding turns), indexed for recall but not part of the memory.")
    # V3 (docs/v3.md; checked by memlane.v3.model)
    scope: str | None = Field(None, description="global | module | work_unit | session; default: the type's "
                              "fixed scope (workflow_recipe global; context_cost, prefetch_pattern module), else global.")
    source: str = Field("agent_explicit", description="agent_explicit | observer_inferred | qa_auto | mcp_auto | "
                        "commit_auto | user_taught.")
    work_unit_ref: dict[str, Any] | None = Field(
        None, description='The work unit: {"methodology": str, "hierarchy": [outermost, ..., innermost], "label"?: str}.')
    related_files: list[str] = Field(default_factory=list, description="Files the memory is about (repo-relative).")
    related_modules: list[str] = Field(default_factory=list, description="Modules the memory is about.")
    needs_review: bool = Field(False, description="Waiting for the user's review (inferred memories).")
    user_verified: bool = Field(False, description="The user confirmed it.")
    citation_text: str | None = Field(None, description="Short form for an inline citation (<= 200 characters).")
    commit_sha: str | None = Field(None, description="The git commit that produced it (7-64 hex digits).")
    decay_half_life_days: float | None = Field(None, description="Decay half-life override in days "
                                               "(default: work_state 7, dead_end 90).")
    type_fields: dict[str, Any] = Field(default_factory=dict, description="The type's extended fields "
                                        "(dead_end: approach_tried, why_it_failed...; see docs/v3.md).")

    def to_input(self) -> RememberInput:
        d = self.model_dump()
        d["tags"] = tuple(d["tags"])
        d["related_files"] = tuple(d["related_files"])
        d["related_modules"] = tuple(d["related_modules"])
        return RememberInput(**d)


class BatchIn(_Strict):
    """Several memories in one call (one result per item, in order)."""

    memories: list[MemoryIn] = Field(..., description="The memories to remember.")


class RememberOut(BaseModel):
    id: str
    status: str = Field(..., description="created | deduplicated")
    content_hash: str
    embedded: bool

    @classmethod
    def of(cls, r: RememberResult) -> "RememberOut":
        return cls(id=r.id, status=r.status, content_hash=r.content_hash, embedded=r.embedded)


class BatchOut(BaseModel):
    results: list[RememberOut]
    created: int
    deduplicated: int


class RecallIn(_Strict):
    """A recall request."""

    query: str = Field(..., description="Any text; FTS syntax in it is treated as words.")
    limit: int = Field(10, description="Results to return, 1..1000.")
    project: str | None = Field(None, description="Only memories of this project.")
    types: list[str] = Field(default_factory=list, description="Only memories of these types.")
    since: str | None = Field(None, description="Only memories created at or after (ISO-8601).")
    until: str | None = Field(None, description="Only memories created before (ISO-8601).")
    include_deleted: bool = Field(False, description="Also return soft-deleted memories.")
    min_score: float | None = Field(None, description="Drop results below this final score.")
    alpha: float | None = Field(None, description="Vector-leg weight; default from settings.")
    now: str | None = Field(None, description="Reference time for recency (ISO-8601); default now.")
    touch: bool = Field(True, description="Count each returned memory as accessed (access_count, last_accessed: "
                        "the rehearsal boost's input). False leaves the store unchanged, for automated or "
                        "exploratory recalls that should not promote what they return.")
    ranker: Literal["learned", "heuristic"] | None = Field(
        None, description="Who orders the best candidates; default recall.ranker (the learned ranker when "
        "its features are available).")


class MemoryOut(BaseModel):
    id: str
    type: str
    content: str
    context: str | None
    content_hash: str
    importance: float
    confidence: float
    project: str | None
    tags: list[str]
    metadata: dict[str, Any]
    who: str | None
    why: str | None
    source_type: str | None
    source_id: str | None
    created_at: str
    updated_at: str
    last_accessed: str | None
    access_count: int
    pinned: bool
    is_deleted: bool
    deleted_at: str | None
    superseded_by: str | None
    embedding_model: str | None
    extraction_status: str
    scope: str = "global"
    source: str = "agent_explicit"
    work_unit_ref: dict[str, Any] | None = None
    methodology: str | None = None
    related_files: list[str] = Field(default_factory=list)
    related_modules: list[str] = Field(default_factory=list)
    needs_review: bool = False
    user_verified: bool = False
    citation_text: str | None = None
    commit_sha: str | None = None
    decay_half_life_days: float | None = None
    stale_at: str | None = None
    type_fields: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, m: Memory) -> "MemoryOut":
        return cls(**memory_dict(m))


def memory_dict(m: Memory) -> dict[str, Any]:
    """The JSON object of a memory, as MemoryOut documents it (built directly: recall is hot)."""
    return {
        "id": m.id, "type": m.type, "content": m.content, "context": m.context, "content_hash": m.content_hash,
        "importance": m.importance, "confidence": m.confidence, "project": m.project, "tags": list(m.tags),
        "metadata": m.metadata, "who": m.who, "why": m.why, "source_type": m.source_type,
        "source_id": m.source_id, "created_at": m.created_at, "updated_at": m.updated_at,
        "last_accessed": m.last_accessed, "access_count": m.access_count, "pinned": m.pinned,
        "is_deleted": m.is_deleted, "deleted_at": m.deleted_at, "superseded_by": m.superseded_by,
        "embedding_model": m.embedding_model, "extraction_status": m.extraction_status,
        "scope": m.scope, "source": m.source, "work_unit_ref": m.work_unit_ref, "methodology": m.methodology,
        "related_files": list(m.related_files), "related_modules": list(m.related_modules),
        "needs_review": m.needs_review, "user_verified": m.user_verified, "citation_text": m.citation_text,
        "commit_sha": m.commit_sha, "decay_half_life_days": m.decay_half_life_days, "stale_at": m.stale_at,
        "type_fields": m.type_fields,
    }


class RecallHitOut(MemoryOut):
    score: float = Field(..., description="Final score after merge and boosts.")
    vector_score: float | None = Field(..., description="Vector-leg score in [0, 1]; null if the leg did not run.")
    bm25_score: float | None = Field(..., description="Normalised BM25 score in [0, 1]; null if the leg did not run.")
    rank_score: float | None = Field(None, description="The learned ranker's score (hits are in its order); null "
                                     "when the heuristic ranked.")


class RecallOut(BaseModel):
    results: list[RecallHitOut]
    legs: list[str] = Field(..., description="Which legs ran: bm25, vector.")
    took_ms: float
    ranker: str = Field("heuristic", description="Which ranker ordered the hits: learned or heuristic.")


class PatchIn(_Strict):
    """Fields to change; absent fields are untouched. ``who``/``why`` go to the history row."""

    content: str | None = None
    context: str | None = None
    type: str | None = None
    importance: float | None = None
    confidence: float | None = None
    project: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    pinned: bool | None = None
    who: str | None = None
    why: str | None = None
    scope: str | None = None
    source: str | None = None
    work_unit_ref: dict[str, Any] | None = None
    related_files: list[str] | None = None
    related_modules: list[str] | None = None
    needs_review: bool | None = None
    user_verified: bool | None = None
    citation_text: str | None = None
    commit_sha: str | None = None
    decay_half_life_days: float | None = None
    type_fields: dict[str, Any] | None = None


class ActorIn(_Strict):
    """Optional attribution for delete and recover."""

    who: str | None = None
    why: str | None = None


class HistoryOut(BaseModel):
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
    def of(cls, h: HistoryEntry) -> "HistoryOut":
        return cls(**{k: getattr(h, k) for k in cls.model_fields})


class ListOut(BaseModel):
    items: list[MemoryOut]
    total: int
    limit: int
    offset: int
    stats: dict[str, Any]
