"""The sidecar's request parameters: ``score``, ``train`` and ``train_from_db`` params validated
and turned into what the engine takes (predictive-memory-scorer.md "Daemon Communication Protocol").

:func:`parse_score_params` validates one session's params (``score``, or one session of
``train``) in either request shape - the daemon's or the seed's (whose ``signals`` object
:mod:`memlane.predictor.rpc_shapes` maps onto the daemon's) - and builds the
:class:`~memlane.predictor.data.Session` with :func:`memlane.predictor.dataset.build_session`,
the one feature path of scoring and training. :func:`parse_train_params` and
:func:`parse_train_from_db_params` validate the rest of the training requests' params.

The params' types and ranges are pydantic models (:class:`ScoreParams`, :class:`TrainParams`,
:class:`TrainFromDbParams`; strict: a JSON number where a number belongs, nothing converted);
the rules between fields (lengths against the candidate count, the seed's signals against
their daemon-shape counterparts) and the bulk float arrays (numpy, checked finite in float32)
are checked here after them. A malformed or inconsistent value is refused with
:class:`InvalidParams` (JSON-RPC -32602) and a message naming the field; nothing is silently
ignored or replaced. Unknown keys are ignored (the sidecar's own options, the daemon's
``trigger``). Nothing here reads the database itself (``lookup`` and ``derive`` are the
caller's) or computes a feature.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memlane.config import predictor as C
from memlane.predictor.dataset import build_session
from memlane.predictor.rpc_shapes import InvalidParams, SeedSignals, invalid_params, parse_signals

__all__ = [
    "MAX_CANDIDATES",
    "ScoreParams",
    "TrainFromDbParams",
    "TrainParams",
    "parse_score_params",
    "parse_train_from_db_params",
    "parse_train_params",
]

MAX_CANDIDATES = 1000


class _Params(BaseModel):
    """Base of the request models: strict types, unknown keys ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


def _validate(
    model: type[_Params], p: dict[str, Any], meanings: dict[str, str], elements: dict[str, str] | None = None
) -> Any:
    try:
        return model.model_validate(p)
    except ValidationError as exc:
        raise invalid_params(exc, meanings=meanings, elements=elements) from exc


class ScoreParams(_Params):
    """The fields of ``score`` (and of one ``train`` session) whose type a model can check;
    shapes and meanings in :func:`parse_score_params`. Arrays of floats stay ``Any`` here: they
    are read with numpy (a pydantic float list of 1000 x 384 values would cost the score's
    deadline)."""

    candidate_ids: list[str] | None = None
    candidates: list[dict[str, Any]] | None = None
    session_time: str | None = None
    session_gap_hours: float | None = Field(None, allow_inf_nan=False)
    project: str | None = None
    signals: Any = None
    context_embedding: Any = None
    context_embedding_b64: str | None = None
    context_text: str | None = None
    candidate_embeddings: list[Any] | None = None
    candidate_embeddings_b64: str | None = None
    candidate_is_embedded: list[bool] | None = None
    candidate_texts: list[str] | None = None
    continuity_score: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    confidence: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)

    @field_validator("candidate_ids")
    @classmethod
    def _ids(cls, ids: list[str] | None) -> list[str] | None:
        if ids is not None:
            if not ids or not all(ids):
                raise ValueError("candidate_ids must be a non-empty array of strings")
            if len(ids) > MAX_CANDIDATES or len(set(ids)) != len(ids):
                raise ValueError(f"candidate_ids must be unique and at most {MAX_CANDIDATES}")
        return ids


_SCORE_MEANINGS = {
    "candidate_ids": "a non-empty array of strings",
    "candidates": "an array of objects",
    "session_time": "an ISO-8601 time (string)",
    "session_gap_hours": "a finite number (hours)",
    "project": "a string or null",
    "context_embedding_b64": "a base64 string",
    "context_text": "a string",
    "candidate_embeddings": "an array of arrays",
    "candidate_embeddings_b64": "a base64 string",
    "candidate_is_embedded": "an array of booleans",
    "candidate_texts": "an array of strings",
    "continuity_score": "a number in [0, 1]",
    "confidence": "a number in [0, 1]",
}
_SCORE_ELEMENTS = {
    "candidate_ids": "a non-empty string",
    "candidates": "an object",
    "candidate_is_embedded": "a boolean",
    "candidate_texts": "a string",
}


def _floats(raw: Any, name: str, dim: int | None = None) -> np.ndarray:
    """``raw`` as float32 ``[dim]`` (any length when None): JSON numbers only (a string, null or
    boolean array is refused, not converted), finite after the conversion to float32."""
    try:
        v = np.asarray(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidParams(f"{name} must be an array of numbers") from exc
    if v.dtype.kind not in "iuf":
        raise InvalidParams(f"{name} must be an array of numbers")
    with np.errstate(over="ignore"):
        v = v.astype(np.float32)
    if v.ndim != 1 or (dim is not None and v.shape[0] != dim) or not np.isfinite(v).all():
        raise InvalidParams(f"{name} must be {dim or 'n'} finite numbers")
    return v


def _b64_matrix(raw: Any, name: str, rows: int, dim: int) -> np.ndarray:
    if not isinstance(raw, str):
        raise InvalidParams(f"{name} must be a base64 string")
    try:
        m = np.frombuffer(base64.b64decode(raw, validate=True), dtype="<f4")
    except (ValueError, TypeError) as exc:
        raise InvalidParams(f"{name} is not valid base64") from exc
    if m.size != rows * dim:
        raise InvalidParams(f"{name} holds {m.size} floats, expected {rows} x {dim}")
    if not np.isfinite(m).all():
        raise InvalidParams(f"{name} holds a non-finite float")
    return m.reshape(rows, dim)


def _anonymous_count(m: ScoreParams) -> int:
    """The number of candidates of a request without ``candidate_ids`` (the seed's ``train``)."""
    for key, rows in (("candidate_embeddings", m.candidate_embeddings), ("candidate_texts", m.candidate_texts)):
        if rows is not None:
            if not 1 <= len(rows) <= MAX_CANDIDATES:
                raise InvalidParams(f"{key} must be an array of 1..{MAX_CANDIDATES} candidates")
            return len(rows)
    raise InvalidParams(
        "candidate_ids is required unless candidate_embeddings (the seed's train form) "
        "or candidate_texts lists the candidates"
    )


def parse_score_params(
    p: Any,
    *,
    native_dim: int,
    lookup: Callable[[list[str]], dict[str, tuple[str, bytes | None]]],
    labels_key: str | None = None,
    derive: Callable[[list[str], str | None, datetime], dict[str, dict[str, Any]]] | None = None,
    anonymous: bool = False,
) -> tuple[list[str], Any]:
    """Validate ``score`` (or one ``train`` session's) params and build the
    :class:`~memlane.predictor.data.Session` with :func:`~memlane.predictor.dataset.build_session`,
    the one feature path of scoring and training.

    ``derive(ids, project, cut_off)``: the signals derived from the database
    (:func:`memlane.predictor.dataset.derived_signals`), merged over each candidate's raw
    signals; None leaves them at their defaults (or as sent).

    Params (all JSON; two shapes, which may be mixed where they do not overlap)::

        candidate_ids        [n] memory ids (1..1000, unique); required, except with
                             ``anonymous`` (the seed's train form) when candidate_embeddings or
                             candidate_texts lists the candidates: nothing is then read from the
                             database and the derived signals stay False
        candidates           [n] raw signal objects (CandidateFeatures fields); default {} each,
                             i.e. age_days 0, importance 0.5, access_count 0
        session_time         ISO-8601 local time of the session (default: now)
        session_gap_hours    hours since the previous session (default 0)
        project              project name or null
        signals              the seed's object {time_of_day, day_of_week, month_of_year, project,
                             session_gap_hours, is_superseded [n]}
                             (:mod:`memlane.predictor.rpc_shapes`: time_of_day a fraction of a day,
                             0.25 = 06:00; day_of_week 0..6, Monday = 0; month_of_year 1..12,
                             January = 1). Each key given stands for its daemon-shape
                             counterpart: the three time keys for session_time (the derived
                             signals' cut-off is then the request's arrival), is_superseded[i]
                             for candidates[i].is_superseded. Giving both of a pair is refused
                             unless they agree (session_time and the time keys: always refused)
        context_embedding    [E] floats, or context_embedding_b64 (float32 LE); or null
        context_text         text for the text path when there is no context embedding
        candidate_embeddings [n][E] floats (a row may be null: text path), or
                             candidate_embeddings_b64 ([n*E] float32 LE) with
                             candidate_is_embedded [n] bools; absent -> read from the DB
        candidate_texts      [n] texts for candidates without embeddings (absent -> the DB)
        <labels_key>         [n] labels in [-1, 1] (training only)
        continuity_score     the session's weight in the loss, [0, 1] (default 1)

    Returns:
        ``(candidate_ids, session)``; without ``candidate_ids`` (anonymous) the ids are the
        positions ``"#0"``, ``"#1"``, ...

    Raises:
        InvalidParams: any violation (wrong type, wrong length, non-finite number, value out of
            range, two fields that disagree), with a message naming the field.
    """
    if not isinstance(p, dict):
        raise InvalidParams("params must be an object")
    m: ScoreParams = _validate(ScoreParams, p, _SCORE_MEANINGS, _SCORE_ELEMENTS)
    ids = m.candidate_ids
    if ids is None and anonymous:
        n = _anonymous_count(m)
    elif ids is None:
        raise InvalidParams("candidate_ids must be a non-empty array of strings")
    else:
        n = len(ids)
    raw = m.candidates or [{} for _ in range(n)]
    if len(raw) != n:
        raise InvalidParams(f"candidates must be {n} objects")
    defaults = {"age_days": 0.0, "importance": 0.5, "access_count": 0, "is_embedded": True}
    raw = [{**defaults, **r} for r in raw]
    seed = parse_signals(m.signals, n) if m.signals is not None else None
    try:
        when = datetime.fromisoformat(m.session_time) if m.session_time else datetime.now().astimezone()
    except ValueError as exc:
        raise InvalidParams(f"session_time must be an ISO-8601 time: {exc}") from exc
    gap = m.session_gap_hours or 0.0
    project = m.project
    cut_off = when
    if seed is not None:
        when, cut_off, gap, project, raw = _merge_seed_signals(seed, m, when, gap, project, raw)
    if derive is not None and ids is not None:
        derived = derive(ids, project, cut_off)
        raw = [{**r, **derived.get(i, {})} for r, i in zip(raw, ids)]
    ctx = None
    if m.context_embedding_b64 is not None:
        ctx = _b64_matrix(m.context_embedding_b64, "context_embedding_b64", 1, native_dim)[0]
    elif m.context_embedding is not None:
        ctx = _floats(m.context_embedding, "context_embedding", native_dim)
    vectors: list[np.ndarray | None]
    texts = m.candidate_texts
    if m.candidate_embeddings_b64 is not None:
        matrix = _b64_matrix(m.candidate_embeddings_b64, "candidate_embeddings_b64", n, native_dim)
        flags = m.candidate_is_embedded or [True] * n
        if len(flags) != n:
            raise InvalidParams(f"candidate_is_embedded must be {n} booleans")
        vectors = [matrix[i] if flags[i] else None for i in range(n)]
    elif m.candidate_embeddings is not None:
        if len(m.candidate_embeddings) != n:
            raise InvalidParams(f"candidate_embeddings must be {n} arrays")
        vectors = [
            None if r is None else _floats(r, f"candidate_embeddings[{i}]", native_dim)
            for i, r in enumerate(m.candidate_embeddings)
        ]
    elif ids is None:
        vectors = [None] * n  # anonymous, listed by candidate_texts
    else:
        stored = lookup(ids)
        vectors = [None] * n
        for i, mid in enumerate(ids):
            blob = stored.get(mid, ("", None))[1]
            if blob is not None and len(blob) == native_dim * 4:
                vectors[i] = np.frombuffer(blob, dtype="<f4")
        if texts is None:
            texts = [stored.get(mid, ("", None))[0] for mid in ids]
    if texts is None:
        if ids is None and (missing := next((i for i, v in enumerate(vectors) if v is None), None)) is not None:
            raise InvalidParams(
                f"candidate_embeddings[{missing}] is null and there is no candidate_texts "
                f"(nor candidate_ids to read it from): a candidate needs its vector or its text"
            )
        texts = [""] * n
    if len(texts) != n:
        raise InvalidParams(f"candidate_texts must be {n} strings")
    labels = _labels(p.get(labels_key), labels_key, n) if labels_key is not None else None
    confidence = m.continuity_score if "continuity_score" in m.model_fields_set else m.confidence
    try:
        session = build_session(
            candidates=raw,
            session_time=when,
            session_gap_hours=gap,
            candidate_vectors=vectors,
            candidate_texts=texts,
            context_vector=ctx,
            context_text=m.context_text or "",
            project=project,
            native_dim=native_dim,
            labels=labels,
            confidence=1.0 if confidence is None else confidence,
        )
    except ValueError as exc:
        raise InvalidParams(str(exc)) from exc
    return (ids if ids is not None else [f"#{i}" for i in range(n)]), session


def _merge_seed_signals(
    seed: SeedSignals, m: ScoreParams, when: datetime, gap: float, project: str | None, raw: list[dict[str, Any]]
) -> tuple[datetime, datetime, float, str | None, list[dict[str, Any]]]:
    """Put the seed's ``signals`` in place of the daemon shape's fields they stand for.

    Args:
        seed: the validated ``signals`` (:func:`memlane.predictor.rpc_shapes.parse_signals`).
        m: the request's params (to tell a field the sender gave from a default).
        when / gap / project / raw: the session time, gap (hours), project and ``n`` candidate
            signal dicts read from the daemon-shape fields.

    Returns:
        ``(session time, cut-off of the database-derived signals, gap, project, candidates)``;
        the cut-off is now when the seed's time keys give the time (they carry no date).

    Raises:
        InvalidParams: a seed field and its daemon-shape counterpart both given and disagreeing
            (the session's time may come from only one of them).
    """
    cut_off = when
    if seed.session_time is not None:
        if m.session_time:
            raise InvalidParams(
                "session_time and signals.time_of_day / day_of_week / month_of_year both "
                "give the session's time: send one of them"
            )
        when, cut_off = seed.session_time, datetime.now().astimezone()
    if seed.session_gap_hours is not None:
        if m.session_gap_hours is not None and gap != seed.session_gap_hours:
            raise InvalidParams(
                f"session_gap_hours {gap} and signals.session_gap_hours {seed.session_gap_hours} disagree"
            )
        gap = seed.session_gap_hours
    if seed.has_project:
        if project is not None and project != seed.project:
            raise InvalidParams(f"project {project!r} and signals.project {seed.project!r} disagree")
        project = seed.project
    if seed.is_superseded is not None:
        for i, (r, flag) in enumerate(zip(raw, seed.is_superseded)):
            if "is_superseded" in r and bool(r["is_superseded"]) != flag:
                raise InvalidParams(
                    f"signals.is_superseded[{i}] ({flag}) and candidates[{i}].is_superseded "
                    f"({r['is_superseded']!r}) disagree"
                )
        raw = [{**r, "is_superseded": flag} for r, flag in zip(raw, seed.is_superseded)]
    return when, cut_off, gap, project, raw


def _labels(raw: Any, key: str, n: int) -> np.ndarray:
    """A training session's labels: ``n`` JSON numbers (not booleans) in [-1, 1], float32."""
    if (
        not isinstance(raw, list)
        or len(raw) != n
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in raw)
    ):
        raise InvalidParams(f"{key} must be {n} numbers")
    labels = _floats(raw, key, n)
    if (np.abs(labels) > 1.0).any():
        raise InvalidParams(f"{key} must be in [-1, 1] (relevance), got {float(np.abs(labels).max())}")
    return labels


class TrainParams(_Params):
    """``train``'s params around its sessions (each session is :class:`ScoreParams` plus labels)."""

    sessions: list[Any] = Field(min_length=1)
    epochs: int | None = Field(None, ge=1, le=1000)


def parse_train_params(p: Any) -> tuple[list[Any], int | None]:
    """Validate ``train``'s params around its sessions: one session, or
    ``{"sessions": [session, ...], "epochs"?: int}``.

    Returns:
        ``(items, epochs)``: the sessions' raw params (``[p]`` for the single-session form; each
        still to be validated with :func:`parse_score_params`) and ``epochs`` (None: the
        engine's training-stage default).

    Raises:
        InvalidParams: not an object, no session, or ``epochs`` not an integer in [1, 1000].
    """
    if not isinstance(p, dict):
        raise InvalidParams("params must be an object")
    m: TrainParams = _validate(
        TrainParams,
        {**p, "sessions": p.get("sessions", [p])},
        {"sessions": "a non-empty array", "epochs": "an integer in [1, 1000]"},
    )
    return m.sessions, m.epochs


class TrainFromDbParams(_Params):
    """``train_from_db``'s params.

    Attributes:
        limit: the newest training-grade sessions to load, [1, 100000].
        max_seconds: the training's time budget, (0, 3600] s.
        epochs: [1, 1000], or None when absent (the engine's training-stage default).
        early_stop_patience: epochs, [1, 1001], or None when absent (the stage's default).
        influential: the model has influence (the top-5 overlap gate applies); default True.
        hold_out_canary: the canary sessions are left out of training; default True.
    """

    limit: int = Field(C.MAX_TRAINING_SESSIONS, ge=1, le=100_000)
    max_seconds: float = Field(C.MAX_TRAINING_SECONDS, gt=0, le=3600, allow_inf_nan=False)
    epochs: int | None = Field(None, ge=1, le=1000)
    early_stop_patience: int | None = Field(None, ge=1, le=1001)
    influential: bool = True
    hold_out_canary: bool = True


def parse_train_from_db_params(p: Any) -> TrainFromDbParams:
    """Validate ``train_from_db``'s params (a non-object counts as ``{}``): optional ``limit``
    (sessions, [1, 100000]), ``epochs`` ([1, 1000]), ``max_seconds`` ((0, 3600], s),
    ``early_stop_patience`` (epochs, [1, 1001]), ``influential`` and ``hold_out_canary`` (booleans).

    Raises:
        InvalidParams: a parameter of the wrong type or out of range, naming it.
    """
    return _validate(
        TrainFromDbParams,
        p if isinstance(p, dict) else {},
        {
            "limit": "an integer in [1, 100000]",
            "max_seconds": "a number in (0, 3600]",
            "epochs": "an integer in [1, 1000]",
            "early_stop_patience": "an integer in [1, 1001]",
            "influential": "a boolean",
            "hold_out_canary": "a boolean",
        },
    )
