"""The drift MCP tools (docs/drift.md): ``memory_record_signal`` and ``memory_prediction_errors``,
registered on the memlane MCP server over either backend (in-process: the container's drift
service; stdio: the daemon's HTTP routes, memlane.api.drift_routes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from memlane.storage.drift import PredictionError


# The stored row's fields (storage.drift.PredictionError) plus the memory; the docstring is the
# schema description MCP clients read.
@dataclass(frozen=True)
class ErrorRow(PredictionError):
    """One prediction error (``memory``: the memory it is about, in the listing)."""

    memory: dict[str, Any] | None = None


class ErrorsOut(BaseModel):
    """Prediction errors, newest first."""

    items: list[ErrorRow]


class _Local:
    """Drift calls on the daemon's own container."""

    def __init__(self, container: Any) -> None:
        self.drift = container.drift

    def errors(
        self, *, error_type: str | None, memory_id: str | None, resolved: bool | None, limit: int
    ) -> dict[str, Any]:
        return {"items": self.drift.list(error_type=error_type, memory_id=memory_id, resolved=resolved, limit=limit)}

    def signal(self, memory_id: str, *, source: str, evidence: dict[str, Any], weight: float) -> dict[str, Any]:
        return self.drift.record_signal(memory_id, source=source, evidence=evidence, weight=weight)


class _Http:
    """Drift calls over the daemon's HTTP API (the stdio server's backend's request function)."""

    def __init__(self, request: Any) -> None:
        self.request = request

    def errors(
        self, *, error_type: str | None, memory_id: str | None, resolved: bool | None, limit: int
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, "resolved": {False: "false", True: "true", None: "all"}[resolved]}
        if error_type is not None:
            params["error_type"] = error_type
        if memory_id is not None:
            params["memory_id"] = memory_id
        out = self.request("GET", "/api/drift/errors", params=params)
        return {"items": out["items"]}

    def signal(self, memory_id: str, *, source: str, evidence: dict[str, Any], weight: float) -> dict[str, Any]:
        return self.request(
            "POST", f"/api/memory/{memory_id}/signal", json={"source": source, "evidence": evidence, "weight": weight}
        )


def drift_backend(backend: Any) -> Any:
    """The drift calls for an MCP backend: in-process when it holds a container (``.c``), else
    over its HTTP request function (``._request``); None when neither (no drift tools)."""
    if getattr(backend, "c", None) is not None and getattr(backend.c, "drift", None) is not None:
        return _Local(backend.c)
    if callable(getattr(backend, "_request", None)):
        return _Http(backend._request)
    return None


def register(server: Any, backend: Any, run: Any) -> None:
    """Add the two drift tools to ``server`` (a FastMCP-style server); ``run`` is the server's
    blocking-call wrapper (``memlane.mcp.server._run``: MemlaneError -> tool error)."""
    drift = drift_backend(backend)
    if drift is None:
        return

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    async def memory_prediction_errors(
        error_type: Annotated[
            Literal["memory_drift", "memory_external_signal", "memory_stale_file", "memory_stale_entity"] | None,
            Field(description="Only this kind of error."),
        ] = None,
        memory_id: Annotated[str | None, Field(description="Only this memory's errors.")] = None,
        resolved: Annotated[
            bool | None, Field(description="false (default): open ones; true: resolved; null: both.")
        ] = False,
        limit: Annotated[int, Field(ge=1, le=1000, description="Most rows, newest first.")] = 20,
    ) -> Annotated[CallToolResult, ErrorsOut]:
        """List memories that may no longer match the world: drifted from a document they
        reference (memory_drift), referencing a file that is gone (memory_stale_file), or
        reported by an external signal. Each row carries its memory (content, tags, dates).
        Reconcile by updating the memory (memory_modify) or forgetting it (memory_forget); both
        resolve the row. Returns {items: [{error_id, error_type, target, cosine_distance,
        context, detected_at, resolved_at, memory}]}."""
        return await run(drift.errors, error_type=error_type, memory_id=memory_id, resolved=resolved, limit=limit)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        )
    )
    async def memory_record_signal(
        id: Annotated[str, Field(description="The memory the evidence is about.")],
        source: Annotated[str, Field(description="Where the evidence comes from: git, linear, calendar, manual...")],
        evidence: Annotated[dict[str, Any], Field(description="Any JSON object (stored as given).")],
        weight: Annotated[float, Field(ge=0.0, le=10.0, description="How sure the memory is stale; 1 = normal.")] = 1.0,
    ) -> Annotated[CallToolResult, ErrorRow]:
        """Record external evidence that a memory is stale (a commit that fixed the bug it
        describes, a closed ticket...). The memory is then no longer injected proactively and
        search shows it with a warning until it is updated or forgotten. Returns the row."""
        return await run(drift.signal, id.strip(), source=source, evidence=dict(evidence), weight=weight)
