"""Health domains of the daemon (predictive-memory-scorer.md "4.1 Diagnostics Health Domain").

:func:`health_report` scores seven domains in [0, 1] with the seed's convention -- >= 0.8
``healthy``, 0.5-0.8 ``degraded``, < 0.5 ``unhealthy`` -- plus ``disabled`` (the subsystem
does not run here: no score, left out of the overall mean) and, for the predictor,
``cold_start``:

* ``storage``: tombstone ratio (1.0 up to 30 %, then falling to 0 at 100 %), minus 0.3 when
  storage errors reached the error ring in the last hour.
* ``index``: FTS rows in step with the memories (1.0, else 0.5 x the share in step) times the
  share of live memories with a vector of the current model.
* ``queue``: the job queue's dead-job rate and stale leases (1 - 10 x dead rate, halved with
  stale leases), as the maintenance worker scores it.
* ``provider``: the embedder and the LLM: 1.0 with no embedding/provider error in the last
  hour, 0.7 with 1-4, 0.3 with 5 or more; ``disabled`` when neither is configured.
* ``predictor``: 0.0 when the sidecar is dead or crash-disabled; 0.6 in cold start; 0.8 once
  trained, + 0.2 x (success rate - 0.4) / 0.6 when the success rate passes 0.4; - 0.2 when the
  score p95 passes ``scoreTimeoutMs``; - 0.1 while drifting; - 0.2 after a crash in the last
  hour. ``disabled`` when it does not run in this daemon.
* ``workers``: the share of background workers that are healthy (running once started, and
  fewer than 3 failed ticks in a row).
* ``connector``: the hook routes' answers in the last hour: 1 - 2 x their error rate
  (``disabled``-free: 1.0 before any hook was seen).

The overall ``score`` is the mean of the scored domains.
"""

from __future__ import annotations

import os
from typing import Any

from memlane.config.clock import now_iso
from memlane.observability.hub import Observability
from memlane.pipeline.diagnostics import DiagnosticsReport, build_recommendations, get_diagnostics
from memlane.storage import sessions as sess_sql

#: Domains in display order.
DOMAINS = ("storage", "index", "queue", "provider", "predictor", "workers", "connector")
HEALTHY, DEGRADED = 0.8, 0.5
HOUR_S = 3600.0


def status_of(score: float | None) -> str:
    """``healthy`` (>= 0.8), ``degraded`` (>= 0.5), ``unhealthy``, or ``disabled`` (None)."""
    if score is None:
        return "disabled"
    return "healthy" if score >= HEALTHY else "degraded" if score >= DEGRADED else "unhealthy"


def _domain(score: float | None, details: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    s = None if score is None else round(max(0.0, min(1.0, score)), 4)
    return {"score": s, "status": status or status_of(s), **details}


def _file_size(path: Any) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def predictor_domain(container: Any, obs: Observability) -> dict[str, Any]:
    """The ``predictor`` domain with the seed's ``PredictorHealth`` fields (snake_case)."""
    pred = container.predictor
    settings = container.settings.predictor
    if pred is None:
        scored = container.db.read(sess_sql.count_scored_sessions)
        return _domain(
            None,
            {
                "sidecar_alive": False,
                "sidecar_pid": None,
                "training_sessions": scored,
                "min_training_sessions": settings.min_training_sessions,
                "reason": "the predictor does not run in this daemon (predictor.enabled false, "
                "or not a daemon process)",
            },
        )
    status = pred.status()
    st = status["state"]
    sidecar = status.get("sidecar") or {}
    lat = obs.latency.get("predictor_score").summary()
    crashes = int(sidecar.get("crashes_last_hour") or 0)
    alive = bool(sidecar.get("alive"))
    disabled = bool(sidecar.get("disabled"))
    phase = status["phase"]
    timeout_ms = float(status.get("score_timeout_ms") or settings.score_timeout_ms)
    p95 = lat["p95"]
    notes: list[str] = []
    lifecycle = sidecar.get("state")  # services.predictor_scoring.SidecarLifecycle
    if lifecycle == "stopped":  # predictor.enabled turned off in the running daemon: not a fault
        return _domain(
            None,
            {
                "sidecar_alive": alive,
                "sidecar_pid": sidecar.get("pid"),
                "phase": phase,
                "training_sessions": st.get("training_sessions", 0),
                "min_training_sessions": settings.min_training_sessions,
                "reason": "the predictor is disabled (predictor.enabled false)",
            },
        )
    if lifecycle == "dormant" and not disabled:
        score = 0.6
        notes.append(
            "no model yet: the untrained model scores in the daemon; the sidecar starts for the first training run"
        )
    elif not alive or disabled:
        score = 0.0
        notes.append("sidecar crash-disabled" if disabled else "sidecar not running")
    elif phase == "collecting":
        score = 0.6
        notes.append("cold start: collecting training data")
    else:
        rate = float(st.get("success_rate") or 0.0)
        score = 0.8 + 0.2 * max(0.0, rate - 0.4) / 0.6 if rate > 0.4 else 0.6
        if rate <= 0.4:
            notes.append(f"success rate {rate:.2f} <= 0.4")
    if alive and p95 is not None and p95 > timeout_ms:
        score -= 0.2
        notes.append(f"score p95 {p95:.0f} ms > scoreTimeoutMs {timeout_ms:.0f}")
    if st.get("drifting"):
        score -= 0.1
        notes.append("drift reset: retraining")
    if alive and crashes:
        score -= 0.2
        notes.append(f"{crashes} crash(es) in the last hour")
    score = max(0.0, score)
    label = (
        "disabled"
        if disabled
        else ("cold_start" if phase == "collecting" and (alive or lifecycle == "dormant") else status_of(score))
    )
    return _domain(
        score,
        {
            "sidecar_alive": alive,
            "sidecar_pid": sidecar.get("pid"),
            "phase": phase,
            "last_score_latency_ms": lat["last_ms"],
            "avg_score_latency_ms": lat["mean_ms"],
            "p95_score_latency_ms": p95,
            "score_timeout_ms": timeout_ms,
            "crash_count": crashes,
            "crash_disabled": disabled,
            "model_version": st.get("model_version", 0),
            "training_sessions": st.get("training_sessions", 0),
            "min_training_sessions": settings.min_training_sessions,
            "success_rate": st.get("success_rate", 0.0),
            "alpha": status.get("alpha"),
            "last_trained_at": st.get("last_trained"),
            "drift_resets": st.get("drift_resets", 0),
            "scorer_drift_signal": st.get("margin_ema", 0.0),
            "project_success_rates": {k: v[0] for k, v in (st.get("project_rates") or {}).items()},
            "recent_errors": obs.errors.count_since(HOUR_S, stage="predictor"),
            "notes": notes,
        },
        status=label,
    )


def health_report(container: Any, obs: Observability, report: DiagnosticsReport | None = None) -> dict[str, Any]:
    """Every domain (see the module docstring): ``{"at", "score", "status", "domains": {name:
    {"score", "status", ...details}}}``. One read of the counts (none when ``report``, the
    maintenance diagnostics read moments ago, is given); never raises for a subsystem that is off.

    Raises:
        StorageError: the database could not be read.
    """
    at = now_iso()
    emb = container.embedder
    if report is None:
        report = get_diagnostics(container.db, now=at, model=emb.model_id if emb is not None else None)
    c = report.counts
    domains: dict[str, dict[str, Any]] = {}
    storage_errors = obs.errors.count_since(HOUR_S, stage="storage")
    db_path = container.settings.db_path
    domains["storage"] = _domain(
        report.storage_score - (0.3 if storage_errors else 0.0),
        {
            "memories_total": c.memories_total,
            "memories_live": c.memories_live,
            "memories_deleted": c.memories_deleted,
            "tombstone_ratio": report.tombstone_ratio,
            "db_bytes": _file_size(db_path),
            "wal_bytes": _file_size(str(db_path) + "-wal"),
            "errors_last_hour": storage_errors,
        },
    )
    domains["index"] = _domain(
        report.index_score * report.embedding_score,
        {
            "fts_rows": c.fts_rows,
            "fts_in_sync": report.fts_in_sync,
            "missing_vectors": c.missing_vectors,
            "embedding_coverage": report.embedding_score,
            "embedding_model": emb.model_id if emb is not None else None,
        },
    )
    domains["queue"] = _domain(
        report.queue_score,
        {
            "jobs_total": c.jobs_total,
            "jobs_pending": c.jobs_pending,
            "jobs_dead": c.jobs_dead,
            "dead_rate": report.dead_rate,
            "stale_leases": c.stale_leases,
        },
    )
    prov_errors = obs.errors.count_since(HOUR_S, stage="embedding") + obs.errors.count_since(HOUR_S, stage="provider")
    llm = container.settings.llm
    configured = emb is not None or container.llm is not None
    domains["provider"] = _domain(
        (1.0 if prov_errors == 0 else 0.7 if prov_errors < 5 else 0.3) if configured else None,
        {
            "embedding_provider": container.settings.embedding.provider,
            "llm_provider": llm.provider,
            "errors_last_hour": prov_errors,
        },
    )
    domains["predictor"] = predictor_domain(container, obs)
    workers = container.workers.status()
    started = container.workers.started
    unhealthy = [
        w["name"] for w in workers if w.get("consecutive_failures", 0) >= 3 or (started and not w.get("running"))
    ]
    domains["workers"] = _domain(
        (1.0 - len(unhealthy) / len(workers)) if workers and started else None,
        {
            "started": started,
            "count": len(workers),
            "unhealthy": unhealthy,
            "failing": {w["name"]: w.get("last_error") for w in workers if w.get("consecutive_failures", 0)},
        },
    )
    hooks = sum(obs.latency.get(op).count_since(HOUR_S) for op in ("session_start", "prompt_submit", "session_end"))
    hook_errors = obs.errors.count_since(HOUR_S, stage="connector")
    rate = hook_errors / max(hooks, hook_errors, 1)
    domains["connector"] = _domain(
        1.0 - 2.0 * rate,
        {"hook_requests_last_hour": hooks, "errors_last_hour": hook_errors, "last_hook_at": obs.last_hook_at},
    )
    scored = [d["score"] for d in domains.values() if d["score"] is not None]
    overall = round(sum(scored) / len(scored), 4) if scored else None
    return {
        "at": at,
        "score": overall,
        "status": status_of(overall),
        "domains": domains,
        "thresholds": {"healthy": HEALTHY, "degraded": DEGRADED},
        "recommendations": [{"action": r.action, "reason": r.reason} for r in build_recommendations(report)],
    }
