"""The sidecar's request parameters: ``score``, ``train`` and ``train_from_db`` params validated
and turned into what the engine takes (predictive-memory-scorer.md "Daemon Communication Protocol").

:func:`parse_score_params` validates one session's params (``score``, or one session of
``train``) in either request shape - the daemon's or the seed's (whose ``signals`` object
:mod:`memlane.predictor.rpc_shapes` maps onto the daemon's) - and builds the
:class:`~memlane.predictor.data.Session` with :func:`memlane.predictor.dataset.build_session`,
the one feature path of scoring and training. :func:`parse_train_params` and
:func:`parse_train_from_db_params` validate the rest of the training requests' params.

A malformed or inconsistent value is refused with :class:`InvalidParams` (JSON-RPC -32602)
and a message naming the field; nothing is silently ignored or replaced. Nothing here reads
the database itself (``lookup`` and ``derive`` are the caller's) or computes a feature.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from memlane.config import predictor as C
from memlane.predictor.dataset import build_session
from memlane.predictor.rpc_shapes import InvalidParams, SeedSignals, parse_signals

__all__ = ["MAX_CANDIDATES", "TrainFromDbParams", "parse_score_params", "parse_train_from_db_params",
           "parse_train_params"]

MAX_CANDIDATES = 1000


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


def _anonymous_count(p: dict[str, Any]) -> int:
    """The number of candidates of a request without ``candidate_ids`` (the seed's ``train``)."""
    for key in ("candidate_embeddings", "candidate_texts"):
        rows = p.get(key)
        if rows is not None:
            if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_CANDIDATES:
                raise InvalidParams(f"{key} must be an array of 1..{MAX_CANDIDATES} candidates")
            return len(rows)
    raise InvalidParams("candidate_ids is required unless candidate_embeddings (the seed's train form) "
                        "or candidate_texts lists the candidates")


def parse_score_params(p: Any, *, native_dim: int, lookup: Callable[[list[str]], dict[str, tuple[str, bytes | None]]],
                       labels_key: str | None = None,
                       derive: Callable[[list[str], str | None, datetime], dict[str, dict[str, Any]]] | None = None,
                       anonymous: bool = False) -> tuple[list[str], Any]:
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
    ids = p.get("candidate_ids")
    if ids is None and anonymous:
        n = _anonymous_count(p)
    else:
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
            raise InvalidParams("candidate_ids must be a non-empty array of strings")
        if len(ids) > MAX_CANDIDATES or len(set(ids)) != len(ids):
            raise InvalidParams(f"candidate_ids must be unique and at most {MAX_CANDIDATES}")
        n = len(ids)
    raw = p.get("candidates") or [{} for _ in range(n)]
    if not isinstance(raw, list) or len(raw) != n or not all(isinstance(r, dict) for r in raw):
        raise InvalidParams(f"candidates must be {n} objects")
    defaults = {"age_days": 0.0, "importance": 0.5, "access_count": 0, "is_embedded": True}
    raw = [{**defaults, **r} for r in raw]
    seed = parse_signals(p["signals"], n) if p.get("signals") is not None else None
    try:
        when = datetime.fromisoformat(str(p["session_time"]).replace("Z", "+00:00")) if p.get("session_time") \
            else datetime.now().astimezone()
        gap = float(p.get("session_gap_hours") or 0.0)
    except (TypeError, ValueError) as exc:
        raise InvalidParams(f"session_time / session_gap_hours: {exc}") from exc
    project = p.get("project")
    if project is not None and not isinstance(project, str):
        raise InvalidParams("project must be a string or null")
    cut_off = when
    if seed is not None:
        when, cut_off, gap, project, raw = _merge_seed_signals(seed, p, when, gap, project, raw)
    if derive is not None and ids is not None:
        derived = derive(ids, project, cut_off)
        raw = [{**r, **derived.get(i, {})} for r, i in zip(raw, ids)]
    ctx = None
    if p.get("context_embedding_b64") is not None:
        ctx = _b64_matrix(p["context_embedding_b64"], "context_embedding_b64", 1, native_dim)[0]
    elif p.get("context_embedding") is not None:
        ctx = _floats(p["context_embedding"], "context_embedding", native_dim)
    context_text = p.get("context_text") or ""
    if not isinstance(context_text, str):
        raise InvalidParams("context_text must be a string")
    vectors: list[np.ndarray | None]
    texts = p.get("candidate_texts")
    if p.get("candidate_embeddings_b64") is not None:
        m = _b64_matrix(p["candidate_embeddings_b64"], "candidate_embeddings_b64", n, native_dim)
        flags = p.get("candidate_is_embedded") or [True] * n
        if not isinstance(flags, list) or len(flags) != n:
            raise InvalidParams(f"candidate_is_embedded must be {n} booleans")
        vectors = [m[i] if flags[i] else None for i in range(n)]
    elif p.get("candidate_embeddings") is not None:
        rows = p["candidate_embeddings"]
        if not isinstance(rows, list) or len(rows) != n:
            raise InvalidParams(f"candidate_embeddings must be {n} arrays")
        vectors = [None if r is None else _floats(r, f"candidate_embeddings[{i}]", native_dim)
                   for i, r in enumerate(rows)]
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
            raise InvalidParams(f"candidate_embeddings[{missing}] is null and there is no candidate_texts "
                                f"(nor candidate_ids to read it from): a candidate needs its vector or its text")
        texts = [""] * n
    if not isinstance(texts, list) or len(texts) != n or not all(isinstance(t, str) for t in texts):
        raise InvalidParams(f"candidate_texts must be {n} strings")
    labels = None
    if labels_key is not None:
        lab = p.get(labels_key)
        if not isinstance(lab, list) or len(lab) != n:
            raise InvalidParams(f"{labels_key} must be {n} numbers")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in lab):
            raise InvalidParams(f"{labels_key} must be {n} numbers")
        labels = _floats(lab, labels_key, n)
        if (np.abs(labels) > 1.0).any():
            raise InvalidParams(f"{labels_key} must be in [-1, 1] (relevance), got {float(np.abs(labels).max())}")
    try:
        session = build_session(candidates=raw, session_time=when, session_gap_hours=gap, candidate_vectors=vectors,
                                candidate_texts=texts, context_vector=ctx, context_text=context_text,
                                project=project, native_dim=native_dim, labels=labels,
                                confidence=_confidence(p))
    except ValueError as exc:
        raise InvalidParams(str(exc)) from exc
    return (ids if ids is not None else [f"#{i}" for i in range(n)]), session


def _merge_seed_signals(seed: SeedSignals, p: dict[str, Any], when: datetime, gap: float, project: str | None,
                        raw: list[dict[str, Any]]
                        ) -> tuple[datetime, datetime, float, str | None, list[dict[str, Any]]]:
    """Put the seed's ``signals`` in place of the daemon shape's fields they stand for.

    Args:
        seed: the validated ``signals`` (:func:`memlane.predictor.rpc_shapes.parse_signals`).
        p: the request's params (to tell a field the sender gave from a default).
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
        if p.get("session_time"):
            raise InvalidParams("session_time and signals.time_of_day / day_of_week / month_of_year both "
                                "give the session's time: send one of them")
        when, cut_off = seed.session_time, datetime.now().astimezone()
    if seed.session_gap_hours is not None:
        if p.get("session_gap_hours") is not None and gap != seed.session_gap_hours:
            raise InvalidParams(f"session_gap_hours {gap} and signals.session_gap_hours "
                                f"{seed.session_gap_hours} disagree")
        gap = seed.session_gap_hours
    if seed.has_project:
        if project is not None and project != seed.project:
            raise InvalidParams(f"project {project!r} and signals.project {seed.project!r} disagree")
        project = seed.project
    if seed.is_superseded is not None:
        for i, (r, flag) in enumerate(zip(raw, seed.is_superseded)):
            if "is_superseded" in r and bool(r["is_superseded"]) != flag:
                raise InvalidParams(f"signals.is_superseded[{i}] ({flag}) and candidates[{i}].is_superseded "
                                    f"({r['is_superseded']!r}) disagree")
        raw = [{**r, "is_superseded": flag} for r, flag in zip(raw, seed.is_superseded)]
    return when, cut_off, gap, project, raw


def _confidence(p: dict[str, Any]) -> float:
    raw = p.get("continuity_score", p.get("confidence"))
    if isinstance(raw, (bool, str)):
        raise InvalidParams("continuity_score must be a number")
    try:
        value = 1.0 if raw is None else float(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidParams("continuity_score must be a number") from exc
    if not 0.0 <= value <= 1.0:
        raise InvalidParams("continuity_score must be in [0, 1]")
    return value


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
    items = p.get("sessions") if "sessions" in p else [p]
    if not isinstance(items, list) or not items:
        raise InvalidParams("sessions must be a non-empty array")
    epochs = p.get("epochs")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or not 1 <= epochs <= 1000):
        raise InvalidParams(f"epochs must be an integer in [1, 1000], got {epochs!r}")
    return items, epochs


@dataclass(frozen=True)
class TrainFromDbParams:
    """``train_from_db``'s params, validated.

    Attributes:
        limit: the newest training-grade sessions to load, [1, 100000].
        max_seconds: the training's time budget, (0, 3600] s.
        max_epochs: [1, 1000], or None when absent (the engine's training-stage default).
        early_stop_patience: epochs, [1, 1001], or None when absent (the stage's default).
        influential: the model has influence (the top-5 overlap gate applies); default True.
        hold_out_canary: the canary sessions are left out of training; default True.
    """

    limit: int
    max_seconds: float
    max_epochs: int | None
    early_stop_patience: int | None
    influential: bool
    hold_out_canary: bool = True


def parse_train_from_db_params(p: Any) -> TrainFromDbParams:
    """Validate ``train_from_db``'s params (a non-object counts as ``{}``): optional ``limit``
    (sessions, [1, 100000]), ``epochs`` ([1, 1000]), ``max_seconds`` ((0, 3600], s),
    ``early_stop_patience`` (epochs, [1, 1001]), ``influential`` and ``hold_out_canary``.

    Raises:
        InvalidParams: a parameter out of range or not a number.
    """
    p = p if isinstance(p, dict) else {}
    try:
        limit = int(p.get("limit", C.MAX_TRAINING_SESSIONS))
        # epochs / patience absent: the engine picks its training stage's defaults.
        epochs = int(p.get("epochs", C.LINEAR_STAGE_MAX_EPOCHS))
        max_seconds = float(p.get("max_seconds", C.MAX_TRAINING_SECONDS))
        patience = int(p.get("early_stop_patience", C.LINEAR_STAGE_PATIENCE))
    except (TypeError, ValueError) as exc:
        raise InvalidParams(f"limit / epochs / max_seconds: {exc}") from exc
    if not (1 <= limit <= 100_000 and 1 <= epochs <= 1000 and 0 < max_seconds <= 3600 and 1 <= patience <= 1001):
        raise InvalidParams("limit in [1, 100000], epochs in [1, 1000], max_seconds in (0, 3600], "
                            "early_stop_patience in [1, 1001]")
    return TrainFromDbParams(limit=limit, max_seconds=max_seconds, max_epochs=epochs if "epochs" in p else None,
                             early_stop_patience=patience if "early_stop_patience" in p else None,
                             influential=bool(p.get("influential", True)),
                             hold_out_canary=bool(p.get("hold_out_canary", True)))
