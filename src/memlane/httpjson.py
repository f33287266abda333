"""One JSON-over-HTTP POST with memlane's error rules, shared by the embedding and LLM providers.

Every failure becomes the caller's own error (built by ``fail``): a timeout names the timeout
in seconds; an HTTP status >= 400 carries the status and the first 200 characters of the body;
a reply that is not JSON says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

#: Characters of an HTTP error body quoted in an error message.
BODY_EXCERPT_CHARS = 200

#: ``fail(message, timed_out, **details) -> the exception to raise``.
Fail = Callable[..., Exception]


def excerpt(text: str, limit: int = BODY_EXCERPT_CHARS) -> str:
    """The first ``limit`` characters of ``text`` (an error body)."""
    return text[:limit]


def post_json(client: httpx.Client, url: str, payload: Any, *, timeout_s: float, fail: Fail) -> Any:
    """POST ``payload`` as JSON and return the decoded JSON reply.

    Args:
        timeout_s: seconds for connecting and for each read.
        fail: builds the exception for a failure; called as ``fail(message, timed_out, **details)``.
    Raises:
        whatever ``fail`` returns, for a timeout, a connection failure, an HTTP status >= 400 or a
        reply that is not JSON.
    """
    try:
        response = client.post(url, json=payload, timeout=httpx.Timeout(timeout_s))
    except httpx.TimeoutException as exc:
        raise fail(f"timed out after {timeout_s:g} s waiting for {url} (timeout_s={timeout_s:g})", True,
                   timeout_s=timeout_s) from exc
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach {url}: {type(exc).__name__}: {exc}", False) from exc
    if response.status_code >= 400:
        body = excerpt(response.text)
        raise fail(f"{url} answered HTTP {response.status_code}: {body}", False,
                   status=response.status_code, body=body)
    try:
        return json.loads(response.content)
    except ValueError as exc:
        raise fail(f"reply is not valid JSON: {excerpt(response.text)!r}", False,
                   status=response.status_code) from exc
