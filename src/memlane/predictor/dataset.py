"""From stored sessions to listwise examples: the one path from logged inputs to features.

At session-start the daemon logs, for every candidate, the raw signals it scored with
(``session_memories.features``) and, per session, the context vector and the session-level
signals (``sessions.context_vector`` and ``signals``). Scoring and training both turn those
into a feature matrix with :func:`memlane.predictor.features.feature_matrix_from_signals`
(:func:`~memlane.predictor.features.build_feature_matrix` when a value is bad) through
:func:`build_session` here, so a model is never trained on features it is not served
(the failure of the one public predictor of this design).

Three signals are not logged but derived from the database by :func:`derived_signals`, with
the same function and the same cut-off on both paths: ``names_other_project`` (schema v4),
which needs the projects the user had started sessions in before the session, and the two
project-vocabulary flags (schema v5, :mod:`memlane.predictor.vocabulary`), which need every
memory written before it (the sidecar derives them when it scores, :func:`load_sessions` when
it loads a session for training).

``query_coverage`` (schema v6) is logged; for a session logged before it existed,
:func:`load_sessions` computes it from the session's stored context and the memories' text
with the daemon's own function (:func:`with_query_coverage`).

``log_content_chars`` (schema v7) is neither logged nor read: :func:`build_session` counts the
candidate texts both paths already hold (the sidecar reads them by id to score).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memlane.predictor.coverage import query_coverage
from memlane.predictor.data import Session
from memlane.predictor.features import (
    CandidateFeatures,
    build_feature_matrix,
    feature_matrix_from_signals,
    project_name,
)
from memlane.predictor.vocabulary import VocabularyCache
from memlane.storage import memories as mem_sql
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql

__all__ = [
    "CANDIDATE_SIGNALS",
    "DERIVED_SIGNALS",
    "build_session",
    "derived_signals",
    "load_sessions",
    "signals_to_features",
    "with_query_coverage",
]

#: The per-candidate signal keys (CandidateFeatures' fields), logged as JSON.
CANDIDATE_SIGNALS = tuple(CandidateFeatures.__dataclass_fields__)

#: The per-candidate signals :func:`derived_signals` reads from the database (not logged).
DERIVED_SIGNALS = ("names_other_project", "shares_project_vocabulary", "shares_other_project_vocabulary")


def derived_signals(
    conn: sqlite3.Connection,
    ids: Sequence[str],
    *,
    project: str | None,
    session_time: datetime,
    memories: Callable[[], Mapping[str, tuple[str | None, str]]] | None = None,
    vocabulary: VocabularyCache | None = None,
) -> dict[str, dict[str, Any]]:
    """Signals of the candidates ``ids`` derived from the database as of ``session_time``.

    ``names_other_project``: the memory is stored under a project other than ``project``, or
    its text names (:func:`memlane.predictor.features.project_name`, case-insensitive
    substring) a project other than ``project`` in which a session started before
    ``session_time``. False for every candidate when ``project`` is None (no project to
    differ from).

    Scoring (the sidecar's ``score``) and training (:func:`load_sessions`) call this with the
    session's logged local start time, so both see the same projects: a session's own row
    and later sessions never count.

    Args:
        conn: a connection to the daemon's database (read-only is enough).
        ids: candidate memory ids (unknown ids get False).
        project: the session's project.
        session_time: the session's start (aware; naive = UTC), compared with
            ``sessions.started_at``.
        memories: returns ``{memory_id: (its project, its content)}`` for ``ids`` when the
            caller reads those rows anyway (the sidecar); called only when there is a project.
            None: read here.
        vocabulary: a cache that lives across calls (the sidecar's, synced before each score
            request; one per :func:`load_sessions`, synced once), synced with ``conn`` by the
            caller. None: a new one, read here (every memory).

    Returns:
        ``{memory_id: {signal: bool}}`` with the :data:`DERIVED_SIGNALS` for every id in ``ids``.
    """
    from memlane.config.clock import to_iso

    out: dict[str, dict[str, Any]] = {m: dict.fromkeys(DERIVED_SIGNALS, False) for m in ids}
    if project is None or not ids:
        return out
    own = project_name(project)
    before = to_iso(session_time)
    known = sess_sql.projects_started_before(conn, before)
    cache = vocabulary
    if cache is None:
        cache = VocabularyCache()
        cache.sync(conn)
    for mid, (mine, other) in cache.signals(ids, project=project, cutoff=before, known_projects=known).items():
        out[mid]["shares_project_vocabulary"] = mine
        out[mid]["shares_other_project_vocabulary"] = other
    names = sorted({n for p in known if p != project and (n := project_name(p)) is not None and n != own})
    rows = memories() if memories is not None else mem_sql.projects_and_contents(conn, ids)
    for mid, (stored, content) in rows.items():
        if mid in out:
            text = (content or "").lower()
            out[mid]["names_other_project"] = bool(stored is not None and stored != project) or any(
                n in text for n in names
            )
    return out


def with_query_coverage(raw: Sequence[Mapping[str, Any]], context: str, texts: Sequence[str]) -> list[dict[str, Any]]:
    """The logged signals ``raw`` ([n] dicts), with ``query_coverage`` computed where it is missing.

    Sessions logged before schema v6 lack the signal; it is a function of the session's stored
    context and each memory's text (:func:`memlane.predictor.coverage.query_coverage`, as the
    daemon computes it when it logs), so training gives them the value scoring would have.
    A logged value is kept as logged.

    Raises:
        ValueError: ``raw`` and ``texts`` differ in length.
    """
    if len(raw) != len(texts):
        raise ValueError("raw signals and texts must have the same length")
    out = [dict(r) for r in raw]
    if any("query_coverage" not in r for r in out):
        for r, c in zip(out, query_coverage(context or "", texts)):
            r.setdefault("query_coverage", c)
    return out


def signals_to_features(raw: Mapping[str, Any], session_gap_hours: float) -> CandidateFeatures:
    """Rebuild :class:`CandidateFeatures` from logged JSON (unknown keys ignored).

    Raises:
        ValueError: a required signal is missing or not a number.
    """
    try:
        return CandidateFeatures(
            age_days=float(raw["age_days"]),
            importance=float(raw["importance"]),
            access_count=int(raw["access_count"]),
            session_gap_hours=float(session_gap_hours),
            is_embedded=bool(raw["is_embedded"]),
            is_superseded=bool(raw.get("is_superseded", False)),
            baseline_score=float(raw.get("baseline_score", 0.0)),
            baseline_rank=None if raw.get("baseline_rank") is None else int(raw["baseline_rank"]),
            context_similarity=None if raw.get("context_similarity") is None else float(raw["context_similarity"]),
            pinned=bool(raw.get("pinned", False)),
            bm25_score=None if raw.get("bm25_score") is None else float(raw["bm25_score"]),
            vector_score=None if raw.get("vector_score") is None else float(raw["vector_score"]),
            mentions_project=bool(raw.get("mentions_project", False)),
            names_other_project=bool(raw.get("names_other_project", False)),
            shares_project_vocabulary=bool(raw.get("shares_project_vocabulary", False)),
            shares_other_project_vocabulary=bool(raw.get("shares_other_project_vocabulary", False)),
            query_coverage=float(raw.get("query_coverage") or 0.0),
            content_chars=int(raw.get("content_chars") or 0),
            phase_weight=1.0 if raw.get("phase_weight") is None else float(raw["phase_weight"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad candidate signals {dict(raw)!r}: {exc}") from exc


def _vector(blob: bytes | None, native_dim: int) -> np.ndarray | None:
    if blob is None:
        return None
    v = np.frombuffer(blob, dtype="<f4")
    return v if v.shape[0] == native_dim else None


def build_session(
    *,
    candidates: Sequence[Mapping[str, Any]],
    session_time: datetime,
    session_gap_hours: float,
    candidate_vectors: Sequence[np.ndarray | None],
    candidate_texts: Sequence[str],
    context_vector: np.ndarray | None,
    context_text: str,
    project: str | None,
    native_dim: int,
    labels: Sequence[float] | np.ndarray | None = None,
    confidence: float = 1.0,
    session_id: str = "",
) -> Session:
    """One :class:`Session` from raw signals (the shared scoring/training constructor).

    Args:
        candidates: ``n`` raw signal dicts (:data:`CANDIDATE_SIGNALS`).
        session_time: the session's local start time (time-of-day features).
        session_gap_hours: hours since the previous session.
        candidate_vectors: ``n`` content vectors ``[native_dim]`` or None (text path).
        candidate_texts: ``n`` memory texts (the text path where the vector is None, and
            ``log_content_chars``: their length in characters on every row).
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
    # log_content_chars (schema v7) counts the text both paths hold here, never a logged value.
    candidates = [{**raw, "content_chars": len(text or "")} for raw, text in zip(candidates, candidate_texts)]
    embedded = np.array([v is not None and v.shape[0] == native_dim for v in candidate_vectors], dtype=bool)
    matrix = feature_matrix_from_signals(
        candidates, is_embedded=embedded.tolist(), session_gap_hours=session_gap_hours, session_time=session_time
    )
    if matrix is None:  # a missing, malformed or non-finite signal: the checked path names it
        feats = [
            signals_to_features({**raw, "is_embedded": bool(emb)}, session_gap_hours)
            for raw, emb in zip(candidates, embedded)
        ]
        matrix = build_feature_matrix(feats, session_time)
    emb_matrix = None
    if embedded.any():
        emb_matrix = np.zeros((n, native_dim), dtype=np.float32)
        for i, v in enumerate(candidate_vectors):
            if embedded[i]:
                emb_matrix[i] = v
    texts = [t if not embedded[i] else "" for i, t in enumerate(candidate_texts)] if not embedded.all() else []
    ctx = context_vector if context_vector is not None and context_vector.shape[0] == native_dim else None
    return Session(
        features=matrix,
        labels=None if labels is None else np.asarray(labels, dtype=np.float32),
        candidate_texts=texts,
        candidate_embeddings=emb_matrix,
        candidate_is_embedded=embedded,
        context_embedding=None if ctx is None else np.asarray(ctx, dtype=np.float32),
        context_text="" if ctx is not None else (context_text or "")[:2000],
        confidence=float(confidence),
        project=project,
        session_id=session_id,
    )


def load_sessions(
    conn: sqlite3.Connection,
    *,
    embedding_model: str | None,
    native_dim: int,
    min_confidence: float,
    limit: int = 500,
    keys: Sequence[str] | None = None,
) -> list[Session]:
    """Labelled sessions from the database, newest first (``keys`` restricts to those sessions).

    Sessions whose candidates lack logged features or labels, or whose labels do not vary, are
    skipped (no ranking signal).
    """
    out: list[Session] = []
    vocabulary = VocabularyCache()  # read once; sessions come newest first, its cut-off moves back
    vocabulary.sync(conn)
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
            derived = derived_signals(
                conn, [r.memory_id for r in rows], project=s.project, session_time=when, vocabulary=vocabulary
            )
            logged = with_query_coverage([r.features or {} for r in rows], s.context or "", [r.content for r in rows])
            out.append(
                build_session(
                    candidates=[{**sig, **derived[r.memory_id]} for r, sig in zip(rows, logged)],
                    session_time=when,
                    session_gap_hours=float(sig.get("session_gap_hours", 0.0)),
                    candidate_vectors=[_vector(r.vector, native_dim) for r in rows],
                    candidate_texts=[r.content for r in rows],
                    context_vector=ctx,
                    context_text=s.context or "",
                    project=s.project,
                    native_dim=native_dim,
                    labels=labels,
                    confidence=s.confidence,
                    session_id=s.session_key,
                )
            )
        except ValueError:
            continue  # one malformed session never blocks training on the others
    return out
