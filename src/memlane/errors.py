"""One root exception; every subclass carries its HTTP status and a stable error code.

The API maps any :class:`MemlaneError` to the one JSON error shape
``{"error": {"code": str, "message": str, "details": dict}}`` (see ``memlane.api.errors``).
"""

from __future__ import annotations

from typing import Any


class MemlaneError(Exception):
    """Root of every error memlane raises on purpose.

    Attributes:
        status: the HTTP status the API answers with.
        code: a short, stable, machine-readable error code.
        details: structured fields for the client (never secrets).
    """

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class ValidationError(MemlaneError):
    """Input that is well-formed JSON but not acceptable (wrong type, out of range, too large)."""

    status = 422
    code = "validation_error"


class PayloadTooLarge(MemlaneError):
    """A request body or a memory content over the configured size cap."""

    status = 413
    code = "payload_too_large"


class NotFound(MemlaneError):
    """An id that names no memory (or no row of the asked kind)."""

    status = 404
    code = "not_found"


class Conflict(MemlaneError):
    """A request that contradicts the current state (e.g. recovering a live memory)."""

    status = 409
    code = "conflict"


class EmbeddingError(MemlaneError):
    """The embedding provider failed (unreachable, bad reply, wrong dimensions)."""

    status = 503
    code = "embedding_unavailable"


class StorageError(MemlaneError):
    """The database could not complete an operation (disk full, corrupt file)."""

    status = 503
    code = "storage_unavailable"


class ConfigError(MemlaneError):
    """A setting with a value outside its allowed range; the message names the key."""

    status = 400
    code = "config_error"
