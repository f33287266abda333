"""The URL fetcher of document ingest (memory-pipeline-v2.md "URL Fetcher").

:func:`fetch_url` GETs an ``http``/``https`` URL with guards, then turns the body into text:

* one overall deadline, ``timeout_ms`` (default 30,000 ms), for the whole fetch (connect,
  headers, body, every redirect): a server trickling bytes cannot hold it longer;
* a size cap, ``max_bytes`` (default 10 MB): checked first on ``Content-Length``, then on a
  running byte count while streaming (the fetch stops as soon as the cap is passed);
* content types ``text/html``, ``text/*``, ``application/json``, ``application/xml`` (and
  ``application/*+xml``, ``application/*+json``); anything else (binary, missing) is refused;
* at most ``max_redirects`` (default 5) redirects, each to ``http``/``https`` only;
* no request to a loopback, private, link-local (cloud metadata), multicast, CGNAT, reserved
  or otherwise non-public address, whatever the spelling of the host, on the first request and
  on every redirect hop, unless ``allowed_hosts`` lists it: the requests go through
  :func:`memlane.netguard.guarded_client`, which resolves each host once, checks every address
  and connects to the address it checked (see :mod:`memlane.netguard`); proxy variables in the
  environment are ignored;
* HTML: ``<script>``, ``<style>``, ``<noscript>``, ``<template>`` dropped, tags removed with a
  line break after block elements, entities decoded (selectolax/Lexbor), the first ``<title>``
  returned as the title.

Errors are :class:`FetchError` with ``retryable`` (timeouts, connection failures, 5xx, 429)
or not (bad URL, refused address, 4xx, content type, size): the document worker retries only
the former. A refused address is :class:`FetchRefused` (code ``address_refused``), naming the
host, the address and why.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from selectolax.lexbor import LexborHTMLParser

from memlane.errors import ValidationError
from memlane.netguard import AddressRefused, HostAllowlist, check_literal, guarded_client, normalize_host

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_REDIRECTS = 5
#: Longest URL accepted, characters.
MAX_URL_CHARS = 2048
USER_AGENT = "memlane-document-fetcher/1"

_TEXT_TYPES = ("text/",)
_EXACT_TYPES = frozenset({"application/json", "application/xml"})
_DROP_TAGS = "script, style, noscript, template"
_BLOCK_TAGS = (
    "p, div, br, li, dt, dd, h1, h2, h3, h4, h5, h6, tr, pre, section, article, blockquote, "
    "header, footer, nav, aside, main, table, ul, ol, dl, hr, figure, figcaption, form, address"
)
_MANY_NEWLINES = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")


class FetchError(ValidationError):
    """A URL could not be fetched or is not acceptable.

    Attributes:
        retryable: a later attempt may succeed (timeout, connection error, HTTP 5xx or 429).
    """

    code = "fetch_failed"

    def __init__(self, message: str, *, retryable: bool = False, **details: object) -> None:
        super().__init__(message, details=dict(details))
        self.retryable = retryable


class FetchRefused(FetchError):
    """The URL's host is, or resolves to, an address outbound fetches may not reach
    (:func:`memlane.netguard.refusal`); never retryable. ``details``: host, address, reason."""

    code = "address_refused"

    @classmethod
    def of(cls, exc: AddressRefused) -> FetchRefused:
        """The fetch error for a refusal of the address guard."""
        return cls(exc.message, **exc.details)


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetched body as text.

    Attributes:
        url: the URL asked for; ``final_url`` the one that answered (after redirects).
        content: the text (HTML stripped to text).
        content_type: the media type, lowercased, without parameters.
        title: the HTML ``<title>`` (None when absent or not HTML).
        byte_length: bytes of the body as received.
    """

    url: str
    final_url: str
    content: str
    content_type: str
    title: str | None
    byte_length: int


def check_url(url: str) -> str:
    """``url`` stripped, if it is an absolute ``http``/``https`` URL with a valid host and port.

    The URL is parsed by httpx, the parser the fetch itself uses, so what is checked is what
    would be requested. The host must be a DNS name (IDNA allowed) or an IP literal; the port,
    when given, 1-65535.

    Raises:
        FetchError: not a string, empty, longer than :data:`MAX_URL_CHARS`, unparsable
            (e.g. ``http://[::1/``), another scheme, no host, a malformed host, a bad port.
    """
    if not isinstance(url, str) or not url.strip():
        raise FetchError("url: must be a non-empty string", field="url")
    url = url.strip()
    if len(url) > MAX_URL_CHARS:
        raise FetchError(f"url: longer than {MAX_URL_CHARS} characters", field="url")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise FetchError(f"url: not a valid URL ({str(exc)[:200]})", field="url") from None
    if parsed.scheme not in ("http", "https"):
        raise FetchError(
            f"url: only http and https are fetched, not {parsed.scheme[:20] or 'a relative URL'!r}", field="url"
        )
    if not parsed.raw_host:
        raise FetchError("url: has no host", field="url")
    try:
        normalize_host(parsed.raw_host.decode("ascii"))
    except (ValueError, UnicodeError):
        raise FetchError(f"url: {parsed.host[:100]!r} is not a valid host name or IP address", field="url") from None
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise FetchError(f"url: port {parsed.port} is outside 1-65535", field="url")
    return url


def check_target(url: str, allow: HostAllowlist) -> str:
    """:func:`check_url`, then refuse a host that names a refused address without DNS: a
    numeric address in any spelling (``127.0.0.1``, ``2130706433``, ``0x7f000001``,
    ``[::ffff:127.0.0.1]``...) or ``localhost``, unless ``allow`` lists it. Host names are
    checked when fetched (after resolution).

    Raises:
        FetchError: see :func:`check_url`. FetchRefused: a refused address.
    """
    url = check_url(url)
    try:
        check_literal(httpx.URL(url).raw_host.decode("ascii"), allow)
    except AddressRefused as exc:
        raise FetchRefused.of(exc) from None
    return url


def accepted_type(content_type: str) -> bool:
    """Whether a media type (lowercase, no parameters) is fetched: text/*, JSON, XML."""
    if content_type.startswith(_TEXT_TYPES) or content_type in _EXACT_TYPES:
        return True
    return content_type.startswith("application/") and content_type.endswith(("+xml", "+json"))


def fetch_url(
    url: str,
    *,
    timeout_ms: float = DEFAULT_TIMEOUT_MS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    allowed_hosts: Sequence[str] | HostAllowlist = (),
    client: httpx.Client | None = None,
) -> FetchResult:
    """GET ``url`` and return its text (see the module docstring for every guard).

    Args:
        timeout_ms: deadline of the whole fetch, ms.
        max_bytes: largest body accepted, bytes.
        max_redirects: redirects followed at most.
        allowed_hosts: exceptions to the address policy (:class:`memlane.netguard.HostAllowlist`
            entries: host names, IPs, CIDR networks); used for the default client.
        client: an httpx client to use (not closed), which then carries the address policy:
            build it with :func:`memlane.netguard.guarded_client`; default a new guarded one per call.

    Raises:
        FetchError: bad URL, timeout, connection error, HTTP status >= 400, too many redirects,
            unsupported content type, body over ``max_bytes``. FetchRefused: the host or a
            redirect's host is, or resolves to, a refused address.
        ValueError: a malformed ``allowed_hosts`` entry.
    """
    url = check_url(url)
    deadline = time.monotonic() + timeout_ms / 1000.0
    own = client is None
    if client is None:
        allow = allowed_hosts if isinstance(allowed_hosts, HostAllowlist) else HostAllowlist(allowed_hosts)
        client = guarded_client(allow, headers={"User-Agent": USER_AGENT})
    http = client
    try:
        current = url
        for _ in range(max_redirects + 1):
            result = _get_once(http, current, deadline, timeout_ms, max_bytes)
            if isinstance(result, str):  # a redirect target, vetted when it is requested
                try:
                    target = str(httpx.URL(current).join(result))
                except (httpx.InvalidURL, ValueError, TypeError) as exc:
                    raise FetchError(f"redirect to an invalid URL ({str(exc)[:200]})", url=current) from None
                current = check_url(target)
                continue
            body, ctype, charset = result
            return _to_text(url, current, body, ctype, charset)
        raise FetchError(f"more than {max_redirects} redirects", url=url, limit=max_redirects)
    finally:
        if own:
            http.close()


def _remaining(deadline: float, timeout_ms: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError(f"timed out after {timeout_ms:.0f} ms", retryable=True, url=url, timeout_ms=timeout_ms)
    return left


def _get_once(
    http: httpx.Client, url: str, deadline: float, timeout_ms: float, max_bytes: int
) -> str | tuple[bytes, str, str | None]:
    """One request: a redirect's Location, or (body, media type, charset)."""
    left = _remaining(deadline, timeout_ms, url)
    try:
        with http.stream("GET", url, timeout=httpx.Timeout(left), follow_redirects=False) as resp:
            if resp.is_redirect:
                location = resp.headers.get("location")
                if not location:
                    raise FetchError(f"HTTP {resp.status_code} redirect without a Location", url=url)
                return location
            if resp.status_code >= 400:
                retry = resp.status_code >= 500 or resp.status_code == 429
                raise FetchError(
                    f"HTTP {resp.status_code} from {url}", retryable=retry, url=url, status=resp.status_code
                )
            raw_type = resp.headers.get("content-type", "")
            ctype = raw_type.split(";", 1)[0].strip().lower()
            if not ctype or not accepted_type(ctype):
                raise FetchError(
                    f"unsupported content type {ctype or '(none)'!r}: only text/*, "
                    "application/json and application/xml are ingested",
                    url=url,
                    content_type=ctype,
                )
            declared = resp.headers.get("content-length")
            if declared and declared.strip().isdigit() and int(declared) > max_bytes:
                raise FetchError(
                    f"body of {int(declared)} bytes is over the limit of {max_bytes} bytes", url=url, limit=max_bytes
                )
            buf = bytearray()
            for part in resp.iter_bytes():
                buf += part
                if len(buf) > max_bytes:
                    raise FetchError(f"body is over the limit of {max_bytes} bytes", url=url, limit=max_bytes)
                _remaining(deadline, timeout_ms, url)
            return bytes(buf), ctype, resp.charset_encoding
    except AddressRefused as exc:
        raise FetchRefused.of(exc) from None
    except httpx.TimeoutException as exc:
        raise FetchError(
            f"timed out after {timeout_ms:.0f} ms", retryable=True, url=url, timeout_ms=timeout_ms
        ) from exc
    except httpx.HTTPError as exc:
        raise FetchError(f"cannot fetch {url}: {type(exc).__name__}: {exc}"[:500], retryable=True, url=url) from exc


def _decode(body: bytes, charset: str | None) -> str:
    if charset:
        try:
            return body.decode(charset, errors="replace")
        except LookupError:  # an unknown charset name: fall back to UTF-8
            pass
    return body.decode("utf-8", errors="replace")


def _to_text(url: str, final_url: str, body: bytes, ctype: str, charset: str | None) -> FetchResult:
    text = _decode(body, charset)
    title = None
    if ctype in ("text/html", "application/xhtml+xml"):
        text, title = html_to_text(text)
    return FetchResult(url, final_url, tidy(text), ctype, title, len(body))


def html_to_text(html: str) -> tuple[str, str | None]:
    """Plain text of an HTML page and its first ``<title>`` (None when absent or empty).

    Script, style, noscript and template elements are dropped whole; a line break follows every
    block element; entities are decoded by the parser.
    """
    tree = LexborHTMLParser(html)
    node = tree.css_first("title")
    title = _SPACES.sub(" ", node.text()).strip() if node is not None else ""
    for n in tree.css(_DROP_TAGS):
        n.decompose()
    if node is not None:
        node.decompose()
    for n in tree.css(_BLOCK_TAGS):
        n.insert_after("\n")
    root = tree.body if tree.body is not None else tree.root
    text = root.text(separator="") if root is not None else ""
    return text, (title or None)


def tidy(text: str) -> str:
    """Collapse runs of spaces, keep at most one blank line, strip each line and the ends, drop NULs."""
    text = text.replace("\x00", "").replace("\r\n", "\n")
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _MANY_NEWLINES.sub("\n\n", "\n".join(lines)).strip()
