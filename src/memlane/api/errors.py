"""The one JSON error shape, and the handlers that produce it for every error.

Shape: ``{"error": {"code": str, "message": str, "details": {...}}}``. Codes:
``invalid_json`` (400), ``validation_error`` (422), ``payload_too_large`` (413),
``not_found`` (404), ``conflict`` (409), ``method_not_allowed`` (405),
``embedding_unavailable`` / ``storage_unavailable`` (503), ``internal_error`` (500, a bug).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memlane.errors import MemlaneError

log = logging.getLogger(__name__)

_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
               415: "unsupported_media_type"}


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None) -> JSONResponse:
    """A JSONResponse in the one error shape."""
    return JSONResponse(status_code=status,
                        content={"error": {"code": code, "message": message, "details": details or {}}})


def _clip(value: Any, limit: int = 200) -> Any:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


async def _memlane(_: Request, exc: MemlaneError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, exc.details)


async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        e = next(e for e in errors if e.get("type") == "json_invalid")
        return error_response(400, "invalid_json", "request body is not valid JSON: "
                              + str(e.get("ctx", {}).get("error", e.get("msg"))))
    raw = [e for e in errors if tuple(e.get("loc", ())) == ("body",) and isinstance(e.get("input"), (bytes, str))]
    if raw:
        return error_response(400, "invalid_json", "request body is not a JSON object "
                              "(send JSON with Content-Type: application/json)")
    fields = []
    for e in errors[:20]:
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        fields.append({"field": ".".join(loc) or "body", "message": e.get("msg", ""),
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
