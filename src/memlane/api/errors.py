"""The handlers that answer every error of the HTTP API in the one JSON error shape
(:mod:`memlane.schemas.errors`)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memlane.errors import MemlaneError
from memlane.schemas.errors import clip, error_response

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


async def _memlane(_: Request, exc: MemlaneError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, exc.details)


async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        e = next(e for e in errors if e.get("type") == "json_invalid")
        return error_response(
            400, "invalid_json", "request body is not valid JSON: " + str(e.get("ctx", {}).get("error", e.get("msg")))
        )
    # A body that arrived as text (not an object). ``string_unicode`` at the body is an object
    # key with a lone surrogate instead: a 422 like any other bad value.
    raw = [
        e
        for e in errors
        if tuple(e.get("loc", ())) == ("body",)
        and isinstance(e.get("input"), (bytes, str))
        and e.get("type") != "string_unicode"
    ]
    if raw:
        return error_response(
            400, "invalid_json", "request body is not a JSON object (send JSON with Content-Type: application/json)"
        )
    fields = []
    for e in errors[:20]:
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        fields.append(
            {"field": clip(".".join(loc) or "body"), "message": e.get("msg", ""), "input": clip(e.get("input"))}
        )
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
