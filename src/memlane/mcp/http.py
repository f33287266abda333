"""The daemon's streamable HTTP MCP endpoint at ``/mcp`` (in-process backend).

Following the SDK's "Add to an existing app" guide: a mounted sub-application's lifespan never
runs, so the host app must enter ``session_manager.run()`` in its own lifespan. :func:`mount`
chains that into the FastAPI app's existing lifespan. A session manager can run only once, so
each lifespan (each daemon start, each test client) builds a fresh streamable HTTP app; the
``/mcp`` route delegates to the current one and answers 503 while none is running.

The route is added to the app's router rather than mounted at ``/``, so the daemon's own 404,
405 and error shapes are untouched. When the daemon binds a loopback address the SDK's
DNS-rebinding protection is on (only ``127.0.0.1``, ``localhost`` and ``[::1]`` Host headers).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memlane.api.errors import error_response
from memlane.container import Container
from memlane.mcp.server import build_server

#: Path of the MCP endpoint on the daemon.
MCP_PATH = "/mcp"


class _Endpoint:
    """ASGI endpoint forwarding to the streamable HTTP handler of the running lifespan."""

    def __init__(self) -> None:
        self.handler: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.handler
        if handler is None:
            response = error_response(503, "mcp_unavailable",
                                      "the MCP endpoint is not running (the app's lifespan has not started)")
            await response(scope, receive, send)
            return
        await handler(scope, receive, send)


def mount(app: FastAPI, container: Container) -> MCPServer:
    """Serve the memory tools over streamable HTTP at ``/mcp`` on ``app``; returns the MCP server.

    Call once, before the app starts. The app's existing lifespan still runs (outermost); the
    MCP session manager runs inside it and is shut down first.
    """
    server = build_server(container)
    endpoint = _Endpoint()
    host = container.settings.host
    previous = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with previous(a) as state:
            sub = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
            handler = next(r.endpoint for r in sub.routes if isinstance(r, Route) and r.path == MCP_PATH)
            async with server.session_manager.run():
                endpoint.handler = handler
                try:
                    yield state
                finally:
                    endpoint.handler = None

    app.router.lifespan_context = lifespan
    app.router.routes.append(Route(MCP_PATH, endpoint=endpoint, include_in_schema=False))
    app.state.mcp_server = server
    return server
