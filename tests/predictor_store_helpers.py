"""Rows of a real predictor store, written straight through the storage layer.

Shared by the derived-signal tests (``test_predictor_schema_v4``, ``test_predictor_vocabulary``):
a memory with its embedding, and a labelled, scored session whose candidates carry logged
raw signals, as the daemon leaves them for ``load_sessions``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence

import numpy as np

from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.embeddings import upsert as upsert_embeddings


def insert_memory(
    conn: sqlite3.Connection,
    mid: str,
    content: str,
    vector: np.ndarray,
    *,
    model: str,
    at: str,
    project: str | None = None,
) -> None:
    """One live memory ``mid`` created and updated at ``at``, with its ``model`` embedding."""
    h = hashlib.sha256(content.encode()).hexdigest()
    conn.execute(
        """INSERT INTO memories (id, content, normalized_content, content_hash, project, created_at, updated_at)
                    VALUES (?,?,?,?,?,?,?)""",
        (mid, content, content.lower(), h, project, at, at),
    )
    upsert_embeddings(conn, [(h, vector)], model, at)


def insert_scored_session(
    conn: sqlite3.Connection,
    key: str,
    project: str | None,
    started_at: str,
    ids: Sequence[str],
    *,
    local_time: str,
    ctx: np.ndarray,
    model: str,
    raw: Callable[[int], dict],
) -> None:
    """A session started at ``started_at`` (local start ``local_time``) whose candidates
    ``ids`` (in rank order, the first two injected) logged ``raw(rank)``; the first is labelled
    1, the others 0, and the session is scored (confidence 0.9) at ``started_at``."""
    sess_sql.insert_session(
        conn,
        key=key,
        project=project,
        harness="test",
        cwd=None,
        context="ctx",
        started_at=started_at,
        predictor_state="collecting",
    )
    sess_sql.record_candidates(
        conn,
        key,
        [
            sess_sql.CandidateRow(memory_id=m, source="effective", final_score=1.0, rank=i, was_injected=i < 2)
            for i, m in enumerate(ids)
        ],
        started_at,
    )
    pred_sql.set_session_inputs(
        conn,
        key,
        context_vector=ctx,
        context_model=model,
        signals={"session_time": local_time, "session_gap_hours": 2.0},
    )
    pred_sql.set_candidate_features(conn, key, {m: raw(i) for i, m in enumerate(ids)})
    rid = dict(conn.execute("SELECT memory_id, id FROM session_memories WHERE session_key = ?", (key,)).fetchall())
    sess_sql.write_labels(conn, [(rid[m], float(i == 0), float(i == 0), ["test"]) for i, m in enumerate(ids)])
    sess_sql.write_score(
        conn,
        key,
        score=0.8,
        confidence=0.9,
        memories_recalled=2,
        memories_used=1,
        novel_context_count=0,
        reasoning=None,
        scorer="llm",
        model=None,
        at=started_at,
    )
