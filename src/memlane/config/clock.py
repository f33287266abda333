"""Timestamps: ISO-8601 UTC strings with millisecond precision and a ``Z`` suffix."""

from __future__ import annotations

from datetime import UTC, datetime

from memlane.errors import ValidationError


def now_iso() -> str:
    """The current time, e.g. ``2026-11-21T10:00:00.123Z``."""
    return to_iso(datetime.now(UTC))


def to_iso(dt: datetime) -> str:
    """Format a datetime (naive = UTC) as memlane's timestamp string."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    # %Y is not zero-padded for years < 1000 on glibc; fromisoformat needs 4 digits.
    return f"{dt.year:04d}" + dt.strftime("-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_iso(value: str, field: str = "timestamp") -> str:
    """Validate and canonicalise an ISO-8601 timestamp (naive = UTC).

    Raises:
        ValidationError: not an ISO-8601 timestamp (the message names ``field``).
    """
    try:
        dt = datetime.fromisoformat(value.strip())
        # astimezone(utc) overflows for e.g. 9999-12-31T23:59-01:00 or 0001-01-01T00:00+01:00
        return to_iso(dt)
    except (ValueError, AttributeError, OverflowError) as exc:
        raise ValidationError(f"{field}: not an ISO-8601 timestamp: {value!r:.80}", details={"field": field}) from exc


def age_days(created_at: str, now: datetime) -> float:
    """Days between ``created_at`` (ISO) and ``now``."""
    dt = datetime.fromisoformat(created_at)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return (now - dt).total_seconds() / 86400.0
