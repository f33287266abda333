"""Request guard (pure ASGI middleware): Host, Origin, CSRF and token checks on every route.

Order of the checks, each refusing in the one error shape:

1. **Host** (DNS rebinding): the ``Host`` header's name must be a loopback name
   (``127.0.0.1``, ``localhost``, ``::1``), the configured bind host, or one of
   ``allowed_hosts``; otherwise 403 ``forbidden_host``. A web page that rebinds its own name
   to 127.0.0.1 still sends its own name as Host, so it is refused here.
2. **Origin**: a request that carries ``Origin`` must come from the daemon's own origin
   (``http://`` + the request's Host); anything else, ``null`` included, is 403
   ``forbidden_origin``. No CORS headers are ever sent, so browsers also block reading answers.
3. **CSRF**: a state-changing method (POST, PUT, PATCH, DELETE) needs a JSON content type,
   an ``Authorization`` header or an ``X-Memlane-Client`` header. Each of those makes a
   cross-site browser request non-simple, so the browser must send a CORS preflight, which
   the daemon never approves. Otherwise 403 ``csrf_refused``.
4. **Token**: every route except ``GET /health`` needs ``Authorization: Bearer <token>``
   (:mod:`memlane.auth`), compared in constant time; otherwise 401 ``unauthorized``.
   ``GET /health`` without the token answers only ``{"status": "ok"}``: the route reads
   ``scope["state"]["authenticated"]``, set here. The dashboard's session cookie
   (:mod:`memlane.dashboard.auth`, set by ``GET /login`` with a one-time code) is the one
   alternative to the token, on every route; ``scope["state"]["auth"]`` says which was used
   (``"token"`` or ``"cookie"``). ``GET /login`` itself is open (the route checks the code).
   A refused browser page request (GET, not under ``/api/``, accepting HTML) gets the 401 as a
   small HTML page saying how to sign in.

With ``require_token`` off (a trusted container), step 4 is skipped; 1-3 still apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from memlane.auth import CLIENT_HEADER, TokenStore, bearer_value
from memlane.schemas.errors import error_response

#: Host names every daemon accepts (loopback).
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_OPEN_PATHS = frozenset({"/health", "/login"})
_WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})


def host_name(host_header: str) -> str:
    """The name part of a Host header value, lower-cased: ``[::1]:7437`` -> ``::1``,
    ``LocalHost:80`` -> ``localhost``, ``example.org`` -> ``example.org``."""
    value = host_header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


class RequestGuard:
    """ASGI middleware applying the four checks of this module.

    Args:
        app: the wrapped application.
        tokens: the token to require (step 4), or None to skip step 4.
        bind_host: the address the daemon binds (accepted as a Host name unless a wildcard).
        allowed_hosts: further Host names to accept (e.g. a container's service name).
        sessions: the dashboard's sessions (:class:`memlane.dashboard.auth.DashboardAuth`): a
            live session cookie counts as the token. None: only the token.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: TokenStore | None,
        bind_host: str,
        allowed_hosts: Iterable[str] = (),
        sessions: Any = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.sessions = sessions
        names = set(LOOPBACK_NAMES) | {h.strip().lower().strip("[]") for h in allowed_hosts if h.strip()}
        if bind_host.strip().lower() not in _WILDCARD_BINDS:
            names.add(bind_host.strip().lower().strip("[]"))
        self.host_names = frozenset(names)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers", ()):
            headers.setdefault(k, v)  # the first of repeated headers, as Starlette reads them
        refusal = self._check(scope, headers)
        if refusal is not None:
            status, code, message = refusal
            extra = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            response = (
                _page_refusal(message)
                if status == 401 and _wants_page(scope, headers)
                else error_response(status, code, message)
            )
            if extra:
                response.headers.update(extra)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str, str] | None:
        host = headers.get(b"host", b"").decode("latin-1")
        if host_name(host) not in self.host_names:
            return (
                403,
                "forbidden_host",
                (
                    f"Host {host[:100]!r} is not accepted: use 127.0.0.1 or localhost "
                    "(or add the name to allowed_hosts in config.yaml)"
                ),
            )
        origin = headers.get(b"origin")
        if origin is not None:
            own = ("http://" + host).lower()
            if origin.decode("latin-1").strip().lower().rstrip("/") != own:
                return 403, "forbidden_origin", "cross-origin requests are refused"
        method = scope.get("method", "GET")
        if method in _STATE_CHANGING:
            ctype = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            is_json = ctype == b"application/json" or ctype.endswith(b"+json")
            if not (is_json or b"authorization" in headers or CLIENT_HEADER.lower().encode() in headers):
                return (
                    403,
                    "csrf_refused",
                    (f"a {method} needs Content-Type: application/json or an {CLIENT_HEADER} header"),
                )
        presented = bearer_value(headers.get(b"authorization", b"").decode("latin-1"))
        authenticated = self.tokens is None or self.tokens.matches(presented)
        via = "token" if authenticated else None
        if not authenticated and self.sessions is not None and b"cookie" in headers:
            from memlane.dashboard.auth import cookie_value

            if self.sessions.valid(cookie_value(headers[b"cookie"].decode("latin-1"))):
                authenticated, via = True, "cookie"
        state = scope.setdefault("state", {})
        state["authenticated"] = authenticated
        state["auth"] = via
        if authenticated or (scope.get("path") in _OPEN_PATHS and method in ("GET", "HEAD")):
            return None
        where = self.tokens.path if self.tokens is not None else "the home"
        if presented is None:
            return (
                401,
                "unauthorized",
                (
                    f"this route needs the daemon's token: send 'Authorization: Bearer "
                    f"<token>' (the token is in {where}; memlane's own clients send it)"
                ),
            )
        return 401, "unauthorized", f"wrong token (the current one is in {where}; see `memlane token rotate`)"


def _wants_page(scope: Scope, headers: dict[bytes, bytes]) -> bool:
    """A browser asking for a page: GET, outside ``/api/``, accepting text/html."""
    return (
        scope.get("method") == "GET"
        and not str(scope.get("path", "")).startswith("/api/")
        and b"text/html" in headers.get(b"accept", b"")
    )


def _page_refusal(reason: str) -> Any:
    """The 401 as a small HTML page (memlane.dashboard.auth.UNAUTHORIZED_PAGE)."""
    from html import escape

    from starlette.responses import HTMLResponse

    from memlane.dashboard.auth import UNAUTHORIZED_PAGE

    text = "This page needs a dashboard session." if "token" in reason else reason
    return HTMLResponse(
        UNAUTHORIZED_PAGE.format(reason=escape(text)), status_code=401, headers={"Cache-Control": "no-store"}
    )


def is_loopback_bind(host: str) -> bool:
    """True when binding ``host`` exposes the daemon to this machine only (a loopback name or
    address: ``127.0.0.0/8``, ``::1``, ``localhost``)."""
    import ipaddress

    name = host.strip().lower().strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bind_warnings(host: str, require_token: bool) -> list[str]:
    """What ``memlane serve`` must say before it binds ``host``.

    Returns:
        Warnings to print (empty for the default: loopback with the token on).
    Raises:
        ConfigError: a non-loopback ``host`` with the token off (anyone on the network could
            read and rewrite every memory).
    """
    from memlane.errors import ConfigError

    if is_loopback_bind(host):
        return (
            []
            if require_token
            else [
                "require_token is off: any local process (and any web page whose requests pass the Host/Origin "
                "checks) can read and change every memory; keep it off only inside a trusted container"
            ]
        )
    if not require_token:
        raise ConfigError(
            f"refusing to bind {host!r} with require_token off: a non-loopback address needs the "
            "token (remove require_token: false, or bind 127.0.0.1)"
        )
    return [
        f"binding {host!r}: the daemon is reachable from the network; every request needs the token "
        "(memlane token show), and traffic is plain HTTP, so put TLS in front of it"
    ]
