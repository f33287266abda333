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
        0.06,
        ge=0.0,
        le=2.0,
        description="A memory drifts from a referenced document when the max cosine similarity between its claim "
        "(its text without its references) and the document's current chunk and sentence vectors has dropped by "
        "more than this from the reference's baseline (the same similarity, measured when the memory was written "
        "or the reference first resolved). 0.06 is the 0.0633 chosen on the httpx 0.13->0.18 pair of `memlane "
        "bench drift` (best F1 with precision >= 0.8), rounded to two decimals; every value from 0.03 to 0.10 "
        "meets precision >= 0.8 with recall >= 0.6 on all three pairs; docs/drift.md.",
    )
    slot_similarity: float = Field(
        0.85,
        ge=0.0,
        le=1.01,
        description="A slot change is drift evidence too: when the document's sentence nearest to a memory's claim "
        "has at least this cosine similarity to it (it is still the same statement) but a number, version, date "
        "or code identifier its sentence held when the baseline was taken is gone, replaced by one the claim does "
        "not have (`2020 -> 2021`). Above 1: off. docs/drift.md.",
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
