"""Outbound HTTP for memlane: JSON calls to the embedding and LLM providers, and the transport
that the document fetcher's guard (:mod:`memlane.netguard`) shares.

:class:`JsonHttpClient` is an ``httpx.Client`` (thread-safe, keep-alive) with one call,
:meth:`JsonHttpClient.post_json`. Every failure becomes the caller's own error (built by
``fail``): a timeout names the timeout in seconds; an HTTP status >= 400 carries the status and
the first 200 characters of the body; a reply that is not JSON says so. Redirects are not
followed and nothing is retried. Proxies come from the environment (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) as ``urllib.request`` reads them.

:meth:`JsonHttpClient.close` must end a call blocked on a hung server (an LLM may take minutes):
closing an httpx client only drops its idle connections. Its connections therefore go through
:class:`AbortableBackend`, an httpcore network backend that keeps every open socket and shuts
them all down on :meth:`AbortableBackend.abort`, which wakes a blocked read at once.

:class:`PoolTransport` is the httpx transport over httpcore connection pools with a chosen
network backend; :class:`memlane.netguard.GuardedTransport` is one with the address guard's.
"""

from __future__ import annotations

import functools
import json
import socket
import ssl
import threading
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import httpcore
import httpx

#: Characters of an HTTP error body quoted in an error message.
BODY_EXCERPT_CHARS = 200
#: Idle keep-alive connections kept per pool of :class:`JsonHttpClient` (more calls at once
#: open more connections: a caller never waits for a free one).
KEEPALIVE_CONNECTIONS = 8

#: ``fail(message, timed_out, **details) -> the exception to raise``.
Fail = Callable[..., Exception]


def excerpt(text: str, limit: int = BODY_EXCERPT_CHARS) -> str:
    """The first ``limit`` characters of ``text`` (an error body)."""
    return text[:limit]


# ---------------------------------------------------------------- httpcore pools as an httpx transport

_CORE_TO_HTTPX: Sequence[tuple[type[Exception], type[httpx.HTTPError]]] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


def _map_error(exc: Exception) -> Exception:
    """httpx's exception for an httpcore one (the same mapping httpx's own transport makes)."""
    for source, target in _CORE_TO_HTTPX:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


class _Body(httpx.SyncByteStream):
    """A response body from httpcore with its errors turned into httpx's."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._stream
        except Exception as exc:
            mapped = _map_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


@functools.cache
def default_tls() -> ssl.SSLContext:
    """httpx's default verifying context, built once: loading the CA bundle is slow
    (docs/decisions.md, "Serialisation"), and a client context is safe to share between
    connections and threads."""
    return httpx.create_ssl_context()


def tls_context(verify: ssl.SSLContext | str | bool) -> ssl.SSLContext:
    """The SSL context for ``verify`` as httpx takes it (True, a CA bundle path, or a context)."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    return default_tls() if verify is True else httpx.create_ssl_context(verify=verify)


class PoolTransport(httpx.BaseTransport):
    """An httpx transport over httpcore connection pools whose sockets come from ``backend``.

    Args:
        backend: the httpcore network backend every connection is opened with.
        verify: TLS verification as httpx takes it (True, a CA bundle path, or an SSLContext).
        max_connections: most connections of each pool (a request waits for a free one, within
            its pool timeout); None = no limit.
        keepalive: idle connections kept per pool (default ``max_connections``).

    One pool connects directly; :meth:`_pool_for` may route a request through another (a
    proxy). Nothing is retried. Raises (from ``handle_request``) httpx's transport errors.
    """

    def __init__(
        self,
        backend: httpcore.NetworkBackend,
        *,
        verify: ssl.SSLContext | str | bool = True,
        max_connections: int | None = 10,
        keepalive: int | None = None,
    ) -> None:
        self.backend = backend
        self._tls = tls_context(verify)
        self._max_connections = max_connections
        self._keepalive = keepalive if keepalive is not None else max_connections
        self._direct = self._new_pool()

    def _new_pool(self, proxy: httpcore.Proxy | None = None) -> httpcore.ConnectionPool:
        return httpcore.ConnectionPool(
            ssl_context=self._tls,
            proxy=proxy,
            max_connections=self._max_connections,
            max_keepalive_connections=self._keepalive,
            network_backend=self.backend,
            retries=0,
        )

    def _pool_for(self, url: httpx.URL) -> httpcore.ConnectionPool:
        """The pool a request to ``url`` goes through (here: always the direct one)."""
        return self._direct

    def _pools(self) -> list[httpcore.ConnectionPool]:
        return [self._direct]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through its pool; httpcore's errors come back as httpx's."""
        assert isinstance(request.stream, httpx.SyncByteStream)
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            resp = self._pool_for(request.url).handle_request(req)
        except Exception as exc:
            mapped = _map_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        assert isinstance(resp.stream, Iterable)
        return httpx.Response(
            status_code=resp.status, headers=resp.headers, stream=_Body(resp.stream), extensions=resp.extensions
        )

    def close(self) -> None:
        """Close every pooled connection."""
        for pool in self._pools():
            pool.close()


# ---------------------------------------------------------------- abortable connections


class _TrackedStream(httpcore.NetworkStream):
    """A network stream that leaves its backend's set of open sockets when it is closed."""

    def __init__(self, inner: httpcore.NetworkStream, owner: AbortableBackend) -> None:
        self._inner = inner
        self._owner = owner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._owner._discard(self)
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self._inner.start_tls(ssl_context, server_hostname, timeout)
        self._inner = tls  # same descriptor, now wrapped in TLS
        return self

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class AbortableBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, keeping every open socket so that :meth:`abort` can end the
    calls blocked on them (a read or write fails at once, as on a dropped connection). After
    :meth:`abort` every new connection fails with ``httpcore.ConnectError``."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._lock = threading.Lock()
        self._open: set[_TrackedStream] = set()
        self.aborted = False

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        """A TCP stream to ``host:port``, tracked until closed.

        Raises:
            httpcore.ConnectError: after :meth:`abort`, or the connection failed.
            httpcore.ConnectTimeout: no connection within ``timeout`` s.
        """
        if self.aborted:
            raise httpcore.ConnectError("the HTTP client was closed")
        stream = _TrackedStream(
            self._inner.connect_tcp(
                host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
            ),
            self,
        )
        with self._lock:
            self._open.add(stream)
            aborted = self.aborted
        if aborted:  # connected while abort() ran: end it before a request is sent on it
            _shutdown(stream)
        return stream

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        """Refused: memlane's outbound calls are TCP.

        Raises:
            httpcore.ConnectError: always.
        """
        raise httpcore.ConnectError("unix sockets are not used for outbound calls")

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` s (httpcore's retry backoff)."""
        self._inner.sleep(seconds)

    def _discard(self, stream: _TrackedStream) -> None:
        with self._lock:
            self._open.discard(stream)

    def abort(self) -> None:
        """Refuse new connections and shut down every open socket (idempotent)."""
        with self._lock:
            self.aborted = True
            streams = list(self._open)
        for stream in streams:
            _shutdown(stream)


def _shutdown(stream: httpcore.NetworkStream) -> None:
    sock = stream.get_extra_info("socket")
    if sock is None:
        return
    try:
        # The base method works on the descriptor, also under a TLS socket (whose own
        # shutdown() would first drop its TLS state under a reader in another thread).
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected


class _EnvProxyTransport(PoolTransport):
    """:class:`PoolTransport` that sends each request through the proxy the environment names
    for its scheme (``urllib.request.getproxies``) unless ``NO_PROXY`` exempts its host.

    Raises (from ``handle_request``): httpx.ProxyError for a proxy URL that does not parse or
    is not http/https (the message names neither its host nor its credentials)."""

    def __init__(self, backend: httpcore.NetworkBackend, *, trust_env: bool) -> None:
        super().__init__(backend, max_connections=None, keepalive=KEEPALIVE_CONNECTIONS)
        self._env = urllib.request.getproxies() if trust_env else {}
        self._proxies: dict[str, httpcore.ConnectionPool] = {}
        self._lock = threading.Lock()

    def _pool_for(self, url: httpx.URL) -> httpcore.ConnectionPool:
        proxy = self._env.get(url.scheme) or self._env.get("all")
        if not proxy or urllib.request.proxy_bypass(url.host):
            return self._direct
        with self._lock:
            if proxy not in self._proxies:
                try:
                    spec = httpx.Proxy(proxy if "://" in proxy else "http://" + proxy)
                except (ValueError, httpx.InvalidURL) as exc:
                    raise httpx.ProxyError(
                        f"the {url.scheme} proxy named by the environment is not a valid URL ({type(exc).__name__})"
                    ) from None
                target = spec.url
                if target.scheme not in ("http", "https"):  # SOCKS needs a package memlane does not ship
                    raise httpx.ProxyError(
                        f"the {url.scheme} proxy named by the environment is a "
                        f"{target.scheme} proxy; only http and https proxies are supported"
                    )
                self._proxies[proxy] = self._new_pool(
                    httpcore.Proxy(
                        url=httpcore.URL(
                            scheme=target.raw_scheme, host=target.raw_host, port=target.port, target=target.raw_path
                        ),
                        auth=spec.raw_auth,
                        headers=spec.headers.raw,
                    )
                )
            return self._proxies[proxy]

    def _pools(self) -> list[httpcore.ConnectionPool]:
        with self._lock:
            return [self._direct, *self._proxies.values()]


# ---------------------------------------------------------------- the JSON client


def _transport_failure(url: str, timeout_s: float, exc: BaseException, fail: Fail, *, aborted: bool) -> Exception:
    """The caller's error for a request that raised ``exc`` (``aborted``: the client was closed)."""
    if aborted:
        return fail(f"call to {url} aborted: the client was closed (shutting down)", False)
    if isinstance(exc, httpx.TimeoutException):
        return fail(
            f"timed out after {timeout_s:g} s waiting for {url} (timeout_s={timeout_s:g})", True, timeout_s=timeout_s
        )
    return fail(f"cannot reach {url}: {type(exc).__name__}: {exc}", False)


class JsonHttpClient:
    """A keep-alive HTTP client for JSON APIs; thread-safe (one httpx client shared by all callers).

    Args:
        headers: sent with every request (e.g. ``Authorization``); never put in error messages.
        trust_env: route through the proxy named by ``HTTP(S)_PROXY`` / ``ALL_PROXY`` unless
            ``NO_PROXY`` exempts the host.

    Redirects are not followed and nothing is retried: a failure is reported at once.
    :meth:`close` aborts the calls in flight (they fail at once, as a dropped connection would)
    and every later call fails without connecting: a daemon shutting down never waits on a
    hung server.
    """

    def __init__(self, *, headers: dict[str, str] | None = None, trust_env: bool = True) -> None:
        self._backend = AbortableBackend()
        self._http = httpx.Client(
            transport=_EnvProxyTransport(self._backend, trust_env=trust_env),
            headers={"Accept": "application/json", **(headers or {})},
            follow_redirects=False,
            trust_env=False,
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every call now fails at once)."""
        return self._backend.aborted

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        timeout_s: float,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One request; the whole reply is read before returning.

        Args:
            timeout_s: seconds for connecting, for each read and each write.
        Raises:
            httpx.TimeoutException: no connection, or no data, within ``timeout_s``.
            httpx.TransportError: any other transport failure (refused, name not resolved,
                dropped), and any call after :meth:`close`.
            httpx.InvalidURL: ``url`` is not a valid URL.
        """
        if self._backend.aborted:
            raise httpx.ConnectError("the HTTP client was closed")
        try:
            return self._http.request(method, url, content=body, headers=headers, timeout=timeout_s)
        except RuntimeError as exc:  # httpx refuses a client closed by close() in another thread
            if not self._backend.aborted:
                raise
            raise httpx.ConnectError("the HTTP client was closed") from exc

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
            response = self.request(
                "POST", url, body=body, timeout_s=timeout_s, headers={"Content-Type": "application/json"}
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _transport_failure(url, timeout_s, exc, fail, aborted=self._backend.aborted) from exc
        data = response.content
        if response.status_code >= 400:
            text = excerpt(data.decode("utf-8", errors="replace"))
            raise fail(
                f"{url} answered HTTP {response.status_code}: {text}", False, status=response.status_code, body=text
            )
        try:
            return json.loads(data)
        except ValueError as exc:
            raise fail(
                f"reply is not valid JSON: {excerpt(data.decode('utf-8', errors='replace'))!r}",
                False,
                status=response.status_code,
            ) from exc

    def status(self, url: str, *, timeout_s: float) -> int | None:
        """The HTTP status of ``GET url``, or ``None`` if it failed or timed out. Never raises."""
        try:
            return self.request("GET", url, timeout_s=timeout_s).status_code
        except Exception:  # noqa: BLE001 - a probe never raises
            return None

    def close(self) -> None:
        """Abort the calls in flight, refuse new ones and close every pooled connection (idempotent)."""
        self._backend.abort()
        self._http.close()
