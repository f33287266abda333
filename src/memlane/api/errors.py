"""The one JSON error shape, and the handlers that produce it for every error.

Shape: ``{"error": {"code": str, "message": str, "details": {...}}}``. Codes:
``invalid_json`` (400), ``validation_error`` (422), ``payload_too_large`` (413),
``not_found`` (404), ``conflict`` (409), ``method_not_allowed`` (405),
``embedding_unavailable`` / ``storage_unavailable`` (503), ``internal_error`` (500, a bug).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memlane.errors import MemlaneError

log = logging.getLogger(__name__)

_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
               415: "unsupported_media_type"}


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
        return text(bytes(value[:ECHO_CHARS * 4]).decode("utf-8", "replace"))
    try:
        return text(str(value))
    except Exception:  # noqa: BLE001 - an object whose str() fails is named by its type
        return f"<{type(value).__name__}>"


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None) -> JSONResponse:
    """A JSONResponse in the one error shape. Every string in it (the message, the details'
    keys and values) is made encodable first (:func:`json_safe`), so an error that quotes the
    request's own bad input can always be sent."""
    content = {"error": {"code": safe_text(code), "message": safe_text(str(message)),
                         "details": json_safe(details or {})}}
    return JSONResponse(status_code=status, content=content)


def _clip(value: Any, limit: int = ECHO_CHARS) -> str:
    """A rejected value as at most ``limit`` characters (+ "...") of JSON-safe text."""
    if isinstance(value, str):
        text = value[:limit + 1]
    else:
        # lone surrogates stay raw through dumps and are escaped once, below
        text = json.dumps(_walk(value, _ECHO_ITEMS, _ECHO_DEPTH, lambda t: t), ensure_ascii=False)
    text = safe_text(text)
    return text if len(text) <= limit else text[:limit] + "..."


async def _memlane(_: Request, exc: MemlaneError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, exc.details)


async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        e = next(e for e in errors if e.get("type") == "json_invalid")
        return error_response(400, "invalid_json", "request body is not valid JSON: "
                              + str(e.get("ctx", {}).get("error", e.get("msg"))))
    # A body that arrived as text (not an object). ``string_unicode`` at the body is an object
    # key with a lone surrogate instead: a 422 like any other bad value.
    raw = [e for e in errors if tuple(e.get("loc", ())) == ("body",) and isinstance(e.get("input"), (bytes, str))
           and e.get("type") != "string_unicode"]
    if raw:
        return error_response(400, "invalid_json", "request body is not a JSON object "
                              "(send JSON with Content-Type: application/json)")
    fields = []
    for e in errors[:20]:
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        fields.append({"field": _clip(".".join(loc) or "body"), "message": e.get("msg", ""),
                       "input": _clip(e.get("input"))})
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    return error_response(422, "validation_error", f"invalid request: {summary}", {"errors": fields})


async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error")
    return error_response(500, "internal_error", f"internal error: {type(exc).__name__}")


def install(app: FastAPI) -> None:
    """Register every handler on ``app``."""
    app.add_exception_handler(MemlaneError, _memlane)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
