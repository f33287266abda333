"""Observability endpoints (predictive-memory-scorer.md Phase 4):

* ``GET /api/diagnostics/{domain}``: one health domain (storage, index, queue, provider,
  predictor, workers, connector); ``GET /api/diagnostics`` includes them all under ``domains``.
* ``GET /api/analytics/latency[?operation=]``: p50 / p95 / p99 (ms) and per-minute points of
  every timed operation.
* ``GET /api/analytics/errors[?stage=&code=&limit=&after_id=]``: the error ring, newest first.
* ``GET /api/analytics/logs[?category=&level=&q=&limit=&offset=]``: the log ring (the daemon's
  newest log records as structured events), newest first, one page with the total.
* ``GET /api/timeline/{key}``: a session's or a memory's events in order.
* ``GET /metrics``: Prometheus text exposition.

All need the token (or the dashboard's session cookie), like every route but ``/health``.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from memlane.errors import NotFound
from memlane.observability import metrics, timeline
from memlane.observability.diagnostics import DOMAINS, health_report


def router(container: Any) -> APIRouter:
    """The observability routes over ``container`` and its hub (``container.observability``)."""
    obs = container.observability
    r = APIRouter(tags=["observability"])

    @r.get("/api/diagnostics/{domain}")
    def diagnostics_domain(domain: str) -> dict[str, Any]:
        """One health domain: ``score`` in [0, 1] (None when disabled), ``status`` and its details."""
        if domain not in DOMAINS:
            raise NotFound(
                f"no diagnostics domain {domain!r:.40}; domains: {', '.join(DOMAINS)}",
                details={"domains": list(DOMAINS)},
            )
        return {"domain": domain, **health_report(container, obs)["domains"][domain]}

    @r.get("/api/analytics/latency")
    def latency(
        operation: str | None = Query(None, max_length=64, description="One operation only."),
        minutes: int = Query(60, ge=1, le=60, description="Minutes of per-minute points."),
    ) -> dict[str, Any]:
        """Every timed operation's count, mean, max, last and p50 / p95 / p99 (ms) over its last
        2,048 durations, and per-minute p50 / p95 points for sparklines."""
        report = obs.latency.report(sparkline_minutes=minutes)
        if operation is not None:
            if operation not in report["operations"]:
                raise NotFound(f"no operation {operation!r:.64}", details={"operations": list(report["operations"])})
            report["operations"] = {operation: report["operations"][operation]}
        return report

    @r.get("/api/analytics/errors")
    def errors(
        stage: str | None = Query(None, max_length=64),
        code: str | None = Query(None, max_length=64),
        limit: int = Query(100, ge=1, le=500),
        after_id: int = Query(0, ge=0, le=2**62),
    ) -> dict[str, Any]:
        """The error ring (500 entries), newest first, with counts by stage."""
        return {
            "errors": obs.errors.recent(stage=stage, code=code, limit=limit, after_id=after_id),
            "by_stage": obs.errors.by_stage(),
            "totals": dict(obs.errors.totals),
            "size": len(obs.errors),
        }

    @r.get("/api/analytics/logs")
    def logs(
        category: str | None = Query(None, max_length=64, description="e.g. predictor, pipeline, drift."),
        level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] | None = Query(
            None, description="This level and above."
        ),
        q: str | None = Query(None, max_length=200, description="Words in the message or the logger's name."),
        limit: int = Query(50, ge=1, le=500),
        offset: int = Query(0, ge=0, le=10_000),
    ) -> dict[str, Any]:
        """The log ring (the daemon's newest 2,000 log records at its log level), newest first:
        ``items`` (``id, at, level, category, logger, message, exception``), ``total`` matching,
        and the records by category."""
        items, total = obs.logs.page(category=category, level=level, q=q, offset=offset, limit=limit)
        return {"items": items, "total": total, "limit": limit, "offset": offset, "categories": obs.logs.categories()}

    @r.get("/api/timeline/{key:path}")
    def get_timeline(key: str) -> dict[str, Any]:
        """The events of the session with this key, or of the memory with this id, oldest first."""
        return timeline.timeline(container.db, key)

    @r.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:
        """Prometheus text exposition (histograms, errors, health, counts)."""
        return Response(metrics.exposition(container, obs), media_type=metrics.CONTENT_TYPE)

    return r
