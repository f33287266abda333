"""Timestamps: ISO-8601 UTC strings with millisecond precision and a ``Z`` suffix."""

from __future__ import annotations

from datetime import datetime, timezone

from memlane.errors import ValidationError


def now_iso() -> str:
    """The current time, e.g. ``2026-11-21T10:00:00.123Z``."""
    return to_iso(datetime.now(timezone.utc))


def to_iso(dt: datetime) -> str:
    """Format a datetime (naive = UTC) as memlane's timestamp string."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_iso(value: str, field: str = "timestamp") -> str:
    """Validate and canonicalise an ISO-8601 timestamp (naive = UTC).

    Raises:
        ValidationError: not an ISO-8601 timestamp (the message names ``field``).
    """
    try:
        dt = datetime.fromisoformat(value.strip())
    except (ValueError, AttributeError) as exc:
        raise ValidationError(f"{field}: not an ISO-8601 timestamp: {value!r:.80}",
                              details={"field": field}) from exc
    return to_iso(dt)


def age_days(created_at: str, now: datetime) -> float:
    """Days between ``created_at`` (ISO) and ``now``."""
    dt = datetime.fromisoformat(created_at)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    return (now - dt).total_seconds() / 86400.0
