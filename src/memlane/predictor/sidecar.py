"""``memlane predictor serve``: the predictor sidecar, newline-delimited JSON-RPC 2.0 on stdio.

predictive-memory-scorer.md "Daemon Communication Protocol". One request per line on stdin,
one response per line on stdout (responses may arrive out of order: a ``score`` is answered
while a ``train`` runs on the training thread). Methods:

``score``            rank one session's candidates (:func:`parse_score_params`)
``train``            fit on sessions given inline (the seed's single-session form, or ``sessions``)
``train_from_db``    fit on the stored training-grade sessions, canary and replay buffer
``status``           trained, training_pairs, model_version, last_trained, ...
``save_checkpoint``  write ``model.bin`` now

``score`` and ``train`` accept two request shapes, which reach the same feature builder
(:func:`memlane.predictor.dataset.build_session`), the one training uses:

* the daemon's: ``candidate_ids`` with each candidate's logged signals (``candidates``),
  ``session_time`` (ISO-8601 local), ``session_gap_hours``, ``project``; vectors and texts
  read from the database;
* the seed's: ``context_embedding``, ``candidate_ids``, ``candidate_embeddings`` and a
  ``signals`` object ``{"time_of_day": 0.25, "day_of_week": 2, "month_of_year": 1, "project",
  "session_gap_hours", "is_superseded": [n]}`` for ``score``
  (:mod:`memlane.predictor.rpc_shapes`: time_of_day is a fraction of a day, 0.25 = 06:00;
  day_of_week 0..6 with Monday = 0; month_of_year 1..12 with **January = 1**); and for
  ``train`` ``{"context_embedding", "candidate_embeddings", "labels", "continuity_score"}``
  without ids, answered with (among others) ``{"loss", "step"}``. Neither seed form carries
  the per-candidate signals the daemon logs (age, importance, access count, baseline score
  and rank, ...): they take their defaults (age 0, importance 0.5, access count 0, the rest
  0 / false) unless the request adds ``candidates``; the sidecar does not recompute them
  (that would be a second feature path). The seed's train form carries no time either: the
  request's arrival, unless ``session_time`` or ``signals`` gives it. With the seed's time
  keys, the database-derived signals are taken as of the request's arrival (the keys give no
  date).

A malformed or inconsistent value (wrong type or length, non-finite number, out of range, a
seed field and its daemon-shape counterpart that disagree, an unknown ``signals`` key) is
refused with -32602 and a message naming the field; nothing is silently ignored or replaced.

Errors use the JSON-RPC codes: -32700 parse error, -32600 invalid request, -32601 method not
found, -32602 invalid params, -32603 internal error. After loading its model the sidecar
sends one notification ``{"method": "ready", "params": <status>}``. The database is opened
read-only (``mode=ro`` and ``PRAGMA query_only``): the sidecar cannot write it.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from memlane.predictor import settings as C
from memlane.predictor.dataset import build_session, derived_signals, load_sessions
from memlane.predictor.features import FEATURE_NAMES
from memlane.predictor.rpc_shapes import InvalidParams, parse_signals
from memlane.predictor.vocabulary import VocabularyCache
from memlane.predictor.engine import PredictorEngine, load_or_fresh
from memlane.storage import predictor as pred_sql

__all__ = ["InvalidParams", "Sidecar", "parse_score_params", "serve"]

log = logging.getLogger(__name__)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
MAX_LINE_BYTES = 32 * 1024 * 1024
MAX_CANDIDATES = 1000


def open_readonly(path: str | Path) -> sqlite3.Connection:
    """A read-only connection (URI ``mode=ro`` plus ``PRAGMA query_only``)."""
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


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


class Sidecar:
    """Dispatches JSON-RPC requests to a :class:`PredictorEngine` (one per process).

    Args:
        engine: the engine serving scores.
        db_path: the daemon's database, opened read-only for ``train_from_db`` and lookups.
        out: where responses are written (stdout).
        load_error: why a stored checkpoint was set aside at start-up (reported by status).
    """

    def __init__(self, engine: PredictorEngine, db_path: str | Path | None, out: IO[str],
                 load_error: str | None = None) -> None:
        self.engine = engine
        self.db_path = db_path
        self.out = out
        self.load_error = load_error
        self._write_lock = threading.Lock()
        self._trainer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="predictor-train")
        self._training = threading.Event()
        self._local = threading.local()
        self.vocabulary = VocabularyCache()  # the score path's (one thread); training loads its own
        self.methods: dict[str, Callable[[Any], Any]] = {
            "score": self.score, "train": self.train, "train_from_db": self.train_from_db,
            "status": self.status, "save_checkpoint": self.save_checkpoint}

    # -- plumbing -------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if not self.db_path:
                raise InvalidParams("the sidecar was started without --db")
            conn = self._local.conn = open_readonly(self.db_path)
        return conn

    def send(self, message: dict[str, Any]) -> None:
        """Write one JSON-RPC message as one line to stdout (thread-safe; strict JSON).

        Raises:
            ValueError: a non-finite number in ``message`` (not JSON).
        """
        line = json.dumps(message, separators=(",", ":"), allow_nan=False)
        with self._write_lock:
            self.out.write(line + "\n")
            self.out.flush()

    def _reply(self, rid: Any, result: Any = None, error: tuple[int, str] | None = None) -> None:
        if error is not None:
            self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": error[0], "message": error[1]}})
        else:
            self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def handle_line(self, line: str) -> None:
        """Parse one request line and answer it (training requests answer later)."""
        if len(line) > MAX_LINE_BYTES:
            return self._reply(None, error=(INVALID_REQUEST, f"request line over {MAX_LINE_BYTES} bytes"))
        try:
            req = orjson.loads(line)  # strict JSON (no NaN literals), ~6x the stdlib for a score request
        except ValueError as exc:
            return self._reply(None, error=(PARSE_ERROR, f"parse error: {exc}"))
        if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or not isinstance(req.get("method"), str):
            rid = req.get("id") if isinstance(req, dict) else None
            return self._reply(rid if isinstance(rid, (str, int)) else None,
                               error=(INVALID_REQUEST, "expected a JSON-RPC 2.0 request object"))
        rid = req.get("id")
        if rid is not None and not isinstance(rid, (str, int)):
            return self._reply(None, error=(INVALID_REQUEST, "id must be a string or an integer"))
        method = self.methods.get(req["method"])
        if method is None:
            return self._reply(rid, error=(METHOD_NOT_FOUND, f"method not found: {req['method']}"))
        params = req.get("params", {})
        if req["method"] in ("train", "train_from_db"):
            self._trainer.submit(self._run, rid, method, params)
        else:
            self._run(rid, method, params)

    def _run(self, rid: Any, method: Callable[[Any], Any], params: Any) -> None:
        try:
            result = method(params)
        except InvalidParams as exc:
            err: tuple[int, str] | None = (INVALID_PARAMS, str(exc))
        except Exception as exc:  # never let one request kill the sidecar
            log.exception("predictor request failed")
            err = (INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        else:
            err = None
        if rid is not None:  # notifications get no reply
            try:
                self._reply(rid, result, err) if err is None else self._reply(rid, error=err)
            except ValueError as exc:  # a non-finite number in the result is not JSON
                self._reply(rid, error=(INTERNAL_ERROR, f"result is not valid JSON: {exc}"))

    def _readers(self) -> tuple[Callable[[list[str]], dict[str, tuple[str, bytes | None]]],
                                Callable[[list[str], str | None, datetime], dict[str, dict[str, Any]]]]:
        """``(lookup, derive)`` for one request's :func:`parse_score_params`, sharing one read of
        the candidates' rows (:func:`memlane.storage.predictor.memory_rows`): vectors and texts
        for the model, project and text for the derived signals (as :func:`load_sessions`).
        Without a database ``derive`` derives nothing (the signals keep their defaults)."""
        rows: dict[str, tuple[str, bytes | None, str | None]] = {}
        done: list[bool] = []  # the read happened (rows may be empty: no candidate is stored)

        def read(ids: list[str]) -> dict[str, tuple[str, bytes | None, str | None]]:
            if not done:
                rows.update(pred_sql.memory_rows(self._conn(), ids, self.engine.embedding_model_id))
                done.append(True)
            return rows

        def lookup(ids: list[str]) -> dict[str, tuple[str, bytes | None]]:
            return {m: (content, blob) for m, (content, blob, _) in read(ids).items()}

        def derive(ids: list[str], project: str | None, when: datetime) -> dict[str, dict[str, Any]]:
            if not self.db_path:
                return {}
            if project is not None:
                self.vocabulary.sync(self._conn())
            return derived_signals(self._conn(), ids, project=project, session_time=when,
                                   memories=lambda: {m: (proj, content) for m, (content, _, proj) in read(ids).items()},
                                   vocabulary=self.vocabulary)

        return lookup, derive

    # -- methods ------------------------------------------------------------------------
    def score(self, p: Any) -> dict[str, Any]:
        """``score``: the live model's scores of one session's candidates.

        Args:
            p: :func:`parse_score_params`' shape. The daemon sends ``candidate_ids`` [n],
                ``candidates`` [n] logged signal objects, ``session_time``,
                ``session_gap_hours``, ``project`` and the context as ``context_embedding_b64``
                float32 [E] or ``context_text``; vectors and texts are read from the database.
                The seed's shape sends ``context_embedding`` [E], ``candidate_ids`` [n],
                ``candidate_embeddings`` [n][E] and ``signals`` (time_of_day fraction of a day,
                day_of_week 0..6 Monday = 0, month_of_year 1..12 January = 1, project,
                session_gap_hours, is_superseded [n]; :mod:`memlane.predictor.rpc_shapes`) and
                no per-candidate signals (defaults, unless ``candidates`` [n] gives them).
                Optional ``return_features`` (bool, default false): also return the feature
                matrix the model was given.

        Returns:
            ``{"scores": [{"id", "score"}] (n, request order), "model_version", "trained",
            "took_ms"}`` (ms, in this process); with ``return_features`` also
            ``"features": {"names": [F] feature names, "rows": [n][F] floats (float32 values),
            "project": the session's project or null}``.

        Raises:
            InvalidParams: a malformed request (JSON-RPC -32602), the message naming the field.
        """
        t0 = time.perf_counter()
        want_features = p.get("return_features", False) if isinstance(p, dict) else False
        if not isinstance(want_features, bool):
            raise InvalidParams("return_features must be a boolean")
        lookup, derive = self._readers()
        ids, session = parse_score_params(p, native_dim=self.engine.native_dim, lookup=lookup, derive=derive)
        scores = self.engine.score(session)
        out = {"scores": [{"id": i, "score": float(s)} for i, s in zip(ids, scores)],
               "model_version": self.engine.model_version, "trained": self.engine.trained,
               "took_ms": round((time.perf_counter() - t0) * 1000, 3)}
        if want_features:
            out["features"] = {"names": list(FEATURE_NAMES), "rows": session.features.tolist(),
                               "project": session.project}
        return out

    def train(self, p: Any) -> dict[str, Any]:
        """``train``: fit on labelled sessions sent in the request, gated as every training.

        Args:
            p: one session, or ``{"sessions": [session, ...], "epochs"?: int}``. A session is
                :func:`parse_score_params`' shape plus ``labels`` [n] in [-1, 1] and
                ``continuity_score`` in [0, 1] (the session's weight in the loss, default 1).
                The seed's single-session form ``{"context_embedding": [E],
                "candidate_embeddings": [n][E], "labels": [n], "continuity_score"}`` needs no
                ``candidate_ids``: its candidates are then read from nothing but the request
                (no database row, the derived signals False, the per-candidate signals at
                their defaults unless ``candidates`` [n] gives them), and its session time is
                the request's arrival unless ``session_time`` or ``signals``' time keys give
                it (the seed's train form carries no time).

        Returns:
            the engine's :class:`~memlane.predictor.engine.TrainReport` as a dict, plus ``step``
            (optimiser steps of every accepted run so far; a refused run adds none) and ``loss``
            (mean loss of the last epoch, nats, or null when nothing trained); the seed's
            response ``{"loss", "step"}`` is a subset.

        Raises:
            InvalidParams: not an object, no session, ``epochs`` not an integer in [1, 1000], or
                a malformed session (JSON-RPC -32602, the message naming the field).
        """
        if not isinstance(p, dict):
            raise InvalidParams("params must be an object")
        items = p.get("sessions") if "sessions" in p else [p]
        if not isinstance(items, list) or not items:
            raise InvalidParams("sessions must be a non-empty array")
        epochs = p.get("epochs")
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or not 1 <= epochs <= 1000):
            raise InvalidParams(f"epochs must be an integer in [1, 1000], got {epochs!r}")
        sessions = []
        for k, item in enumerate(items):
            lookup, derive = self._readers()
            try:
                sessions.append(parse_score_params(item, native_dim=self.engine.native_dim, lookup=lookup,
                                                   derive=derive, labels_key="labels", anonymous=True)[1])
            except InvalidParams as exc:
                if "sessions" in p:
                    raise InvalidParams(f"sessions[{k}]: {exc}") from exc
                raise
        self._training.set()
        try:
            report = self.engine.train(sessions, max_epochs=epochs)
        finally:
            self._training.clear()
        out = report.to_dict()
        out.update(step=self.engine.steps_total, loss=report.loss)
        return out

    def train_from_db(self, p: Any) -> dict[str, Any]:
        """``train_from_db``: fit on the database's training-grade sessions (newest ``limit``,
        canary sessions held out for the gates, the replay buffer mixed in), gated.

        Args:
            p: optional ``limit`` (sessions, [1, 100000]), ``epochs`` ([1, 1000]), ``max_seconds``
                ((0, 3600], s), ``early_stop_patience`` (epochs, [1, 1001]), ``influential``
                (the model has influence: the top-5 overlap gate applies); absent epochs and
                patience take the training stage's defaults.

        Returns:
            the :class:`~memlane.predictor.engine.TrainReport` as a dict plus ``load_ms`` (ms),
            ``canary_sessions``, ``replay_sessions`` and ``step``.

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
        e = self.engine
        conn = self._conn()
        t0 = time.perf_counter()
        kw = dict(embedding_model=e.embedding_model_id, native_dim=e.native_dim, min_confidence=C.MIN_SCORER_CONFIDENCE)
        canary_keys = pred_sql.canary_keys(conn)
        canary = load_sessions(conn, keys=canary_keys, limit=len(canary_keys) or 1, **kw) if canary_keys else []
        skip = set(canary_keys)
        sessions = [s for s in load_sessions(conn, limit=limit, **kw) if s.session_id not in skip]
        replay_keys = pred_sql.replay_keys(conn, size=C.REPLAY_BUFFER_SIZE, min_confidence=C.MIN_SCORER_CONFIDENCE)
        recent = {s.session_id for s in sessions}
        replay = load_sessions(conn, keys=[k for k in replay_keys if k not in skip], limit=C.REPLAY_BUFFER_SIZE, **kw)
        replay = [s for s in replay if s.session_id not in recent] or replay
        load_ms = (time.perf_counter() - t0) * 1000
        self._training.set()
        try:
            report = e.train(sessions, canary=canary, replay=replay, max_seconds=max_seconds,
                             max_epochs=epochs if "epochs" in p else None,
                             influential=bool(p.get("influential", True)),
                             early_stop_patience=patience if "early_stop_patience" in p else None)
        finally:
            self._training.clear()
        out = report.to_dict()
        out.update(load_ms=round(load_ms, 1), canary_sessions=len(canary), replay_sessions=len(replay),
                   step=e.steps_total)
        return out

    def status(self, _p: Any = None) -> dict[str, Any]:
        """``status``: the engine's state (trained, model version, stage, parameters) plus
        ``busy_training``, ``pid``, ``db`` and ``checkpoint_error`` (a refused checkpoint)."""
        out = self.engine.status()
        out.update(busy_training=self._training.is_set(), pid=os.getpid(), db=str(self.db_path or ""),
                   checkpoint_error=self.load_error)
        return out

    def save_checkpoint(self, _p: Any = None) -> dict[str, Any]:
        """``save_checkpoint``: write ``model.bin`` atomically; ``{"path", "sha256",
        "model_version"}``."""
        digest = self.engine.save_checkpoint()
        return {"path": str(self.engine.checkpoint_path), "sha256": digest, "model_version": self.engine.model_version}

    def close(self) -> None:
        """Wait for a running training, then stop the training thread."""
        self._trainer.shutdown(wait=True)


def serve(*, db_path: str | None, model_dir: str, embedding_model_id: str, native_dim: int,
          base_weights: str | None = None, threads: int = 1, stdin: IO[str] | None = None,
          stdout: IO[str] | None = None) -> int:
    """Run the sidecar until stdin closes; returns the process exit code (0)."""
    from memlane.predictor.model import configure_threads

    configure_threads(threads)
    out = stdout or sys.stdout
    inp = stdin or sys.stdin
    engine, load_error = load_or_fresh(model_dir, embedding_model_id=embedding_model_id, native_dim=native_dim,
                                       base_weights=base_weights)
    sidecar = Sidecar(engine, db_path, out, load_error)
    if db_path:  # read every memory's words now, not in the first session-start's score request
        try:
            conn = sidecar._conn()
            sidecar.vocabulary.sync(conn)
            last = pred_sql.latest_session_project(conn)
            if last is not None:  # and count its words as of now, for the latest session's project
                derived_signals(conn, ["warm-up"], project=last, session_time=datetime.now(timezone.utc),
                                vocabulary=sidecar.vocabulary)
        except sqlite3.Error as exc:
            log.warning("project vocabulary not loaded at start-up: %s", exc)
    # Warm the scoring path once (first-call allocations), then announce readiness.
    sidecar.score({"candidate_ids": ["warm-a", "warm-b"], "candidate_texts": ["a", "b"],
                   "candidate_embeddings": [None, None], "context_text": "warm up"})
    # What PyTorch and the model loaded stays for the process's life: out of the collector's
    # full passes, which a score request would otherwise wait behind (Python docs, gc.freeze).
    gc.collect()
    gc.freeze()
    sidecar.send({"jsonrpc": "2.0", "method": "ready", "params": sidecar.status()})
    try:
        for line in inp:
            if line.strip():
                sidecar.handle_line(line)
    finally:
        sidecar.close()
    return 0
