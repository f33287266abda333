"""Service-level inputs and outputs (plain dataclasses; Pydantic stays at the API edge)."""

from __future__ import annotations

from dataclasses import dataclass

from memlane.storage.models import Memory, MemoryBody


@dataclass(frozen=True, slots=True)
class RememberInput(MemoryBody):
    """One memory to store: its body (:class:`~memlane.storage.models.MemoryBody`; ``content`` is
    required, everything else has a default), plus ``created_at`` (ISO-8601; default: now) and
    ``scope`` (None: the type's fixed scope, else global; memlane.v3.model).
    """

    created_at: str | None = None
    scope: str | None = None


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
    #: A universal phase (memlane.v3.methodology.phases): scores are multiplied by the phase's
    #: weight of each memory's type; None: no phase, the ranking as without phases.
    phase: str | None = None


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One recalled memory with its final score and each leg's score (None = leg did not run)."""

    memory: Memory
    score: float
    vector_score: float | None
    bm25_score: float | None
    rank_score: float | None = None  # the learned ranker's score when it ordered the hits
    # When the learned ranker ordered the hits: this hit's heuristic final score and 1-based
    # rank among the candidates it reranked (the order the heuristic alone would have given)
    heuristic_score: float | None = None
    heuristic_rank: int | None = None


@dataclass(frozen=True, slots=True)
class RecallResult:
    """Hits, best first, and how the query was served (``legs``: which legs ran; ``ms``: time;
    ``ranker``: which ranker ordered the hits, ``learned`` or ``heuristic``)."""

    hits: list[RecallHit]
    legs: tuple[str, ...]
    took_ms: float
    ranker: str = "heuristic"
