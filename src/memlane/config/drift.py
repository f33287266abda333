"""Settings of drift and staleness detection (``drift.*`` in config.yaml, ``MEMLANE_DRIFT__*``)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DriftSettings(BaseModel):
    """Thresholds and switches of :mod:`memlane.drift` (docs/drift.md)."""

    enabled: bool = Field(
        True,
        description="Check retrieved memories for drift and missing files (write-behind) "
        "and apply the retrieval rules (no proactive injection, penalty and warning in recall).",
    )
    threshold: float = Field(
        0.21,
        ge=0.0,
        le=2.0,
        description="A memory drifts from a referenced document when 1 - (max cosine similarity between its "
        "claim, its text without its references, and the document's current chunk and sentence vectors) is above "
        "this (cosine distance). 0.21 is the 0.2027 chosen on the httpx 0.13->0.18 pair of `memlane bench drift` "
        "(best F1 with precision >= 0.8), rounded up to keep that precision; the seed's starting 0.62 flagged "
        "almost nothing there; docs/drift.md.",
    )
    recheck_seconds: float = Field(
        60.0,
        ge=0.0,
        le=86_400.0,
        description="A memory checked less than this many seconds ago is not checked again when it is retrieved "
        "again (the write-behind check's load on a busy store); an update of the memory clears it.",
    )
    debounce_hours: float = Field(
        24.0,
        ge=0.0,
        le=24.0 * 365,
        description="An open row for the same memory, target and type detected within this many hours is "
        "updated in place (strongest signal kept) instead of a new row being written.",
    )
    penalty: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Recall and MCP search multiply a stale or drifting memory's score and confidence by "
        "(1 - penalty) and prefix its content with a warning.",
    )
    sweep_every_sessions: int = Field(
        20,
        ge=0,
        le=100_000,
        description="The staleness sweep runs every this many session-starts (and at a project's first "
        "session); 0 = never on its own.",
    )
    git: bool = Field(
        True,
        description="Read renames and deletions from git (the real git binary) when a project is a git repository.",
    )
    propagation_floor: float = Field(
        0.05, ge=0.0, le=1.0, description="Confidence propagation stops where a change is smaller than this."
    )
