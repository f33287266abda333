"""SQL behind the dashboard and the timeline (storage layer: SQL only, plain dicts out).

Pages read one page of rows at a time (``LIMIT``/``OFFSET`` with a total), ordered by an
indexed column: memories by ``created_at`` (``idx_memories_created``), sessions by
``started_at`` (``idx_sessions_started``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from memlane.storage.models import Memory

#: Memory states a page can filter on.
MEMORY_STATES = ("live", "deleted", "superseded", "all")


def _rows(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    return [dict(r) for r in cur.fetchall()]


# -- memories ------------------------------------------------------------------------------
def memory_filters(
    *,
    project: str | None = None,
    type_: str | None = None,
    source_type: str | None = None,
    pinned: bool | None = None,
    state: str = "live",
    flagged: bool | None = None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (without the keyword) and its arguments for the memory filters.

    ``state``: live (not deleted, not superseded), deleted, superseded, or all. ``source_type``
    ``""`` matches memories without one. ``flagged``: True keeps only memories with an
    unresolved prediction error (stale or drifting, docs/drift.md), False only those without.

    Raises:
        ValueError: an unknown state.
    """
    if state not in MEMORY_STATES:
        raise ValueError(f"state must be one of {MEMORY_STATES}")
    where: list[str] = ["1=1"]
    args: list[Any] = []
    if state == "live":
        where.append("is_deleted = 0 AND superseded_by IS NULL")
    elif state == "deleted":
        where.append("is_deleted = 1")
    elif state == "superseded":
        where.append("superseded_by IS NOT NULL")
    if project is not None:
        where.append("project = ?")
        args.append(project)
    if type_ is not None:
        where.append("type = ?")
        args.append(type_)
    if source_type is not None:
        if source_type == "":
            where.append("source_type IS NULL")
        else:
            where.append("source_type = ?")
            args.append(source_type)
    if pinned is not None:
        where.append("pinned = ?")
        args.append(int(pinned))
    if flagged is not None:  # idx_pred_errors_memory; the open rows are few
        where.append(
            ("" if flagged else "NOT ") + "EXISTS (SELECT 1 FROM prediction_errors p "
            "WHERE p.memory_id = memories.id AND p.resolved_at IS NULL)"
        )
    return " AND ".join(where), args


def drift_counts(conn: sqlite3.Connection) -> dict[str, Any]:
    """Unresolved prediction errors of memories that are not deleted (docs/drift.md):
    ``{"memories": distinct memories, "errors": rows, "by_type": {error_type: rows}}``."""
    rows = conn.execute(
        "SELECT p.error_type, count(*) FROM prediction_errors p "
        "JOIN memories m ON m.id = p.memory_id WHERE p.resolved_at IS NULL AND m.is_deleted = 0 "
        "GROUP BY p.error_type"
    ).fetchall()
    memories = (
        conn.execute(
            "SELECT count(DISTINCT p.memory_id) FROM prediction_errors p JOIN memories m ON m.id = p.memory_id "
            "WHERE p.resolved_at IS NULL AND m.is_deleted = 0"
        ).fetchone()[0]
        if rows
        else 0
    )
    by_type = {str(r[0]): int(r[1]) for r in rows}
    return {"memories": int(memories), "errors": sum(by_type.values()), "by_type": by_type}


def drift_error_count(conn: sqlite3.Connection, memory_id: str) -> int:
    """How many prediction errors, open or resolved, the memory has (``idx_pred_errors_memory``)."""
    return int(conn.execute("SELECT count(*) FROM prediction_errors WHERE memory_id = ?", (memory_id,)).fetchone()[0])


def memories_page(conn: sqlite3.Connection, *, limit: int, offset: int, **filters: Any) -> tuple[list[Memory], int]:
    """One page of memories, newest first, and the total matching (filters: :func:`memory_filters`)."""
    clause, args = memory_filters(**filters)
    total = conn.execute(f"SELECT count(*) FROM memories WHERE {clause}", args).fetchone()[0]
    return memories_rows(conn, limit=limit, offset=offset, **filters), int(total)


def memories_rows(conn: sqlite3.Connection, *, limit: int, offset: int, **filters: Any) -> list[Memory]:
    """One page of memories, newest first, without the total (from ``idx_memories_created``)."""
    clause, args = memory_filters(**filters)
    rows = conn.execute(
        f"SELECT * FROM memories WHERE {clause} ORDER BY created_at DESC, seq DESC LIMIT ? OFFSET ?",
        (*args, int(limit), int(offset)),
    ).fetchall()
    return [Memory.from_row(r) for r in rows]


def memories_by_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, Memory]:
    """``id -> Memory`` for the given ids (deleted ones included)."""
    out: dict[str, Memory] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        for r in conn.execute(f"SELECT * FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk):
            m = Memory.from_row(r)
            out[m.id] = m
    return out


def facet_values(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Distinct projects, types and source types of the memories (filter menus), at most 200 each."""

    def distinct(col: str) -> list[str]:
        return [
            r[0]
            for r in conn.execute(
                f"SELECT DISTINCT {col} FROM memories WHERE {col} IS NOT NULL ORDER BY {col} LIMIT 200"
            )
        ]

    return {"projects": distinct("project"), "types": distinct("type"), "source_types": distinct("source_type")}


def supersede_chain(conn: sqlite3.Connection, memory_id: str, *, max_hops: int = 20) -> dict[str, list[dict[str, Any]]]:
    """The memories this one replaced (``before``, oldest first) and those that replaced it
    (``after``, in order), each ``{id, content, superseded_by, is_deleted, created_at}``."""
    cols = "id, content, superseded_by, is_deleted, created_at"
    after, seen, cur = [], {memory_id}, memory_id
    for _ in range(max_hops):
        nxt = conn.execute("SELECT superseded_by FROM memories WHERE id = ?", (cur,)).fetchone()
        if nxt is None or nxt[0] is None or nxt[0] in seen:
            break
        row = conn.execute(f"SELECT {cols} FROM memories WHERE id = ?", (nxt[0],)).fetchone()
        if row is None:
            break
        after.append(dict(row))
        seen.add(nxt[0])
        cur = nxt[0]
    before: list[dict[str, Any]] = []
    cur = memory_id
    for _ in range(max_hops):
        row = conn.execute(f"SELECT {cols} FROM memories WHERE superseded_by = ? LIMIT 1", (cur,)).fetchone()
        if row is None or row["id"] in seen:
            break
        before.insert(0, dict(row))
        seen.add(row["id"])
        cur = row["id"]
    return {"before": before, "after": after}


def memory_sessions(conn: sqlite3.Connection, memory_id: str, *, limit: int = 20) -> list[dict[str, Any]]:
    """The newest sessions that had this memory as a candidate, with how it fared in each."""
    return _rows(
        conn.execute(
            """SELECT sm.session_key, s.started_at, s.project, sm.source, sm.rank, sm.baseline_rank, sm.predictor_rank,
                  sm.was_injected, sm.fts_hit_count, sm.agent_relevance_score, sm.raw_label, sm.label,
                  sm.label_reason
           FROM session_memories sm JOIN sessions s ON s.session_key = sm.session_key
           WHERE sm.memory_id = ? ORDER BY s.started_at DESC LIMIT ?""",
            (memory_id, int(limit)),
        )
    )


def memory_session_count(conn: sqlite3.Connection, memory_id: str) -> int:
    """Sessions that had this memory as a candidate."""
    return int(conn.execute("SELECT count(*) FROM session_memories WHERE memory_id = ?", (memory_id,)).fetchone()[0])


def label_flagged_wrong(conn: sqlite3.Connection, memory_id: str, *, label: float, reason: str) -> int:
    """Set ``label`` on every session row where this memory was injected, adding ``reason`` to
    its ``label_reason`` list (a row that has it already is left alone). Returns rows changed."""
    n = 0
    for rid, reasons in conn.execute(
        "SELECT id, label_reason FROM session_memories WHERE memory_id = ? AND was_injected = 1", (memory_id,)
    ).fetchall():
        listed = json.loads(reasons) if reasons else []
        if reason in listed:
            continue
        listed.append(reason)
        conn.execute(
            "UPDATE session_memories SET label = ?, label_reason = ? WHERE id = ?",
            (float(label), json.dumps(listed), rid),
        )
        n += 1
    return n


# -- sessions ------------------------------------------------------------------------------
def sessions_page(
    conn: sqlite3.Connection, *, limit: int, offset: int, project: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """One page of sessions, newest start first, with their score and comparison outcome."""
    where, args = ("WHERE s.project = ?", [project]) if project is not None else ("", [])
    total = conn.execute(f"SELECT count(*) FROM sessions s {where}", args).fetchone()[0]
    rows = _rows(
        conn.execute(
            f"""SELECT s.session_key, s.project, s.harness, s.started_at, s.ended_at, s.status, s.prompt_count,
                   s.candidate_count, s.injected_count, s.predictor_state,
                   sc.score, sc.confidence, sc.scorer,
                   pc.predictor_ndcg, pc.baseline_ndcg, pc.predictor_won, pc.margin
            FROM sessions s
            LEFT JOIN session_scores sc ON sc.session_key = s.session_key
            LEFT JOIN predictor_comparisons pc ON pc.session_key = s.session_key
            {where} ORDER BY s.started_at DESC, s.rowid DESC LIMIT ? OFFSET ?""",
            (*args, int(limit), int(offset)),
        )
    )
    return rows, int(total)


def session_candidates(
    conn: sqlite3.Connection, key: str, *, limit: int, offset: int, injected_only: bool = False
) -> tuple[list[dict[str, Any]], int]:
    """A page of a session's candidates (final rank order) with their memory's text and state."""
    cond = " AND sm.was_injected = 1" if injected_only else ""
    total = conn.execute(f"SELECT count(*) FROM session_memories sm WHERE sm.session_key = ?{cond}", (key,)).fetchone()[
        0
    ]
    rows = _rows(
        conn.execute(
            f"""SELECT sm.memory_id, sm.source, sm.effective_score, sm.similarity, sm.predictor_score, sm.final_score,
                   sm.rank, sm.baseline_rank, sm.predictor_rank, sm.was_injected, sm.relevance_score,
                   sm.fts_hit_count, sm.agent_relevance_score, sm.agent_feedback_count, sm.raw_label, sm.label,
                   sm.label_reason, sm.created_at, m.content, m.type, m.is_deleted, m.superseded_by
            FROM session_memories sm JOIN memories m ON m.id = sm.memory_id
            WHERE sm.session_key = ?{cond} ORDER BY sm.rank LIMIT ? OFFSET ?""",
            (key, int(limit), int(offset)),
        )
    )
    for r in rows:
        r["label_reason"] = json.loads(r["label_reason"]) if r["label_reason"] else []
    return rows, int(total)


def comparison_of(conn: sqlite3.Connection, key: str) -> dict[str, Any] | None:
    """The session's ``predictor_comparisons`` row (JSON columns decoded), or None."""
    r = conn.execute("SELECT * FROM predictor_comparisons WHERE session_key = ?", (key,)).fetchone()
    if r is None:
        return None
    d = dict(r)
    for k in ("predictor_top_ids", "baseline_top_ids", "relevance_scores"):
        d[k] = json.loads(d[k]) if d[k] else ([] if k != "relevance_scores" else {})
    return d


def session_signals(conn: sqlite3.Connection, key: str) -> dict[str, Any]:
    """The session's logged predictor signals (``sessions.signals``), ``{}`` when none."""
    r = conn.execute("SELECT signals FROM sessions WHERE session_key = ?", (key,)).fetchone()
    try:
        return json.loads(r[0]) if r and r[0] else {}
    except ValueError:
        return {}


def session_review_rows(conn: sqlite3.Connection, key: str, *, limit: int = 200) -> list[dict[str, Any]]:
    """Memories the pipeline inferred from the session: those derived (``source_type``
    pipeline_v2) from a memory the session recorded (``source_id`` = the session key), plus
    the session's own memories that are not plain dialogue turns; newest first."""
    return _rows(
        conn.execute(
            """SELECT m.id, m.type, m.content, m.confidence, m.source_type, m.source_id, m.who, m.why, m.created_at,
                  m.is_deleted, m.superseded_by, m.metadata, m.access_count
           FROM memories m
           WHERE m.source_type = 'pipeline_v2' AND m.source_id IN
                 (SELECT id FROM memories WHERE source_id = ?)
           ORDER BY m.created_at DESC, m.seq DESC LIMIT ?""",
            (key, int(limit)),
        )
    )


def session_events(conn: sqlite3.Connection, key: str) -> dict[str, Any]:
    """Everything the session timeline interleaves: the session row, its score, comparison,
    candidates (brief), checkpoints, jobs and the memories recorded in it."""
    sess = conn.execute(
        "SELECT session_key, project, started_at, ended_at, status, prompt_count, candidate_count, "
        "injected_count, predictor_state FROM sessions WHERE session_key = ?",
        (key,),
    ).fetchone()
    if sess is None:
        return {}
    return {
        "session": dict(sess),
        "score": (lambda r: dict(r) if r else None)(
            conn.execute(
                "SELECT score, confidence, scorer, reasoning, novel_context_count, created_at "
                "FROM session_scores WHERE session_key = ?",
                (key,),
            ).fetchone()
        ),
        "comparison": comparison_of(conn, key),
        "signals": session_signals(conn, key),
        "candidates": _rows(
            conn.execute(
                "SELECT memory_id, source, rank, baseline_rank, predictor_rank, was_injected, fts_hit_count, label, "
                "created_at FROM session_memories WHERE session_key = ? ORDER BY rank",
                (key,),
            )
        ),
        "checkpoints": _rows(
            conn.execute(
                "SELECT id, trigger, prompt_count, created_at FROM session_checkpoints WHERE session_key = ? "
                "ORDER BY created_at",
                (key,),
            )
        ),
        "jobs": _rows(
            conn.execute(
                "SELECT id, job_type, status, attempts, error, created_at, updated_at FROM memory_jobs "
                "WHERE session_key = ? ORDER BY id",
                (key,),
            )
        ),
        "memories": _rows(
            conn.execute(
                "SELECT id, type, created_at FROM memories WHERE source_id = ? ORDER BY created_at, seq LIMIT 500",
                (key,),
            )
        ),
    }


def memory_events(conn: sqlite3.Connection, memory_id: str) -> dict[str, Any]:
    """Everything the memory timeline interleaves: history, jobs and session candidacies."""
    return {
        "history": _rows(
            conn.execute(
                "SELECT id, event, who, why, changes, created_at FROM memory_history WHERE memory_id = ? ORDER BY id",
                (memory_id,),
            )
        ),
        "jobs": _rows(
            conn.execute(
                "SELECT id, job_type, status, attempts, error, created_at, updated_at FROM memory_jobs "
                "WHERE memory_id = ? ORDER BY id",
                (memory_id,),
            )
        ),
        "sessions": _rows(
            conn.execute(
                """SELECT sm.session_key, s.started_at, sm.source, sm.rank, sm.was_injected, sm.fts_hit_count,
                      sm.label, sm.label_reason, sc.created_at AS scored_at
               FROM session_memories sm JOIN sessions s ON s.session_key = sm.session_key
               LEFT JOIN session_scores sc ON sc.session_key = sm.session_key
               WHERE sm.memory_id = ? ORDER BY s.started_at LIMIT 500""",
                (memory_id,),
            )
        ),
    }


def session_exists(conn: sqlite3.Connection, key: str) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE session_key = ?", (key,)).fetchone() is not None


def memory_exists(conn: sqlite3.Connection, memory_id: str) -> bool:
    return conn.execute("SELECT 1 FROM memories WHERE id = ?", (memory_id,)).fetchone() is not None


# -- predictor -----------------------------------------------------------------------------
def comparisons_version(conn: sqlite3.Connection) -> tuple[int, int, str | None]:
    """``(rows, largest rowid, newest created_at)`` of ``predictor_comparisons``: changes when a
    comparison is added or a session's comparison replaced (``INSERT OR REPLACE`` writes a new
    row), read from the indexes without touching a row."""
    n, rid = conn.execute("SELECT count(*), coalesce(max(rowid), 0) FROM predictor_comparisons").fetchone()
    newest = conn.execute("SELECT max(created_at) FROM predictor_comparisons").fetchone()[0]
    return int(n), int(rid), newest


def comparisons_series(conn: sqlite3.Connection, *, limit: int = 1000) -> list[dict[str, Any]]:
    """The newest ``limit`` comparisons, oldest first, with the columns the charts need."""
    rows = _rows(
        conn.execute(
            """SELECT * FROM (SELECT session_key, project, predictor_ndcg, baseline_ndcg, predictor_won, margin,
                                 scorer_confidence, ema_updated, success_rate, alpha, predictor_top_ids,
                                 baseline_top_ids, relevance_scores, model_version, created_at, rowid AS rid
                          FROM predictor_comparisons ORDER BY created_at DESC, rowid DESC LIMIT ?)
           ORDER BY created_at, rid""",
            (int(limit),),
        )
    )
    for r in rows:
        for k in ("predictor_top_ids", "baseline_top_ids"):
            r[k] = json.loads(r[k]) if r[k] else []
        r["relevance_scores"] = json.loads(r["relevance_scores"]) if r["relevance_scores"] else {}
    return rows


def training_series(conn: sqlite3.Connection, *, limit: int = 500) -> list[dict[str, Any]]:
    """The newest ``limit`` training-log rows, oldest first (no gate reports)."""
    return _rows(
        conn.execute(
            """SELECT * FROM (SELECT id, model_version, trigger, accepted, loss, steps, sample_count, duration_ms,
                                 canary_ndcg, drift_resets, error, created_at
                          FROM predictor_training_log ORDER BY id DESC LIMIT ?) ORDER BY id""",
            (int(limit),),
        )
    )


def recent_scored_sessions(conn: sqlite3.Connection, *, limit: int = 20) -> list[dict[str, Any]]:
    """The newest scored sessions with their continuity score and confidence."""
    return _rows(
        conn.execute(
            """SELECT sc.session_key, s.project, s.started_at, sc.score, sc.confidence, sc.scorer
           FROM session_scores sc JOIN sessions s ON s.session_key = sc.session_key
           ORDER BY s.started_at DESC LIMIT ?""",
            (int(limit),),
        )
    )


def training_grade_count(conn: sqlite3.Connection, *, min_confidence: float) -> int:
    """Scored sessions whose confidence reaches ``min_confidence`` (training-grade)."""
    return int(
        conn.execute("SELECT count(*) FROM session_scores WHERE confidence >= ?", (float(min_confidence),)).fetchone()[
            0
        ]
    )


# -- jobs ----------------------------------------------------------------------------------
def recent_jobs(
    conn: sqlite3.Connection, *, limit: int, offset: int = 0, status: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """A page of jobs, newest first (optionally of one status), and the total."""
    where, args = ("WHERE status = ?", [status]) if status else ("", [])
    total = conn.execute(f"SELECT count(*) FROM memory_jobs {where}", args).fetchone()[0]
    rows = _rows(
        conn.execute(
            f"SELECT id, job_type, memory_id, session_key, status, attempts, max_attempts, error, created_at, updated_at "
            f"FROM memory_jobs {where} ORDER BY id DESC LIMIT ? OFFSET ?",
            (*args, int(limit), int(offset)),
        )
    )
    return rows, int(total)
