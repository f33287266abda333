"""The rows the predictor service writes: ``predictor_comparisons`` and ``predictor_training_log``.

Columns per predictive-memory-scorer.md "Success Rate Tracking" (comparisons) and the training
schedule's validation gates (training log: loss, steps, samples, duration, canary NDCG, its
delta, variance and top-k churn). Pure functions: the service computes, these shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["comparison_row", "training_log_row"]


def comparison_row(
    *,
    session_key: str,
    project: str | None,
    predictor: Sequence[str],
    baseline: Sequence[str],
    predictor_ndcg: float | None,
    baseline_ndcg: float | None,
    won: bool | None,
    ema_updated: bool,
    confidence: float,
    success_rate: float,
    signals: Mapping[str, Any],
    relevance: Any,
    fts_overlap: float | None,
    phase: str,
    at: str,
) -> dict[str, Any]:
    """One ``predictor_comparisons`` row.

    Args:
        predictor / baseline: the two rankings (memory ids, best first); ``predictor`` is empty
            when the predictor did not score the session (its NDCG and margin are then 0).
        predictor_ndcg / baseline_ndcg: NDCG@10 over the shared evaluation pool, or None.
        won: the comparison's outcome for the EMA (None: not comparable).
        signals: the session's logged signals (``alpha``, ``model_version``).
        relevance: the evaluation pool's relevance scores as recorded.
        fts_overlap: share of the injected memories the prompts matched, or None.
        at: ISO-8601 UTC.
    """
    scored = bool(predictor)
    return {
        "session_key": session_key,
        "project": project,
        "predictor_ndcg": predictor_ndcg if (predictor_ndcg is not None and scored) else 0.0,
        "baseline_ndcg": baseline_ndcg if baseline_ndcg is not None else 0.0,
        "predictor_won": None if won is None else int(won),
        "margin": ((predictor_ndcg or 0.0) - (baseline_ndcg or 0.0)) if scored else 0.0,
        "scorer_confidence": confidence,
        "ema_updated": int(ema_updated),
        "success_rate": success_rate,
        "alpha": float(signals.get("alpha", 1.0)),
        "predictor_top_ids": list(predictor[:10]),
        "baseline_top_ids": list(baseline[:10]),
        "relevance_scores": relevance,
        "fts_overlap_score": fts_overlap,
        "model_version": signals.get("model_version"),
        "predictor_state": phase,
        "created_at": at,
    }


def training_log_row(
    report: Mapping[str, Any],
    *,
    model_version: int,
    trigger: str,
    accepted: bool,
    drift_resets: int,
    error: str | None,
    at: str,
) -> dict[str, Any]:
    """One ``predictor_training_log`` row from a ``train_from_db`` report (``{}`` when the
    sidecar never ran it); ``duration_ms`` in ms, ``at`` ISO-8601 UTC."""
    return {
        "model_version": model_version,
        "trigger": trigger,
        "accepted": int(accepted),
        "loss": report.get("loss"),
        "steps": int(report.get("steps") or 0),
        "sample_count": int(report.get("sample_count") or 0),
        "duration_ms": float(report.get("duration_ms") or 0),
        "stop_reason": report.get("stop_reason"),
        "gates": report.get("gates"),
        "canary_ndcg": report.get("canary_ndcg"),
        "canary_ndcg_delta": report.get("canary_ndcg_delta"),
        "canary_score_variance": report.get("canary_score_variance"),
        "canary_topk_churn": report.get("canary_topk_churn"),
        "drift_resets": drift_resets,
        "error": error,
        "created_at": at,
    }
