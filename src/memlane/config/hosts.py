"""Host allow-lists as settings hold them (``memory.pipelineV2.documents.allowedHosts``): the one
parser of their entries, used by the settings' validation and by :mod:`memlane.netguard`, which
enforces them on every outbound connection."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Most entries an allow-list may hold.
MAX_ALLOWED_HOSTS = 100
# A DNS name after IDNA encoding: dot-separated labels of letters, digits, '-' and '_'.
_HOST_NAME = re.compile(
    r"^(?=.{1,253}\.?$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
    r"(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$"
)


def normalize_host(host: str) -> str:
    """A URL host as compared: lowercase, IDNA-encoded (as httpx sends it), no brackets or trailing dot.

    Raises:
        ValueError: not a valid host name or IP literal.
    """
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return str(ipaddress.IPv6Address(h))
        except ValueError:
            raise ValueError(f"not a valid IPv6 address: {host[:100]!r}") from None
    try:
        raw = httpx.URL(scheme="http", host=h).raw_host.decode("ascii").lower()
    except (httpx.InvalidURL, UnicodeError, ValueError):
        raise ValueError(f"not a valid host name: {host[:100]!r}") from None
    if not _HOST_NAME.match(raw):
        raise ValueError(f"not a valid host name: {host[:100]!r}")
    return raw.rstrip(".")


class HostAllowlist:
    """Hosts the policy lets through (setting ``memory.pipelineV2.documents.allowedHosts``).

    An entry is a host name (``docs.internal``, compared with the URL's host after
    :func:`normalize_host`; no wildcards), an IP address or a CIDR network (``10.1.2.0/24``,
    compared with every address a host resolves to, so ``127.0.0.1`` also lets ``localhost``
    through).

    Raises:
        ValueError: an entry that is neither, or more than :data:`MAX_ALLOWED_HOSTS` entries.
    """

    def __init__(self, entries: Iterable[str] = ()) -> None:
        entries = list(entries)
        if len(entries) > MAX_ALLOWED_HOSTS:
            raise ValueError(f"at most {MAX_ALLOWED_HOSTS} allowed hosts")
        names: set[str] = set()
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise ValueError("allowed hosts are non-empty strings")
            text = entry.strip()
            bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
            try:
                networks.append(ipaddress.ip_network(bare, strict=False))
                continue
            except ValueError:
                pass
            names.add(normalize_host(text))
        self.names = frozenset(names)
        self.networks = tuple(networks)

    def __bool__(self) -> bool:
        return bool(self.names or self.networks)

    def allows_name(self, host: str) -> bool:
        """Whether ``host`` (any spelling :func:`normalize_host` accepts) is listed by name."""
        try:
            return normalize_host(host) in self.names
        except ValueError:
            return False

    def allows_address(self, ip: IPAddress) -> bool:
        """Whether ``ip`` lies in a listed address or network."""
        return any(ip.version == n.version and ip in n for n in self.networks)
