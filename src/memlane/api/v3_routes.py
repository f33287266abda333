"""V3 memory endpoints (docs/v3.md): ``/api/v3/...``.

* ``GET /api/v3/memories``: list by the V3 fields (scope, source, work unit, related file...).
* ``POST /api/v3/recall``: hybrid recall restricted by the same conditions.
* ``GET /api/v3/stats``: live memories by scope, source and type; review and stale counts.
* ``POST /api/v3/memories/{id}/verify``: the user's review (confirm, or send back to review).
* ``POST/GET/DELETE /api/v3/relations``: memory-to-memory relations.
* ``POST /api/v3/lifecycle/run|archive|prune-low-confidence``, ``GET /api/v3/lifecycle/status``,
  ``POST /api/v3/memories/{id}/keep|pin``: pruning and the user's controls (memlane.v3.lifecycle).
* ``POST /api/v3/coaccess/bootstrap``, ``GET /api/v3/coaccess/predict``, ``GET /api/v3/coaccess/stats``:
  the co-access graph of a project's files (from ``git log``; memlane.coaccess).

Remembering with the V3 fields is ``POST /api/memory/remember`` (its body takes them); changing
them is ``PATCH /api/memory/{id}``. Thin: the services check every value (422 in the one error shape).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from memlane.container import Container
from memlane.errors import MemlaneError, ValidationError
from memlane.schemas.models import MemoryOut, memory_dict
from memlane.services.inputs import RecallQuery
from memlane.storage.v3 import V3Filter
from memlane.v3.active import is_git_commit
from memlane.v3.methodology.phases import PHASE_WEIGHTS, UNIVERSAL_PHASES
from memlane.v3.methodology.registry import DEFAULT_METHODOLOGY, PLUGINS
from memlane.v3.model import check_str
from memlane.v3.service import V3Service


def _s() -> Any:
    """An optional string query parameter (a fresh Query each: FastAPI binds one per parameter)."""
    return Query(None, max_length=1000)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class V3FilterIn(_Strict):
    """Conditions on the V3 fields; all given ones must hold."""

    scopes: list[str] = Field(default_factory=list, description="global, module, work_unit, session.")
    sources: list[str] = Field(default_factory=list, description="agent_explicit, observer_inferred, ...")
    methodology: str | None = None
    work_unit: str | None = Field(None, description="The outermost entry of work_unit_ref.hierarchy.")
    related_file: str | None = None
    related_module: str | None = None
    needs_review: bool | None = None
    user_verified: bool | None = None
    commit_sha: str | None = None
    stale: bool | None = None

    def to_filter(self, **extra: Any) -> V3Filter:
        d = self.model_dump()
        return V3Filter(scopes=tuple(d.pop("scopes")), sources=tuple(d.pop("sources")), **d, **extra)


class V3RecallIn(V3FilterIn):
    """A recall request with V3 conditions."""

    query: str
    limit: int = Field(10, description="Hits to return, 1..1000.")
    project: str | None = None
    types: list[str] = Field(default_factory=list)
    include_global: bool = False
    touch: bool = True


class RelationIn(_Strict):
    source_id: str
    target_id: str
    relation: Literal["validates", "required_with", "conflicts_with", "supersedes", "derived_from"]
    weight: float = 1.0


class BootstrapIn(_Strict):
    repo: str = Field(..., description="Path of the project's git repository (the daemon's filesystem).")
    project: str = Field("", description="Project name the graph is kept under ('' = default).")
    rev: str = Field("HEAD", description="Revision whose history is read.")
    max_commits: int | None = Field(None, description="Only the newest this many commits.")


class LifecycleRunIn(_Strict):
    dry_run: bool = Field(False, description="Report what the rules would do without doing it.")
    project: str | None = Field(None, description="Only this project's memories.")
    project_root: str | None = Field(
        None, description="Directory for the file rules (default: the project's latest session's working directory)."
    )


class ArchiveIn(_Strict):
    methodology: str
    work_unit: str = Field(..., description="The merged work unit (outermost hierarchy entry).")
    dry_run: bool = False


class PruneLowIn(_Strict):
    threshold: float = Field(0.2, description="Prune memories with confidence below this, 0..1.")
    idle_days: float = Field(30.0, description="... not accessed for this many days.")
    project: str | None = None
    dry_run: bool = False


class PinIn(_Strict):
    pinned: bool = True


#: Latest accepted event time, epoch ms (year 2286; JSON integers beyond 2**53 lose precision).
MAX_TS_MS = 10**13


class ToolUseIn(BaseModel):
    """A Claude Code PostToolUse payload (extra keys such as transcript_path are ignored)."""

    model_config = ConfigDict(extra="ignore")
    session_id: str
    tool_name: str
    tool_input: dict[str, Any] = Field(default_factory=dict)
    tool_response: Any = None
    cwd: str | None = None
    project: str | None = None
    error: str | None = Field(None, description="The failure text when the call failed.")
    tool_use_id: str | None = Field(None, max_length=200, description="Pairs the call with its PreToolUse.")
    ts_ms: int | None = Field(None, ge=0, le=MAX_TS_MS, description="When the call ended (epoch ms); default now.")
    payload_chars: int | None = Field(
        None, ge=0, le=10**12, description="The size of the hook input (characters), for the context cost."
    )


class PreToolUseIn(BaseModel):
    """A Claude Code PreToolUse payload (extra keys such as transcript_path are ignored)."""

    model_config = ConfigDict(extra="ignore")
    session_id: str
    tool_name: str
    tool_input: dict[str, Any] = Field(default_factory=dict)
    cwd: str | None = None
    project: str | None = None
    tool_use_id: str | None = Field(None, max_length=200, description="Pairs the call with its PostToolUse.")
    ts_ms: int | None = Field(None, ge=0, le=MAX_TS_MS, description="When the call started (epoch ms); default now.")


class StepEndIn(BaseModel):
    """A Claude Code Stop / SubagentStop hook, as the hook client posts it."""

    model_config = ConfigDict(extra="ignore")
    session_id: str
    kind: Literal["stop", "subagent_stop"] = Field(
        ..., description="stop: the agent's turn ended; subagent_stop: a subagent finished its task."
    )
    cwd: str | None = None
    project: str | None = None
    agent_id: str | None = Field(None, max_length=200)
    agent_type: str | None = Field(None, max_length=200)
    ts_ms: int | None = Field(None, ge=0, le=MAX_TS_MS, description="When the step ended (epoch ms); default now.")
    context_tokens: int | None = Field(
        None, ge=0, le=10**9, description="The context size when the step ended (the transcript's latest usage)."
    )


class ObserverEndIn(_Strict):
    session_id: str
    project: str | None = None
    finalize: bool = Field(True, description="Run the promotion pipeline for the session (memlane.v3.promotion).")
    outcome: Literal["passed", "failed"] | None = Field(
        None, description="The session's validation; default: failed when its last tool call failed, else passed."
    )
    complexity: str | None = Field(None, description="trivial, standard, complex: caps the promoted memories.")
    work_unit_ref: dict[str, Any] | None = Field(None, description="Records the work unit's outcome.")


class FinalizeIn(_Strict):
    session_id: str
    outcome: Literal["passed", "failed"] = Field("passed", description="passed: promote; failed: discard.")
    project: str | None = None
    why_failed: str | None = Field(
        None, description="With failed: why the approach was abandoned (a dead end when the run had 20+ steps)."
    )
    dry_run: bool = False
    complexity: str | None = Field(
        None, description="trivial, standard, complex: caps the promoted memories at 2, 10, 25 (default 20)."
    )
    work_unit_ref: dict[str, Any] | None = Field(None, description="Records a work_unit_outcome memory for it.")


class PhaseIn(_Strict):
    session_key: str = Field(..., description="The harness's session id.")
    project: str | None = Field(None, description="The session's project (chooses the methodology).")
    phase: str | None = Field(None, description="A phase name of the project's methodology or a universal phase.")
    work_unit: dict[str, str] | None = Field(
        None, description='The work unit\'s identifiers, e.g. {"spec": "042", "subtask": "3"}.'
    )


class VerifyIn(_Strict):
    verified: bool = Field(True, description="True confirms; false sends the memory back to review.")
    who: str | None = None


def router(container: Container) -> APIRouter:
    """The V3 routes over ``container``'s services."""
    r = APIRouter(tags=["v3"])
    svc = V3Service(container.db, container.memories, container.recall)

    phases = container.phases

    @r.get("/api/v3/methodology")
    def methodology(project: str | None = _s()) -> dict[str, Any]:
        """The built-in methodology plugins (phase maps, work-unit keys, relays), the universal
        phases with their type weights, and the methodology ``project`` uses."""
        return {
            "plugins": [p.describe() for p in PLUGINS.values()],
            "phases": list(UNIVERSAL_PHASES),
            "weights": PHASE_WEIGHTS,
            "project": project,
            "methodology": phases.plugin_for(project).id if phases is not None else DEFAULT_METHODOLOGY,
        }

    @r.post("/api/v3/sessions/phase")
    def set_phase(body: PhaseIn) -> dict[str, Any]:
        """Set a session's phase and/or work unit (as the hooks' ``phase`` / ``work_unit`` do);
        the answer is the session's state."""
        check_str(body.session_key, "session_key", max_chars=256)
        if phases is None:
            raise ValidationError("phases are off in this process", details={"field": "phase"})
        return phases.resolve(body.session_key, body.project, phase=body.phase, work_unit=body.work_unit).to_dict()

    @r.get("/api/v3/sessions/phase")
    def get_phase(session_key: str = Query(..., max_length=256), project: str | None = _s()) -> dict[str, Any]:
        """A session's current phase and work unit (all None when nothing is known)."""
        check_str(session_key, "session_key", max_chars=256)
        if phases is None:
            raise ValidationError("phases are off in this process", details={"field": "phase"})
        return phases.current(session_key, project).to_dict()

    @r.get("/api/v3/memories")
    def list_v3(
        project: str | None = _s(),
        type: list[str] = Query([]),
        scope: list[str] = Query([]),
        source: list[str] = Query([]),
        methodology: str | None = _s(),
        work_unit: str | None = _s(),
        related_file: str | None = _s(),
        related_module: str | None = _s(),
        needs_review: bool | None = Query(None),
        user_verified: bool | None = Query(None),
        commit_sha: str | None = Query(None, max_length=64),
        stale: bool | None = Query(None),
        include_deleted: bool = Query(False),
        limit: int = Query(50, ge=1, le=1000),
        offset: int = Query(0, ge=0, le=10_000_000),
    ) -> dict[str, Any]:
        """Memories matching every given condition, newest first (``type``/``scope``/``source`` repeatable)."""
        f = V3Filter(
            project=project,
            types=tuple(type),
            scopes=tuple(scope),
            sources=tuple(source),
            methodology=methodology,
            work_unit=work_unit,
            related_file=related_file,
            related_module=related_module,
            needs_review=needs_review,
            user_verified=user_verified,
            commit_sha=commit_sha,
            stale=stale,
            include_deleted=include_deleted,
        )
        items, total = svc.search(f, limit=limit, offset=offset)
        return {"items": [memory_dict(m) for m in items], "total": total, "limit": limit, "offset": offset}

    @r.post("/api/v3/recall")
    def recall_v3(body: V3RecallIn) -> JSONResponse:
        """Hybrid recall keeping only hits that match the V3 conditions (ranked within the best
        ``limit`` x 10 candidates, at least 100, at most 1000)."""
        f = V3FilterIn.model_validate({k: getattr(body, k) for k in V3FilterIn.model_fields}).to_filter()
        res = svc.recall(
            RecallQuery(
                query=body.query,
                limit=body.limit,
                project=body.project,
                types=tuple(body.types),
                include_global=body.include_global,
                touch=body.touch,
            ),
            f,
        )
        return JSONResponse(
            {
                "results": [
                    {
                        **memory_dict(h.memory),
                        "score": h.score,
                        "vector_score": h.vector_score,
                        "bm25_score": h.bm25_score,
                    }
                    for h in res.hits
                ],
                "legs": list(res.legs),
                "took_ms": round(res.took_ms, 3),
            }
        )

    @r.get("/api/v3/stats")
    def stats_v3(project: str | None = _s()) -> dict[str, Any]:
        """Live memories by scope, source and type; how many need review, are verified, are stale."""
        return svc.counts(project)

    @r.post("/api/v3/memories/{memory_id}/verify", response_model=MemoryOut)
    def verify(memory_id: str, body: VerifyIn | None = None) -> MemoryOut:
        """Confirm a memory (user_verified, out of the review queue) or send it back to review."""
        body = body or VerifyIn()
        return MemoryOut.of(svc.verify(memory_id, verified=body.verified, who=body.who))

    @r.post("/api/v3/relations")
    def add_relation(body: RelationIn) -> dict[str, Any]:
        """Store a directed relation between two live memories (again: updates the weight)."""
        return svc.relate(body.source_id, body.target_id, body.relation, weight=body.weight)

    @r.get("/api/v3/relations")
    def list_relations(
        memory_id: str = Query(..., max_length=200),
        direction: Literal["out", "in", "both"] = Query("both"),
        relation: str | None = Query(None, max_length=64),
    ) -> dict[str, Any]:
        """Relations touching one memory."""
        return {"relations": svc.relations(memory_id, direction=direction, relation=relation)}

    @r.delete("/api/v3/relations")
    def delete_relation(
        source_id: str = Query(..., max_length=200),
        target_id: str = Query(..., max_length=200),
        relation: str | None = Query(None, max_length=64),
    ) -> dict[str, Any]:
        """Delete the relation(s) from ``source_id`` to ``target_id``."""
        return {"removed": svc.unrelate(source_id, target_id, relation)}

    from pathlib import Path

    from memlane.coaccess.graph import MAX_K, CoAccessService
    from memlane.v3.lifecycle import LifecycleService

    life = LifecycleService(container.db, container.memories)
    from memlane.v3.observer import check_payload_error

    if container.observer is None:
        raise RuntimeError("the container has no observer (memlane.container.open_container builds one)")
    sessions_end = container.observer
    observer, promoter = sessions_end.observer, sessions_end.promoter
    tool_warnings = container.tool_warnings

    @r.post("/api/v3/observer/tool-use")
    def observer_tool_use(body: ToolUseIn) -> dict[str, Any]:
        """Record one tool call in the session's scratchpad; returns the signals it completed."""
        err = body.error if body.error is not None else check_payload_error(body.tool_response)
        sig = observer.record(
            body.session_id,
            body.tool_name,
            body.tool_input,
            project=body.project,
            cwd=body.cwd,
            error=err,
            ts_ms=body.ts_ms,
            tool_use_id=body.tool_use_id,
            payload_chars=body.payload_chars,
        )
        out: dict[str, Any] = {"signals": [{"type": t, **d} for t, d in sig]}
        if container.active is not None and err is None and is_git_commit(body.tool_name, body.tool_input) and body.cwd:
            try:  # the call is recorded: a git problem is reported, never a failed hook
                out["commit"] = container.active.tag_commit(body.session_id, repo=body.cwd, project=body.project)
            except MemlaneError as exc:
                out["commit"] = {"error": exc.message}
        return out

    @r.post("/api/v3/observer/pre-tool-use")
    def observer_pre_tool_use(body: PreToolUseIn) -> dict[str, Any]:
        """A tool call is about to run (Claude Code's PreToolUse): its start time is kept for its
        duration, and ``inject`` carries the warnings memlane holds about the file it touches
        ("" in the common case; memlane.v3.tool_warnings)."""
        observer.note_start(body.session_id, body.tool_name, body.tool_use_id, body.ts_ms, project=body.project)
        if tool_warnings is None:
            return {"file": None, "memory_ids": [], "inject": ""}
        return tool_warnings.for_call(
            body.session_id, body.tool_name, body.tool_input, cwd=body.cwd, project=body.project
        )

    @r.post("/api/v3/observer/step-end")
    def observer_step_end(body: StepEndIn) -> dict[str, Any]:
        """A work step ended (Claude Code's Stop or SubagentStop): a boundary after the session's
        last recorded tool call, read by the promotion's validation filter."""
        return observer.step_end(
            body.session_id,
            body.kind,
            project=body.project,
            agent_id=body.agent_id,
            agent_type=body.agent_type,
            ts_ms=body.ts_ms,
            context_tokens=body.context_tokens,
        )

    @r.get("/api/v3/observer/steps")
    def observer_steps(session_id: str = Query(..., max_length=200)) -> dict[str, Any]:
        """The session's work steps (calls between boundaries) and whether each ended in failure."""
        return {"steps": observer.steps(session_id)}

    @r.post("/api/v3/observer/session-end")
    def observer_session_end(body: ObserverEndIn) -> dict[str, Any]:
        """The session's files go into the co-access graph (origin ``session``); with ``finalize``
        its scratchpad goes through the promotion pipeline."""
        return sessions_end.end(
            body.session_id,
            project=body.project,
            finalize=body.finalize,
            outcome=body.outcome,
            complexity=body.complexity,
            work_unit_ref=body.work_unit_ref,
        )

    @r.post("/api/v3/observer/finalize")
    def observer_finalize(body: FinalizeIn) -> dict[str, Any]:
        """Promote a session's scratchpad after its validation passed, or discard it after a failure
        (the promotion pipeline, docs/v3.md "Promotion")."""
        return promoter.finalize(
            body.session_id,
            outcome=body.outcome,
            project=body.project,
            why_failed=body.why_failed,
            dry_run=body.dry_run,
            complexity=body.complexity,
            work_unit_ref=body.work_unit_ref,
        ).as_dict()

    @r.get("/api/v3/observer/signals")
    def observer_signals(session_id: str = Query(..., max_length=200)) -> dict[str, Any]:
        """The scratchpad of one session: its signals in order."""
        return {"signals": observer.signals(session_id)}

    @r.get("/api/v3/observer/inferences")
    def observer_inferences(project: str | None = Query(None, max_length=200)) -> dict[str, Any]:
        """What the inference rules suggest from a project's signals (template text; not stored)."""
        return {"inferences": observer.inferences(project)}

    @r.post("/api/v3/lifecycle/run")
    def lifecycle_run(body: LifecycleRunIn | None = None) -> dict[str, Any]:
        """Prune now: apply the lifecycle rules once (or report them with ``dry_run``)."""
        body = body or LifecycleRunIn()
        return life.run(project=body.project, project_root=body.project_root, dry_run=body.dry_run)

    @r.post("/api/v3/lifecycle/archive")
    def lifecycle_archive(body: ArchiveIn) -> dict[str, Any]:
        """Archive the memories of a merged work unit (pinned and user-verified ones stay)."""
        return life.archive_work_unit(body.methodology, body.work_unit, dry_run=body.dry_run)

    @r.post("/api/v3/lifecycle/prune-low-confidence")
    def lifecycle_prune_low(body: PruneLowIn) -> dict[str, Any]:
        """Prune memories below a confidence threshold not accessed for some days."""
        return life.prune_low_confidence(
            threshold=body.threshold, idle_days=body.idle_days, project=body.project, dry_run=body.dry_run
        )

    @r.get("/api/v3/lifecycle/status")
    def lifecycle_status() -> dict[str, Any]:
        """The background lifecycle worker's telemetry and last report (null before its first run)."""
        try:
            w = container.workers.get("v3-lifecycle")
        except KeyError:
            return {"worker": None, "last_report": None}
        return {"worker": w.telemetry(), "last_report": getattr(w, "last_report", None)}

    @r.post("/api/v3/memories/{memory_id}/keep", response_model=MemoryOut)
    def keep(memory_id: str) -> MemoryOut:
        """Keep a memory: user-verified, so no automatic rule prunes it (and out of review)."""
        return MemoryOut.of(svc.verify(memory_id, verified=True, who="user"))

    @r.post("/api/v3/memories/{memory_id}/pin", response_model=MemoryOut)
    def pin(memory_id: str, body: PinIn | None = None) -> MemoryOut:
        """Pin (or with ``{"pinned": false}`` unpin) a memory: always a session-start candidate, never pruned."""
        return MemoryOut.of(container.memories.update(memory_id, {"pinned": (body or PinIn()).pinned}, who="user"))

    co = CoAccessService(container.db)

    @r.post("/api/v3/coaccess/bootstrap")
    def coaccess_bootstrap(body: BootstrapIn) -> dict[str, Any]:
        """Rebuild a project's co-access graph from ``git log`` of a repository (real git)."""
        return co.bootstrap_git(
            Path(check_str(body.repo, "repo")).expanduser(),
            project=body.project,
            rev=body.rev,
            max_commits=body.max_commits,
        )

    @r.get("/api/v3/coaccess/predict")
    def coaccess_predict(
        file: str = Query(..., max_length=1000),
        project: str = Query("", max_length=200),
        k: int = Query(10, ge=1, le=MAX_K),
        suffix: str = Query("", max_length=20),
    ) -> dict[str, Any]:
        """The files most likely needed with ``file``, best first (reason: co-change, directory, popular)."""
        preds = co.predict(file, project=project, k=k, suffix=suffix)
        return {
            "file": file,
            "predictions": [
                {
                    "file": p.file,
                    "score": round(p.score, 6),
                    "raw_count": p.raw_count,
                    "weight": round(p.weight, 6),
                    "reason": p.reason,
                }
                for p in preds
            ],
        }

    @r.get("/api/v3/coaccess/stats")
    def coaccess_stats(project: str = Query("", max_length=200)) -> dict[str, Any]:
        """Files and directed edges of a project's co-access graph."""
        return co.stats(project)

    return r
