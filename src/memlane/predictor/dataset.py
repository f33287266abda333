"""From stored sessions to listwise examples: the one path from logged inputs to features.

At session-start the daemon logs, for every candidate, the raw signals it scored with
(``session_memories.features``) and, per session, the context vector and the session-level
signals (``sessions.context_vector`` and ``signals``). Scoring and training both turn those
into a feature matrix with :func:`memlane.predictor.features.build_feature_matrix` through
:func:`build_session` here, so a model is never trained on features it is not served
(the failure of the one public predictor of this design).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memlane.predictor.data import Session
from memlane.predictor.features import CandidateFeatures, build_feature_matrix
from memlane.storage import predictor as pred_sql

__all__ = ["CANDIDATE_SIGNALS", "build_session", "load_sessions", "signals_to_features"]

#: The per-candidate signal keys (CandidateFeatures' fields), logged as JSON.
CANDIDATE_SIGNALS = tuple(CandidateFeatures.__dataclass_fields__)


def signals_to_features(raw: Mapping[str, Any], session_gap_hours: float) -> CandidateFeatures:
    """Rebuild :class:`CandidateFeatures` from logged JSON (unknown keys ignored).

    Raises:
        ValueError: a required signal is missing or not a number.
    """
    try:
        return CandidateFeatures(
            age_days=float(raw["age_days"]), importance=float(raw["importance"]),
            access_count=int(raw["access_count"]), session_gap_hours=float(session_gap_hours),
            is_embedded=bool(raw["is_embedded"]), is_superseded=bool(raw.get("is_superseded", False)),
            baseline_score=float(raw.get("baseline_score", 0.0)),
            baseline_rank=None if raw.get("baseline_rank") is None else int(raw["baseline_rank"]),
            context_similarity=None if raw.get("context_similarity") is None else float(raw["context_similarity"]),
            pinned=bool(raw.get("pinned", False)),
            bm25_score=None if raw.get("bm25_score") is None else float(raw["bm25_score"]),
            vector_score=None if raw.get("vector_score") is None else float(raw["vector_score"]),
            mentions_project=bool(raw.get("mentions_project", False)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad candidate signals {dict(raw)!r}: {exc}") from exc


def _vector(blob: bytes | None, native_dim: int) -> np.ndarray | None:
    if blob is None:
        return None
    v = np.frombuffer(blob, dtype="<f4")
    return v if v.shape[0] == native_dim else None


def build_session(*, candidates: Sequence[Mapping[str, Any]], session_time: datetime, session_gap_hours: float,
                  candidate_vectors: Sequence[np.ndarray | None], candidate_texts: Sequence[str],
                  context_vector: np.ndarray | None, context_text: str, project: str | None,
                  native_dim: int, labels: Sequence[float] | None = None, confidence: float = 1.0,
                  session_id: str = "") -> Session:
    """One :class:`Session` from raw signals (the shared scoring/training constructor).

    Args:
        candidates: ``n`` raw signal dicts (:data:`CANDIDATE_SIGNALS`).
        session_time: the session's local start time (time-of-day features).
        session_gap_hours: hours since the previous session.
        candidate_vectors: ``n`` content vectors ``[native_dim]`` or None (text path).
        candidate_texts: ``n`` memory texts (used where the vector is None).
        context_vector: ``[native_dim]`` or None (then ``context_text`` takes the text path).
        project: project name (project slot).
        native_dim: embedding width E.
        labels: ``n`` labels in [-1, 1], or None to score.
        confidence: session weight in the loss.

    Raises:
        ValueError: mismatched lengths or bad signals.
    """
    n = len(candidates)
    if len(candidate_vectors) != n or len(candidate_texts) != n:
        raise ValueError("candidates, vectors and texts must have the same length")
    embedded = np.array([v is not None and v.shape[0] == native_dim for v in candidate_vectors], dtype=bool)
    feats = []
    for raw, emb in zip(candidates, embedded):
        f = signals_to_features({**raw, "is_embedded": bool(emb)}, session_gap_hours)
        feats.append(f)
    matrix = build_feature_matrix(feats, session_time)
    emb_matrix = None
    if embedded.any():
        emb_matrix = np.zeros((n, native_dim), dtype=np.float32)
        for i, v in enumerate(candidate_vectors):
            if embedded[i]:
                emb_matrix[i] = v  # type: ignore[assignment]
    texts = [t if not embedded[i] else "" for i, t in enumerate(candidate_texts)] if not embedded.all() else []
    ctx = context_vector if context_vector is not None and context_vector.shape[0] == native_dim else None
    return Session(features=matrix,
                   labels=None if labels is None else np.asarray(labels, dtype=np.float32),
                   candidate_texts=texts, candidate_embeddings=emb_matrix, candidate_is_embedded=embedded,
                   context_embedding=None if ctx is None else np.asarray(ctx, dtype=np.float32),
                   context_text="" if ctx is not None else (context_text or "")[:2000],
                   confidence=float(confidence), project=project, session_id=session_id)


def load_sessions(conn: sqlite3.Connection, *, embedding_model: str | None, native_dim: int,
                  min_confidence: float, limit: int = 500, keys: Sequence[str] | None = None) -> list[Session]:
    """Labelled sessions from the database, newest first (``keys`` restricts to those sessions).

    Sessions whose candidates lack logged features or labels, or whose labels do not vary, are
    skipped (no ranking signal).
    """
    out: list[Session] = []
    for s in pred_sql.training_sessions(conn, min_confidence=min_confidence, limit=limit, keys=keys):
        rows = pred_sql.session_candidates(conn, s.session_key, embedding_model)
        rows = [r for r in rows if r.features is not None]
        if len(rows) < 2:
            continue
        labels = [float(r.label) if r.label is not None else 0.0 for r in rows]
        if max(labels) - min(labels) <= 1e-6:
            continue
        sig = s.signals
        try:
            when = datetime.fromisoformat(str(sig.get("session_time") or s.started_at).replace("Z", "+00:00"))
            ctx = _vector(s.context_vector, native_dim) if s.context_model == embedding_model else None
            out.append(build_session(
                candidates=[r.features or {} for r in rows], session_time=when,
                session_gap_hours=float(sig.get("session_gap_hours", 0.0)),
                candidate_vectors=[_vector(r.vector, native_dim) for r in rows],
                candidate_texts=[r.content for r in rows], context_vector=ctx, context_text=s.context or "",
                project=s.project, native_dim=native_dim, labels=labels, confidence=s.confidence,
                session_id=s.session_key))
        except ValueError:
            continue  # one malformed session never blocks training on the others
    return out
