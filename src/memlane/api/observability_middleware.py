"""Times every HTTP request of the daemon (pure ASGI middleware).

* The operations of :data:`memlane.observability.latency.OPERATIONS` that are HTTP routes
  (remember, recall, mutate, session_start, prompt_submit, session_end) are recorded in the
  hub's histograms, from the first byte in to the last byte out (background tasks of the
  route, such as the session-start's write, included).
* Every response carries ``Server-Timing: app;dur=<ms>`` (the same server time), which
  ``memlane bench dashboard`` and a browser's devtools read.
* A 5xx answer goes to the error ring (stage by route: ``connector`` for the hook routes,
  ``mutation`` for memory changes, ``http`` otherwise) with its error code; a 4xx on a hook
  route too (a connector sending what the daemon refuses).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memlane.observability.hub import Observability

_HOOKS = {
    "/api/hooks/session-start": "session_start",
    "/api/hooks/user-prompt-submit": "prompt_submit",
    "/api/hooks/session-end": "session_end",
}
_MEMORY_ID = re.compile(r"^/api/memory/(?!remember$|recall$|jobs/)[^/]+(/recover)?$")
#: Bytes of a 5xx body read to find its error code.
_ERROR_BODY_MAX = 4096


def operation_of(method: str, path: str) -> str | None:
    """The timed operation of a request, or None (not one of the timed routes)."""
    if method == "POST":
        if path == "/api/memory/remember":
            return "remember"
        if path == "/api/memory/recall":
            return "recall"
        if path in _HOOKS:
            return _HOOKS[path]
    if (
        method in ("PATCH", "DELETE", "POST")
        and _MEMORY_ID.match(path)
        and (method != "POST" or path.endswith("/recover"))
    ):
        return "mutate"
    return None


def _stage(path: str, op: str | None) -> str:
    if path.startswith("/api/hooks/") or path == "/api/sessions/feedback":
        return "connector"
    if op == "mutate":
        return "mutation"
    return "http"


class ObservabilityMiddleware:
    """ASGI middleware recording into ``obs`` (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, obs: Observability) -> None:
        self.app = app
        self.obs = obs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        method, path = scope.get("method", "GET"), scope.get("path", "")
        op = operation_of(method, path)
        if path.startswith("/api/hooks/"):
            self.obs.last_hook_at = time.time()
        state: dict[str, Any] = {"status": 0, "body": b""}

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                headers = list(message.get("headers", []))
                dur = (time.perf_counter() - t0) * 1000
                headers.append((b"server-timing", f"app;dur={dur:.3f}".encode()))
                message = {**message, "headers": headers}
            elif (
                message["type"] == "http.response.body"
                and state["status"] >= 400
                and len(state["body"]) < _ERROR_BODY_MAX
            ):
                state["body"] += message.get("body", b"")[:_ERROR_BODY_MAX]
            await send(message)

        try:
            await self.app(scope, receive, wrapped)
        except Exception as exc:
            self.obs.errors.add(
                _stage(path, op),
                "internal_error",
                f"{type(exc).__name__}: {exc}",
                {"method": method, "path": path[:200]},
            )
            raise
        finally:
            if op is not None:
                self.obs.latency.observe(op, (time.perf_counter() - t0) * 1000)
        status = state["status"]
        if status >= 500 or (status >= 400 and _stage(path, op) == "connector"):
            code, message = _error_of(state["body"], status)
            self.obs.errors.add(
                _stage(path, op), code, message, {"method": method, "path": path[:200], "status": status}
            )


def _error_of(body: bytes, status: int) -> tuple[str, str]:
    """(code, message) of a response in the one error shape (or ``http_<status>``)."""
    try:
        err = json.loads(body.decode("utf-8", "replace"))["error"]
        return str(err["code"]), str(err.get("message", ""))
    except Exception:  # not the error shape: name the status
        return f"http_{status}", f"HTTP {status}"
