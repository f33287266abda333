"""Outbound-request guard: which addresses the daemon may contact on a user's behalf.

A URL handed to the daemon (document ingest by URL) must not become a way to reach what only
the daemon's machine can reach: its own loopback services (memlane itself, databases, an
Ollama), the private network, or a cloud metadata endpoint (``169.254.169.254``). This module
holds the address policy and an httpx transport that enforces it where it cannot be bypassed:
at connect time, on every connection, hence on every redirect hop.

* :func:`refusal` says why one IP address is refused (``None`` for a public unicast address):
  unspecified (``0.0.0.0/8``, ``::``), loopback, link-local (including cloud metadata),
  multicast, private (RFC 1918, ULA ``fc00::/7``, site-local ``fec0::/10``), shared address
  space (CGNAT ``100.64.0.0/10``), reserved (``240.0.0.0/4``, broadcast), and anything else
  that is not globally routable (documentation, benchmarking, ``192.0.0.0/24``, Teredo
  ``2001::/32``...). IPv6 forms that carry an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
  IPv4-compatible ``::a.b.c.d``, 6to4 ``2002::/16``, NAT64 ``64:ff9b::/96``) are judged by the
  IPv4 address they carry; local-use NAT64 ``64:ff9b:1::/48`` is refused as private.
* :class:`HostAllowlist` is the exception list (setting
  ``memory.pipelineV2.documents.allowedHosts``): host names, matched against the URL's host;
  IP addresses and CIDR networks, matched against each resolved address.
* :func:`vet` resolves a host name once (``getaddrinfo``, so every numeric form the C library
  accepts -- ``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1`` -- is judged by the
  address it becomes) and refuses the whole host when any of its addresses is refused.
* :class:`GuardedTransport` is an httpx transport whose connections go through
  :class:`GuardedBackend`: it vets the host and connects to the vetted address itself, so a
  second DNS answer (DNS rebinding) never decides where the socket goes. TLS keeps the URL's
  name for SNI and certificate verification, and the Host header is the URL's; no proxy from
  the environment is used.

Errors: :class:`AddressRefused` (HTTP 422, code ``address_refused``) names the host, the
address and the reason; a name that does not resolve, or a resolution that outlasts the
connect timeout, is an ``httpcore`` connect error that the transport maps to httpx's.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpcore
import httpx

from memlane.config.hosts import HostAllowlist, normalize_host
from memlane.errors import ValidationError
from memlane.httpjson import PoolTransport

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``socket.getaddrinfo``'s signature: (host, port, family, type) -> [(family, type, proto, canon, sockaddr)].
Resolver = Callable[..., list[tuple[Any, ...]]]

#: Where a user allows a refused host (named in every refusal).
ALLOWLIST_SETTING = "memory.pipelineV2.documents.allowedHosts"

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_RESERVED_V4 = ipaddress.IPv4Network("240.0.0.0/4")
_IPV4_COMPAT = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_RFC1918 = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_ULA = ipaddress.IPv6Network("fc00::/7")
_METADATA = frozenset(
    {
        ipaddress.IPv4Address("169.254.169.254"),
        ipaddress.IPv4Address("169.254.170.2"),
        ipaddress.IPv6Address("fd00:ec2::254"),
    }
)


class AddressRefused(ValidationError):
    """An outbound request to an address the policy refuses (see :func:`refusal`).

    Attributes:
        host: the host as the URL gave it; ``address``: the refused IP (text); ``reason``:
        the category (e.g. ``"loopback"``).
    """

    code = "address_refused"

    def __init__(self, host: str, address: str, reason: str) -> None:
        shown = host if host == address else f"{host} ({address})"
        super().__init__(
            f"refused to connect to {shown}: {reason} address; to allow it, list the host in "
            f"{ALLOWLIST_SETTING} in config.yaml",
            details={"host": host, "address": address, "reason": reason},
        )
        self.host, self.address, self.reason = host, address, reason


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 transition form carries, or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (ip in _IPV4_COMPAT and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be contacted, or None when it is a public unicast address.

    Returns:
        a short category: ``"unspecified"``, ``"loopback"``, ``"cloud metadata (link-local)"``,
        ``"link-local"``, ``"multicast"``, ``"private"``, ``"shared (CGNAT)"``, ``"reserved"``,
        ``"non-global"``; for an IPv6 form carrying an IPv4 address, the IPv4 verdict followed
        by ``" (via <v6 form> <v4>)"``.
    """
    if ip in _METADATA:
        return "cloud metadata (link-local)"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:  # a zone index only exists on link-local addresses
            ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
        inner = _embedded_v4(ip)
        if inner is not None:
            why = refusal(inner)
            return None if why is None else f"{why} (IPv4 {inner} inside {ip})"
        if ip in _NAT64_LOCAL or ip in _ULA or ip.is_site_local:
            return "private"
    if ip.is_unspecified or ip in _THIS_NETWORK:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address):
        if any(ip in n for n in _RFC1918):
            return "private"
        if ip in _CGNAT:
            return "shared (CGNAT)"
        if ip in _RESERVED_V4 or ip == ipaddress.IPv4Address("255.255.255.255"):
            return "reserved"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "non-global"
    return None


def numeric_address(host: str) -> IPAddress | None:
    """The address a numeric host denotes, in any form ``getaddrinfo`` accepts without DNS.

    ``127.0.0.1``, ``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1`` and IPv6 literals
    (with or without brackets) give an address; a host name gives None.
    """
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    try:
        return ipaddress.ip_address(h)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return None
    return _parse_ip(str(infos[0][4][0])) if infos else None


def _parse_ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text.split("%", 1)[0])


NO_EXCEPTIONS = HostAllowlist()


def check_address(host: str, ip: IPAddress, allow: HostAllowlist = NO_EXCEPTIONS) -> None:
    """Refuse ``ip`` (an address ``host`` denotes or resolves to) unless the policy or ``allow`` accepts it.

    Raises:
        AddressRefused: naming ``host``, ``ip`` and the reason.
    """
    if allow.allows_name(host) or allow.allows_address(ip):
        return
    why = refusal(ip)
    if why is not None:
        raise AddressRefused(host, str(ip), why)


def check_literal(host: str, allow: HostAllowlist = NO_EXCEPTIONS) -> None:
    """Refuse a host that is refused without asking DNS: a numeric address in any form, or
    ``localhost`` / ``*.localhost`` (RFC 6761: always loopback). Names go to :func:`vet`.

    Raises:
        AddressRefused: the host denotes a refused address.
    """
    ip = numeric_address(host)
    if ip is not None:
        check_address(host, ip, allow)
        return
    try:
        name = normalize_host(host)
    except ValueError:
        return
    if (
        (name == "localhost" or name.endswith(".localhost"))
        and not allow.allows_name(name)
        and not allow.allows_address(ipaddress.IPv4Address("127.0.0.1"))
    ):
        raise AddressRefused(host, "127.0.0.1", "loopback")


def _resolve(resolver: Resolver, host: str, port: int, timeout: float | None) -> list[tuple[Any, ...]]:
    """``resolver(host, port, 0, SOCK_STREAM)`` on a daemon thread, given up after ``timeout`` s.

    A lookup the C library cannot cancel keeps its daemon thread until it ends by itself; it
    never holds the caller or the process's exit.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["infos"] = resolver(host, port, 0, socket.SOCK_STREAM)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="memlane-resolve", daemon=True).start()
    if not done.wait(timeout):
        raise httpcore.ConnectTimeout(f"resolving {host} took longer than {timeout:.1f} s")
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, (OSError, UnicodeError)):  # gaierror is an OSError
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        raise exc
    return box["infos"]


def vet(
    host: str,
    port: int,
    allow: HostAllowlist = NO_EXCEPTIONS,
    *,
    resolver: Resolver = socket.getaddrinfo,
    timeout: float | None = None,
) -> list[str]:
    """Resolve ``host`` once and return its addresses (text, resolver order, no duplicates),
    after checking every one of them against the policy (and ``localhost`` names before any
    lookup, see :func:`check_literal`).

    Args:
        host: the URL's host (a name or an IP literal; brackets allowed).
        port: the TCP port (passed to the resolver).
        allow: the exceptions.
        resolver: ``socket.getaddrinfo`` or a function with its signature.
        timeout: longest wait for the resolver, s (None: no limit).

    Raises:
        AddressRefused: any resolved address is refused (the host as a whole is refused).
        httpcore.ConnectError: the name does not resolve. httpcore.ConnectTimeout: resolution too slow.
    """
    check_literal(host, allow)
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    infos = _resolve(resolver, bare, port, timeout)
    out: list[str] = []
    for info in infos:
        text = str(info[4][0])
        ip = _parse_ip(text)
        check_address(host, ip, allow)
        if text not in out:
            out.append(text)
    if not out:
        raise httpcore.ConnectError(f"cannot resolve {host}: no addresses")
    return out


class GuardedBackend(httpcore.NetworkBackend):
    """An httpcore network backend that connects only to vetted addresses.

    ``connect_tcp(host, port)`` resolves ``host`` once with :func:`vet` and connects to the
    addresses it returned, in order, until one answers: the address checked is the address
    connected to. TLS is started by httpcore on the returned stream with the URL's host as
    ``server_hostname`` (SNI and certificate verification use the name, not the IP).
    Unix sockets are refused.

    Args:
        allow: the exceptions to the policy.
        resolver: ``socket.getaddrinfo`` or a function with its signature.
    """

    def __init__(self, allow: HostAllowlist = NO_EXCEPTIONS, *, resolver: Resolver = socket.getaddrinfo) -> None:
        self.allow = allow
        self.resolver = resolver
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        """A TCP stream to a vetted address of ``host`` (see the class docstring).

        Raises:
            AddressRefused: the policy refuses an address of ``host``.
            httpcore.ConnectError / ConnectTimeout: no address answered or resolution failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        addresses = vet(host, port, self.allow, resolver=self.resolver, timeout=timeout)
        last: Exception | None = None
        for address in addresses:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise httpcore.ConnectTimeout(f"connecting to {host} took longer than {timeout:.1f} s")
            try:
                return self._inner.connect_tcp(
                    address, port, timeout=left, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None  # vet() returns at least one address
        raise last

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        """Refused: a guarded client only speaks TCP to vetted addresses.

        Raises:
            httpcore.ConnectError: always.
        """
        raise httpcore.ConnectError("unix sockets are not allowed for outbound fetches")

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` s (httpcore's retry backoff)."""
        time.sleep(seconds)


class GuardedTransport(PoolTransport):
    """An httpx transport over an httpcore pool whose connections go through :class:`GuardedBackend`.

    Args:
        allow: the exceptions to the policy.
        verify: TLS verification as httpx takes it (True, a CA bundle path, or an SSLContext).
        resolver: ``socket.getaddrinfo`` or a function with its signature.
        max_connections: pool size.

    Raises (from ``handle_request``):
        AddressRefused: the policy refuses the request's host. httpx.HTTPError: transport failures.
    """

    def __init__(
        self,
        allow: HostAllowlist = NO_EXCEPTIONS,
        *,
        verify: ssl.SSLContext | str | bool = True,
        resolver: Resolver = socket.getaddrinfo,
        max_connections: int = 10,
    ) -> None:
        super().__init__(GuardedBackend(allow, resolver=resolver), verify=verify, max_connections=max_connections)


def guarded_client(
    allow: HostAllowlist = NO_EXCEPTIONS,
    *,
    verify: ssl.SSLContext | str | bool = True,
    resolver: Resolver = socket.getaddrinfo,
    **kwargs: Any,
) -> httpx.Client:
    """An ``httpx.Client`` that never follows redirects by itself, ignores proxy variables and
    connects only through :class:`GuardedTransport` (the caller vets each redirect by sending it).

    Keyword arguments go to ``httpx.Client`` (e.g. ``headers``); ``transport``, ``mounts``,
    ``proxy`` and ``trust_env`` are fixed.
    """
    return httpx.Client(
        transport=GuardedTransport(allow, verify=verify, resolver=resolver),
        trust_env=False,
        follow_redirects=False,
        **kwargs,
    )
