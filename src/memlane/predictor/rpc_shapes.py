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

The object is validated by a pydantic model (:class:`SignalsModel`, strict: a JSON number
where a number belongs, a boolean where a boolean does, nothing converted); a violation becomes
:class:`InvalidParams` naming the field and what it must be (:func:`invalid_params`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

__all__ = [
    "SIGNAL_KEYS",
    "TIME_KEYS",
    "InvalidParams",
    "SeedSignals",
    "SignalsModel",
    "invalid_params",
    "parse_signals",
    "wall_clock",
]

#: The keys of the seed's ``signals`` object.
SIGNAL_KEYS = ("time_of_day", "day_of_week", "month_of_year", "project", "session_gap_hours", "is_superseded")
#: The keys that together give the session's time (all three or none).
TIME_KEYS = ("time_of_day", "day_of_week", "month_of_year")

#: The fixed reference year of :func:`wall_clock` (2001-01-01 is a Monday; not a leap year).
_YEAR = 2001
_SECONDS_PER_DAY = 86_400


class InvalidParams(ValueError):
    """Bad ``params`` of a known method (JSON-RPC -32602); the message names the field."""


def _path(loc: tuple[int | str, ...], prefix: str) -> str:
    """``("is_superseded", 0)`` -> ``"signals.is_superseded[0]"`` (with ``prefix`` ``"signals."``)."""
    out = prefix.rstrip(".")
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def invalid_params(
    exc: ValidationError,
    *,
    prefix: str = "",
    meanings: dict[str, str] | None = None,
    elements: dict[str, str] | None = None,
    known: tuple[str, ...] = (),
) -> InvalidParams:
    """The :class:`InvalidParams` for the first error of a pydantic validation of request params.

    Args:
        exc: the validation error.
        prefix: put before the field's path (``"signals."``).
        meanings: field name -> what its value must be (``"an integer 0..6 (Monday = 0)"``).
        elements: array field name -> what each element must be (``"a boolean"``).
        known: the accepted keys, named in an unknown key's message.

    Returns:
        the exception (the caller raises it), its message naming the field: ``"<path> must be
        <meaning>, got <value>"`` (e.g. ``signals.is_superseded[0] must be a boolean, got 0``);
        a validator's own message; or ``"<path>: <pydantic's message>"`` for other fields.
    """
    err = exc.errors(include_url=False)[0]
    loc, kind = tuple(err["loc"]), err["type"]
    path = _path(loc, prefix)
    if kind == "extra_forbidden":
        listed = f" (known: {', '.join(known)})" if known else ""
        return InvalidParams(f"{path} is not a known {'signal' if prefix == 'signals.' else 'parameter'}{listed}")
    if kind == "value_error":  # a validator's own message, naming its field
        return InvalidParams(str(err["ctx"]["error"]))
    field = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
    got = err.get("input")
    shown = type(got).__name__ if isinstance(got, (list, dict)) else repr(got)
    if loc and isinstance(loc[-1], int) and field in (elements or {}):
        return InvalidParams(f"{path} must be {(elements or {})[field]}, got {shown}")
    if field in (meanings or {}):
        return InvalidParams(f"{path} must be {(meanings or {})[field]}, got {shown}")
    return InvalidParams(f"{path or 'params'}: {err['msg']}")


#: What each signal must be, for the messages of :func:`invalid_params`.
_MEANINGS = {
    "time_of_day": "a fraction of a day in [0, 1) (0.25 = 06:00)",
    "day_of_week": "an integer 0..6 (Monday = 0)",
    "month_of_year": "an integer 1..12 (January = 1)",
    "project": "a string or null",
    "session_gap_hours": "a finite number >= 0 (hours)",
    "is_superseded": "an array of booleans (one per candidate)",
}
#: What one element of an array signal must be.
_ELEMENTS = {"is_superseded": "a boolean"}


class SignalsModel(BaseModel):
    """The seed's ``signals`` object (module docstring for units); validate with
    ``SignalsModel.model_validate(raw, context={"n": n})``, ``n`` the number of candidates.

    Raises (pydantic ValidationError, turned into InvalidParams by :func:`parse_signals`): an
    unknown key, a wrong type, a value out of range or not finite, only some of the three time
    keys, or an ``is_superseded`` of another length than ``n``.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    # None is an absent key's default; an explicit null is refused (_explicit_null)
    time_of_day: float | None = Field(None, ge=0.0, lt=1.0, allow_inf_nan=False)
    day_of_week: int | None = Field(None, ge=0, le=6)
    month_of_year: int | None = Field(None, ge=1, le=12)
    project: str | None = None
    session_gap_hours: float | None = Field(None, ge=0.0, allow_inf_nan=False)
    is_superseded: list[bool] | None = Field(None)

    @field_validator("time_of_day", "day_of_week", "month_of_year", "session_gap_hours", "is_superseded", mode="before")
    @classmethod
    def _explicit_null(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None:
            raise ValueError(f"signals.{info.field_name} must be {_MEANINGS[info.field_name or '']}, got None")
        return v

    @model_validator(mode="after")
    def _whole(self, info: ValidationInfo) -> SignalsModel:
        given = [k for k in TIME_KEYS if k in self.model_fields_set]
        if given and len(given) != len(TIME_KEYS):
            missing = [k for k in TIME_KEYS if k not in self.model_fields_set]
            raise ValueError(
                f"signals.{missing[0]} is missing: signals.time_of_day, day_of_week and "
                f"month_of_year come together (the session's time), or not at all"
            )
        n = (info.context or {}).get("n")
        if self.is_superseded is not None and n is not None and len(self.is_superseded) != n:
            raise ValueError(
                f"signals.is_superseded must be {n} booleans (one per candidate), got {len(self.is_superseded)} entries"
            )
        return self


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
        raise ValueError(
            f"time_of_day {time_of_day}, day_of_week {day_of_week}, month_of_year {month_of_year} out of range"
        )
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
    try:
        m = SignalsModel.model_validate(raw, context={"n": n})
    except ValidationError as exc:
        raise invalid_params(exc, prefix="signals.", meanings=_MEANINGS, elements=_ELEMENTS, known=SIGNAL_KEYS) from exc
    when = None
    if m.time_of_day is not None and m.day_of_week is not None and m.month_of_year is not None:
        when = wall_clock(m.time_of_day, m.day_of_week, m.month_of_year)  # the three come together
    return SeedSignals(
        session_time=when,
        project=m.project,
        has_project="project" in m.model_fields_set,
        session_gap_hours=m.session_gap_hours,
        is_superseded=m.is_superseded,
    )
