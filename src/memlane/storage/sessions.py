"""SQL for sessions, session_memories, session_scores and session_transcripts (SQL only)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

#: Compact JSON for logged signals and label reasons (same content as ``json.dumps``' default,
#: without the spaces: ~15 % smaller rows and faster to encode).
_COMPACT = {"separators": (",", ":")}


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One row of ``sessions``."""

    session_key: str
    project: str | None
    harness: str | None
    cwd: str | None
    context: str | None
    started_at: str
    ended_at: str | None
    status: str
    started: int
    prompt_count: int
    candidate_count: int
    injected_count: int
    predictor_state: str


@dataclass(frozen=True, slots=True)
class CandidateRow:
    """A session_memories row to insert at session-start (or as an fts_only hit)."""

    memory_id: str
    source: str
    final_score: float
    rank: int
    was_injected: bool
    effective_score: float | None = None
    similarity: float | None = None
    predictor_score: float | None = None
    baseline_rank: int | None = None
    predictor_rank: int | None = None
    #: the predictor's raw scoring signals of this candidate (``session_memories.features``,
    #: :data:`memlane.predictor.dataset.CANDIDATE_SIGNALS`), or None when the predictor is off;
    #: a ``str`` is taken as already encoded by :func:`encode_features`.
    features: Mapping[str, Any] | str | None = None


def encode_features(features: Mapping[str, Any]) -> str:
    """The ``session_memories.features`` JSON of one candidate's signals (compact UTF-8 JSON).

    orjson (~10x the stdlib here, on the session-start path); a non-finite number is written
    as null, which reads back as a missing optional signal or a malformed required one (the
    session is then left out of training, as a NaN was)."""
    return orjson.dumps(dict(features)).decode()


@dataclass(frozen=True, slots=True)
class SessionMemory:
    """One row of ``session_memories`` joined with the memory's state needed for labels."""

    id: int
    session_key: str
    memory_id: str
    source: str
    effective_score: float | None
    similarity: float | None
    predictor_score: float | None
    final_score: float
    rank: int
    baseline_rank: int | None
    predictor_rank: int | None
    was_injected: bool
    relevance_score: float | None
    fts_hit_count: int
    agent_relevance_score: float | None
    agent_feedback_count: int
    raw_label: float | None
    label: float | None
    label_reason: list[str] | None
    created_at: str
    # memory state
    content: str
    access_count: int
    superseded_by: str | None
    is_deleted: bool
    deleted_at: str | None
    last_edited_at: str | None  # latest 'updated' history event (content or fields), if any


def get_session(conn: sqlite3.Connection, key: str) -> SessionRow | None:
    """The session with this key, or None."""
    r = conn.execute("SELECT * FROM sessions WHERE session_key = ?", (key,)).fetchone()
    if r is None:
        return None
    d = dict(r)
    for k in ("context_vector", "context_model", "signals"):  # the predictor's inputs (storage.predictor)
        d.pop(k, None)
    return SessionRow(**d)


def insert_session(
    conn: sqlite3.Connection,
    *,
    key: str,
    project: str | None,
    harness: str | None,
    cwd: str | None,
    context: str | None,
    started_at: str,
    predictor_state: str,
) -> bool:
    """Create a started session, or start one that a prompt or end created implicitly; False if it
    was already started (idempotent session-start)."""
    cur = conn.execute(
        """INSERT INTO sessions (session_key, project, harness, cwd, context, started_at, predictor_state, started)
           VALUES (?,?,?,?,?,?,?,1)
           ON CONFLICT(session_key) DO UPDATE SET project = coalesce(excluded.project, project),
               harness = coalesce(excluded.harness, harness), cwd = coalesce(excluded.cwd, cwd),
               context = excluded.context, predictor_state = excluded.predictor_state, started = 1
           WHERE started = 0""",
        (key, project, harness, cwd, context, started_at, predictor_state),
    )
    return cur.rowcount == 1


def ensure_session(
    conn: sqlite3.Connection, *, key: str, project: str | None, harness: str | None, cwd: str | None, started_at: str
) -> None:
    """Create a session row if missing (a prompt or end for a session we never saw start)."""
    conn.execute(
        """INSERT OR IGNORE INTO sessions (session_key, project, harness, cwd, started_at)
           VALUES (?,?,?,?,?)""",
        (key, project, harness, cwd, started_at),
    )


def record_candidates(conn: sqlite3.Connection, key: str, rows: Sequence[CandidateRow], at: str) -> int:
    """Record every candidate of a session-start, its logged features included (one statement).

    A (session, memory) row a prompt already created (``fts_only``, when prompts arrived before
    the start) takes the candidate's scores, ranks and features and keeps its hit and feedback
    counts. Returns the number of rows written.
    """
    cur = conn.executemany(
        """INSERT INTO session_memories (session_key, memory_id, source, effective_score, similarity,
               predictor_score, final_score, rank, baseline_rank, predictor_rank, was_injected, created_at, features)
           VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
           ON CONFLICT(session_key, memory_id) DO UPDATE SET source = excluded.source,
               effective_score = excluded.effective_score, similarity = excluded.similarity,
               predictor_score = excluded.predictor_score, final_score = excluded.final_score,
               rank = excluded.rank, baseline_rank = excluded.baseline_rank,
               predictor_rank = excluded.predictor_rank, was_injected = excluded.was_injected,
               features = coalesce(excluded.features, features)""",
        [
            (
                key,
                r.memory_id,
                r.source,
                r.effective_score,
                r.similarity,
                r.predictor_score,
                r.final_score,
                r.rank,
                r.baseline_rank,
                r.predictor_rank,
                int(r.was_injected),
                at,
                r.features if r.features is None or isinstance(r.features, str) else encode_features(r.features),
            )
            for r in rows
        ],
    )
    injected = sum(r.was_injected for r in rows)
    conn.execute(
        "UPDATE sessions SET candidate_count = ?, injected_count = ? WHERE session_key = ?", (len(rows), injected, key)
    )
    return cur.rowcount


def track_fts_hits(conn: sqlite3.Connection, key: str, hits: Sequence[tuple[str, float]], at: str) -> tuple[int, int]:
    """Prompt-submit FTS hit tracking (predictive-memory-scorer.md "FTS Hit Tracking").

    ``hits`` are (memory_id, recall score). Existing rows get ``fts_hit_count + 1``; the rest are
    inserted with source 'fts_only', was_injected 0, fts_hit_count 1. Returns (updated, inserted).
    """
    updated = inserted = 0
    for memory_id, score in hits:
        cur = conn.execute(
            "UPDATE session_memories SET fts_hit_count = fts_hit_count + 1 WHERE session_key = ? AND memory_id = ?",
            (key, memory_id),
        )
        if cur.rowcount:
            updated += 1
            continue
        rank = conn.execute(
            "SELECT coalesce(max(rank), 0) + 1 FROM session_memories WHERE session_key = ?", (key,)
        ).fetchone()[0]
        conn.execute(
            """INSERT OR IGNORE INTO session_memories (session_key, memory_id, source, final_score, rank,
                   was_injected, fts_hit_count, created_at) VALUES (?,?,'fts_only',?,?,0,1,?)""",
            (key, memory_id, float(score), int(rank), at),
        )
        inserted += 1
    return updated, inserted


def apply_feedback(conn: sqlite3.Connection, key: str, scores: dict[str, float]) -> int:
    """Running mean of agent feedback (agent-relevance-feedback.md "Data Storage").

    ``scores`` maps full memory ids to a score in [-1, 1]; ids not in the session are ignored.
    Returns the number of rows updated.
    """
    n = 0
    for memory_id, score in scores.items():
        cur = conn.execute(
            """UPDATE session_memories
               SET agent_relevance_score = (coalesce(agent_relevance_score, 0) * agent_feedback_count + ?)
                                           / (agent_feedback_count + 1),
                   agent_feedback_count = agent_feedback_count + 1
               WHERE session_key = ? AND memory_id = ?""",
            (float(score), key, memory_id),
        )
        n += cur.rowcount
    return n


def bump_prompt_count(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("UPDATE sessions SET prompt_count = prompt_count + 1 WHERE session_key = ?", (key,))


def session_memory_ids(conn: sqlite3.Connection, key: str, *, injected_only: bool = False) -> list[str]:
    """Memory ids recorded for a session, by rank."""
    q = "SELECT memory_id FROM session_memories WHERE session_key = ?"
    if injected_only:
        q += " AND was_injected = 1"
    return [r[0] for r in conn.execute(q + " ORDER BY rank", (key,))]


#: ``session_memories`` columns read into :class:`SessionMemory` (its field order), then the
#: memory's state. ``features`` and ``agent_preference`` are not read (the predictor reads its
#: features through :mod:`memlane.storage.predictor`).
_SM_COLUMNS = (
    "id",
    "session_key",
    "memory_id",
    "source",
    "effective_score",
    "similarity",
    "predictor_score",
    "final_score",
    "rank",
    "baseline_rank",
    "predictor_rank",
    "was_injected",
    "relevance_score",
    "fts_hit_count",
    "agent_relevance_score",
    "agent_feedback_count",
    "raw_label",
    "label",
    "label_reason",
    "created_at",
)
_SM_QUERY = f"""SELECT {", ".join("sm." + c for c in _SM_COLUMNS)},
                  m.content, m.access_count, m.superseded_by, m.is_deleted, m.deleted_at,
                  (SELECT max(h.created_at) FROM memory_history h
                   WHERE h.memory_id = m.id AND h.event = 'updated') AS last_edited_at
           FROM session_memories sm JOIN memories m ON m.id = sm.memory_id
           WHERE sm.session_key = ? ORDER BY sm.rank"""


def session_memories(conn: sqlite3.Connection, key: str) -> list[SessionMemory]:
    """Every candidate row of a session with the memory state the label rules read, by rank.

    Rows are read as plain tuples (no ``sqlite3.Row`` -> dict step), which is several times
    faster on a session's candidates (docs/decisions.md, "Serialisation").
    """
    cur = conn.cursor()
    cur.row_factory = None
    out = []
    loads = json.loads
    for r in cur.execute(_SM_QUERY, (key,)):
        r = list(r)
        r[11] = bool(r[11])  # was_injected
        r[18] = loads(r[18]) if r[18] else None  # label_reason
        r[23] = bool(r[23])  # is_deleted
        out.append(SessionMemory(*r))
    return out


def write_relevance(conn: sqlite3.Connection, key: str, relevance: dict[str, float]) -> int:
    """Store the continuity scorer's per-memory relevance (full ids). Returns rows updated."""
    n = 0
    for memory_id, value in relevance.items():
        n += conn.execute(
            "UPDATE session_memories SET relevance_score = ? WHERE session_key = ? AND memory_id = ?",
            (float(value), key, memory_id),
        ).rowcount
    return n


def write_labels(conn: sqlite3.Connection, labels: Iterable[tuple[int, float, float, Sequence[str]]]) -> None:
    """Store (row id, raw_label, label, reasons) for session_memories rows."""
    conn.executemany(
        "UPDATE session_memories SET raw_label = ?, label = ?, label_reason = ? WHERE id = ?",
        [(raw, lab, json.dumps(list(reasons)), rid) for rid, raw, lab, reasons in labels],
    )


def end_session(conn: sqlite3.Connection, key: str, at: str) -> None:
    conn.execute(
        "UPDATE sessions SET status = 'ended', ended_at = coalesce(ended_at, ?) WHERE session_key = ?", (at, key)
    )


def write_score(
    conn: sqlite3.Connection,
    key: str,
    *,
    score: float,
    confidence: float,
    memories_recalled: int,
    memories_used: int,
    novel_context_count: int,
    reasoning: str | None,
    scorer: str,
    model: str | None,
    at: str,
) -> None:
    """Insert or replace the session's continuity score row."""
    conn.execute(
        """INSERT OR REPLACE INTO session_scores (session_key, score, confidence, memories_recalled, memories_used,
               novel_context_count, reasoning, continuity_reasoning, scorer, model, created_at)
           VALUES (?,?,?,?,?,?,?,?,?,?,?)""",
        (
            key,
            score,
            confidence,
            memories_recalled,
            memories_used,
            novel_context_count,
            reasoning,
            reasoning,
            scorer,
            model,
            at,
        ),
    )


def get_score(conn: sqlite3.Connection, key: str) -> dict[str, Any] | None:
    r = conn.execute("SELECT * FROM session_scores WHERE session_key = ?", (key,)).fetchone()
    return dict(r) if r else None


def write_transcript(
    conn: sqlite3.Connection, key: str, content: str, *, harness: str | None, project: str | None, at: str
) -> bool:
    """Store a transcript whole: the first one, replaced only by a longer one (a resumed
    session ends again with its whole conversation). True if stored now. ``content`` must
    already be redacted (:func:`memlane.redact.redact`; the session service does it)."""
    return (
        conn.execute(
            """INSERT INTO session_transcripts (session_key, content, harness, project, created_at)
           VALUES (?,?,?,?,?)
           ON CONFLICT(session_key) DO UPDATE SET content = excluded.content, created_at = excluded.created_at
           WHERE length(excluded.content) > length(session_transcripts.content)""",
            (key, content, harness, project, at),
        ).rowcount
        == 1
    )


def get_transcript(conn: sqlite3.Connection, key: str) -> str | None:
    r = conn.execute("SELECT content FROM session_transcripts WHERE session_key = ?", (key,)).fetchone()
    return r[0] if r else None


def count_scored_sessions(conn: sqlite3.Connection) -> int:
    """Sessions with a score row (the cold-start counter's 'N')."""
    return conn.execute("SELECT count(*) FROM session_scores").fetchone()[0]


def summary(conn: sqlite3.Connection) -> dict[str, Any]:
    """Counts for reports: sessions, candidates, injected, fts hits, feedback, labels, scores by scorer."""
    s = dict(
        conn.execute(
            """SELECT count(*) AS sessions, sum(status = 'ended') AS ended, sum(prompt_count) AS prompts
           FROM sessions"""
        ).fetchone()
    )
    sm = dict(
        conn.execute(
            """SELECT count(*) AS candidates, sum(was_injected) AS injected, sum(source = 'fts_only') AS fts_only,
                  sum(fts_hit_count > 0) AS fts_hit_rows, sum(fts_hit_count) AS fts_hits,
                  sum(agent_feedback_count > 0) AS rated_rows, sum(agent_feedback_count) AS ratings,
                  sum(label IS NOT NULL) AS labelled, avg(label) AS mean_label,
                  sum(label > 0.5) AS positive_labels, sum(label < 0) AS negative_labels,
                  sum(relevance_score IS NOT NULL) AS judged_rows
           FROM session_memories"""
        ).fetchone()
    )
    scorers = dict(conn.execute("SELECT scorer, count(*) FROM session_scores GROUP BY scorer").fetchall())
    conf = conn.execute("SELECT avg(score), avg(confidence), sum(confidence >= 0.6) FROM session_scores").fetchone()
    return {
        **{k: (v or 0) for k, v in s.items()},
        **{k: (v if v is not None else 0) for k, v in sm.items()},
        "scores_by_scorer": scorers,
        "mean_score": conf[0],
        "mean_confidence": conf[1],
        "training_grade_sessions": conf[2] or 0,
    }


def shown_state(conn: sqlite3.Connection, key: str) -> dict[str, bool]:
    """The session's memories -> whether the agent already saw them (injected at start or matched
    by an earlier prompt)."""
    return {
        r[0]: bool(r[1])
        for r in conn.execute(
            "SELECT memory_id, was_injected = 1 OR fts_hit_count > 0 FROM session_memories WHERE session_key = ?",
            (key,),
        )
    }


def scored_sessions_holding(conn: sqlite3.Connection, memory_id: str) -> list[str]:
    """The keys of the scored sessions (a ``session_scores`` row) whose candidates include
    ``memory_id``, each once."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT sm.session_key FROM session_memories sm JOIN session_scores ss "
            "ON ss.session_key = sm.session_key WHERE sm.memory_id = ?",
            (memory_id,),
        )
    ]


def projects_started_before(conn: sqlite3.Connection, before: str) -> list[str]:
    """The distinct projects with a session started before ``before`` (ISO-8601), ascending.

    One index seek per project on ``sessions(project, started_at)`` (a recursive skip-scan), not a
    scan of every session.
    """
    return [
        p
        for (p,) in conn.execute(
            """WITH RECURSIVE p(x) AS (SELECT min(project) FROM sessions
                                   UNION ALL SELECT (SELECT min(project) FROM sessions WHERE project > x)
                                   FROM p WHERE x IS NOT NULL)
           SELECT x FROM p WHERE x IS NOT NULL
             AND EXISTS (SELECT 1 FROM sessions WHERE project = x AND started_at < ?)""",
            (before,),
        )
    ]
