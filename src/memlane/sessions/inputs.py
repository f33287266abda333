"""Inputs and results of the session lifecycle (plain dataclasses; Pydantic stays at the API edge)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class StartInput:
    """session-start. ``context`` is the text the similarity pre-filter embeds (default: the
    project, the working directory and the project's latest checkpoint digest). ``now`` (ISO)
    replaces the clock (replays)."""

    session_key: str
    project: str | None = None
    cwd: str | None = None
    harness: str | None = None
    source: str | None = None
    context: str | None = None
    now: str | None = None
    #: "effective" (default: effectiveScore pool, seed baseline) or "relevance" (the pool is the
    #: hybrid-recall hits of ``context``: for sessions that start with a real request).
    ranking: str = "effective"
    #: The methodology's phase name (or a universal phase), the work unit's identifiers and the
    #: harness's hook payload fields (``permission_mode``...): see memlane.v3.methodology.service.
    phase: str | None = None
    work_unit: Any = None
    hook: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StartResult:
    """``status`` is ``new`` or ``existing`` (a repeated start: nothing recorded).

    ``release``: set when the start answered before the predictor's ranking
    (``defer_predictor``); call it once the answer is out, and the predictor's part is scored
    and recorded then (session-end and shutdown release it themselves). Idempotent."""

    session_key: str
    status: str
    inject: str
    predictor_state: str
    candidate_count: int = 0
    injected: list[dict[str, Any]] = field(default_factory=list)
    took_ms: float = 0.0
    #: The session's phase state (memlane.v3.methodology.service.PhaseState.to_dict), or None.
    phase: dict[str, Any] | None = None
    release: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    #: Set with ``hold_write``: queues the start's record on the writer; call it once the
    #: answer is out (before ``release``). Idempotent; the key's next request and shutdown
    #: call it too.
    commit: Callable[[], None] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class PromptInput:
    """user-prompt-submit; ``memory_feedback`` maps memory ids (full or 8-char prefixes) to scores
    in [-1, 1], or is a JSON string of such an object; anything malformed is ignored."""

    session_key: str
    prompt: str
    project: str | None = None
    cwd: str | None = None
    harness: str | None = None
    memory_feedback: Any = None
    now: str | None = None
    phase: str | None = None  # as StartInput
    work_unit: Any = None
    hook: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    applied: int
    ignored: int


@dataclass(frozen=True, slots=True)
class PromptResult:
    session_key: str
    inject: str
    matched: list[str]
    injected: list[str]
    feedback: FeedbackResult
    took_ms: float = 0.0
    phase: dict[str, Any] | None = None  # as StartResult


@dataclass(frozen=True, slots=True)
class EndInput:
    """session-end; the transcript is stored whole (up to the configured cap), secrets redacted."""

    session_key: str
    transcript: str | None = None
    reason: str | None = None
    project: str | None = None
    cwd: str | None = None
    harness: str | None = None
    now: str | None = None


@dataclass(frozen=True, slots=True)
class EndResult:
    """``scorer`` is ``llm`` or ``behavioral``; ``scoring`` is ``done`` or ``queued`` (LLM judging
    runs in the background unless the caller waits). ``judge``: None when no judge applies (no
    provider, short transcript), else ``queued``, ``running``, ``done``, ``failed`` or
    ``skipped`` (:meth:`memlane.sessions.service.SessionService.end`)."""

    session_key: str
    scoring: str
    scorer: str | None
    score: float | None
    confidence: float | None
    labels: int
    transcript_stored: bool
    summary_job_id: int | None
    judge: str | None = None
