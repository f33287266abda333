"""Maintenance endpoints (memory-pipeline-v2.md "Maintenance Worker"):

* ``GET /api/diagnostics`` -- the health report (score in [0, 1]), recommendations, halted
  actions, each repair's cooldown/budget state and the last cycle.
* ``POST /api/repair/{action}`` -- run one repair now, within its cooldown and hourly budget
  (429 ``rate_limited`` with ``retry_after_ms`` otherwise): ``release-stale-leases``,
  ``requeue-dead-jobs``, ``check-fts-consistency``, ``trigger-retention-sweep``, ``reembed``,
  ``dedup`` (409 unless pipeline mutations and ``autonomous.allowUpdateDelete`` allow it;
  ``{"dry_run": true}`` lists the pairs only). Answers what was done.
* ``POST /api/maintenance/run`` -- one maintenance cycle now (``execute`` query: true, false,
  or absent = the configured mode).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from memlane.container import Container


class RepairIn(BaseModel):
    """Options of a repair run."""

    model_config = ConfigDict(extra="forbid", strict=True)

    dry_run: bool = Field(False, description="dedup only: report the duplicate pairs, delete nothing.")


def router(container: Container) -> APIRouter:
    """The maintenance routes over ``container.repairs`` and ``container.maintenance``."""
    r = APIRouter(tags=["maintenance"])

    @r.get("/api/diagnostics")
    def diagnostics() -> dict[str, Any]:
        """Health report, recommendations, halted actions, repair limits, last cycle, and the
        health domains (``domains``, ``score``, ``status``: memlane.observability.diagnostics)."""
        from memlane.observability.diagnostics import health_report

        report = container.maintenance.report()
        health = health_report(container, container.observability, report)
        return {
            **container.maintenance.diagnose(report),
            "domains": health["domains"],
            "score": health["score"],
            "status": health["status"],
        }

    @r.post("/api/repair/{action}")
    def repair(action: str, body: RepairIn | None = None) -> dict[str, Any]:
        """Run one repair action now (hyphens or underscores); returns ``action``, ``at`` and
        ``result`` (what it did)."""
        body = body or RepairIn()
        return container.repairs.run(action.replace("-", "_"), dry_run=body.dry_run).as_dict()

    @r.post("/api/maintenance/run")
    def run_maintenance(
        execute: bool | None = Query(None, description="true: repair; false: observe; absent: the configured mode"),
    ) -> dict[str, Any]:
        """One maintenance cycle now: scores before/after, recommendations, each action's outcome."""
        return container.maintenance.run_cycle(execute=execute)

    return r
