"""Latency histograms per operation (predictive-memory-scorer.md "4.2 Latency Tracking").

Each operation (:data:`OPERATIONS`: remember, recall, mutate, session_start, prompt_submit,
session_end, predictor_score, predictor_train, jobs) keeps, in memory since the daemon started:

* cumulative bucket counts over :data:`BUCKETS_MS` plus count and sum (the Prometheus
  histogram ``/metrics`` exposes, in seconds);
* the last :data:`WINDOW` durations, from which p50 / p95 / p99 are computed exactly
  (nearest rank on the sorted window);
* one bucket per wall-clock minute for the last :data:`MINUTES` minutes (count and up to
  :data:`MINUTE_SAMPLES` durations each, reservoir-sampled), for the dashboard's sparklines.

All durations are milliseconds. Recording is O(buckets) under one lock per operation; reading
sorts at most :data:`WINDOW` numbers.
"""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

#: The operations the daemon times (order is the display order).
OPERATIONS = (
    "remember",
    "recall",
    "mutate",
    "session_start",
    "prompt_submit",
    "session_end",
    "predictor_score",
    "predictor_train",
    "jobs",
)
#: Upper bounds of the histogram buckets, ms (a last +Inf bucket is implied).
BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000)
#: Durations kept per operation for exact percentiles.
WINDOW = 2048
#: Minutes of per-minute buckets kept for sparklines.
MINUTES = 60
#: Durations kept per minute bucket (reservoir sample beyond that).
MINUTE_SAMPLES = 256


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` in [0, 1] of an ascending list, or None when empty."""
    if not sorted_values:
        return None
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[idx]


class _Minute:
    __slots__ = ("minute", "count", "samples")

    def __init__(self, minute: int) -> None:
        self.minute = minute
        self.count = 0
        self.samples: list[float] = []


class LatencyHistogram:
    """One operation's histogram (see the module docstring).

    Args:
        clock: wall-clock seconds (``time.time``); tests pass their own to move minutes.
        rng: the minute reservoir's randomness.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time, rng: random.Random | None = None) -> None:
        self._clock = clock
        self._rng = rng or random.Random(0)
        self._lock = threading.Lock()
        self.buckets = [0] * (len(BUCKETS_MS) + 1)
        self.count = 0
        self.sum_ms = 0.0
        self.max_ms = 0.0
        self.last_ms: float | None = None
        self._window: deque[float] = deque(maxlen=WINDOW)
        self._minutes: deque[_Minute] = deque(maxlen=MINUTES)

    def observe(self, ms: float) -> None:
        """Record one duration, ms (negative or non-finite values are ignored)."""
        if not math.isfinite(ms) or ms < 0:
            return
        minute = int(self._clock() // 60)
        with self._lock:
            self.buckets[bisect.bisect_left(BUCKETS_MS, ms)] += 1
            self.count += 1
            self.sum_ms += ms
            self.max_ms = max(self.max_ms, ms)
            self.last_ms = ms
            self._window.append(ms)
            m = self._minutes[-1] if self._minutes else None
            if m is None or m.minute != minute:
                m = _Minute(minute)
                self._minutes.append(m)
            m.count += 1
            if len(m.samples) < MINUTE_SAMPLES:
                m.samples.append(ms)
            else:  # reservoir: every duration of the minute equally likely to be kept
                j = self._rng.randrange(m.count)
                if j < MINUTE_SAMPLES:
                    m.samples[j] = ms

    def summary(self) -> dict[str, Any]:
        """``{count, sum_ms, mean_ms, max_ms, last_ms, window, p50, p95, p99}`` (ms; the
        percentiles over the last :data:`WINDOW` durations, None before the first)."""
        with self._lock:
            values = sorted(self._window)
            count, total, mx, last = self.count, self.sum_ms, self.max_ms, self.last_ms
        r = lambda v: None if v is None else round(v, 3)  # noqa: E731
        return {
            "count": count,
            "sum_ms": round(total, 3),
            "mean_ms": r(total / count) if count else None,
            "max_ms": r(mx) if count else None,
            "last_ms": r(last),
            "window": len(values),
            "p50": r(percentile(values, 0.50)),
            "p95": r(percentile(values, 0.95)),
            "p99": r(percentile(values, 0.99)),
        }

    def minutes(self, last: int = MINUTES) -> list[dict[str, Any]]:
        """Per-minute points of the last ``last`` minutes that had any duration, oldest first:
        ``{"t": minute start (epoch s), "count", "p50", "p95"}`` (ms)."""
        now_minute = int(self._clock() // 60)
        with self._lock:
            rows = [(m.minute, m.count, sorted(m.samples)) for m in self._minutes if m.minute > now_minute - last]
        return [
            {
                "t": minute * 60,
                "count": count,
                "p50": round(percentile(s, 0.5) or 0.0, 3),
                "p95": round(percentile(s, 0.95) or 0.0, 3),
            }
            for minute, count, s in rows
        ]

    def count_since(self, seconds: float) -> int:
        """Durations recorded in the minute buckets that overlap the last ``seconds``."""
        since = int((self._clock() - seconds) // 60)
        with self._lock:
            return sum(m.count for m in self._minutes if m.minute >= since)

    def cumulative_buckets(self) -> tuple[list[tuple[float, int]], int, float]:
        """``([(upper bound ms, cumulative count)...] ending with (inf, count), count, sum_ms)``."""
        with self._lock:
            counts, n, total = list(self.buckets), self.count, self.sum_ms
        out, acc = [], 0
        for bound, c in zip((*BUCKETS_MS, math.inf), counts):
            acc += c
            out.append((bound, acc))
        return out, n, total


class LatencyBook:
    """The histograms of every operation, by name.

    Args:
        operations: the operation names known up front (others are created on first use).
        clock: wall-clock seconds, passed to each histogram.
    """

    def __init__(self, operations: Iterable[str] = OPERATIONS, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ops: dict[str, LatencyHistogram] = {op: LatencyHistogram(clock=clock) for op in operations}

    def get(self, op: str) -> LatencyHistogram:
        """The histogram of ``op`` (created when new)."""
        h = self._ops.get(op)
        if h is None:
            with self._lock:
                h = self._ops.setdefault(op, LatencyHistogram(clock=self._clock))
        return h

    def observe(self, op: str, ms: float) -> None:
        """Record one duration of ``op``, ms."""
        self.get(op).observe(ms)

    def names(self) -> list[str]:
        """Every operation name, known ones first."""
        with self._lock:
            return list(self._ops)

    def report(self, *, sparkline_minutes: int = MINUTES) -> dict[str, Any]:
        """``{"operations": {op: summary + "minutes": [...]}, "unit": "ms"}``."""
        return {
            "unit": "ms",
            "operations": {
                op: {**self.get(op).summary(), "minutes": self.get(op).minutes(sparkline_minutes)}
                for op in self.names()
            },
        }
