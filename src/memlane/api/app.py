"""The FastAPI application factory.

Endpoints are plain ``def`` functions: FastAPI runs them on its thread pool, and each one
is a thin call into a service (SQLite and the embedder are blocking).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request

from memlane import __version__
from memlane.api import errors
from memlane.api.guard import RequestGuard
from memlane.api.limits import BodyLimit
from memlane.auth import TokenStore, read_token
from memlane.container import Container
from memlane.procinfo import process_info


def create_app(container: Container) -> FastAPI:
    """Build the daemon's app over an open container (the caller owns its lifetime)."""
    app = FastAPI(title="memlane", version=__version__, description="Local-first memory daemon for AI agents.")
    app.state.container = container
    app.state.started = time.time()
    errors.install(app)
    app.add_middleware(BodyLimit, max_bytes=container.settings.max_body_bytes)
    settings = container.settings
    # The token file is created here, before the first request (Starlette builds middleware lazily).
    tokens = TokenStore(settings.home) if settings.require_token else None
    from memlane.api.observability_middleware import ObservabilityMiddleware
    from memlane.observability.logs import install as install_log_ring

    app.add_middleware(ObservabilityMiddleware, obs=container.observability)  # inside the guard
    install_log_ring()  # the daemon's log ring (GET /api/analytics/logs) records from here on
    from memlane.dashboard.auth import DashboardAuth

    # the dashboard's login codes and cookie sessions, bound to the token they were opened under
    app.state.dashboard_auth = DashboardAuth(token=lambda: read_token(settings.home) if tokens else None)
    app.add_middleware(
        RequestGuard,
        tokens=tokens,
        bind_host=settings.host,
        allowed_hosts=settings.allowed_hosts,
        sessions=app.state.dashboard_auth,
    )
    mem = container.memories
    container.recall.warm()  # the BM25 / hint legs' in-memory FTS statistics, built in the background

    @app.get("/health", tags=["meta"])
    def health(request: Request) -> dict[str, Any]:
        """Liveness. Without the token: ``{"status": "ok"}`` only. With it, also version, uptime (s),
        live memory count, embedding model, database path and ``processes``: the daemon's and
        the predictor sidecar's pid and resident memory (``rss_bytes``, ``peak_rss_bytes``;
        the sidecar's ``state``: running, starting, dormant = no model yet, stopped; null when
        the predictor does not run here).

        Cheap by design (an index-only count): full statistics, which scan every memory and
        vector, are in ``GET /api/memories``."""
        if not getattr(request.state, "authenticated", False):
            return {"status": "ok"}
        pred = container.predictor
        return {
            "status": "ok",
            "version": __version__,
            "uptime_s": round(time.time() - app.state.started, 3),
            "memories": mem.live_count(),
            "embedding_model": mem.embedder.model_id if mem.embedder else None,
            "db_path": str(container.settings.db_path),
            # What memlane costs: resident memory (bytes) of this process and of the sidecar.
            "processes": {
                "daemon": process_info(),
                "predictor_sidecar": pred.sidecar_process() if pred is not None else None,
            },
        }

    # Routes are matched in the order they are included: the hot paths first (the hooks Claude
    # Code runs on every prompt, recall and remember, the observer's tool-call hook), so a hook
    # request is not compared with every dashboard and maintenance route before its own. The paths
    # of these three (/api/hooks, /api/sessions, /api/memory, /api/memories, /api/v3) match no
    # other router's, so the order changes no match.
    from memlane.api import hooks, memory_routes, v3_routes

    app.include_router(hooks.router(container))
    app.include_router(memory_routes.router(container))
    app.include_router(v3_routes.router(container))
    from memlane.api import config_routes, pipeline_routes

    app.include_router(config_routes.router(container))
    app.include_router(pipeline_routes.router(container))
    from memlane.api import predictor_routes

    app.include_router(predictor_routes.router(container))
    from memlane.api import documents_routes, repair_routes

    app.include_router(documents_routes.router(container))
    app.include_router(repair_routes.router(container))
    from memlane.api import knowledge_routes

    app.include_router(knowledge_routes.router(container))
    from memlane.api import active_routes

    app.include_router(active_routes.router(container))  # noqa: E702
    from memlane.api import drift_routes

    app.include_router(drift_routes.router(container))  # noqa: E702
    from memlane.api import observability_routes

    app.include_router(observability_routes.router(container))
    from memlane.dashboard.routes import install as install_dashboard

    install_dashboard(app, container, app.state.dashboard_auth)  # the web dashboard at / (memlane dashboard)

    from memlane.mcp.http import mount

    mount(app, container)
    return app
