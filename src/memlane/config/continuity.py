"""The ``continuity`` settings: session checkpoints and the recovery digest
(:mod:`memlane.sessions.checkpoints`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SessionCheckpointSettings(BaseModel):
    """Config ``continuity`` (seed names accepted as aliases, e.g. ``promptInterval``)."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)

    enabled: bool = Field(True, description="Master switch: off = no checkpoints, no recovery digest.")
    prompt_interval: int = Field(
        10, ge=1, le=1000, alias="promptInterval", description="Prompts between periodic checkpoints."
    )
    time_interval_ms: int = Field(
        900_000,
        ge=60_000,
        le=3_600_000,
        alias="timeIntervalMs",
        description="Time between periodic checkpoints, ms (60 s to 1 h; 15 min).",
    )
    max_checkpoints_per_session: int = Field(
        50,
        ge=1,
        le=500,
        alias="maxCheckpointsPerSession",
        description="Per-session cap; the oldest rows beyond it are deleted.",
    )
    retention_days: int = Field(
        7, ge=1, le=90, alias="retentionDays", description="Days before checkpoints are hard-deleted by prune()."
    )
    recovery_budget_chars: int = Field(
        2000, ge=200, le=10_000, alias="recoveryBudgetChars", description="Max characters of the recovery digest."
    )
