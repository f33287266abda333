"""The seed's request shapes for the sidecar (predictive-memory-scorer.md, "Daemon Communication
Protocol"), validated and turned into the values of the daemon's own request shape.

The seed's ``score`` request carries its session-level signals in one object::

    "signals": {"time_of_day": 0.25, "day_of_week": 2, "month_of_year": 1, "project": "signetai",
                "session_gap_hours": 8.5, "is_superseded": [false, false, true, ...]}

The daemon's request (:func:`memlane.predictor.rpc_params.parse_score_params`) gives the same
information as ``session_time`` (an ISO-8601 local time), ``session_gap_hours``, ``project``
and a per-candidate ``candidates[i].is_superseded``. :func:`parse_signals` maps the seed's
object onto those, so both shapes go through the one feature builder
(:func:`memlane.predictor.dataset.build_session` ->
:func:`memlane.predictor.features.feature_matrix_from_signals`), the one the model is trained
with. Nothing here computes a feature.

Conventions (the seed gives only the example above and no ranges; these are memlane's choices,
the same as its feature schema's, :mod:`memlane.predictor.features`, and as the upstream Signet
predictor's loader, ``packages/predictor/src/data.rs``):

``time_of_day``
    fraction of a day, ``[0, 1)``: 0.25 = 06:00, 0.5 = 12:00 (local wall clock). Resolved to
    the nearest second (the time features read hours, minutes and seconds, as from a
    ``session_time``); a value within half a second of 1 becomes 23:59:59.
``day_of_week``
    integer 0..6, **Monday = 0** ... Sunday = 6 (Python's ``weekday()``, the ``dow_sin`` /
    ``dow_cos`` features' own origin; upstream turns Sakamoto's Sunday = 0 into Monday = 0).
    The seed's example ``2`` is a Wednesday.
``month_of_year``
    integer 1..12, **January = 1** (the calendar month, as in the seed's example ``1``; upstream
    reads the calendar month 1..12 and subtracts 1, "0-indexed for sin/cos").
    The ``moy_sin`` / ``moy_cos`` features encode ``(month_of_year - 1) / 12``, exactly as
    for a ``session_time`` in that month. 0 and 13 are refused; a sender counting from 0 is
    caught only when it sends January (0): its other months cannot be told from ours.
``session_gap_hours``
    hours since the previous session, a finite number >= 0.
``project``
    the project's name or path (string), or null.
``is_superseded``
    ``n`` booleans, one per candidate in ``candidate_ids`` order.

Every key is optional, but the three time keys come together or not at all (a partial time
would be completed from the clock, which is the silent substitution this module exists to
stop). Unknown keys are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = ["SIGNAL_KEYS", "TIME_KEYS", "InvalidParams", "SeedSignals", "parse_signals", "wall_clock"]

#: The keys of the seed's ``signals`` object.
SIGNAL_KEYS = ("time_of_day", "day_of_week", "month_of_year", "project", "session_gap_hours", "is_superseded")
#: The keys that together give the session's time (all three or none).
TIME_KEYS = ("time_of_day", "day_of_week", "month_of_year")

#: The fixed reference year of :func:`wall_clock` (2001-01-01 is a Monday; not a leap year).
_YEAR = 2001
_SECONDS_PER_DAY = 86_400


class InvalidParams(ValueError):
    """Bad ``params`` of a known method (JSON-RPC -32602); the message names the field."""


@dataclass(frozen=True)
class SeedSignals:
    """The seed's ``signals`` object, validated (None: the key was absent).

    Attributes:
        session_time: a naive datetime whose wall-clock time, weekday and month are the
            signals' ``time_of_day``, ``day_of_week`` and ``month_of_year`` (its year and day
            of month are fixed by :func:`wall_clock`; no feature reads them), or None without
            those keys.
        project: the project (``has_project`` tells an explicit null from an absent key).
        has_project: ``project`` was given (possibly null).
        session_gap_hours: hours, finite, >= 0; or None.
        is_superseded: ``n`` booleans, or None.
    """

    session_time: datetime | None = None
    project: str | None = None
    has_project: bool = False
    session_gap_hours: float | None = None
    is_superseded: list[bool] | None = None


def _number(value: Any, field: str) -> float:
    """A JSON number (not a boolean), finite, as float; else :class:`InvalidParams`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParams(f"{field} must be a number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out):
        raise InvalidParams(f"{field} must be finite, got {value!r}")
    return out


def _integer(value: Any, field: str, lo: int, hi: int, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParams(f"{field} must be an integer {lo}..{hi} ({meaning}), got {value!r}")
    if not lo <= value <= hi:
        raise InvalidParams(f"{field} must be an integer {lo}..{hi} ({meaning}), got {value}")
    return value


def wall_clock(time_of_day: float, day_of_week: int, month_of_year: int) -> datetime:
    """A naive datetime with the given wall-clock time, weekday and month.

    The time features (:func:`memlane.predictor.features.build_feature_matrix`) read only the
    hour, minute and second, ``weekday()`` and ``month`` of the session time, so this datetime
    yields exactly the features of any real session time with those three values. Its year is
    fixed (2001) and its day of month is the first day of that month with that weekday (1..7);
    no feature reads either.

    Args:
        time_of_day: fraction of a day in ``[0, 1)`` (0.25 = 06:00); rounded to the second,
            capped at 23:59:59.
        day_of_week: 0..6, Monday = 0.
        month_of_year: 1..12, January = 1.

    Raises:
        ValueError: a value out of those ranges.
    """
    if not (0.0 <= time_of_day < 1.0 and 0 <= day_of_week <= 6 and 1 <= month_of_year <= 12):
        raise ValueError(f"time_of_day {time_of_day}, day_of_week {day_of_week}, "
                         f"month_of_year {month_of_year} out of range")
    first = datetime(_YEAR, month_of_year, 1)
    day = 1 + (day_of_week - first.weekday()) % 7
    seconds = min(round(time_of_day * _SECONDS_PER_DAY), _SECONDS_PER_DAY - 1)
    return first.replace(day=day) + timedelta(seconds=seconds)


def parse_signals(raw: Any, n: int) -> SeedSignals:
    """Validate the seed's ``signals`` object of a request with ``n`` candidates.

    Args:
        raw: the ``signals`` value (a JSON object); the keys are :data:`SIGNAL_KEYS`, all
            optional; shapes and units in the module docstring.
        n: the number of candidates (the length ``is_superseded`` must have).

    Returns:
        a :class:`SeedSignals`.

    Raises:
        InvalidParams: not an object, an unknown key, only some of the three time keys, or
            a value of the wrong type, out of range, not finite or of the wrong length; the
            message names the field (``signals.<key>``).
    """
    if not isinstance(raw, dict):
        raise InvalidParams(f"signals must be an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SIGNAL_KEYS))
    if unknown:
        raise InvalidParams(f"signals.{unknown[0]} is not a known signal (known: {', '.join(SIGNAL_KEYS)})")
    given = [k for k in TIME_KEYS if k in raw]
    when = None
    if given:
        if len(given) != len(TIME_KEYS):
            missing = [k for k in TIME_KEYS if k not in raw]
            raise InvalidParams(f"signals.{missing[0]} is missing: signals.time_of_day, day_of_week and "
                                f"month_of_year come together (the session's time), or not at all")
        tod = _number(raw["time_of_day"], "signals.time_of_day")
        if not 0.0 <= tod < 1.0:
            raise InvalidParams(f"signals.time_of_day must be a fraction of a day in [0, 1) "
                                f"(0.25 = 06:00), got {raw['time_of_day']!r}")
        dow = _integer(raw["day_of_week"], "signals.day_of_week", 0, 6, "Monday = 0")
        moy = _integer(raw["month_of_year"], "signals.month_of_year", 1, 12, "January = 1")
        when = wall_clock(tod, dow, moy)
    gap = None
    if "session_gap_hours" in raw:
        gap = _number(raw["session_gap_hours"], "signals.session_gap_hours")
        if gap < 0:
            raise InvalidParams(f"signals.session_gap_hours must be >= 0 hours, got {raw['session_gap_hours']!r}")
    project = raw.get("project")
    if project is not None and not isinstance(project, str):
        raise InvalidParams(f"signals.project must be a string or null, got {type(project).__name__}")
    superseded = None
    if "is_superseded" in raw:
        flags = raw["is_superseded"]
        if not isinstance(flags, list) or len(flags) != n:
            got = f"{len(flags)} entries" if isinstance(flags, list) else type(flags).__name__
            raise InvalidParams(f"signals.is_superseded must be {n} booleans (one per candidate), got {got}")
        bad = next((i for i, f in enumerate(flags) if not isinstance(f, bool)), None)
        if bad is not None:
            raise InvalidParams(f"signals.is_superseded[{bad}] must be a boolean, got {flags[bad]!r}")
        superseded = list(flags)
    return SeedSignals(session_time=when, project=project, has_project="project" in raw,
                       session_gap_hours=gap, is_superseded=superseded)
