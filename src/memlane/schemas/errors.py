"""The one JSON error shape every surface answers with (the HTTP API's handlers in
:mod:`memlane.api.errors`, the MCP endpoint's refusals in :mod:`memlane.mcp.http`).

Shape: ``{"error": {"code": str, "message": str, "details": {...}}}``. Codes:
``invalid_json`` (400), ``validation_error`` (422), ``payload_too_large`` (413),
``not_found`` (404), ``conflict`` (409), ``method_not_allowed`` (405),
``embedding_unavailable`` / ``storage_unavailable`` (503), ``internal_error`` (500, a bug).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse

#: Characters of a rejected value echoed back in a 422 (``details.errors[].input``).
ECHO_CHARS = 200
#: Nesting levels and items per level of a rejected value walked before it is echoed.
_ECHO_DEPTH, _ECHO_ITEMS = 6, 20
#: Nesting levels of an error's details kept before the rest is replaced by "...".
_MAX_DEPTH = 32
#: Integers beyond this many bits are echoed as a description (str() of a huge int is slow or refused).
_MAX_INT_BITS = 256


def safe_text(text: str) -> str:
    """``text`` as valid UTF-8: each unpaired surrogate written as its ``\\udXXX`` escape
    (the ``backslashreplace`` error handler), everything else unchanged."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_safe(value: Any, *, max_items: int | None = None, depth: int = _MAX_DEPTH) -> Any:
    """``value`` made encodable by the JSON response: strings and keys through :func:`safe_text`,
    non-finite floats and huge integers as strings, other objects as ``str()``; containers deeper
    than ``depth`` become ``"..."`` and, when ``max_items`` is given, each keeps its first
    ``max_items`` entries. Never raises."""
    return _walk(value, max_items, depth, safe_text)


def _walk(value: Any, max_items: int | None, depth: int, text: Callable[[str], str]) -> Any:
    """:func:`json_safe` with the string treatment ``text`` (identity for the 422 echo, which
    escapes once, after ``json.dumps``)."""
    if isinstance(value, str):
        return text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= _MAX_INT_BITS else f"<integer of {value.bit_length()} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        if depth <= 0:
            return "..."
        if isinstance(value, dict):
            items = list(itertools.islice(value.items(), max_items))
            return {text(str(k)): _walk(v, max_items, depth - 1, text) for k, v in items}
        return [_walk(v, max_items, depth - 1, text) for v in itertools.islice(value, max_items)]
    if isinstance(value, (bytes, bytearray)):
        return text(bytes(value[: ECHO_CHARS * 4]).decode("utf-8", "replace"))
    try:
        return text(str(value))
    except Exception:  # noqa: BLE001 - an object whose str() fails is named by its type
        return f"<{type(value).__name__}>"


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None) -> JSONResponse:
    """A JSONResponse in the one error shape. Every string in it (the message, the details'
    keys and values) is made encodable first (:func:`json_safe`), so an error that quotes the
    request's own bad input can always be sent."""
    content = {
        "error": {"code": safe_text(code), "message": safe_text(str(message)), "details": json_safe(details or {})}
    }
    return JSONResponse(status_code=status, content=content)


def clip(value: Any, limit: int = ECHO_CHARS) -> str:
    """A rejected value as at most ``limit`` characters (+ "...") of JSON-safe text."""
    if isinstance(value, str):
        text = value[: limit + 1]
    else:
        # lone surrogates stay raw through dumps and are escaped once, below
        text = json.dumps(_walk(value, _ECHO_ITEMS, _ECHO_DEPTH, lambda t: t), ensure_ascii=False)
    text = safe_text(text)
    return text if len(text) <= limit else text[:limit] + "..."
