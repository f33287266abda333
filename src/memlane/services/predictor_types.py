"""The values the predictor service passes around: a candidate as the predictor sees it
(:class:`PoolMember`), one start's ranking decision (:class:`RankDecision`), one ``score``
request's outcome (:class:`ScoreResult`) and a session-end comparison (:class:`Comparison`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memlane.predictor import policy


@dataclass
class RankDecision:
    """The predictor's part of one session-start.

    Attributes:
        order: memory ids in fused order (before topic diversity), best first.
        fused: ``{memory_id: RRF score}`` (the baseline's own scores order when alpha = 1).
        predictor_scores: ``{memory_id: model score}``; empty when the predictor did not score.
        predictor_rank: ``{memory_id: 1-based predictor rank}``.
        alpha: the baseline weight used.
        phase: collecting, warming, active, disabled or retraining.
        features: ``{memory_id: raw signals}`` logged for training.
        signals: session-level signals (local time, gap hours, alpha, phase, model version).
        error: why the predictor did not score, if it did not.
        took_ms: time spent, ms.
        request: the ``score`` request params (:meth:`PredictorService.prepare`), or None when
            there is nothing to ask (no pool, predictor off). Not recorded.
    """

    order: list[str]
    fused: dict[str, float]
    predictor_scores: dict[str, float] = field(default_factory=dict)
    predictor_rank: dict[str, int] = field(default_factory=dict)
    alpha: float = 1.0
    phase: str = "collecting"
    features: dict[str, dict[str, Any]] = field(default_factory=dict)
    signals: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    took_ms: float = 0.0
    request: dict[str, Any] | None = None


@dataclass(frozen=True)
class ScoreResult:
    """One ``score`` request's outcome.

    Attributes:
        scores: ``{memory_id: model score}`` of every candidate; empty on failure.
        rank: ``{memory_id: 1-based predictor rank}`` (stable: equal scores keep baseline order).
        ranked: memory ids by predictor rank, best first.
        error: ``"<ExceptionType>: <message>"`` when the predictor did not score.
        took_ms: the request's duration as the daemon saw it, ms.
    """

    scores: dict[str, float]
    rank: dict[str, int]
    ranked: list[str]
    error: str | None = None
    took_ms: float = 0.0


@dataclass
class Comparison:
    """A session-end comparison computed in memory (:meth:`PredictorService.prepare_comparison`):
    the ``predictor_comparisons`` row (written only when the predictor scored the session,
    ``scored``), the policy state to save, and what the policy decided."""

    session_key: str
    row: dict[str, Any]
    scored: bool
    state: dict[str, Any]
    outcome: policy.ComparisonOutcome
    at: str


@dataclass(frozen=True)
class PoolMember:
    """A candidate as the predictor sees it: baseline score and rank (1-based), similarity.

    ``prior_score`` / ``prior_rank`` (1-based): the first stage the predictor's
    ``baseline_score`` / ``baseline_rank`` signals carry when it is not the baseline (the
    shipped base of a learned relevance start); None: the baseline's. The pool's order (the
    ranking RRF fuses with and alpha is earned against) stays the baseline's.
    """

    memory_id: str
    seq: int
    baseline_score: float
    baseline_rank: int
    similarity: float | None
    bm25_score: float | None = None
    vector_score: float | None = None
    prior_score: float | None = None
    prior_rank: int | None = None
