"""The FastAPI application factory.

Endpoints are plain ``def`` functions: FastAPI runs them on its thread pool, and each one
is a thin call into a service (SQLite and the embedder are blocking).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError as PydanticValidationError

from memlane import __version__
from memlane.api import errors
from memlane.api.guard import RequestGuard
from memlane.auth import TokenStore, read_token
from memlane.api.limits import BodyLimit
from memlane.api.schemas import (
    ActorIn, BatchIn, BatchOut, HistoryOut, ListOut, MemoryIn, MemoryOut, PatchIn, RecallIn,
    RecallOut, RememberOut, memory_dict,
)
from memlane.container import Container
from memlane.errors import ValidationError
from memlane.procinfo import process_info
from memlane.services.inputs import RecallQuery


def _parse(model: type, data: dict[str, Any]) -> Any:
    """Validate ``data`` against ``model``, reporting errors like FastAPI's own body validation."""
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def create_app(container: Container) -> FastAPI:
    """Build the daemon's app over an open container (the caller owns its lifetime)."""
    app = FastAPI(title="memlane", version=__version__,
                  description="Local-first memory daemon for AI agents.")
    app.state.container = container
    app.state.started = time.time()
    errors.install(app)
    app.add_middleware(BodyLimit, max_bytes=container.settings.max_body_bytes)
    settings = container.settings
    # The token file is created here, before the first request (Starlette builds middleware lazily).
    tokens = TokenStore(settings.home) if settings.require_token else None
    from memlane.observability.hub import ensure as ensure_observability
    from memlane.observability.middleware import ObservabilityMiddleware
    app.add_middleware(ObservabilityMiddleware, obs=ensure_observability(container))  # inside the guard
    from memlane.dashboard.auth import DashboardAuth
    # the dashboard's login codes and cookie sessions, bound to the token they were opened under
    app.state.dashboard_auth = DashboardAuth(token=lambda: read_token(settings.home) if tokens else None)
    app.add_middleware(RequestGuard, tokens=tokens, bind_host=settings.host, allowed_hosts=settings.allowed_hosts,
                       sessions=app.state.dashboard_auth)
    mem = container.memories
    rec = container.recall
    rec.warm()  # the BM25 / hint legs' in-memory FTS statistics, built in the background

    @app.get("/health", tags=["meta"])
    def health(request: Request) -> dict[str, Any]:
        """Liveness. Without the token: ``{"status": "ok"}`` only. With it, also version, uptime (s),
        live memory count, embedding model, database path and ``processes``: the daemon's and
        the predictor sidecar's pid and resident memory (``rss_bytes``, ``peak_rss_bytes``;
        the sidecar's ``state``: running, starting, dormant = no model yet, stopped; null when
        the predictor does not run here).

        Cheap by design (an index-only count): full statistics, which scan every memory and
        vector (~50 ms at 10,000 memories), are in ``GET /api/memories``."""
        if not getattr(request.state, "authenticated", False):
            return {"status": "ok"}
        pred = container.predictor
        return {"status": "ok", "version": __version__,
                "uptime_s": round(time.time() - app.state.started, 3),
                "memories": mem.live_count(),
                "embedding_model": mem.embedder.model_id if mem.embedder else None,
                "db_path": str(container.settings.db_path),
                # What memlane costs: resident memory (bytes) of this process and of the sidecar.
                "processes": {"daemon": process_info(),
                              "predictor_sidecar": pred.sidecar_process() if pred is not None else None}}

    @app.post("/api/memory/remember", tags=["memory"], response_model=RememberOut | BatchOut)
    def remember(payload: dict[str, Any] = Body(..., openapi_examples={
            "single": {"value": {"content": "The user prefers tabs over spaces.", "type": "preference"}},
            "batch": {"value": {"memories": [{"content": "Deploys go through staging first."}]}}})
                 ) -> RememberOut | BatchOut:
        """Remember one memory (``{content, ...}``, see MemoryIn) or a batch
        (``{memories: [...]}``, see BatchIn).

        An exact duplicate of a live memory returns the existing id with status
        ``deduplicated``."""
        body = _parse(BatchIn if "memories" in payload else MemoryIn, payload)
        if isinstance(body, BatchIn):
            if len(body.memories) > container.settings.max_batch:
                raise ValidationError(f"memories: at most {container.settings.max_batch} per batch",
                                      details={"field": "memories", "limit": container.settings.max_batch})
            results = mem.remember_many([m.to_input() for m in body.memories])
            created = sum(r.status == "created" for r in results)
            return BatchOut(results=[RememberOut.of(r) for r in results], created=created,
                            deduplicated=len(results) - created)
        return RememberOut.of(mem.remember(body.to_input()))

    @app.post("/api/memory/recall", tags=["memory"], response_model=RecallOut)
    def recall(body: RecallIn) -> JSONResponse:
        """Hybrid recall (BM25 + vector). Any string is a valid query."""
        res = rec.recall(RecallQuery(
            query=body.query, limit=body.limit, project=body.project, types=tuple(body.types),
            since=body.since, until=body.until, include_deleted=body.include_deleted,
            min_score=body.min_score, alpha=body.alpha, now=body.now, touch=body.touch, ranker=body.ranker))
        # Trigger: recall is the hot path (every prompt). Why: re-validating the answer through
        # the response model cost more than the search at 10 hits. Outcome: the documented
        # shape (RecallOut) is built directly; test_api checks it against the model.
        return JSONResponse({"results": [{**memory_dict(h.memory), "score": h.score, "vector_score": h.vector_score,
                                          "bm25_score": h.bm25_score, "rank_score": h.rank_score} for h in res.hits],
                             "legs": list(res.legs), "took_ms": round(res.took_ms, 3), "ranker": res.ranker})

    @app.get("/api/memory/{memory_id}", tags=["memory"], response_model=MemoryOut)
    def get_memory(memory_id: str) -> MemoryOut:
        """One memory, deleted or not."""
        return MemoryOut.of(mem.get(memory_id))

    @app.patch("/api/memory/{memory_id}", tags=["memory"], response_model=MemoryOut)
    def patch_memory(memory_id: str, body: PatchIn) -> MemoryOut:
        """Change fields; a content change is re-hashed and re-embedded; recorded in history."""
        fields = {k: getattr(body, k) for k in body.model_fields_set if k not in ("who", "why")}
        if not fields:
            raise ValidationError("nothing to change: give at least one field")
        return MemoryOut.of(mem.update(memory_id, fields, who=body.who, why=body.why))

    @app.delete("/api/memory/{memory_id}", tags=["memory"], response_model=MemoryOut)
    def delete_memory(memory_id: str, who: str | None = Query(None), why: str | None = Query(None)) -> MemoryOut:
        """Soft-delete (recoverable)."""
        return MemoryOut.of(mem.delete(memory_id, who=who, why=why))

    @app.post("/api/memory/{memory_id}/recover", tags=["memory"], response_model=MemoryOut)
    def recover_memory(memory_id: str, body: ActorIn | None = None) -> MemoryOut:
        """Undo a soft delete."""
        body = body or ActorIn()
        return MemoryOut.of(mem.recover(memory_id, who=body.who, why=body.why))

    @app.get("/api/memory/{memory_id}/history", tags=["memory"], response_model=list[HistoryOut])
    def memory_history(memory_id: str) -> list[HistoryOut]:
        """Every create, update, delete, recover and dedup event, oldest first."""
        return [HistoryOut.of(h) for h in mem.history(memory_id)]

    @app.get("/api/memories", tags=["memory"], response_model=ListOut)
    def list_memories(limit: int = Query(50, ge=1, le=1000), offset: int = Query(0, ge=0),
                      project: str | None = None, type: str | None = None,
                      include_deleted: bool = False,
                      order: str = Query("newest", pattern="^(newest|oldest)$")) -> ListOut:
        """A page of memories (newest first by default), the total, and store statistics."""
        items, total = mem.list(limit=limit, offset=offset, project=project, type_=type,
                                include_deleted=include_deleted, order=order)
        return ListOut(items=[MemoryOut.of(m) for m in items], total=total, limit=limit,
                       offset=offset, stats=mem.stats())

    from memlane.api import config_routes, hooks, pipeline_routes
    app.include_router(hooks.router(container))
    app.include_router(config_routes.router(container))
    app.include_router(pipeline_routes.router(container))
    from memlane.api import predictor_routes
    app.include_router(predictor_routes.router(container))
    from memlane.api import documents_routes, repair_routes
    app.include_router(documents_routes.router(container))
    app.include_router(repair_routes.router(container))
    from memlane.api import knowledge_routes
    app.include_router(knowledge_routes.router(container))
    from memlane.api import v3_routes; app.include_router(v3_routes.router(container))  # noqa: E702
    from memlane.api import drift_routes; app.include_router(drift_routes.router(container))  # noqa: E702
    from memlane.observability import routes as observability_routes
    app.include_router(observability_routes.router(container))
    from memlane.dashboard.routes import install as install_dashboard
    install_dashboard(app, container, app.state.dashboard_auth)  # the web dashboard at / (memlane dashboard)

    from memlane.mcp.http import mount
    mount(app, container)
    return app
