"""SQL for the predictor: training sessions, comparisons, training log, canary set, state.

SQL only. The sidecar reads through :func:`training_sessions`, :func:`session_candidates` and
:func:`canary_keys` on a read-only connection; everything that writes is the daemon's.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlane.storage.db import inserted_rowid


@dataclass(frozen=True, slots=True)
class TrainingSessionRow:
    """A labelled, scored session: the inputs the predictor was served plus its outcome."""

    session_key: str
    project: str | None
    context: str | None
    context_vector: bytes | None
    context_model: str | None
    signals: dict[str, Any]
    score: float
    confidence: float
    started_at: str


@dataclass(frozen=True, slots=True)
class CandidateTrainingRow:
    """One candidate of a training session with its logged features, label and vector."""

    memory_id: str
    features: dict[str, Any] | None
    label: float | None
    content: str
    vector: bytes | None


def training_sessions(
    conn: sqlite3.Connection, *, min_confidence: float, limit: int, keys: Sequence[str] | None = None
) -> list[TrainingSessionRow]:
    """Newest scored sessions with confidence >= ``min_confidence`` whose candidates have
    logged features and labels (or exactly ``keys`` when given), newest first."""
    where = ["ss.confidence >= ?", "s.signals IS NOT NULL"]
    args: list[Any] = [min_confidence]
    if keys is not None:
        if not keys:
            return []
        where.append(f"s.session_key IN ({','.join('?' * len(keys))})")
        args += list(keys)
    args.append(limit)
    rows = conn.execute(
        f"""SELECT s.session_key, s.project, s.context, s.context_vector, s.context_model, s.signals,
                   ss.score, ss.confidence, s.started_at
            FROM sessions s JOIN session_scores ss ON ss.session_key = s.session_key
            WHERE {" AND ".join(where)}
            ORDER BY s.started_at DESC, s.rowid DESC LIMIT ?""",
        args,
    ).fetchall()
    return [
        TrainingSessionRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5] or "{}"), float(r[6]), float(r[7]), r[8])
        for r in rows
    ]


def session_candidates(conn: sqlite3.Connection, session_key: str, model: str | None) -> list[CandidateTrainingRow]:
    """Candidates of a session with logged features (fts_only rows have none), in rank order,
    with each memory's content vector of ``model`` when stored."""
    rows = conn.execute(
        """SELECT sm.memory_id, sm.features, sm.label, m.content, e.vector
           FROM session_memories sm JOIN memories m ON m.id = sm.memory_id
           LEFT JOIN embeddings e ON e.content_hash = m.content_hash AND e.model = ?
           WHERE sm.session_key = ? AND sm.features IS NOT NULL ORDER BY sm.rank, sm.id""",
        (model or "", session_key),
    ).fetchall()
    return [CandidateTrainingRow(r[0], json.loads(r[1]) if r[1] else None, r[2], r[3], r[4]) for r in rows]


def memory_rows(
    conn: sqlite3.Connection, ids: Sequence[str], model: str | None
) -> dict[str, tuple[str, bytes | None, str | None]]:
    """``{memory_id: (content, content vector blob or None, project)}``: everything the sidecar
    reads of a candidate, in one query (vectors and texts for the model, project and text for
    the derived signals)."""
    out: dict[str, tuple[str, bytes | None, str | None]] = {}
    for i in range(0, len(ids), 500):
        chunk = list(ids[i : i + 500])
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(
            f"""SELECT m.id, m.content, e.vector, m.project FROM memories m
                    LEFT JOIN embeddings e ON e.content_hash = m.content_hash AND e.model = ?
                    WHERE m.id IN ({marks})""",
            [model or "", *chunk],
        ):
            out[r[0]] = (r[1], r[2], r[3])
    return out


def contents_and_projects(
    conn: sqlite3.Connection, ids: Sequence[str], *, unread_project: str | None = None
) -> dict[str, tuple[str, str | None]]:
    """``{memory_id: (content, project)}`` for the ids that exist: the ``query_coverage`` signal
    reads every candidate's text, the ``mentions_project`` signal takes the same rows.

    Args:
        unread_project: when only ``mentions_project`` needs the rows, the session's project:
            memories stored under it get ``""`` as content (they mention it whatever they say,
            so their text is not read).
    """
    out: dict[str, tuple[str, str | None]] = {}
    cur = conn.cursor()
    cur.row_factory = None
    content = "content" if unread_project is None else "CASE WHEN project = ? THEN '' ELSE content END"
    head = [] if unread_project is None else [unread_project]
    for i in range(0, len(ids), 500):
        chunk = list(ids[i : i + 500])
        for r in cur.execute(
            f"SELECT id, {content}, project FROM memories WHERE id IN ({','.join('?' * len(chunk))})", [*head, *chunk]
        ):
            out[r[0]] = (r[1], r[2])
    return out


def canary_keys(conn: sqlite3.Connection) -> list[str]:
    """Session keys of the canary set, the oldest session first."""
    return [
        r[0]
        for r in conn.execute("""SELECT pc.session_key FROM predictor_canary pc
                                          LEFT JOIN sessions s USING (session_key)
                                          ORDER BY s.started_at, pc.session_key""")
    ]


def canary_newest_start(conn: sqlite3.Connection) -> str | None:
    """When the newest canary member's session started (ISO-8601 UTC), or None for an empty set."""
    r = conn.execute("""SELECT max(s.started_at) FROM predictor_canary pc
                        JOIN sessions s USING (session_key)""").fetchone()
    return r[0] if r else None


def newest_training_start(conn: sqlite3.Connection, *, min_confidence: float) -> str | None:
    """When the newest session of at least ``min_confidence`` with logged inputs started, or None."""
    r = conn.execute(
        """SELECT max(s.started_at) FROM sessions s JOIN session_scores ss USING (session_key)
                        WHERE ss.confidence >= ? AND s.signals IS NOT NULL""",
        (min_confidence,),
    ).fetchone()
    return r[0] if r else None


def refresh_canary(
    conn: sqlite3.Connection,
    *,
    size: int,
    min_confidence: float,
    at: str,
    replace: bool = True,
    max_replaced: int | None = None,
) -> list[str]:
    """Fill the canary set to ``size`` sessions with the most confident recent sessions not in it.

    With ``replace`` (the weekly refresh, seed "Canary Evaluation Set": "replace oldest sessions
    with recent high-confidence ones, keeping set size at 25") the sessions that started after
    the newest member (the ones since the last refresh) come in first, the most confident
    first, and the members whose sessions are oldest make way for at most ``max_replaced`` of
    them (None: as many as come). Without it the members stay and only the missing ones are
    added: a canary that grows with the data keeps the sessions it already held out.

    Returns:
        the canary's session keys, oldest member first.
    """
    current = canary_keys(conn)
    room = max(size - len(current), 0)
    if replace and current:
        newer = _outside_canary(conn, min_confidence, canary_newest_start(conn) or "", size)
        out = min(max(len(newer) - room, 0), len(current))
        leaving = current[: out if max_replaced is None else min(out, max(max_replaced, 0))]
        conn.executemany("DELETE FROM predictor_canary WHERE session_key = ?", [(k,) for k in leaving])
        coming = newer[: room + len(leaving)]
        _add_to_canary(conn, coming, at)
        room += len(leaving) - len(coming)
    if room:
        _add_to_canary(conn, _outside_canary(conn, min_confidence, "", room), at)
    return canary_keys(conn)


def swap_canary_members(
    conn: sqlite3.Connection, leaving: Sequence[str], *, started_after: str, min_confidence: float, at: str
) -> list[str]:
    """Replace canary members by sessions that started after ``started_after``, one for one.

    The daemon swaps out the members its live model has trained on (the NDCG gate cannot use
    them) for sessions that started after the newest one that model could have trained on
    (docs/predictor.md, "The canary is trained on until cold start exits"). The most
    confident come first; when fewer such sessions exist than members to swap, the oldest of
    ``leaving`` go and the others stay. Keys of ``leaving`` that are not members are ignored.

    Returns:
        the canary's session keys, oldest member first.
    """
    going = set(leaving)
    out = [k for k in canary_keys(conn) if k in going]
    coming = _outside_canary(conn, min_confidence, started_after, len(out)) if out else []
    gone = out[: len(coming)]
    conn.executemany("DELETE FROM predictor_canary WHERE session_key = ?", [(k,) for k in gone])
    _add_to_canary(conn, coming, at)
    return canary_keys(conn)


def _outside_canary(
    conn: sqlite3.Connection, min_confidence: float, started_after: str, limit: int
) -> list[tuple[str, float]]:
    """Training-grade sessions not in the canary that started after ``started_after`` (ISO;
    "" = any), the most confident first, then the most recent: ``[(session_key, confidence)]``."""
    return [
        (r[0], float(r[1]))
        for r in conn.execute(
            """SELECT s.session_key, ss.confidence FROM sessions s JOIN session_scores ss USING (session_key)
           WHERE ss.confidence >= ? AND s.signals IS NOT NULL AND s.started_at > ?
             AND s.session_key NOT IN (SELECT session_key FROM predictor_canary)
           ORDER BY ss.confidence DESC, s.started_at DESC LIMIT ?""",
            (min_confidence, started_after, limit),
        )
    ]


def _add_to_canary(conn: sqlite3.Connection, rows: Sequence[tuple[str, float]], at: str) -> None:
    conn.executemany(
        "INSERT INTO predictor_canary(session_key, confidence, added_at) VALUES (?,?,?)",
        [(key, conf, at) for key, conf in rows],
    )


def replay_keys(conn: sqlite3.Connection, *, size: int, min_confidence: float) -> list[str]:
    """The replay buffer: the ``size`` best sessions by continuity score (seed "Phase 5b")."""
    return [
        r[0]
        for r in conn.execute(
            """SELECT s.session_key FROM sessions s JOIN session_scores ss USING (session_key)
           WHERE ss.confidence >= ? AND s.signals IS NOT NULL
           ORDER BY ss.score DESC, ss.confidence DESC, s.started_at DESC LIMIT ?""",
            (min_confidence, size),
        )
    ]


def set_session_inputs(
    conn: sqlite3.Connection,
    key: str,
    *,
    context_vector: np.ndarray | None,
    context_model: str | None,
    signals: Mapping[str, Any],
) -> None:
    """Record the session-level inputs the candidates were scored with."""
    blob = None if context_vector is None else np.asarray(context_vector, dtype="<f4").tobytes()
    conn.execute(
        "UPDATE sessions SET context_vector = ?, context_model = ?, signals = ? WHERE session_key = ?",
        (blob, context_model, json.dumps(dict(signals), separators=(",", ":")), key),
    )


def set_candidate_features(conn: sqlite3.Connection, key: str, features: Mapping[str, Mapping[str, Any]]) -> None:
    """Log each candidate's raw scoring signals (``{memory_id: {...}}``) on its session row."""
    conn.executemany(
        "UPDATE session_memories SET features = ? WHERE session_key = ? AND memory_id = ?",
        [(json.dumps(dict(v), separators=(",", ":")), key, m) for m, v in features.items()],
    )


def record_predictor(
    conn: sqlite3.Connection,
    key: str,
    *,
    features: Mapping[str, Mapping[str, Any]],
    scores: Mapping[str, float],
    ranks: Mapping[str, int],
    context_vector: np.ndarray | None,
    context_model: str | None,
    signals: Mapping[str, Any],
) -> int:
    """Record the predictor's part of a session-start that answered before it (the deferred
    path of :meth:`memlane.services.predictor_service.PredictorService.record_later`): the
    session's inputs (context vector and signals), every candidate's logged features and, when
    the predictor scored, its scores and ranks. What :func:`set_session_inputs` and the
    candidates' INSERT record on the waiting path, in one more statement pair.

    Args:
        features: ``{memory_id: raw signals}`` of every candidate.
        scores: ``{memory_id: model score}``; empty when the predictor did not score.
        ranks: ``{memory_id: 1-based predictor rank}`` (same keys as ``scores``).
        signals: the session-level signals (``predictor_error`` when it did not score).

    Returns:
        the number of candidate rows updated.
    """
    set_session_inputs(conn, key, context_vector=context_vector, context_model=context_model, signals=signals)
    enc = json.JSONEncoder(separators=(",", ":")).encode
    return conn.executemany(
        "UPDATE session_memories SET features = ?, predictor_score = ?, predictor_rank = ? "
        "WHERE session_key = ? AND memory_id = ?",
        [(enc(dict(f)), scores.get(m), ranks.get(m), key, m) for m, f in features.items()],
    ).rowcount


def session_signals(conn: sqlite3.Connection, key: str) -> dict[str, Any] | None:
    """The session-level signals logged at its start (alpha, phase, model version, ...), or
    None when the session is unknown or logged none."""
    r = conn.execute("SELECT signals FROM sessions WHERE session_key = ?", (key,)).fetchone()
    return json.loads(r[0]) if r and r[0] else None


def last_session_start(conn: sqlite3.Connection, *, before: str) -> str | None:
    """Start time of the latest session before ``before`` (any project), for the session gap."""
    r = conn.execute("SELECT max(started_at) FROM sessions WHERE started_at < ? AND started = 1", (before,)).fetchone()
    return r[0] if r else None


def insert_comparison(conn: sqlite3.Connection, row: Mapping[str, Any]) -> str:
    """Insert (or replace, for a re-scored session) one ``predictor_comparisons`` row."""
    cid = row.get("id") or str(uuid.uuid4())
    cols = [
        "id",
        "session_key",
        "project",
        "predictor_ndcg",
        "baseline_ndcg",
        "predictor_won",
        "margin",
        "scorer_confidence",
        "ema_updated",
        "success_rate",
        "alpha",
        "predictor_top_ids",
        "baseline_top_ids",
        "relevance_scores",
        "fts_overlap_score",
        "model_version",
        "predictor_state",
        "created_at",
    ]
    values = {**row, "id": cid}
    for k in ("predictor_top_ids", "baseline_top_ids", "relevance_scores"):
        if not isinstance(values[k], str):
            values[k] = json.dumps(values[k])
    conn.execute(
        f"INSERT OR REPLACE INTO predictor_comparisons ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
        [values.get(c) for c in cols],
    )
    return cid


def comparisons(conn: sqlite3.Connection, *, limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` ``predictor_comparisons`` rows, newest first, JSON columns decoded."""
    rows = conn.execute(
        "SELECT * FROM predictor_comparisons ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,)
    ).fetchall()
    out = []
    for r in rows:
        d = dict(r)
        for k in ("predictor_top_ids", "baseline_top_ids", "relevance_scores"):
            d[k] = json.loads(d[k])
        out.append(d)
    return out


def has_comparison(conn: sqlite3.Connection, key: str) -> bool:
    """True when the session was compared already (its EMA update is done)."""
    return conn.execute("SELECT 1 FROM predictor_comparisons WHERE session_key = ?", (key,)).fetchone() is not None


def insert_training_log(conn: sqlite3.Connection, row: Mapping[str, Any]) -> int:
    """Insert one ``predictor_training_log`` row (``gates`` as JSON); returns its id."""
    cols = [
        "model_version",
        "trigger",
        "accepted",
        "loss",
        "steps",
        "sample_count",
        "duration_ms",
        "stop_reason",
        "gates",
        "canary_ndcg",
        "canary_ndcg_delta",
        "canary_score_variance",
        "canary_topk_churn",
        "drift_resets",
        "error",
        "created_at",
    ]
    values = dict(row)
    if values.get("gates") is not None and not isinstance(values["gates"], str):
        values["gates"] = json.dumps(values["gates"])
    cur = conn.execute(
        f"INSERT INTO predictor_training_log ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
        [values.get(c) for c in cols],
    )
    return inserted_rowid(cur)


def training_log(conn: sqlite3.Connection, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` training-log rows, newest first, ``gates`` decoded."""
    rows = conn.execute("SELECT * FROM predictor_training_log ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    out = []
    for r in rows:
        d = dict(r)
        d["gates"] = json.loads(d["gates"]) if d["gates"] else None
        out.append(d)
    return out


def training_outcomes(conn: sqlite3.Connection) -> dict[str, Any]:
    """Counts of the ``predictor_training_log`` runs: ``{"total", "accepted", "rejected",
    "rejected_by_reason": {"gates", "no_validation_gain", "error"}}``.

    A rejected run (``accepted`` 0: the serving model did not change) has exactly one reason, in
    this order: ``gates`` (its gate report says ``passed`` false), ``no_validation_gain`` (its
    ``error`` starts with "no validation gain": every gate may have passed), ``error`` (the rest:
    nothing was trained, or the sidecar failed or never answered). The reasons sum to
    ``rejected``.
    """
    r = conn.execute(
        """SELECT count(*), coalesce(sum(accepted != 0), 0), coalesce(sum(accepted = 0 AND gate_failed), 0),
                  coalesce(sum(accepted = 0 AND NOT gate_failed AND no_gain), 0)
           FROM (SELECT accepted,
                        coalesce(CASE WHEN json_valid(gates) THEN json_extract(gates, '$.passed') = 0 END, 0)
                            AS gate_failed,
                        coalesce(error LIKE 'no validation gain%', 0) AS no_gain
                 FROM predictor_training_log)"""
    ).fetchone()
    total, accepted, gates, no_gain = (int(x) for x in r)
    rejected = total - accepted
    return {
        "total": total,
        "accepted": accepted,
        "rejected": rejected,
        "rejected_by_reason": {"gates": gates, "no_validation_gain": no_gain, "error": rejected - gates - no_gain},
    }


def load_state(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The persisted policy state (:class:`memlane.predictor.policy.PolicyState` as a dict), or
    None before the first save."""
    r = conn.execute("SELECT state FROM predictor_state WHERE id = 1").fetchone()
    return json.loads(r[0]) if r else None


def save_state(conn: sqlite3.Connection, state: Mapping[str, Any], at: str) -> None:
    """Upsert the single policy-state row (``at``: ISO-8601 UTC)."""
    conn.execute(
        "INSERT INTO predictor_state(id, state, updated_at) VALUES (1, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
        (json.dumps(dict(state)), at),
    )


@dataclass(frozen=True, slots=True)
class VocabularyRow:
    """One memory as the project-vocabulary signals read it (:mod:`memlane.predictor.vocabulary`)."""

    seq: int
    id: str
    project: str | None
    content: str
    created_at: str
    updated_at: str
    is_deleted: bool


def vocabulary_rows(
    conn: sqlite3.Connection, *, after_seq: int = 0, seqs: Sequence[int] | None = None
) -> list[VocabularyRow]:
    """Memories with ``seq > after_seq``, or exactly those with the given ``seqs``; deleted
    ones included (a reader drops them), in ``seq`` order."""
    cols = "seq, id, project, content, created_at, updated_at, is_deleted"
    if seqs is None:
        rows = conn.execute(f"SELECT {cols} FROM memories WHERE seq > ? ORDER BY seq", (after_seq,)).fetchall()
    else:
        rows = []
        for i in range(0, len(seqs), 500):
            chunk = list(seqs[i : i + 500])
            rows += conn.execute(
                f"SELECT {cols} FROM memories WHERE seq IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
        rows.sort(key=lambda r: r[0])
    return [VocabularyRow(int(r[0]), r[1], r[2], r[3], r[4], r[5], bool(r[6])) for r in rows]


def updated_since(conn: sqlite3.Connection, mark: str, upto_seq: int) -> list[tuple[int, str]]:
    """``(seq, updated_at)`` of memories with ``seq <= upto_seq`` and ``updated_at >= mark``
    (``>=``: two writes can share a millisecond), from ``idx_memories_updated`` alone."""
    return [
        (int(r[0]), r[1])
        for r in conn.execute(
            "SELECT seq, updated_at FROM memories WHERE updated_at >= ? AND seq <= ?", (mark, upto_seq)
        )
    ]


def latest_session_project(conn: sqlite3.Connection) -> str | None:
    """The project of the most recently started session that has one (None: no such session)."""
    row = conn.execute(
        "SELECT project FROM sessions WHERE project IS NOT NULL ORDER BY started_at DESC LIMIT 1"
    ).fetchone()
    return row[0] if row else None
