"""``memlane predictor serve``: the predictor sidecar, newline-delimited JSON-RPC 2.0 on stdio.

predictive-memory-scorer.md "Daemon Communication Protocol". One request per line on stdin,
one response per line on stdout (responses may arrive out of order: a ``score`` is answered
while a ``train`` runs on the training thread). Methods:

``score``            rank one session's candidates
                     (:func:`memlane.predictor.rpc_params.parse_score_params`)
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
The params are validated in :mod:`memlane.predictor.rpc_params`.

Errors use the JSON-RPC codes: -32700 parse error, -32600 invalid request, -32601 method not
found, -32602 invalid params, -32603 internal error. After loading its model the sidecar
sends one notification ``{"method": "ready", "params": <status>}``. The database is opened
read-only (``mode=ro`` and ``PRAGMA query_only``): the sidecar cannot write it.
"""

from __future__ import annotations

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
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from memlane.config import predictor as C
from memlane.predictor.dataset import derived_signals, load_sessions
from memlane.predictor.engine import PredictorEngine, load_or_fresh
from memlane.predictor.features import FEATURE_NAMES
from memlane.predictor.rpc_params import parse_score_params, parse_train_from_db_params, parse_train_params
from memlane.predictor.rpc_shapes import InvalidParams
from memlane.predictor.vocabulary import VocabularyCache
from memlane.storage import predictor as pred_sql
from memlane.storage.db import open_readonly

__all__ = ["InvalidParams", "Sidecar", "serve"]

log = logging.getLogger(__name__)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
MAX_LINE_BYTES = 32 * 1024 * 1024


class Sidecar:
    """Dispatches JSON-RPC requests to a :class:`PredictorEngine` (one per process).

    Args:
        engine: the engine serving scores.
        db_path: the daemon's database, opened read-only for ``train_from_db`` and lookups.
        out: where responses are written (stdout).
        load_error: why a stored checkpoint was set aside at start-up (reported by status).
    """

    def __init__(
        self, engine: PredictorEngine, db_path: str | Path | None, out: IO[str], load_error: str | None = None
    ) -> None:
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
            "score": self.score,
            "train": self.train,
            "train_from_db": self.train_from_db,
            "status": self.status,
            "save_checkpoint": self.save_checkpoint,
        }

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
            return self._reply(
                rid if isinstance(rid, (str, int)) else None,
                error=(INVALID_REQUEST, "expected a JSON-RPC 2.0 request object"),
            )
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

    def _readers(
        self,
    ) -> tuple[
        Callable[[list[str]], dict[str, tuple[str, bytes | None]]],
        Callable[[list[str], str | None, datetime], dict[str, dict[str, Any]]],
    ]:
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
            return derived_signals(
                self._conn(),
                ids,
                project=project,
                session_time=when,
                memories=lambda: {m: (proj, content) for m, (content, _, proj) in read(ids).items()},
                vocabulary=self.vocabulary,
            )

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
        out = {
            "scores": [{"id": i, "score": float(s)} for i, s in zip(ids, scores)],
            "model_version": self.engine.model_version,
            "trained": self.engine.trained,
            "took_ms": round((time.perf_counter() - t0) * 1000, 3),
        }
        if want_features:
            out["features"] = {
                "names": list(FEATURE_NAMES),
                "rows": session.features.tolist(),
                "project": session.project,
            }
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
        items, epochs = parse_train_params(p)
        sessions = []
        for k, item in enumerate(items):
            lookup, derive = self._readers()
            try:
                sessions.append(
                    parse_score_params(
                        item,
                        native_dim=self.engine.native_dim,
                        lookup=lookup,
                        derive=derive,
                        labels_key="labels",
                        anonymous=True,
                    )[1]
                )
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
        out["step"] = self.engine.steps_total  # with the report's "loss": the seed's reply
        return out

    def train_from_db(self, p: Any) -> dict[str, Any]:
        """``train_from_db``: fit on the database's training-grade sessions (newest ``limit``,
        canary sessions held out for the gates unless ``hold_out_canary`` is false, the replay
        buffer mixed in), gated.

        Args:
            p: optional ``limit`` (sessions, [1, 100000]), ``epochs`` ([1, 1000]), ``max_seconds``
                ((0, 3600], s), ``early_stop_patience`` (epochs, [1, 1001]), ``influential``
                (the model has influence: the top-5 overlap gate applies; default True) and
                ``hold_out_canary`` (default True); absent epochs and patience take the
                training stage's defaults.

        Returns:
            the :class:`~memlane.predictor.engine.TrainReport` as a dict plus ``load_ms`` (ms),
            ``canary_sessions``, ``replay_sessions``, ``canary_seen`` (the canary members the
            serving model's lineage has trained on, sorted) and ``step``.

        Raises:
            InvalidParams: a parameter out of range or not a number.
        """
        params = parse_train_from_db_params(p)
        e = self.engine
        conn = self._conn()
        t0 = time.perf_counter()
        kw: dict[str, Any] = dict(
            embedding_model=e.embedding_model_id, native_dim=e.native_dim, min_confidence=C.MIN_SCORER_CONFIDENCE
        )
        canary_keys = pred_sql.canary_keys(conn)
        canary = load_sessions(conn, keys=canary_keys, limit=len(canary_keys) or 1, **kw) if canary_keys else []
        # The daemon trains on the canary until cold start exits: until then a worse model
        # costs the user nothing, and the canary is a fifth of the few sessions there are
        # (docs/predictor.md, "The canary is trained on until cold start exits").
        skip = set(canary_keys) if params.hold_out_canary else set()
        sessions = [s for s in load_sessions(conn, limit=params.limit, **kw) if s.session_id not in skip]
        replay_keys = pred_sql.replay_keys(conn, size=C.REPLAY_BUFFER_SIZE, min_confidence=C.MIN_SCORER_CONFIDENCE)
        recent = {s.session_id for s in sessions}
        replay = load_sessions(conn, keys=[k for k in replay_keys if k not in skip], limit=C.REPLAY_BUFFER_SIZE, **kw)
        replay = [s for s in replay if s.session_id not in recent] or replay
        load_ms = (time.perf_counter() - t0) * 1000
        self._training.set()
        try:
            report = e.train(
                sessions,
                canary=canary,
                replay=replay,
                max_seconds=params.max_seconds,
                max_epochs=params.epochs,
                influential=params.influential,
                early_stop_patience=params.early_stop_patience,
            )
        finally:
            self._training.clear()
        out = report.to_dict()
        out.update(
            load_ms=round(load_ms, 1),
            canary_sessions=len(canary),
            replay_sessions=len(replay),
            canary_seen=sorted(k for k in canary_keys if k in e.trained_on),
            step=e.steps_total,
        )
        return out

    def status(self, _p: Any = None) -> dict[str, Any]:
        """``status``: the engine's state (trained, model version, stage, parameters) plus
        ``busy_training``, ``pid``, ``db`` and ``checkpoint_error`` (a refused checkpoint)."""
        out = self.engine.status()
        out.update(
            busy_training=self._training.is_set(),
            pid=os.getpid(),
            db=str(self.db_path or ""),
            checkpoint_error=self.load_error,
        )
        return out

    def save_checkpoint(self, _p: Any = None) -> dict[str, Any]:
        """``save_checkpoint``: write ``model.bin`` atomically; ``{"path", "sha256",
        "model_version"}``."""
        digest = self.engine.save_checkpoint()
        return {"path": str(self.engine.checkpoint_path), "sha256": digest, "model_version": self.engine.model_version}

    def close(self) -> None:
        """Wait for a running training, then stop the training thread."""
        self._trainer.shutdown(wait=True)


def serve(
    *,
    db_path: str | None,
    model_dir: str,
    embedding_model_id: str,
    native_dim: int,
    base_weights: str | None = None,
    threads: int = 1,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
) -> int:
    """Run the sidecar until stdin closes; returns the process exit code (0)."""
    from memlane.predictor.model import configure_threads

    configure_threads(threads)
    out = stdout or sys.stdout
    inp = stdin or sys.stdin
    engine, load_error = load_or_fresh(
        model_dir, embedding_model_id=embedding_model_id, native_dim=native_dim, base_weights=base_weights
    )
    sidecar = Sidecar(engine, db_path, out, load_error)
    if db_path:  # read every memory's words now, not in the first session-start's score request
        try:
            conn = sidecar._conn()
            sidecar.vocabulary.sync(conn)
            last = pred_sql.latest_session_project(conn)
            if last is not None:  # and count its words as of now, for the latest session's project
                derived_signals(
                    conn, ["warm-up"], project=last, session_time=datetime.now(UTC), vocabulary=sidecar.vocabulary
                )
        except sqlite3.Error as exc:
            log.warning("project vocabulary not loaded at start-up: %s", exc)
    # Warm the scoring path once (first-call allocations), then announce readiness.
    sidecar.score(
        {
            "candidate_ids": ["warm-a", "warm-b"],
            "candidate_texts": ["a", "b"],
            "candidate_embeddings": [None, None],
            "context_text": "warm up",
        }
    )
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
