"""Active-loop endpoints (docs/v3.md "Active loop"; memlane.v3.active): thin wrappers, the service
checks every value (422 in the one error shape).

* ``POST /api/v3/active/outcome``: record a work unit's outcome (``work_unit_outcome`` memory).
* ``POST /api/v3/active/qa-failure``: a QA report's critical and high issues -> reflexion memories.
* ``POST /api/v3/active/commit``: link a session's memories to the commit that followed it.
* ``GET /api/v3/active/prefetch``: the files this kind of work usually needs.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from memlane.container import Container
from memlane.v3.active import PREFETCH_MAX_FILES


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class OutcomeIn(_Strict):
    """A work unit's outcome (seed ``WorkUnitOutcome``)."""

    work_unit_ref: dict[str, Any] = Field(..., description='{"methodology": "native", "hierarchy": ["spec-12", "t3"]}')
    succeeded: bool
    files_modified: list[str] = Field(default_factory=list)
    key_decisions: list[str] = Field(default_factory=list)
    steps_taken: int | None = None
    context_tokens_used: int | None = None
    retry_count: int | None = Field(None, description="Default: the outcomes already recorded for this work unit.")
    failure_reason: str | None = None
    project: str | None = None
    session_id: str | None = Field(None, description="The session that did the work (commit tagging finds it).")


class QaIssueIn(_Strict):
    description: str
    severity: str = Field("high", description="critical, high, medium, low: only critical and high are kept.")
    file: str | None = None
    module: str | None = None
    what_was_tried: str | None = None
    recommendation: str | None = None


class QaFailureIn(_Strict):
    issues: list[QaIssueIn] = Field(..., description="The QA report's issues.")
    project: str | None = None
    session_id: str | None = None
    work_unit_ref: dict[str, Any] | None = None


class CommitIn(_Strict):
    session_id: str
    repo: str = Field(..., description="A directory inside the project's git work tree.")
    project: str | None = None
    rev: str = Field("HEAD", description="The commit that followed the session's memories.")


def router(container: Container) -> APIRouter:
    """The active-loop routes over ``container.active``."""
    r = APIRouter(tags=["v3"])
    active = container.active
    assert active is not None  # the container always builds it

    @r.post("/api/v3/active/outcome")
    def outcome(body: OutcomeIn) -> dict[str, Any]:
        """Store a ``work_unit_outcome`` memory (scope work_unit) with the seed's fields."""
        return active.record_outcome(**body.model_dump(), who="api")

    @r.post("/api/v3/active/qa-failure")
    def qa_failure(body: QaFailureIn) -> dict[str, Any]:
        """One ``error_pattern`` memory (qa_auto) per critical or high issue; ``writer`` says whether
        the LLM wrote it or the structured template did."""
        issues = [{k: v for k, v in i.model_dump().items() if v is not None} for i in body.issues]
        return active.qa_failure(
            issues, project=body.project, session_id=body.session_id, work_unit_ref=body.work_unit_ref
        )

    @r.post("/api/v3/active/commit")
    def commit(body: CommitIn) -> dict[str, Any]:
        """Set ``commit_sha`` on the session's memories that the commit concerns."""
        return active.tag_commit(body.session_id, repo=body.repo, project=body.project, rev=body.rev)

    @r.get("/api/v3/active/prefetch")
    def prefetch(
        project: str | None = Query(None, max_length=200),
        session_id: str | None = Query(None, max_length=200),
        text: str = Query("", max_length=20_000),
        cwd: str | None = Query(None, max_length=4096),
        k: int = Query(PREFETCH_MAX_FILES, ge=1, le=20),
    ) -> dict[str, Any]:
        """The files this kind of work usually needs (``text``: a prompt naming files or modules)."""
        return {"files": active.prefetch(project=project, session_id=session_id, text=text, cwd=cwd, k=k)}

    return r
