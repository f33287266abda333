"""Pipeline v2 status and jobs: ``GET /api/pipeline/status``, ``GET /api/memory/jobs/{id}``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path

from memlane.container import Container
from memlane.errors import NotFound
from memlane.storage import jobs as jobs_sql


def router(container: Container) -> APIRouter:
    """The pipeline routes over ``container``."""
    r = APIRouter(tags=["pipeline"])

    @r.get("/api/pipeline/status")
    def pipeline_status() -> dict[str, Any]:
        """The mode and flags (memory-pipeline-v2.md "Pipeline Modes"), every worker's telemetry
        (ticks, processed, failures, last_error, next_delay_ms in ms...) and job counts
        ``{job_type: {status: n}}``."""
        p = container.settings.memory.pipeline_v2
        return {
            **p.flags(),
            "workers_started": container.workers.started,
            "workers": container.workers.status(),
            "jobs": container.db.read(jobs_sql.counts_by_status),
        }

    @r.get("/api/memory/jobs/{job_id}")
    def get_job(job_id: int = Path(..., ge=1, le=2**63 - 1, description="Job id.")) -> dict[str, Any]:
        """One ``memory_jobs`` row: type, status, attempts, lease, run_after, error, result."""
        job = container.db.read(lambda c: jobs_sql.get(c, job_id))
        if job is None:
            raise NotFound(f"no job with id {job_id}", details={"job_id": job_id})
        return job.as_dict()

    return r
