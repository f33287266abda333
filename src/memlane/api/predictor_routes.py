"""/api/predictor/*: the predictor's status, comparisons, training log and a manual retrain
(predictive-memory-scorer.md "4.x New endpoints under /api/predictor/")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from memlane.container import Container
from memlane.errors import MemlaneError
from memlane.storage import predictor as pred_sql


class PredictorOff(MemlaneError):
    """The predictor does not run in this daemon (disabled in config, or a one-shot process)."""

    status = 409
    code = "predictor_off"


def router(container: Container) -> APIRouter:
    r = APIRouter(prefix="/api/predictor", tags=["predictor"])

    @r.get("/status")
    def status() -> dict[str, Any]:
        """Phase (collecting/warming/active/disabled/retraining), alpha, success-rate EMA, per-project
        slices, model version, score counters (``score_errors`` by kind in ``score_error_kinds``:
        timeout, crash, ...; ``score_timeout_ms`` in ms), ``training_runs`` (total, accepted,
        rejected and the rejected ones by reason, from the training log), the sidecar's health
        and recent errors (:meth:`memlane.services.predictor_service.PredictorService.status`).
        Without a running predictor: ``enabled`` false and the training log's ``training_runs``."""
        p = container.predictor
        if p is None:
            return {
                "enabled": False,
                "phase": "collecting",
                "alpha": 1.0,
                "reason": "predictor not running (predictor.enabled=false or not a daemon process)",
                "training_runs": container.db.read(pred_sql.training_outcomes),
            }
        return p.status()

    @r.get("/comparisons")
    def comparisons(limit: int = Query(50, ge=1, le=1000)) -> list[dict[str, Any]]:
        """The newest predictor_comparisons rows (both rankings, NDCG of each, EMA, alpha)."""
        return container.db.read(lambda c: pred_sql.comparisons(c, limit=limit))

    @r.get("/training")
    def training(limit: int = Query(50, ge=1, le=1000)) -> list[dict[str, Any]]:
        """The newest predictor_training_log rows (loss, steps, canary NDCG, gates)."""
        return container.db.read(lambda c: pred_sql.training_log(c, limit=limit))

    @r.post("/train")
    def train() -> dict[str, Any]:
        """Retrain now on the stored sessions (gated); waits for the run and returns its log row."""
        p = container.predictor
        if p is None:
            raise PredictorOff("the predictor is not running in this daemon")
        return p.retrain("manual")

    return r
