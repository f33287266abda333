"""Pydantic request and response models: the HTTP edge only (services use dataclasses).

Requests are strict (no silent type coercion) and forbid unknown fields, so a typo or a
wrong type is a 422 naming the field rather than a silently ignored value.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any, Literal, Self, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from memlane.services.inputs import RememberInput, RememberResult
from memlane.storage.models import HistoryEntry, Memory


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


#: What each field of a memory to remember means (the fields, types and defaults are those of
#: :class:`~memlane.services.inputs.RememberInput`).
MEMORY_IN_DESCRIPTIONS: dict[str, str] = {
    "content": "The memory text (normalised: whitespace collapsed).",
    "type": "Memory type, e.g. fact, preference, decision, constraint.",
    "importance": "Importance in [0, 1].",
    "confidence": "Confidence in [0, 1].",
    "project": "Project scope; null = global.",
    "tags": "Free tags.",
    "metadata": "Free JSON metadata.",
    "who": "Who wrote it (agent, user, tool).",
    "why": "Why it was written.",
    "source_type": "Kind of source (session, document, import...).",
    "source_id": "Id within the source.",
    "created_at": "ISO-8601 creation time; default now.",
    "pinned": "Pinned memories are always candidates for injection.",
    "context": "Surrounding text (e.g. preceding turns), indexed for recall but not part of the memory.",
    # V3 (docs/v3.md; checked by memlane.v3.model)
    "scope": "global | module | work_unit | session; default: the type's fixed scope (workflow_recipe global; "
    "context_cost, prefetch_pattern module), else global.",
    "source": "agent_explicit | observer_inferred | qa_auto | mcp_auto | commit_auto | user_taught.",
    "work_unit_ref": 'The work unit: {"methodology": str, "hierarchy": [outermost, ..., innermost], "label"?: str}.',
    "related_files": "Files the memory is about (repo-relative).",
    "related_modules": "Modules the memory is about.",
    "needs_review": "Waiting for the user's review (inferred memories).",
    "user_verified": "The user confirmed it.",
    "citation_text": "Short form for an inline citation (<= 200 characters).",
    "commit_sha": "The git commit that produced it (7-64 hex digits).",
    "decay_half_life_days": "Decay half-life override in days (default: work_state 7, dead_end 90).",
    "type_fields": "The type's extended fields (dead_end: approach_tried, why_it_failed...; see docs/v3.md).",
}


def _memory_in_fields() -> dict[str, Any]:
    """``name -> (type, Field)`` of every field of ``RememberInput``, in its order, with its default
    (tuples as lists: JSON arrays) and its description.

    Raises:
        KeyError: a field of RememberInput has no description (checked at import).
    """
    hints = get_type_hints(RememberInput)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(RememberInput):
        t, desc = hints[f.name], MEMORY_IN_DESCRIPTIONS[f.name]
        if t == tuple[str, ...]:
            out[f.name] = (list[str], Field(default_factory=list, description=desc))
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = (t, Field(default_factory=f.default_factory, description=desc))
        else:
            default = ... if f.default is dataclasses.MISSING else f.default
            out[f.name] = (t, Field(default, description=desc))
    return out


_MEMORY_IN_ARRAYS = frozenset(n for n, (t, _) in _memory_in_fields().items() if t == list[str])


class _MemoryInBase(_Strict):
    def to_input(self) -> RememberInput:
        """The service input of this request (lists as tuples)."""
        d = self.model_dump()
        for name in _MEMORY_IN_ARRAYS:
            d[name] = tuple(d[name])
        return RememberInput(**d)


# One memory to remember, derived from services.inputs.RememberInput (one declaration of its fields).
if TYPE_CHECKING:
    MemoryIn = _MemoryInBase
else:
    MemoryIn = create_model(
        "MemoryIn", __base__=_MemoryInBase, __doc__="One memory to remember.", **_memory_in_fields()
    )


class BatchIn(_Strict):
    """Several memories in one call (one result per item, in order)."""

    memories: list[MemoryIn] = Field(..., description="The memories to remember.")


class RememberOut(BaseModel):
    id: str
    status: str = Field(..., description="created | deduplicated")
    content_hash: str
    embedded: bool

    @classmethod
    def of(cls, r: RememberResult) -> RememberOut:
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
    touch: bool = Field(
        True,
        description="Count each returned memory as accessed (access_count, last_accessed: "
        "the rehearsal boost's input). False leaves the store unchanged, for automated or "
        "exploratory recalls that should not promote what they return.",
    )
    ranker: Literal["learned", "heuristic"] | None = Field(
        None,
        description="Who orders the best candidates; default recall.ranker (the learned ranker when "
        "its features are available).",
    )
    phase: str | None = Field(
        None,
        description="The work's phase: a universal phase (define, implement, validate, refine, explore, "
        "reflect) or a phase name of the project's methodology (coding, story_acceptance...); scores are "
        "weighed by memory type for it (docs/v3.md). Default: none, the ranking without phases.",
    )
    session_key: str | None = Field(None, description="Use this session's current phase when `phase` is not given.")


#: Fields of :class:`~memlane.storage.models.Memory` the API never shows: the rowid, the
#: normalised text FTS indexes, and the hash of the context vector's text.
HIDDEN_MEMORY_FIELDS = frozenset({"seq", "normalized_content", "context_hash"})


def _memory_out_fields() -> dict[str, Any]:
    """``name -> (type, ...)`` of every shown field of ``Memory``, the id first, then in Memory's
    order (tuples as lists: JSON arrays); every field is required (a memory's JSON always
    carries all of them)."""
    hints = get_type_hints(Memory)
    out: dict[str, Any] = {}
    for f in sorted(dataclasses.fields(Memory), key=lambda f: f.name != "id"):  # the id first
        if f.name not in HIDDEN_MEMORY_FIELDS:
            t = hints[f.name]
            out[f.name] = (list[str] if t == tuple[str, ...] else t, ...)
    return out


#: The shown fields of a memory, in the order of its JSON object.
MEMORY_FIELDS: tuple[str, ...] = tuple(_memory_out_fields())
_ARRAY_FIELDS = tuple(n for n, (t, _) in _memory_out_fields().items() if t == list[str])
_MEMORY_VALUES = operator.attrgetter(*MEMORY_FIELDS)


class _MemoryOutBase(BaseModel):
    @classmethod
    def of(cls, m: Memory) -> Self:
        """The API view of a stored memory."""
        return cls(**memory_dict(m))


# The memory's JSON object, derived from storage.models.Memory (the one declaration of its fields).
if TYPE_CHECKING:
    MemoryOut = _MemoryOutBase
else:
    MemoryOut = create_model("MemoryOut", __base__=_MemoryOutBase, **_memory_out_fields())


def memory_dict(m: Memory) -> dict[str, Any]:
    """The JSON object of a memory, as MemoryOut documents it: :data:`MEMORY_FIELDS`, tuples as lists
    (built without validation: recall is hot)."""
    d = dict(zip(MEMORY_FIELDS, _MEMORY_VALUES(m)))
    for name in _ARRAY_FIELDS:
        d[name] = list(d[name])
    return d


class RecallHitOut(MemoryOut):
    score: float = Field(..., description="Final score after merge and boosts.")
    vector_score: float | None = Field(..., description="Vector-leg score in [0, 1]; null if the leg did not run.")
    bm25_score: float | None = Field(..., description="Normalised BM25 score in [0, 1]; null if the leg did not run.")
    rank_score: float | None = Field(
        None, description="The learned ranker's score (hits are in its order); null when the heuristic ranked."
    )


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
    def of(cls, h: HistoryEntry) -> HistoryOut:
        return cls(**{k: getattr(h, k) for k in cls.model_fields})


class ListOut(BaseModel):
    items: list[MemoryOut]
    total: int
    limit: int
    offset: int
    stats: dict[str, Any]
