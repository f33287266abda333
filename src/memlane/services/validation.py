"""Checks shared by every surface (HTTP, CLI, import): they raise memlane errors, never 500s."""

from __future__ import annotations

import math

from memlane.errors import PayloadTooLarge, ValidationError

#: Longest type, project, tag, who, why and source strings, characters.
MAX_SHORT_CHARS = 512


def check_text(value: str, field: str, *, max_chars: int, allow_empty: bool = False) -> str:
    """A string that SQLite can store: no unpaired UTF-16 surrogates, no NUL, not over ``max_chars``.

    Raises:
        ValidationError: wrong type, unpaired surrogate, NUL, or empty when not allowed.
        PayloadTooLarge: longer than ``max_chars`` characters.
    """
    if not isinstance(value, str):
        raise ValidationError(f"{field}: expected a string", details={"field": field})
    if len(value) > max_chars:
        raise PayloadTooLarge(
            f"{field}: {len(value)} characters is over the limit of {max_chars}",
            details={"field": field, "limit": max_chars, "length": len(value)},
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"{field}: contains an unpaired surrogate at position {exc.start}", details={"field": field}
        ) from exc
    if "\x00" in value:
        raise ValidationError(f"{field}: contains a NUL character", details={"field": field})
    if not allow_empty and not value.strip():
        raise ValidationError(f"{field}: must not be empty", details={"field": field})
    return value


def check_unit(value: float, field: str) -> float:
    """A finite number in [0, 1].

    Raises:
        ValidationError: not a number, not finite, or outside [0, 1].
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        raise ValidationError(f"{field}: must be a number in [0, 1], got {value!r}", details={"field": field})
    return float(value)


def check_metadata(value: object, field: str = "metadata") -> dict:
    """A JSON object SQLite can store as standard JSON (no NaN or Infinity, no surrogates).

    Raises:
        ValidationError: not an object, or not representable as standard JSON.
    """
    import json

    if not isinstance(value, dict):
        raise ValidationError(f"{field}: expected an object", details={"field": field})
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")  # surrogates raise here
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise ValidationError(f"{field}: not storable as standard JSON ({exc})", details={"field": field}) from exc
    return value


def clean_query(query: str, max_chars: int) -> str:
    """A query SQLite and the tokenizer accept: truncated to ``max_chars``, unpaired
    surrogates replaced by U+FFFD, NULs removed. Never raises for a string."""
    if not isinstance(query, str):
        raise ValidationError("query: expected a string", details={"field": "query"})
    q = query[:max_chars]
    q = q.encode("utf-8", "replace").decode("utf-8") if _has_surrogate(q) else q
    return q.replace("\x00", " ")


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True
