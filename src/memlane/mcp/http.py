"""The daemon's streamable HTTP MCP endpoint at ``/mcp`` (in-process backend).

Following the SDK's "Add to an existing app" guide: a mounted sub-application's lifespan never
runs, so the host app must enter ``session_manager.run()`` in its own lifespan. :func:`mount`
chains that into the FastAPI app's existing lifespan. A session manager can run only once, so
each lifespan (each daemon start, each test client) builds a fresh streamable HTTP app; the
``/mcp`` route delegates to the current one and answers 503 while none is running.

The route is added to the app's router rather than mounted at ``/``, so the daemon's own 404,
405 and error shapes are untouched. Host and Origin are checked for ``/mcp`` as for every
other route, by the daemon's request guard (:mod:`memlane.api.guard`: loopback names, the bind
host and ``allowed_hosts``); the SDK's own DNS-rebinding check, which has narrower rules of its
own, is turned off so that one set of rules decides.

Refusals: the SDK answers most protocol errors with a JSON-RPC error object (kept: it is the
MCP transport's own error shape, which MCP clients read), but a few in plain text (``421
Invalid Host header``, ``400 Invalid Content-Type header``, ``403 Invalid Origin header``,
``413 Request body too large``). :class:`_ShapedRefusals` rewrites every 4xx/5xx answer that is
not JSON into the daemon's one error shape, keeping its status and quoting its text as the
message.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memlane.api.errors import error_response
from memlane.container import Container
from memlane.mcp.server import build_server

#: Path of the MCP endpoint on the daemon.
MCP_PATH = "/mcp"


#: Error codes of the SDK's plain-text refusals, by HTTP status.
_REFUSAL_CODES = {400: "bad_request", 403: "forbidden_origin", 404: "not_found", 405: "method_not_allowed",
                  406: "not_acceptable", 413: "payload_too_large", 415: "unsupported_media_type",
                  421: "forbidden_host"}
#: Bytes of a plain-text refusal quoted in the message.
_REFUSAL_QUOTE_BYTES = 500


class _ShapedRefusals:
    """ASGI ``send`` wrapper: passes every response through, except a 4xx/5xx whose
    content type is not JSON, which it buffers and replaces by :func:`error_response` with the
    same status (code from ``_REFUSAL_CODES``, ``http_error`` otherwise; 5xx ``internal_error``)."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.held: dict[str, Any] | None = None
        self.body = bytearray()

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = {k.lower(): v for k, v in message.get("headers", ())}
            ctype = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            if message["status"] >= 400 and not (ctype == b"application/json" or ctype.endswith(b"+json")):
                self.held = message
                return
        elif message["type"] == "http.response.body" and self.held is not None:
            if len(self.body) < _REFUSAL_QUOTE_BYTES:
                self.body += message.get("body", b"")[:_REFUSAL_QUOTE_BYTES]
            if message.get("more_body", False):
                return
            status = self.held["status"]
            text = bytes(self.body[:_REFUSAL_QUOTE_BYTES]).decode("utf-8", "replace").strip()
            code = "internal_error" if status >= 500 else _REFUSAL_CODES.get(status, "http_error")
            self.held = None
            response = error_response(status, code, f"MCP endpoint refused the request: {text or status}")
            await response(self.scope, self.receive, self.send)
            return
        await self.send(message)


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
        await handler(scope, receive, _ShapedRefusals(scope, receive, send) if scope["type"] == "http" else send)


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
            sub = server.streamable_http_app(
                streamable_http_path=MCP_PATH, host=host,
                transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
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
