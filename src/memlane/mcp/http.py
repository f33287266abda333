"""The daemon's streamable HTTP MCP endpoint at ``/mcp`` (in-process backend).

Following the SDK's "Add to an existing app" guide: a mounted sub-application's lifespan never
runs, so the host app must enter ``session_manager.run()`` in its own lifespan. :func:`mount`
chains that into the FastAPI app's existing lifespan. A session manager can run only once, so
each lifespan (each daemon start, each test client) builds a fresh streamable HTTP app, on
its first ``/mcp`` request (the SDK is imported then, not at start-up); the ``/mcp`` route
delegates to the current one and answers 503 outside the lifespan.

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

import asyncio
import contextlib
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import anyio
from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memlane.container import Container
from memlane.schemas.errors import error_response

#: Path of the MCP endpoint on the daemon.
MCP_PATH = "/mcp"


#: Error codes of the SDK's plain-text refusals, by HTTP status.
_REFUSAL_CODES = {
    400: "bad_request",
    403: "forbidden_origin",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    421: "forbidden_host",
}
#: Bytes of a plain-text refusal quoted in the message.
_REFUSAL_QUOTE_BYTES = 500


class _ShapedRefusals:
    """ASGI ``send`` wrapper: passes every response through, except a 4xx/5xx whose
    content type is not JSON, which it buffers and replaces by :func:`error_response` with the
    same status (code from ``_REFUSAL_CODES``, ``http_error`` otherwise; 5xx ``internal_error``)."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.held: MutableMapping[str, Any] | None = None
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
    """ASGI endpoint forwarding to the streamable HTTP handler, built on the first request.

    The MCP SDK's imports cost start-up time and memory (docs/architecture.md, "Footprint"),
    which a daemon nobody reaches over ``/mcp`` (the stdio server talks to the HTTP API) should
    not pay. While the
    app's lifespan runs, the first request imports it (in a worker thread), builds the server
    and its streamable HTTP app, and runs the session manager in a task of its own until the
    lifespan ends; later requests go straight to the handler. Outside the lifespan: 503.
    """

    def __init__(self, container: Container) -> None:
        self.container = container
        self.handler: ASGIApp | None = None
        self.server: Any = None
        self._open = False
        self._lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def open(self) -> None:
        """The lifespan started: requests may build the handler."""
        self._open = True
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()

    async def close(self) -> None:
        """The lifespan ends: stop the session manager (when one was started) and refuse requests."""
        self._open = False
        self.handler = None
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    def _build(self) -> tuple[Any, ASGIApp]:
        """Import the SDK and build the server and its ``/mcp`` handler (blocking: a thread)."""
        from mcp.server.transport_security import TransportSecuritySettings

        from memlane.mcp.local import build_server

        server = build_server(self.container)
        sub = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            host=self.container.settings.host,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        return server, next(r.endpoint for r in sub.routes if isinstance(r, Route) and r.path == MCP_PATH)

    async def _run(self, server: Any, started: asyncio.Event) -> None:
        assert self._stop is not None
        async with server.session_manager.run():
            started.set()
            await self._stop.wait()

    async def _ensure(self) -> ASGIApp | None:
        if self.handler is not None or not self._open or self._lock is None:
            return self.handler
        async with self._lock:
            if self.handler is None and self._open:
                server, handler = await anyio.to_thread.run_sync(self._build)
                started = asyncio.Event()
                self._task = asyncio.create_task(self._run(server, started), name="memlane-mcp-sessions")
                waiter = asyncio.create_task(started.wait())
                await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if self._task.done():  # the session manager failed to start: say so, once per request
                    self._task.result()
                self.server, self.handler = server, handler
        return self.handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = await self._ensure()
        if handler is None:
            response = error_response(
                503, "mcp_unavailable", "the MCP endpoint is not running (the app's lifespan has not started)"
            )
            await response(scope, receive, send)
            return
        await handler(scope, receive, _ShapedRefusals(scope, receive, send) if scope["type"] == "http" else send)


def mount(app: FastAPI, container: Container) -> None:
    """Serve the memory tools over streamable HTTP at ``/mcp`` on ``app``.

    Call once, before the app starts. The app's existing lifespan still runs (outermost); the
    MCP server is built on the first ``/mcp`` request (:class:`_Endpoint`) and its session
    manager shut down first when the lifespan ends.
    """
    endpoint = _Endpoint(container)
    previous = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with previous(a) as state:
            endpoint.open()
            try:
                yield state
            finally:
                await endpoint.close()

    app.router.lifespan_context = lifespan
    app.router.routes.append(Route(MCP_PATH, endpoint=endpoint, include_in_schema=False))
    app.state.mcp_endpoint = endpoint
