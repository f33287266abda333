"""Hook endpoints (``/api/hooks/*``) and session inspection (``/api/sessions/*``): thin wrappers
over :class:`memlane.sessions.service.SessionService`.

Hook bodies are strict about types (a wrong type is a 422 naming the field) but ignore unknown
fields, so a newer connector can talk to an older daemon.

The three hooks Claude Code runs on every session and prompt (session-start, user-prompt-submit,
session-end) return their answer as a ``JSONResponse`` built here rather than a dict for FastAPI
to validate against the return annotation: a ``def`` endpoint's response validation is a second
hop through the thread pool, which waits for the GIL when background workers hold it
(docs/benchmarks.md, "Where a hook's milliseconds go").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, BackgroundTasks
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from memlane.container import Container
from memlane.sessions.inputs import EndInput, PromptInput, StartInput

log = logging.getLogger(__name__)


class _Hook(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    session_key: str = Field(..., description="The harness's session id.")
    project: str | None = Field(None, description="Project scope (e.g. the git root).")
    cwd: str | None = Field(None, description="Working directory.")
    harness: str | None = Field(None, description="claude-code, opencode, ...")
    now: str | None = Field(None, description="ISO-8601 time to use instead of the clock (replays).")
    phase: str | None = Field(
        None,
        description="The work's phase: a phase name of the project's methodology (native: planning, coding, "
        "qa_review...; bmad: architect, dev, qa...) or a universal phase; remembered for the session (docs/v3.md).",
    )
    work_unit: dict[str, str] | None = Field(
        None,
        description='The work unit\'s identifiers in the project\'s methodology, e.g. {"spec": "042", '
        '"subtask": "3"} (native) or {"epic": "3", "story": "3.2"} (bmad).',
    )
    permission_mode: str | None = Field(
        None,
        description="Claude Code's permission mode from the hook payload: plan mode is the methodology's "
        "planning phase.",
    )

    def phase_input(self) -> dict[str, Any]:
        """The phase fields as the session inputs take them."""
        hook = {"permission_mode": self.permission_mode} if self.permission_mode is not None else None
        return {"phase": self.phase, "work_unit": self.work_unit, "hook": hook}


class SessionStartIn(_Hook):
    source: str | None = Field(None, description="startup | resume | clear | compact")
    context: str | None = Field(None, description="Text describing the session, for the similarity pre-filter.")
    ranking: Literal["effective", "relevance"] = Field(
        "effective",
        description="effective = effectiveScore pool (default); relevance = the pool is the "
        "hybrid-recall hits of `context` (sessions that start with a real request).",
    )


class PromptIn(_Hook):
    prompt: str = Field(..., description="The user's prompt.")
    # Any: malformed feedback is ignored and counted by the service, never a 422 that would lose
    # the prompt's recall (agent-relevance-feedback.md: fail open).
    memory_feedback: Any = Field(
        None,
        description="Agent ratings {memory id or 8-char prefix: score in [-1, 1]} (or that object as JSON "
        "text); anything malformed is ignored.",
    )


class SessionEndIn(_Hook):
    reason: str | None = Field(None, description="clear | logout | prompt_input_exit | other")
    transcript: str | None = Field(None, description="The session transcript, stored whole with secrets redacted.")
    wait: bool = Field(
        False,
        description="Wait for the LLM judge (at most sessions.judge_wait_s seconds) instead "
        "of scoring in the background; `judge` in the answer says how it went.",
    )


class PreCompactionIn(_Hook):
    trigger: str | None = Field(None, description="manual | auto")
    custom_instructions: str | None = Field(None, description="The user's /compact instructions.")
    context: str | None = Field(None, description="Current session context to include in the digest.")


class CompactionCompleteIn(_Hook):
    summary: str | None = Field(None, description="The summary the agent wrote.")


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    session_key: str
    memory_feedback: dict[str, Any] | str


def _after_start(commit: Callable[[], None] | None, release: Callable[[], None] | None) -> None:
    """A session-start's work once its answer is out: queue its held write (``commit``), then
    record the predictor's ranking (``release``); ``release`` runs even when ``commit`` raised."""
    try:
        if commit is not None:
            commit()
    finally:
        if release is not None:
            release()


def router(container: Container) -> APIRouter:
    """The hook and session routes over ``container.sessions``."""
    r = APIRouter()
    svc = container.sessions

    @r.post("/api/hooks/session-start", tags=["hooks"])
    def session_start(body: SessionStartIn, background: BackgroundTasks) -> JSONResponse:
        """Candidate pool -> record all candidates -> inject text. Repeated keys record nothing."""
        # The start's record is queued once this response is sent (sessions.inflight: the key's
        # next request queues it if that comes first); at alpha = 1 the predictor's part is
        # scored and recorded after it.
        res = svc.start(
            StartInput(
                session_key=body.session_key,
                project=body.project,
                cwd=body.cwd,
                harness=body.harness,
                source=body.source,
                context=body.context,
                now=body.now,
                ranking=body.ranking,
                **body.phase_input(),
            ),
            defer_predictor=True,
            hold_write=True,
        )
        if res.commit is not None or res.release is not None:
            background.add_task(_after_start, res.commit, res.release)  # one thread-pool hop for both
        return JSONResponse(
            {
                "session_key": res.session_key,
                "status": res.status,
                "inject": res.inject,
                "predictor_state": res.predictor_state,
                "candidate_count": res.candidate_count,
                "injected": res.injected,
                "took_ms": round(res.took_ms, 3),
                "phase": res.phase,
            }
        )

    @r.post("/api/hooks/user-prompt-submit", tags=["hooks"])
    def user_prompt_submit(body: PromptIn) -> JSONResponse:
        """Recall on the prompt (threshold: nothing rather than padding), FTS-hit tracking, feedback."""
        res = svc.prompt(
            PromptInput(
                session_key=body.session_key,
                prompt=body.prompt,
                project=body.project,
                cwd=body.cwd,
                harness=body.harness,
                memory_feedback=body.memory_feedback,
                now=body.now,
                **body.phase_input(),
            )
        )
        return JSONResponse(
            {
                "session_key": res.session_key,
                "inject": res.inject,
                "matched": res.matched,
                "injected": res.injected,
                "feedback": {"applied": res.feedback.applied, "ignored": res.feedback.ignored},
                "took_ms": round(res.took_ms, 3),
                "phase": res.phase,
            }
        )

    def end_observed(session_key: str, project: str | None) -> None:
        """The observer's end of the session (co-access graph, promotion), after the answer is
        sent; never raises (a failure is logged: the hook already answered)."""
        observer = container.observer
        try:
            if observer is not None and observer.observed(session_key):
                observer.end(session_key, project=project)
        except Exception:  # the agent is gone: log, never surface
            log.exception("session %r: the observer's session end failed", session_key[:80])

    @r.post("/api/hooks/session-end", tags=["hooks"])
    def session_end(body: SessionEndIn, background: BackgroundTasks) -> JSONResponse:
        """Transcript stored, summary job enqueued, continuity scored, labels built; after the
        answer, the observer ends the session when it saw tool calls of it (co-access graph and the
        promotion pipeline, docs/v3.md "Promotion").

        With an LLM judge, ``judge`` is ``queued`` (scored in the background), ``done`` / ``failed``
        (waited for), ``skipped`` (its backlog was full or the daemon is stopping: scored from
        behaviour, reason stored) or, when ``wait`` ran out, ``queued`` / ``running`` with the
        behavioural score as of now (not stored; the judge's verdict is stored when it answers)."""
        res = svc.end(
            EndInput(
                session_key=body.session_key,
                transcript=body.transcript,
                reason=body.reason,
                project=body.project,
                cwd=body.cwd,
                harness=body.harness,
                now=body.now,
            ),
            wait=body.wait,
        )
        background.add_task(end_observed, res.session_key, body.project)
        return JSONResponse(
            {
                "session_key": res.session_key,
                "scoring": res.scoring,
                "scorer": res.scorer,
                "score": res.score,
                "confidence": res.confidence,
                "labels": res.labels,
                "transcript_stored": res.transcript_stored,
                "summary_job_id": res.summary_job_id,
                "judge": res.judge,
            }
        )

    @r.post("/api/hooks/pre-compaction", tags=["hooks"])
    def pre_compaction(body: PreCompactionIn) -> dict[str, Any]:
        """A checkpoint now, the summary prompt for the agent, and the recovery digest."""
        return svc.pre_compaction(
            body.session_key,
            project=body.project,
            harness=body.harness,
            context=body.context or body.custom_instructions,
        )

    @r.post("/api/hooks/compaction-complete", tags=["hooks"])
    def compaction_complete(body: CompactionCompleteIn) -> dict[str, Any]:
        """Record the agent's compaction summary as a checkpoint."""
        return svc.compaction_complete(
            body.session_key, project=body.project, harness=body.harness, summary=body.summary
        )

    @r.post("/api/sessions/feedback", tags=["sessions"])
    def feedback(body: FeedbackIn) -> dict[str, int]:
        """Agent feedback outside a prompt (e.g. the MCP memory_feedback tool)."""
        res = svc.feedback(body.session_key, body.memory_feedback)
        return {"applied": res.applied, "ignored": res.ignored}

    @r.get("/api/sessions/summary", tags=["sessions"])
    def sessions_summary() -> dict[str, Any]:
        """Counts over all sessions: candidates, injections, hits, ratings, labels, scores."""
        return svc.summary()

    @r.get("/api/sessions/{session_key:path}", tags=["sessions"])  # keys may hold "/" (harness ids)
    def get_session(session_key: str) -> dict[str, Any]:
        """One session: its row, its score and every candidate with raw and final labels."""
        return svc.get(session_key)

    return r
