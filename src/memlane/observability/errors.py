"""The error ring: the last 500 errors of every subsystem, categorised by stage
(predictive-memory-scorer.md "4.3 Error Ring Integration").

Stages (:data:`STAGES`): ``extraction``, ``decision``, ``embedding``, ``mutation``,
``connector`` and ``predictor`` as the seed names them, plus ``storage``, ``provider``,
``jobs`` and ``http`` for what memlane adds. Predictor codes follow the seed:
``predictor_timeout``, ``predictor_crash``, ``predictor_parse_error``,
``predictor_train_failure``, ``predictor_checkpoint_error`` (and ``predictor_rpc_error``,
``predictor_unavailable``).

Entries are plain dicts ``{"id", "at" (ISO-8601 UTC), "epoch" (s), "stage", "code", "message",
"details"}``; ``id`` grows by one per entry since the daemon started, so a reader can ask for
what is newer than what it saw. The ring is in memory: a restart empties it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

#: Entries kept (seed: 500).
RING_SIZE = 500
#: Known stages (others are accepted and reported as given).
STAGES = (
    "extraction",
    "decision",
    "embedding",
    "mutation",
    "connector",
    "predictor",
    "storage",
    "provider",
    "jobs",
    "http",
)
#: Characters of a message kept.
MAX_MESSAGE = 500


class ErrorRing:
    """A bounded, thread-safe ring of error entries.

    Args:
        size: entries kept (oldest dropped first).
        clock: wall-clock seconds (tests pass their own).
    """

    def __init__(self, size: int = RING_SIZE, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        self._next_id = 1
        #: every entry ever added, by stage (not only those still in the ring).
        self.totals: Counter[str] = Counter()

    def add(self, stage: str, code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
        """Append one entry and return it (the message cut to :data:`MAX_MESSAGE` characters)."""
        now = self._clock()
        entry = {
            "stage": str(stage),
            "code": str(code),
            "message": str(message)[:MAX_MESSAGE],
            "details": dict(details or {}),
            "epoch": now,
            "at": datetime.fromtimestamp(now, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        with self._lock:
            entry["id"] = self._next_id
            self._next_id += 1
            self._ring.append(entry)
            self.totals[str(stage)] += 1
        return entry

    def recent(
        self, *, stage: str | None = None, code: str | None = None, limit: int = 100, after_id: int = 0
    ) -> list[dict[str, Any]]:
        """The newest entries first, at most ``limit``, filtered by stage, code and ``id > after_id``."""
        with self._lock:
            items = list(self._ring)
        out = []
        for e in reversed(items):
            if e["id"] <= after_id:
                break
            if (stage is None or e["stage"] == stage) and (code is None or e["code"] == code):
                out.append(e)
                if len(out) >= limit:
                    break
        return out

    def page(
        self, *, stage: str | None = None, code: str | None = None, offset: int = 0, limit: int = 50
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of entries, newest first, and how many match ``stage`` and ``code``.

        Raises:
            ValueError: a negative offset or a limit under 1.
        """
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        with self._lock:
            items = list(self._ring)
        matched = [
            e for e in reversed(items) if (stage is None or e["stage"] == stage) and (code is None or e["code"] == code)
        ]
        return matched[offset : offset + limit], len(matched)

    def count_since(self, seconds: float, *, stage: str | None = None, code: str | None = None) -> int:
        """Entries still in the ring added within the last ``seconds`` (optionally of one stage/code)."""
        since = self._clock() - seconds
        with self._lock:
            return sum(
                1
                for e in self._ring
                if e["epoch"] >= since
                and (stage is None or e["stage"] == stage)
                and (code is None or e["code"] == code)
            )

    def by_stage(self) -> dict[str, int]:
        """Entries now in the ring, by stage."""
        with self._lock:
            return dict(Counter(e["stage"] for e in self._ring))

    def __len__(self) -> int:
        with self._lock:
            return len(self._ring)
