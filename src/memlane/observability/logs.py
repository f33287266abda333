"""The log ring: the daemon's newest log records as structured events, for the dashboard's
Logs page and ``GET /api/analytics/logs`` (predictive-memory-scorer.md "Structured logging":
events filterable by ``category``, e.g. ``category: predictor``).

:class:`LogRing` is a :class:`logging.Handler` on the ``memlane`` logger (installed once per
process by :func:`install`: one daemon per home and process, memlane.homelock). It keeps what
the daemon logs at its ``log_level`` (a record under that level is never created): it changes
no logger's level, so nothing more or less reaches the daemon's stderr.

Each entry is ``{"id", "at" (ISO-8601 UTC, ms), "epoch" (s), "level" (INFO, WARNING...),
"category" (the logger's first name under ``memlane``: ``memlane.predictor.client`` ->
``predictor``), "logger", "message", "exception" (the exception's type and message, or None)}``.
``id`` grows by one per record since the process started. The ring is in memory: a restart
empties it (the daemon's stderr, or its log file under systemd, keeps everything).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from datetime import UTC, datetime
from typing import Any

#: Records kept (oldest dropped first).
LOG_RING_SIZE = 2000
#: Characters of a message kept.
MAX_LOG_MESSAGE = 1000
#: Level names a reader filters on, lowest first (``level``: this level and above).
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: The logger whose records (and its children's) the ring keeps.
ROOT_LOGGER = "memlane"


def category_of(logger_name: str) -> str:
    """``memlane.predictor.client`` -> ``predictor``; ``memlane`` -> ``memlane``; any other
    logger -> its first name."""
    parts = logger_name.split(".")
    if parts[0] == ROOT_LOGGER:
        return parts[1] if len(parts) > 1 else ROOT_LOGGER
    return parts[0]


class LogRing(logging.Handler):
    """A bounded, thread-safe ring of log records as plain dicts (module docstring).

    Args:
        size: records kept.
    """

    def __init__(self, size: int = LOG_RING_SIZE) -> None:
        super().__init__(level=logging.NOTSET)
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        self._ring_lock = threading.Lock()
        self._next_id = 1

    def emit(self, record: logging.LogRecord) -> None:
        """Keep one record (never raises: a bad format string keeps its raw message)."""
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 -- a logging call with wrong arguments must not break the caller
            message = str(record.msg)
        exc = record.exc_info[1] if record.exc_info and record.exc_info[1] is not None else None
        entry = {
            "epoch": record.created,
            "level": record.levelname,
            "category": category_of(record.name),
            "logger": record.name,
            "message": message[:MAX_LOG_MESSAGE],
            "exception": f"{type(exc).__name__}: {exc}"[:MAX_LOG_MESSAGE] if exc is not None else None,
            "at": datetime.fromtimestamp(record.created, tz=UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
        }
        with self._ring_lock:
            entry["id"] = self._next_id
            self._next_id += 1
            self._ring.append(entry)

    def page(
        self,
        *,
        category: str | None = None,
        level: str | None = None,
        q: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of records, newest first, and how many match: ``category`` exactly,
        ``level`` and above (one of :data:`LEVELS`), ``q`` a case-insensitive substring of the
        message or the logger's name.

        Raises:
            ValueError: an unknown level, a negative offset or a limit under 1.
        """
        if level is not None and level.upper() not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}")
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        floor = logging.getLevelName(level.upper()) if level is not None else logging.NOTSET
        needle = q.lower() if q else None
        with self._ring_lock:
            items = list(self._ring)
        matched = [
            e
            for e in reversed(items)
            if (category is None or e["category"] == category)
            and logging.getLevelName(e["level"]) >= floor
            and (needle is None or needle in e["message"].lower() or needle in e["logger"].lower())
        ]
        return matched[offset : offset + limit], len(matched)

    def categories(self) -> dict[str, int]:
        """Records now in the ring by category, most first."""
        with self._ring_lock:
            counts = Counter(e["category"] for e in self._ring)
        return dict(counts.most_common())

    def __len__(self) -> int:
        with self._ring_lock:
            return len(self._ring)


_INSTALL_LOCK = threading.Lock()
_RING: LogRing | None = None


def install() -> LogRing:
    """The process's :class:`LogRing`, added to the ``memlane`` logger on the first call
    (idempotent, thread-safe)."""
    global _RING
    with _INSTALL_LOCK:
        if _RING is None:
            _RING = LogRing()
            logging.getLogger(ROOT_LOGGER).addHandler(_RING)
        return _RING


__all__ = ["LEVELS", "LOG_RING_SIZE", "LogRing", "category_of", "install"]
