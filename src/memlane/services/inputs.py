"""Service-level inputs and outputs (plain dataclasses; Pydantic stays at the API edge)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memlane.storage.models import Memory


@dataclass(frozen=True, slots=True)
class RememberInput:
    """One memory to store. ``content`` is required; everything else has a default.

    ``context`` is text around the memory (e.g. the preceding conversation turns): it is
    indexed by both recall legs but is not part of the memory's content or hash.
    ``created_at`` is ISO-8601 (default: now).
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
    created_at: str | None = None
    pinned: bool = False
    context: str | None = None
    # V3 fields (memlane.v3.model): scope None = the type's fixed scope, else global
    scope: str | None = None
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


@dataclass(frozen=True, slots=True)
class RememberResult:
    """What happened to one input: ``created`` or ``deduplicated`` (then ``id`` is the existing memory)."""

    id: str
    status: str
    content_hash: str
    embedded: bool


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """A recall request. Times ISO-8601; ``now`` defaults to the current time."""

    query: str
    limit: int = 10
    project: str | None = None
    types: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    include_deleted: bool = False
    min_score: float | None = None
    alpha: float | None = None
    now: str | None = None
    touch: bool = True
    include_global: bool = False  # with a project: also memories without a project
    exclude_superseded: bool = False
    ranker: str | None = None  # "learned" / "heuristic"; None: recall.ranker (memlane.ranker.stage)


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One recalled memory with its final score and each leg's score (None = leg did not run)."""

    memory: Memory
    score: float
    vector_score: float | None
    bm25_score: float | None
    rank_score: float | None = None  # the learned ranker's score when it ordered the hits


@dataclass(frozen=True, slots=True)
class RecallResult:
    """Hits, best first, and how the query was served (``legs``: which legs ran; ``ms``: time;
    ``ranker``: which ranker ordered the hits, ``learned`` or ``heuristic``)."""

    hits: list[RecallHit]
    legs: tuple[str, ...]
    took_ms: float
    ranker: str = "heuristic"
