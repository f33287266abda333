"""The eight memlane MCP tools, defined once over a :class:`Backend`.

:func:`memlane.mcp.local.build_server` serves them in-process (the daemon's ``/mcp`` endpoint);
:mod:`memlane.mcp.stdio` serves the same definitions over a backend that calls the daemon's HTTP
API. Tools are thin: argument types and ranges are checked by the SDK against the input schema,
the rest by the services, and every :class:`MemlaneError` becomes a tool error (``isError``) whose
text is the error's message. Successful results carry the JSON both as text and as
``structuredContent`` (matching each tool's ``outputSchema``). Writes are attributed ``who="mcp"``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, Protocol

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from memlane import __version__
from memlane.errors import MemlaneError, ValidationError
from memlane.schemas.models import MemoryOut

#: Attribution of every write made through MCP (the history's ``who``).
WHO = "mcp"
#: Largest ``limit`` of a search or a list page.
MAX_LIMIT = 1000

INSTRUCTIONS = (
    "memlane is the user's long-term memory across sessions. Search it (memory_search) before "
    "answering questions about the user, their projects, preferences or past decisions; store "
    "durable facts worth remembering next time (memory_store), one self-contained fact per memory; "
    "correct stale memories (memory_modify) or retire wrong ones (memory_forget) instead of storing "
    "contradictions. Rate memories injected into this session with memory_feedback."
)


# -- result shapes (the tools' output schemas) ------------------------------------------------
class SearchHit(BaseModel):
    id: str
    content: str
    type: str
    project: str | None
    score: float = Field(
        description="Final recall score, higher is more relevant: the hybrid score in [0, 1], "
        "which the graph boost (+0.15) and the resolution boost (x1.2) may lift above 1."
    )
    created_at: str


class StoreResult(BaseModel):
    id: str
    status: str = Field(description="created, or deduplicated (the id is the existing identical memory).")


class MemoryPage(BaseModel):
    items: list[MemoryOut]
    total: int = Field(description="Memories matching the filters (all pages).")


class PruneResult(BaseModel):
    pruned: int = Field(description="Memories pruned (soft-deleted, recoverable), or that would be with dry_run.")
    stale_marked: int = Field(description="Memories marked stale (a related file is gone).")
    by_rule: dict[str, int] = Field(description="How many each lifecycle rule matched.")
    dry_run: bool


class PhaseResult(BaseModel):
    methodology: str = Field(description="The project's methodology plugin (native, bmad).")
    methodology_phase: str | None = Field(description="The phase name as given.")
    phase: str | None = Field(
        description="The universal phase: define, implement, validate, refine, explore, "
        "reflect; null when none is known."
    )
    work_unit_ref: dict[str, Any] | None = Field(description="{methodology, hierarchy, label}, or null.")
    source: str | None = Field(description="request or hook: where the phase came from.")
    updated_at: str | None


class ForgetResult(BaseModel):
    id: str
    deleted: bool


class FeedbackResult(BaseModel):
    applied: int = Field(description="Ratings recorded.")
    ignored: int = Field(description="Ratings ignored (unknown id for this session, or not a number).")


# -- backends ---------------------------------------------------------------------------------
class Backend(Protocol):
    """What the tools need. Methods are blocking, return JSON-able data and raise MemlaneError."""

    def search(
        self, query: str, *, limit: int, project: str | None, types: list[str], where: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]: ...
    def store(
        self,
        content: str,
        *,
        type: str,
        importance: float,
        project: str | None,
        tags: list[str],
        who: str,
        v3: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...
    def get(self, memory_id: str) -> dict[str, Any]: ...
    def list(self, *, limit: int, offset: int, project: str | None, type: str | None) -> dict[str, Any]: ...
    def modify(self, memory_id: str, fields: dict[str, Any], *, who: str, why: str | None) -> dict[str, Any]: ...
    def forget(self, memory_id: str, *, who: str, why: str | None) -> dict[str, Any]: ...
    def feedback(self, session_key: str, scores: dict[str, float]) -> dict[str, Any]: ...
    def prune(self, *, dry_run: bool, project: str | None) -> dict[str, Any]: ...
    def phase(
        self, session_key: str, *, project: str | None, phase: str | None, work_unit: dict[str, str] | None
    ) -> dict[str, Any]: ...


def memory_dict(m: Any) -> dict[str, Any]:
    """A memory (:class:`memlane.storage.models.Memory`) as the tools return it (``MemoryOut``'s JSON)."""
    return MemoryOut.of(m).model_dump(mode="json")


def search_hit(d: dict[str, Any]) -> dict[str, Any]:
    """The agent-facing subset of a recalled memory."""
    return {k: d[k] for k in SearchHit.model_fields}


# -- tool plumbing ----------------------------------------------------------------------------
def tool_error(message: str) -> CallToolResult:
    """A tool error the agent reads (the session goes on)."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


async def _run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CallToolResult:
    """Run a blocking backend call on a worker thread; a MemlaneError becomes a tool error."""
    try:
        data = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    except MemlaneError as exc:
        return tool_error(exc.message)
    structured = data if isinstance(data, dict) else {"result": data}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))], structured_content=structured
    )


def _need_id(memory_id: str) -> str:
    if not memory_id.strip():
        raise ValidationError("id: must not be empty", details={"field": "id"})
    return memory_id.strip()


Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"Most results to return, 1..{MAX_LIMIT}.")]
Project = Annotated[str | None, Field(description="Project scope (e.g. the repository name); null = any/global.")]
MemoryId = Annotated[
    str, Field(description="The memory's id, as returned by memory_search, memory_store or memory_list.")
]
Why = Annotated[str | None, Field(description="Short reason, kept in the memory's history.")]
Importance = Annotated[float, Field(ge=0.0, le=1.0, description="How much this matters, 0..1 (0.5 = ordinary).")]
Tags = Annotated[list[str] | None, Field(description="Free-form tags.")]
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def build_mcp(backend: Backend, *, name: str = "memlane") -> MCPServer:
    """An MCP server exposing the memory tools over ``backend``."""
    server = MCPServer(name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    @server.tool(annotations=READ)
    async def memory_search(
        query: Annotated[str, Field(description="What to look for, in natural language or keywords.")],
        limit: Limit = 10,
        project: Project = None,
        types: Annotated[list[str] | None, Field(description='Only these memory types, e.g. ["preference"].')] = None,
        scopes: Annotated[
            list[str] | None, Field(description="Only these scopes: global, module, work_unit, session.")
        ] = None,
        sources: Annotated[list[str] | None, Field(description='Only these sources, e.g. ["user_taught"].')] = None,
        related_file: Annotated[str | None, Field(description="Only memories about this file (repo-relative).")] = None,
        work_unit: Annotated[str | None, Field(description="Only memories of this work unit (outermost id).")] = None,
        needs_review: Annotated[
            bool | None, Field(description="Only memories waiting for review (true) or not.")
        ] = None,
    ) -> Annotated[CallToolResult, list[SearchHit]]:
        """Search long-term memory (hybrid keyword + semantic recall), best match first.

        Use this before answering anything that may depend on what was learned in earlier
        sessions: the user's preferences, project conventions, past decisions, known pitfalls.
        Returns [{id, content, type, project, score, created_at}]; an empty list means nothing
        relevant is stored. Use memory_get with an id for the full record."""
        where = {
            k: v
            for k, v in (
                ("scopes", scopes),
                ("sources", sources),
                ("related_file", related_file),
                ("work_unit", work_unit),
                ("needs_review", needs_review),
            )
            if v is not None
        }
        return await _run(
            backend.search, query, limit=limit, project=project, types=list(types or []), where=where or None
        )

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    async def memory_store(
        content: Annotated[str, Field(description="The memory: one self-contained fact, in a full sentence.")],
        type: Annotated[
            str,
            Field(
                description="fact, preference, decision, constraint, procedure, ... or a V3 "
                "type: gotcha, pattern, error_pattern, module_insight, dead_end, "
                "workflow_recipe, ..."
            ),
        ] = "fact",
        importance: Importance = 0.5,
        project: Project = None,
        tags: Tags = None,
        scope: Annotated[str | None, Field(description="global, module, work_unit or session; default global.")] = None,
        related_files: Annotated[list[str] | None, Field(description="Files this is about (repo-relative).")] = None,
        related_modules: Annotated[list[str] | None, Field(description="Modules this is about.")] = None,
        work_unit_ref: Annotated[
            dict[str, Any] | None, Field(description='{"methodology": "native", "hierarchy": ["spec-12", "subtask-3"]}')
        ] = None,
        type_fields: Annotated[
            dict[str, Any] | None,
            Field(description="The type's extended fields, e.g. dead_end: approach_tried, why_it_failed."),
        ] = None,
    ) -> Annotated[CallToolResult, StoreResult]:
        """Store a new long-term memory that should survive this session.

        Use it for durable knowledge: a user preference, a project convention, a decision and
        its reason, a fix that worked. Do not store transient task state or secrets. Storing
        exactly the same content again is harmless: it returns the existing id with status
        "deduplicated". To change an existing memory use memory_modify instead.
        Returns {id, status}."""
        v3 = {
            k: v
            for k, v in (
                ("scope", scope),
                ("related_files", related_files),
                ("related_modules", related_modules),
                ("work_unit_ref", work_unit_ref),
                ("type_fields", type_fields),
            )
            if v is not None
        }
        return await _run(
            backend.store,
            content,
            type=type,
            importance=importance,
            project=project,
            tags=list(tags or []),
            who=WHO,
            v3=v3 or None,
        )

    @server.tool(annotations=READ)
    async def memory_get(id: MemoryId) -> Annotated[CallToolResult, MemoryOut]:
        """Fetch one memory by id with all its fields (tags, importance, timestamps, whether it
        is deleted or superseded). Use it after memory_search or memory_list when you need the
        full record."""
        return await _run(lambda: backend.get(_need_id(id)))

    @server.tool(annotations=READ)
    async def memory_list(
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"Page size, 1..{MAX_LIMIT}.")] = 20,
        offset: Annotated[int, Field(ge=0, description="Memories to skip (for paging).")] = 0,
        project: Project = None,
        type: Annotated[str | None, Field(description="Only memories of this type.")] = None,
    ) -> Annotated[CallToolResult, MemoryPage]:
        """Browse stored memories, newest first, one page at a time. Use it to review what is
        remembered (e.g. for a project or a type) rather than to find something: for that use
        memory_search. Returns {items, total}; deleted memories are not listed."""
        return await _run(backend.list, limit=limit, offset=offset, project=project, type=type)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        )
    )
    async def memory_modify(
        id: MemoryId,
        content: Annotated[str | None, Field(description="New content (replaces the old text).")] = None,
        type: Annotated[str | None, Field(description="New type.")] = None,
        importance: Annotated[float | None, Field(ge=0.0, le=1.0, description="New importance, 0..1.")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags (replace the old ones).")] = None,
        pinned: Annotated[
            bool | None, Field(description="Pinned memories are always offered at session start.")
        ] = None,
        keep: Annotated[
            bool | None,
            Field(
                description="Only when the user says so: true marks the memory "
                "user-verified, so no lifecycle rule prunes it."
            ),
        ] = None,
        why: Why = None,
    ) -> Annotated[CallToolResult, MemoryOut]:
        """Correct or update an existing memory in place (only the fields you pass change; the
        old version is kept in its history). Use it when a stored memory is outdated or
        imprecise, instead of storing a second, contradicting memory. Returns the updated memory."""
        given = {
            "content": content,
            "type": type,
            "importance": importance,
            "tags": tags,
            "pinned": pinned,
            "user_verified": keep,
        }
        fields = {k: v for k, v in given.items() if v is not None}

        def call() -> dict[str, Any]:
            memory_id = _need_id(id)
            if not fields:
                raise ValidationError(
                    "nothing to change: give at least one of content, type, importance, tags, pinned, keep"
                )
            return backend.modify(memory_id, fields, who=WHO, why=why)

        return await _run(call)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        )
    )
    async def memory_forget(id: MemoryId, why: Why = None) -> Annotated[CallToolResult, ForgetResult]:
        """Forget a memory that is wrong, obsolete or unwanted (for example when the user asks
        you to). This is a soft delete: recall stops returning it, and it can be recovered from
        the memlane CLI or API. Returns {id, deleted: true}."""
        return await _run(lambda: backend.forget(_need_id(id), who=WHO, why=why))

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        )
    )
    async def memory_feedback(
        session_key: Annotated[str, Field(description="This session's id (as given in the injected memory block).")],
        feedback: Annotated[
            dict[str, float],
            Field(
                description="{memory id or its 8-character prefix: score}, score in [-1, 1]: "
                "1 = it helped, 0 = irrelevant, -1 = wrong or misleading."
            ),
        ],
    ) -> Annotated[CallToolResult, FeedbackResult]:
        """Rate the memories that memlane injected into this session, so future recall learns
        what is useful. Call it once you know whether the injected memories helped. Ids that
        were not injected into this session are ignored (counted in "ignored"), never an error.
        Returns {applied, ignored}."""
        return await _run(backend.feedback, session_key, dict(feedback))

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        )
    )
    async def memory_prune(
        dry_run: Annotated[bool, Field(description="True (default): only report what would be pruned.")] = True,
        project: Project = None,
    ) -> Annotated[CallToolResult, PruneResult]:
        """Apply memlane's lifecycle rules now (the user's "prune now"): expired session-scoped
        memories, decayed work states and dead ends, long-unused low-confidence memories, expired
        workflow recipes; memories about files that are gone are marked stale. Pinned and kept
        (user-verified) memories are never pruned; pruned memories can be recovered. Call it with
        dry_run=false only when the user asks. Returns {pruned, stale_marked, by_rule, dry_run}."""
        return await _run(backend.prune, dry_run=dry_run, project=project)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    async def memory_phase(
        session_key: Annotated[str, Field(description="This session's id.")],
        project: Project = None,
        phase: Annotated[
            str | None,
            Field(
                description="What you are doing now, in the project's methodology (native: planning, coding, qa_review, "
                "qa_fix, debugging, insights; bmad: analyst, architect, dev, qa, sm...) or a universal "
                "phase (define, implement, validate, refine, explore, reflect). Omit to only read."
            ),
        ] = None,
        work_unit: Annotated[
            dict[str, str] | None,
            Field(
                description='The work unit\'s identifiers, e.g. {"spec": "042", "subtask": "3"} (native) or '
                '{"epic": "3", "story": "3.2"} (bmad). Omit to keep the current one.'
            ),
        ] = None,
    ) -> Annotated[CallToolResult, PhaseResult]:
        """Tell memlane which phase of the work this session is in (and which work unit), or read
        it: memories are then ranked for that phase (gotchas while coding, requirements and error
        patterns while validating...). Returns {methodology, methodology_phase, phase,
        work_unit_ref, source, updated_at}."""
        return await _run(backend.phase, session_key, project=project, phase=phase, work_unit=work_unit)

    from memlane.mcp import drift_tools

    drift_tools.register(server, backend, _run)  # noqa: E702 (docs/drift.md)
    from memlane.mcp import active_tools

    active_tools.register(server, backend, _run)  # noqa: E702 (docs/v3.md)
    return server
