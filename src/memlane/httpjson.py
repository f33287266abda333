"""JSON over HTTP with memlane's error rules, shared by the embedding and LLM providers.

:class:`JsonHttpClient` is a thread-safe keep-alive connection pool (urllib3) with one call,
:meth:`JsonHttpClient.post_json`. Every failure becomes the caller's own error (built by
``fail``): a timeout names the timeout in seconds; an HTTP status >= 400 carries the status and
the first 200 characters of the body; a reply that is not JSON says so.

urllib3 rather than httpx here: these calls sit on the extraction worker's hot path (three per
job) and urllib3 costs ~0.55 ms of CPU per loopback call against ~0.85 ms for httpx
(``memlane bench pipeline``). Proxies come from the environment (``HTTP_PROXY``,
``HTTPS_PROXY``, ``NO_PROXY``), as httpx did.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

#: Characters of an HTTP error body quoted in an error message.
BODY_EXCERPT_CHARS = 200
#: Keep-alive connections kept per host (one per concurrent caller is enough).
POOL_CONNECTIONS_PER_HOST = 8

#: ``fail(message, timed_out, **details) -> the exception to raise``.
Fail = Callable[..., Exception]


def excerpt(text: str, limit: int = BODY_EXCERPT_CHARS) -> str:
    """The first ``limit`` characters of ``text`` (an error body)."""
    return text[:limit]


def _transport_failure(url: str, timeout_s: float, exc: BaseException, fail: Fail, *, aborted: bool) -> Exception:
    """The caller's error for a request that raised ``exc`` (``aborted``: the client was closed)."""
    if aborted:
        return fail(f"call to {url} aborted: the client was closed (shutting down)", False)
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # a subclass of ConnectTimeoutError
        return fail(f"cannot reach {url}: {type(exc).__name__}: {exc}", False)
    if isinstance(exc, urllib3.exceptions.TimeoutError):
        return fail(f"timed out after {timeout_s:g} s waiting for {url} (timeout_s={timeout_s:g})", True,
                    timeout_s=timeout_s)
    return fail(f"cannot reach {url}: {type(exc).__name__}: {exc}", False)


class _LiveConnections:
    """Every open connection of one client, so :meth:`abort` can end a call blocked in ``recv``.

    Closing a pool only drops its idle connections; a connection checked out by a call waiting
    for a hung server stays blocked until its read timeout (up to minutes for an LLM). Shutting
    its socket down wakes that read at once (it fails like a dropped connection).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: set[HTTPConnection] = set()
        self.closed = False

    def add(self, conn: HTTPConnection) -> None:
        with self._lock:
            self._conns.add(conn)
            closed = self.closed
        if closed:  # connected after abort(): end it before a request is sent on it
            _shutdown(conn)

    def discard(self, conn: HTTPConnection) -> None:
        with self._lock:
            self._conns.discard(conn)

    def abort(self) -> None:
        """Refuse new calls and shut down every open connection's socket (idempotent)."""
        with self._lock:
            self.closed = True
            conns = list(self._conns)
        for conn in conns:
            _shutdown(conn)


def _shutdown(conn: HTTPConnection) -> None:
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        # The base method works on the descriptor, also under a TLS socket (whose own
        # shutdown() would first drop its TLS state under a reader in another thread).
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected


def _tracked_pools(live: _LiveConnections) -> dict[str, type[HTTPConnectionPool]]:
    """Pool classes whose connections register with ``live`` while they are open."""

    def conn_class(base: type[HTTPConnection]) -> type[HTTPConnection]:
        def connect(self: HTTPConnection) -> None:
            base.connect(self)
            live.add(self)

        def close(self: HTTPConnection) -> None:
            live.discard(self)
            base.close(self)

        return type("Tracked" + base.__name__, (base,), {"connect": connect, "close": close})

    return {"http": type("TrackedHTTPConnectionPool", (HTTPConnectionPool,),
                         {"ConnectionCls": conn_class(HTTPConnection)}),
            "https": type("TrackedHTTPSConnectionPool", (HTTPSConnectionPool,),
                          {"ConnectionCls": conn_class(HTTPSConnection)})}


class JsonHttpClient:
    """A keep-alive HTTP client for JSON APIs; thread-safe (one pool shared by all callers).

    Args:
        headers: sent with every request (e.g. ``Authorization``).
        trust_env: route through the proxy named by ``HTTP(S)_PROXY`` unless ``NO_PROXY``
            exempts the host.

    Redirects are not followed and nothing is retried: a failure is reported at once.
    :meth:`close` aborts the calls in flight (they fail at once, as a dropped connection would)
    and every later call fails without connecting: a daemon shutting down never waits on a
    hung server.
    """

    def __init__(self, *, headers: dict[str, str] | None = None, trust_env: bool = True) -> None:
        self._headers = {"Accept": "application/json", **(headers or {})}
        self._live = _LiveConnections()
        self._direct = urllib3.PoolManager(maxsize=POOL_CONNECTIONS_PER_HOST, retries=False)
        self._direct.pool_classes_by_scheme = _tracked_pools(self._live)
        self._proxies: dict[str, urllib3.ProxyManager] = {}
        self._env = urllib.request.getproxies() if trust_env else {}
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every call now fails at once)."""
        return self._live.closed

    def _pool(self, url: str) -> urllib3.PoolManager:
        if not self._env:
            return self._direct
        parts = urlsplit(url)
        proxy = self._env.get(parts.scheme)
        if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
            return self._direct
        with self._lock:
            if proxy not in self._proxies:
                manager = urllib3.ProxyManager(proxy, maxsize=POOL_CONNECTIONS_PER_HOST, retries=False)
                manager.pool_classes_by_scheme = _tracked_pools(self._live)
                self._proxies[proxy] = manager
            return self._proxies[proxy]

    def request(self, method: str, url: str, *, body: bytes | None = None, timeout_s: float,
                headers: dict[str, str] | None = None) -> urllib3.BaseHTTPResponse:
        """One request; the whole reply is read before returning.

        Args:
            timeout_s: seconds for connecting and for each read.
        Raises:
            urllib3.exceptions.NewConnectionError: the connection was refused or the name did not
                resolve (urllib3 makes it a subclass of ``ConnectTimeoutError``).
            urllib3.exceptions.TimeoutError: no connection or no data within ``timeout_s``.
            urllib3.exceptions.HTTPError, OSError: any other transport failure, and any call
                after :meth:`close` (``ConnectionAbortedError``).
        """
        if self._live.closed:
            raise ConnectionAbortedError("the HTTP client was closed")
        return self._pool(url).request(
            method, url, body=body, headers={**self._headers, **(headers or {})},
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s), redirect=False, retries=False)

    def post_json(self, url: str, payload: Any, *, timeout_s: float, fail: Fail) -> Any:
        """POST ``payload`` as JSON and return the decoded JSON reply.

        Args:
            timeout_s: seconds for connecting and for each read.
            fail: builds the exception for a failure; called as ``fail(message, timed_out, **details)``.
        Raises:
            whatever ``fail`` returns, for a timeout, a connection failure, an HTTP status >= 400
            or a reply that is not JSON.
            ValueError: ``payload`` holds NaN or infinity (not JSON).
        """
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        try:
            response = self.request("POST", url, body=body, timeout_s=timeout_s,
                                    headers={"Content-Type": "application/json"})
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_failure(url, timeout_s, exc, fail, aborted=self._live.closed) from exc
        data = response.data
        if response.status >= 400:
            text = excerpt(data.decode("utf-8", errors="replace"))
            raise fail(f"{url} answered HTTP {response.status}: {text}", False, status=response.status, body=text)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise fail(f"reply is not valid JSON: {excerpt(data.decode('utf-8', errors='replace'))!r}", False,
                       status=response.status) from exc

    def status(self, url: str, *, timeout_s: float) -> int | None:
        """The HTTP status of ``GET url``, or ``None`` if it failed or timed out. Never raises."""
        try:
            return self.request("GET", url, timeout_s=timeout_s).status
        except Exception:  # noqa: BLE001 - a probe never raises
            return None

    def close(self) -> None:
        """Abort the calls in flight, refuse new ones and close every pooled connection (idempotent)."""
        self._live.abort()
        self._direct.clear()
        for pool in self._proxies.values():
            pool.clear()
