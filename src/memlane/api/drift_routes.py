"""Drift and staleness endpoints (docs/drift.md):

* ``GET /api/drift/errors`` -- prediction errors, newest first, each with its ``memory``
  (filters: ``error_type``, ``memory_id``, ``resolved`` = false (default) | true | all).
* ``POST /api/drift/errors/{error_id}/resolve`` -- dismiss one open row (a false positive).
* ``POST /api/memory/{memory_id}/signal`` -- external evidence that a memory is stale
  (``source``, ``evidence`` JSON object, ``weight``): a ``memory_external_signal`` row.
* ``POST /api/memory/{memory_id}/confidence`` -- set a memory's confidence (validated, flagged
  wrong) and propagate the change along its relations.
* ``POST /api/stale/scan`` -- the file staleness sweep (``project``: one project root, or all).

Errors use the one JSON shape: 422 bad input, 404 unknown memory or error id.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi import Path as FastApiPath
from pydantic import BaseModel, ConfigDict, Field

from memlane.container import Container
from memlane.errors import NotFound

#: Largest offset accepted in a page request.
MAX_OFFSET = 1_000_000_000


class SignalIn(BaseModel):
    """External evidence about one memory."""

    model_config = ConfigDict(extra="forbid", strict=True)

    source: str = Field(..., min_length=1, max_length=200, description="Who saw it: git, linear, calendar, manual...")
    evidence: dict[str, Any] = Field(default_factory=dict, description="Opaque JSON object, stored as given.")
    weight: float = Field(1.0, ge=0.0, le=10.0, description="Higher = more confident the memory is stale.")


class ConfidenceIn(BaseModel):
    """A memory's new confidence."""

    model_config = ConfigDict(extra="forbid", strict=True)

    confidence: float = Field(..., ge=0.0, le=1.0, description="New confidence in [0, 1].")


class ScanIn(BaseModel):
    """Which project root to sweep (all when absent)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    project: str | None = Field(None, max_length=4096, description="A project root; null = every project.")


def router(container: Container) -> APIRouter:
    """The drift routes over ``container.drift``."""
    r = APIRouter(tags=["drift"])

    @r.get("/api/drift/errors")
    def list_errors(
        error_type: Literal["memory_drift", "memory_external_signal", "memory_stale_file", "memory_stale_entity"]
        | None = None,
        memory_id: str | None = Query(None, max_length=200),
        resolved: Literal["false", "true", "all"] = "false",
        limit: int = Query(50, ge=1, le=1000),
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
    ) -> dict[str, Any]:
        """Prediction errors, newest first: ``items`` (each with ``memory``), ``limit``, ``offset``."""
        flag = {"false": False, "true": True, "all": None}[resolved]
        items = container.drift.list(
            error_type=error_type, memory_id=memory_id, resolved=flag, limit=limit, offset=offset
        )
        return {"items": items, "limit": limit, "offset": offset}

    @r.post("/api/drift/errors/{error_id}/resolve")
    def resolve_error(
        error_id: int = FastApiPath(..., ge=1, le=2**63 - 1, description="A prediction error's id (SQLite INTEGER)."),
    ) -> dict[str, Any]:
        """Mark one open row resolved; 404 when unknown or already resolved."""
        if not container.drift.resolve(error_id):
            raise NotFound(f"no open prediction error {error_id}")
        return {"error_id": error_id, "resolved": True}

    @r.post("/api/memory/{memory_id}/signal")
    def record_signal(memory_id: str, body: SignalIn) -> dict[str, Any]:
        """Store the evidence as a ``memory_external_signal`` row; returns the row."""
        return container.drift.record_signal(memory_id, source=body.source, evidence=body.evidence, weight=body.weight)

    @r.post("/api/memory/{memory_id}/confidence")
    def set_confidence(memory_id: str, body: ConfidenceIn) -> dict[str, Any]:
        """Set the confidence and propagate it; returns ``changed`` (memory id -> confidence)."""
        return {"changed": container.drift.propagate(memory_id, body.confidence)}

    @r.post("/api/stale/scan")
    def stale_scan(body: ScanIn | None = None) -> dict[str, Any]:
        """Run the file staleness sweep now; returns its counts, renames and stale files."""
        return container.drift.sweep(body.project if body is not None else None)

    return r
