"""The versioned feature schema shared by training and scoring.

Seed "Model: Cross-Attention Memory Scorer" -> "Additional scoring signals" lists the 12
signals concatenated before the final gate; memlane adds four signals of its own baseline
recall (its score, its rank, the candidate's similarity to the session context, pinned).
A checkpoint records :data:`SCHEMA_VERSION` and :data:`SCHEMA_HASH`; a model is never served
a feature matrix built by another schema (see :mod:`memlane.predictor.checkpoint`).

Changing :data:`FEATURE_NAMES` (order included) or the scaling in
:func:`build_feature_matrix` means bumping :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

__all__ = [
    "CURRENT_SCHEMA",
    "FEATURE_INDEX",
    "FEATURE_NAMES",
    "NUM_FEATURES",
    "SCHEMA_HASH",
    "SCHEMA_VERSION",
    "CandidateFeatures",
    "FeatureSchema",
    "build_feature_matrix",
    "feature_matrix_from_signals",
    "project_name",
]

SCHEMA_VERSION = "8"

#: Column order of the feature matrix ``[n_candidates, NUM_FEATURES]``.
FEATURE_NAMES: tuple[str, ...] = (
    "log_age_days",  # log(1 + age in days)
    "importance",  # memory importance as stored, nominally [0, 1]
    "log_access_count",  # log(1 + access count)
    "tod_sin",  # time of day of the session, sin/cos of 2*pi*(hours/24)
    "tod_cos",
    "dow_sin",  # day of week of the session (Monday=0), sin/cos of 2*pi*(day/7)
    "dow_cos",
    "moy_sin",  # month of year of the session (January=0), sin/cos of 2*pi*(month/12)
    "moy_cos",
    "log_session_gap_hours",  # log(1 + hours since the previous session)
    "is_embedded",  # 1 when the candidate is scored from its stored embedding
    "is_superseded",  # 1 when the memory was superseded or deprecated
    "baseline_score",  # the baseline recall's own score for the candidate
    "baseline_rank_inv",  # 1 / (1 + 0-based baseline rank); 0 when unranked
    "context_similarity",  # cosine similarity of the candidate to the session context
    "pinned",  # 1 when the user pinned the memory
    "bm25_score",  # the BM25 leg's normalised score in [0, 1]; 0 when the leg did not rank it
    "vector_score",  # the vector leg's score (cosine); 0 when the leg did not rank it
    "mentions_project",  # 1 when the memory belongs to or names the session's project
    "names_other_project",  # 1 when the memory is stored under or names another project of the user
    "shares_project_vocabulary",  # 1 when a memory naming no project uses words only the session's project's notes use
    "shares_other_project_vocabulary",  # 1 when it uses words only another project's notes use
    "query_coverage",  # share of the session context's stemmed query terms the memory's own text holds, [0, 1]
    "log_content_chars",  # log(1 + characters of the memory's text) / CONTENT_CHARS_LOG_SCALE
    "phase_weight",  # the session phase's weight of the memory's type (0.3 to 1.5); 1 when no phase is known
)
NUM_FEATURES = len(FEATURE_NAMES)
#: ``log_content_chars = log(1 + chars) / CONTENT_CHARS_LOG_SCALE``: a memory of ~400 characters
#: scores ~1.0, the range of the other non-indicator features.
CONTENT_CHARS_LOG_SCALE = 6.0
FEATURE_INDEX: dict[str, int] = {name: i for i, name in enumerate(FEATURE_NAMES)}


def _schema_hash(version: str, names: Sequence[str]) -> str:
    payload = json.dumps({"version": version, "names": list(names)}, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


#: First 16 hex chars of sha256 over the version and the ordered names.
SCHEMA_HASH = _schema_hash(SCHEMA_VERSION, FEATURE_NAMES)


@dataclass(frozen=True)
class FeatureSchema:
    """A feature schema as recorded in a checkpoint (version, hash, ordered names)."""

    version: str
    hash: str
    names: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"version": self.version, "hash": self.hash, "names": list(self.names)}

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> FeatureSchema:
        names = raw.get("names") or ()
        return cls(version=str(raw["version"]), hash=str(raw["hash"]), names=tuple(names))  # type: ignore[arg-type]

    def describe(self) -> str:
        return f"v{self.version} (hash {self.hash}, {len(self.names)} features)"


CURRENT_SCHEMA = FeatureSchema(SCHEMA_VERSION, SCHEMA_HASH, FEATURE_NAMES)


@dataclass(frozen=True)
class CandidateFeatures:
    """Raw, unscaled signals of one candidate memory for one session.

    Attributes:
        age_days: days since the memory was created (float, >= 0; negative clock skew is
            clamped to 0).
        importance: stored importance, nominally [0, 1].
        access_count: times the memory was recalled (count, >= 0).
        session_gap_hours: hours since the previous session (same value for every
            candidate of a session; >= 0).
        is_embedded: the candidate has a stored embedding (scored on the embedding path).
        is_superseded: the memory was superseded or deprecated (seed "Negative Memory Signals").
        baseline_score: the baseline recall's score (hybrid BM25 + vector), unitless.
        baseline_rank: 0-based rank in the baseline's list; ``None`` when the baseline did
            not rank it.
        context_similarity: cosine similarity of the candidate embedding to the session
            context embedding, [-1, 1]; ``None`` when either embedding is missing (-> 0).
        pinned: the user pinned the memory.
        bm25_score: the recall's BM25 leg score in [0, 1] (None: not ranked by that leg).
        vector_score: the recall's vector leg score (None: not ranked by that leg).

        mentions_project: the memory is stored under the session's project or its text names
            the project (e.g. "acme-api" for /home/me/src/acme-api).
        names_other_project: the memory is stored under a project other than the session's, or
            its text names one (a project the user started a session in before this session;
            :func:`memlane.predictor.dataset.derived_signals`).
        shares_project_vocabulary: the memory is stored under no project and names none, and
            its text contains a token that only memories of the session's project contain
            (:mod:`memlane.predictor.vocabulary`).
        shares_other_project_vocabulary: the same, for a token of another project.
        query_coverage: the share of the session context's query terms (stemmed, stop words
            out) that the memory's own text contains, [0, 1] (:mod:`memlane.predictor.coverage`);
            0 when the context has no term.
        content_chars: characters of the memory's text (>= 0). Not logged:
            :func:`memlane.predictor.dataset.build_session` counts it from the candidate texts
            on both paths (0 for a memory whose text is gone).
        phase_weight: ``PHASE_WEIGHTS[phase][type]`` of the session's universal phase and the
            memory's type (:mod:`memlane.v3.methodology.phases`, seed memory-system-v3-design.md
            section 7); 1.0 when the session has no phase. Logged with the candidate's signals.

    Schema v8 added ``phase_weight``: the phase is the same for every candidate of a session, so
    a per-session phase column could not reorder a slate; its interaction with the memory's type
    can, and the seed's table is that interaction (the model learns how far to trust it). It is
    1.0 for every session logged before phases existed.

    Schema v7 added ``log_content_chars``: a one-line remark ("Thanks!", "ok, will do") rarely
    holds what a later session needs, a memory that states facts is longer; the share of query
    terms a memory holds does not say how much else it holds (LETOR's "stream length"; chosen
    on a validation split the reported numbers do not use: docs/predictor.md, "Content length").
    Schema v6 added ``query_coverage``: the recall matches a memory through its own text and the
    context indexed with it, and only this says which of the query's terms the memory itself
    holds (docs/predictor.md, "Query-term coverage").
    Schema v5 added the two vocabulary flags: about a third of the candidates of a user's
    vague session starts are notes of some project that name none ("Deploys go out via make
    release to fly.io"), and only their words say which project (docs/predictor.md).
    Schema v4 added ``names_other_project``: when a vague start ("fix the failing build") ranks
    every project's notes on the topic alike, a note naming another project is the wrong
    project's, while a note naming none (a general note, a preference) may apply anywhere;
    ``mentions_project`` alone cannot tell those two apart. Schema v3 added ``mentions_project``: a session that starts vaguely ("fix the failing
    build") says nothing about its project in the text the baseline searches with, while the
    user's memories about that project name it. Schema v2 added the two recall legs: a relevance pool's hybrid score mixes them with a
    fixed weight (alpha 0.7); given both, the model can learn a better mix for its user.
    """

    age_days: float
    importance: float
    access_count: int
    session_gap_hours: float
    is_embedded: bool
    is_superseded: bool = False
    baseline_score: float = 0.0
    baseline_rank: int | None = None
    context_similarity: float | None = None
    pinned: bool = False
    bm25_score: float | None = None
    vector_score: float | None = None
    mentions_project: bool = False
    names_other_project: bool = False
    shares_project_vocabulary: bool = False
    shares_other_project_vocabulary: bool = False
    query_coverage: float = 0.0
    content_chars: int = 0
    phase_weight: float = 1.0


def project_name(project: str | None) -> str | None:
    """The name a memory would use for ``project`` (the ``mentions_project`` and
    ``names_other_project`` features): the last path component, lower-cased
    (``/home/me/src/acme-api`` -> ``acme-api``); None when shorter than 3 characters."""
    if not project:
        return None
    name = project.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1].strip().lower()
    return name if len(name) >= 3 else None


def _cyclic(fraction: float) -> tuple[float, float]:
    angle = 2.0 * math.pi * fraction
    return math.sin(angle), math.cos(angle)


def _time_features(session_time: datetime) -> list[float]:
    hours = session_time.hour + session_time.minute / 60.0 + session_time.second / 3600.0
    return [
        *_cyclic(hours / 24.0),
        *_cyclic(session_time.weekday() / 7.0),
        *_cyclic((session_time.month - 1) / 12.0),
    ]


def _finite(value: float, field: str, index: int) -> float:
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"candidate {index}: {field} is not finite ({value!r})")
    return out


def build_feature_matrix(candidates: Sequence[CandidateFeatures], session_time: datetime) -> np.ndarray:
    """Scale the candidates' signals into the model's feature matrix.

    Scaling (seed "Additional scoring signals"): counts and durations are log-scaled as
    ``log(1 + x)`` (the seed writes ``log(age_days)``; ``log1p`` keeps a memory created
    today finite), cyclic times as sin/cos pairs, indicators as 0/1, the baseline rank as
    ``1 / (1 + rank)``.

    Scoring and training build the same matrix straight from logged signal dicts with
    :func:`feature_matrix_from_signals` (vectorised) and come here, value by value, only when
    that finds a bad value.

    Args:
        candidates: one :class:`CandidateFeatures` per candidate, in slate order.
        session_time: session start; time of day, weekday and month are read from its wall
            clock as given, so pass the user's local time. Identical for every row.

    Returns:
        float32 array, shape ``[len(candidates), NUM_FEATURES]``, columns in
        :data:`FEATURE_NAMES` order; ``[0, NUM_FEATURES]`` for no candidates.

    Raises:
        ValueError: a non-finite number in any field (the message names field and index).
    """
    rows = np.zeros((len(candidates), NUM_FEATURES), dtype=np.float32)
    times = _time_features(session_time)
    for i, c in enumerate(candidates):
        age = max(_finite(c.age_days, "age_days", i), 0.0)
        access = max(_finite(c.access_count, "access_count", i), 0.0)
        gap = max(_finite(c.session_gap_hours, "session_gap_hours", i), 0.0)
        rank_inv = 0.0 if c.baseline_rank is None else 1.0 / (1.0 + max(int(c.baseline_rank), 0))
        sim = 0.0 if c.context_similarity is None else _finite(c.context_similarity, "context_similarity", i)
        rows[i] = [
            math.log1p(age),
            _finite(c.importance, "importance", i),
            math.log1p(access),
            *times,
            math.log1p(gap),
            float(bool(c.is_embedded)),
            float(bool(c.is_superseded)),
            _finite(c.baseline_score, "baseline_score", i),
            rank_inv,
            sim,
            float(bool(c.pinned)),
            0.0 if c.bm25_score is None else _finite(c.bm25_score, "bm25_score", i),
            0.0 if c.vector_score is None else _finite(c.vector_score, "vector_score", i),
            float(bool(c.mentions_project)),
            float(bool(c.names_other_project)),
            float(bool(c.shares_project_vocabulary)),
            float(bool(c.shares_other_project_vocabulary)),
            _finite(c.query_coverage, "query_coverage", i),
            math.log1p(max(_finite(c.content_chars, "content_chars", i), 0.0)) / CONTENT_CHARS_LOG_SCALE,
            _finite(c.phase_weight, "phase_weight", i),
        ]
    return rows


def feature_matrix_from_signals(
    signals: Sequence[Any], *, is_embedded: Sequence[bool], session_gap_hours: float, session_time: datetime
) -> np.ndarray | None:
    """The feature matrix straight from logged signal dicts, or None to take the checked path.

    Equals ``build_feature_matrix([signals_to_features({**raw, "is_embedded": e}, gap) ...])``
    (:mod:`memlane.predictor.dataset`) value for value, without building a
    :class:`CandidateFeatures` per candidate: the same ``float`` / ``int`` / ``bool``
    conversions, the same defaults for missing optional keys. Used on every score request
    and every session loaded for training.

    Args:
        signals: ``n`` mappings with the keys of :class:`CandidateFeatures` (``age_days``,
            ``importance`` and ``access_count`` required).
        is_embedded: ``n`` flags (the candidate has a vector of the model's width).
        session_gap_hours: hours since the previous session, for every row.
        session_time: the session's local start (time features).

    Returns:
        float32 ``[n, NUM_FEATURES]``, or None when any value is missing, not a number or not
        finite: the caller then builds the rows one by one, which raises naming the value.
    """
    n = len(signals)
    if len(is_embedded) != n:
        return None

    def opt(key: str) -> list[float]:
        return [0.0 if (v := r.get(key)) is None else float(v) for r in signals]

    try:
        gap = float(session_gap_hours)
        cols: dict[str, list[Any]] = {
            "age_days": [float(r["age_days"]) for r in signals],
            "importance": [float(r["importance"]) for r in signals],
            "access_count": [int(r["access_count"]) for r in signals],
            "session_gap_hours": [gap] * n,
            "is_embedded": [bool(e) for e in is_embedded],
            "is_superseded": [bool(r.get("is_superseded", False)) for r in signals],
            "baseline_score": [float(r.get("baseline_score", 0.0)) for r in signals],
            "baseline_rank_inv": [
                0.0 if (k := r.get("baseline_rank")) is None else 1.0 / (1.0 + max(int(k), 0)) for r in signals
            ],
            "context_similarity": opt("context_similarity"),
            "pinned": [bool(r.get("pinned", False)) for r in signals],
            "bm25_score": opt("bm25_score"),
            "vector_score": opt("vector_score"),
            "mentions_project": [bool(r.get("mentions_project", False)) for r in signals],
            "names_other_project": [bool(r.get("names_other_project", False)) for r in signals],
            "shares_project_vocabulary": [bool(r.get("shares_project_vocabulary", False)) for r in signals],
            "shares_other_project_vocabulary": [bool(r.get("shares_other_project_vocabulary", False)) for r in signals],
            "query_coverage": opt("query_coverage"),
            "content_chars": opt("content_chars"),
            "phase_weight": [1.0 if (v := r.get("phase_weight")) is None else float(v) for r in signals],
        }
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return None
    return _matrix_from_columns(cols, _time_features(session_time))


def _matrix_from_columns(cols: dict[str, list[Any]], times: list[float]) -> np.ndarray | None:
    """Assemble ``[n, NUM_FEATURES]`` float32 from per-signal columns of Python numbers (rank
    already inverted, None already 0); None when a numeric column holds a non-finite value."""
    numeric = {
        k: np.array(cols[k], dtype=np.float64)
        for k in (
            "age_days",
            "importance",
            "access_count",
            "session_gap_hours",
            "baseline_score",
            "context_similarity",
            "bm25_score",
            "vector_score",
            "query_coverage",
            "content_chars",
            "phase_weight",
        )
    }
    if not all(np.isfinite(v).all() for v in numeric.values()):
        return None
    n = len(cols["age_days"])
    i = FEATURE_INDEX
    rows = np.empty((n, NUM_FEATURES), dtype=np.float64)
    rows[:, i["log_age_days"]] = np.log1p(np.maximum(numeric["age_days"], 0.0))
    rows[:, i["importance"]] = numeric["importance"]
    rows[:, i["log_access_count"]] = np.log1p(np.maximum(numeric["access_count"], 0.0))
    rows[:, i["tod_sin"] : i["moy_cos"] + 1] = times
    rows[:, i["log_session_gap_hours"]] = np.log1p(np.maximum(numeric["session_gap_hours"], 0.0))
    for name in (
        "baseline_score",
        "context_similarity",
        "bm25_score",
        "vector_score",
        "query_coverage",
        "phase_weight",
    ):
        rows[:, i[name]] = numeric[name]
    rows[:, i["log_content_chars"]] = np.log1p(np.maximum(numeric["content_chars"], 0.0)) / CONTENT_CHARS_LOG_SCALE
    for name in (
        "is_embedded",
        "is_superseded",
        "baseline_rank_inv",
        "pinned",
        "mentions_project",
        "names_other_project",
        "shares_project_vocabulary",
        "shares_other_project_vocabulary",
    ):
        rows[:, i[name]] = np.array(cols[name], dtype=np.float64)
    return rows.astype(np.float32)
