"""The memory endpoints: remember (one or a batch), recall, get, patch, delete, recover,
history, and the paged list.

Thin calls into ``container.memories`` (MemoryService) and ``container.recall``
(RecallService); every error is the one JSON shape of ``memlane.api.errors`` (422 bad input,
404 unknown id).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from memlane.container import Container
from memlane.errors import ValidationError
from memlane.schemas.models import (
    ActorIn,
    BatchIn,
    BatchOut,
    HistoryOut,
    ListOut,
    MemoryIn,
    MemoryOut,
    PatchIn,
    RecallIn,
    RecallOut,
    RememberOut,
    memory_dict,
)
from memlane.services.inputs import RecallQuery


def _parse(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """Validate ``data`` against ``model``, reporting errors like FastAPI's own body validation."""
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def router(container: Container) -> APIRouter:
    """The memory routes over ``container.memories`` and ``container.recall``."""
    r = APIRouter()
    mem = container.memories
    rec = container.recall
    phases = container.phases

    @r.post("/api/memory/remember", tags=["memory"], response_model=RememberOut | BatchOut)
    def remember(
        payload: dict[str, Any] = Body(
            ...,
            openapi_examples={
                "single": {"value": {"content": "The user prefers tabs over spaces.", "type": "preference"}},
                "batch": {"value": {"memories": [{"content": "Deploys go through staging first."}]}},
            },
        ),
    ) -> RememberOut | BatchOut:
        """Remember one memory (``{content, ...}``, see MemoryIn) or a batch
        (``{memories: [...]}``, see BatchIn).

        An exact duplicate of a live memory returns the existing id with status
        ``deduplicated``."""
        body = _parse(BatchIn if "memories" in payload else MemoryIn, payload)
        if isinstance(body, BatchIn):
            if len(body.memories) > container.settings.max_batch:
                raise ValidationError(
                    f"memories: at most {container.settings.max_batch} per batch",
                    details={"field": "memories", "limit": container.settings.max_batch},
                )
            results = mem.remember_many([m.to_input() for m in body.memories])
            created = sum(x.status == "created" for x in results)
            return BatchOut(
                results=[RememberOut.of(r) for r in results], created=created, deduplicated=len(results) - created
            )
        return RememberOut.of(mem.remember(body.to_input()))

    @r.post("/api/memory/recall", tags=["memory"], response_model=RecallOut)
    def recall(body: RecallIn) -> JSONResponse:
        """Hybrid recall (BM25 + vector). Any string is a valid query."""
        res = rec.recall(
            RecallQuery(
                query=body.query,
                limit=body.limit,
                project=body.project,
                types=tuple(body.types),
                since=body.since,
                until=body.until,
                include_deleted=body.include_deleted,
                min_score=body.min_score,
                alpha=body.alpha,
                now=body.now,
                touch=body.touch,
                ranker=body.ranker,
                phase=phases.universal(body.project, body.phase, body.session_key) if phases is not None else None,
            )
        )
        # The documented shape (RecallOut) is built directly instead of validated through the
        # response model: recall runs on every prompt and re-validation costs more than the
        # search. test_api checks the shape against the model.
        return JSONResponse(
            {
                "results": [
                    {
                        **memory_dict(h.memory),
                        "score": h.score,
                        "vector_score": h.vector_score,
                        "bm25_score": h.bm25_score,
                        "rank_score": h.rank_score,
                    }
                    for h in res.hits
                ],
                "legs": list(res.legs),
                "took_ms": round(res.took_ms, 3),
                "ranker": res.ranker,
            }
        )

    @r.get("/api/memory/{memory_id}", tags=["memory"], response_model=MemoryOut)
    def get_memory(memory_id: str) -> MemoryOut:
        """One memory, deleted or not."""
        return MemoryOut.of(mem.get(memory_id))

    @r.patch("/api/memory/{memory_id}", tags=["memory"], response_model=MemoryOut)
    def patch_memory(memory_id: str, body: PatchIn) -> MemoryOut:
        """Change fields; a content change is re-hashed and re-embedded; recorded in history."""
        fields = {k: getattr(body, k) for k in body.model_fields_set if k not in ("who", "why")}
        if not fields:
            raise ValidationError("nothing to change: give at least one field")
        return MemoryOut.of(mem.update(memory_id, fields, who=body.who, why=body.why))

    @r.delete("/api/memory/{memory_id}", tags=["memory"], response_model=MemoryOut)
    def delete_memory(memory_id: str, who: str | None = Query(None), why: str | None = Query(None)) -> MemoryOut:
        """Soft-delete (recoverable)."""
        return MemoryOut.of(mem.delete(memory_id, who=who, why=why))

    @r.post("/api/memory/{memory_id}/recover", tags=["memory"], response_model=MemoryOut)
    def recover_memory(memory_id: str, body: ActorIn | None = None) -> MemoryOut:
        """Undo a soft delete."""
        body = body or ActorIn()
        return MemoryOut.of(mem.recover(memory_id, who=body.who, why=body.why))

    @r.get("/api/memory/{memory_id}/history", tags=["memory"], response_model=list[HistoryOut])
    def memory_history(memory_id: str) -> list[HistoryOut]:
        """Every create, update, delete, recover and dedup event, oldest first."""
        return [HistoryOut.of(h) for h in mem.history(memory_id)]

    @r.get("/api/memories", tags=["memory"], response_model=ListOut)
    def list_memories(
        limit: int = Query(50, ge=1, le=1000),
        offset: int = Query(0, ge=0),
        project: str | None = None,
        type: str | None = None,
        include_deleted: bool = False,
        order: str = Query("newest", pattern="^(newest|oldest)$"),
    ) -> ListOut:
        """A page of memories (newest first by default), the total, and store statistics."""
        items, total = mem.list(
            limit=limit, offset=offset, project=project, type_=type, include_deleted=include_deleted, order=order
        )
        return ListOut(
            items=[MemoryOut.of(m) for m in items], total=total, limit=limit, offset=offset, stats=mem.stats()
        )

    return r
