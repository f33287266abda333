"""The active-loop MCP tools (docs/v3.md "Active loop"): ``memory_record_outcome`` and
``memory_qa_failure``, registered on the memlane MCP server over either backend (in-process: the
container's :class:`memlane.v3.active.ActiveLoop`; stdio: the daemon's HTTP routes,
memlane.api.active_routes)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field


class OutcomeOut(BaseModel):
    """The stored ``work_unit_outcome`` memory."""

    id: str
    status: str = Field(description="created, or deduplicated (an identical outcome text exists).")
    content: str
    retry_count: int


class ReflexionOut(BaseModel):
    """The reflexion memories stored (``writer``: ``llm:<provider:model>`` or ``template``)."""

    memories: list[dict[str, Any]]
    skipped: int = Field(description="Issues below high severity (not stored).")


class QaIssue(BaseModel):
    """One QA issue."""

    description: str
    severity: Literal["critical", "high", "medium", "low"] = "high"
    file: str | None = None
    module: str | None = None
    what_was_tried: str | None = None
    recommendation: str | None = None


class _Local:
    def __init__(self, container: Any) -> None:
        self.active = container.active

    def outcome(self, **kw: Any) -> dict[str, Any]:
        return self.active.record_outcome(**kw, who="mcp")

    def qa_failure(self, issues: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        return self.active.qa_failure(issues, **kw)


class _Http:
    def __init__(self, request: Any) -> None:
        self.request = request

    def outcome(self, **kw: Any) -> dict[str, Any]:
        return self.request("POST", "/api/v3/active/outcome", json={k: v for k, v in kw.items() if v is not None})

    def qa_failure(self, issues: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        return self.request(
            "POST",
            "/api/v3/active/qa-failure",
            json={"issues": issues, **{k: v for k, v in kw.items() if v is not None}},
        )


def active_backend(backend: Any) -> Any:
    """The active-loop calls for an MCP backend: in-process when it holds a container with an
    active loop (``.c.active``), else over its HTTP request function; None when neither."""
    if getattr(getattr(backend, "c", None), "active", None) is not None:
        return _Local(backend.c)
    if callable(getattr(backend, "_request", None)):
        return _Http(backend._request)
    return None


WorkUnitRef = Annotated[
    dict[str, Any],
    Field(description='The work unit: {"methodology": "native", "hierarchy": ["spec-12", "subtask-3"]}.'),
]


def register(server: Any, backend: Any, run: Any) -> None:
    """Add the two active-loop tools to ``server``; ``run`` is the server's blocking-call wrapper
    (``memlane.mcp.server._run``: MemlaneError -> tool error)."""
    active = active_backend(backend)
    if active is None:
        return

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        )
    )
    async def memory_record_outcome(
        work_unit_ref: WorkUnitRef,
        succeeded: Annotated[bool, Field(description="Whether the work unit passed its validation.")],
        files_modified: Annotated[list[str] | None, Field(description="Files changed (repo-relative).")] = None,
        key_decisions: Annotated[list[str] | None, Field(description="Decisions worth knowing later.")] = None,
        steps_taken: Annotated[int | None, Field(ge=0, description="Tool calls or steps it took.")] = None,
        context_tokens_used: Annotated[int | None, Field(ge=0)] = None,
        failure_reason: Annotated[
            str | None, Field(description="Why it failed (only when succeeded is false).")
        ] = None,
        project: Annotated[str | None, Field(description="Project scope.")] = None,
        session_id: Annotated[str | None, Field(description="This session's id (links it to the next commit).")] = None,
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Record how a work unit (a subtask, a story) ended: a work_unit_outcome memory with its
        files, decisions, steps and retries (earlier outcomes of the same unit count as
        retries). Call it once the unit's validation passed or failed. Returns {id, status,
        content, retry_count}."""
        return await run(
            active.outcome,
            work_unit_ref=dict(work_unit_ref),
            succeeded=succeeded,
            files_modified=list(files_modified or []),
            key_decisions=list(key_decisions or []),
            steps_taken=steps_taken,
            context_tokens_used=context_tokens_used,
            failure_reason=failure_reason,
            project=project,
            session_id=session_id,
        )

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
        )
    )
    async def memory_qa_failure(
        issues: Annotated[list[QaIssue], Field(min_length=1, max_length=50, description="The QA report's issues.")],
        project: Annotated[str | None, Field(description="Project scope.")] = None,
        session_id: Annotated[str | None, Field(description="This session's id.")] = None,
        work_unit_ref: Annotated[dict[str, Any] | None, Field(description="The work unit QA rejected.")] = None,
    ) -> Annotated[CallToolResult, ReflexionOut]:
        """Turn a failed QA review into reflexion memories: each critical or high issue becomes
        an error_pattern (what went wrong, the right approach, how to avoid it), written by the
        configured LLM or, without one, as a structured template (each memory's writer says
        which). Returns {memories: [{id, status, writer, content}], skipped}."""
        return await run(
            active.qa_failure,
            [i.model_dump(exclude_none=True) for i in issues],
            project=project,
            session_id=session_id,
            work_unit_ref=work_unit_ref,
        )
