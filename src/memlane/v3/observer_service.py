"""The end of an observed session: its files into the co-access graph, its scratchpad through the
promotion pipeline (docs/v3.md, "Observer" and "Promotion").

One implementation for both ways a session ends: ``POST /api/v3/observer/session-end`` (any client)
and Claude Code's SessionEnd hook (``POST /api/hooks/session-end`` runs it after its answer is sent,
so the agent never waits for a promotion or its LLM call).
"""

from __future__ import annotations

from typing import Any

from memlane.coaccess.graph import CoAccessService
from memlane.errors import NotFound
from memlane.v3.context_cost import ContextCosts
from memlane.v3.model import check_str
from memlane.v3.observer import Observer
from memlane.v3.promotion import Promoter


class ObserverSessions:
    """Ends observed sessions.

    Args:
        observer: the scratchpad (tool calls and signals).
        promoter: the promotion pipeline.
        coaccess: the co-access graph.
        costs: the context cost per module (None: not sampled).
    """

    def __init__(
        self, observer: Observer, promoter: Promoter, coaccess: CoAccessService, costs: ContextCosts | None = None
    ) -> None:
        self.observer = observer
        self.promoter = promoter
        self.coaccess = coaccess
        self.costs = costs

    def observed(self, session_id: str) -> bool:
        """Whether any tool call of the session was recorded."""
        return self.observer.has_events(session_id)

    def end(
        self,
        session_id: str,
        *,
        project: str | None = None,
        finalize: bool = True,
        outcome: str | None = None,
        complexity: str | None = None,
        work_unit_ref: Any = None,
    ) -> dict[str, Any]:
        """Record the session's files in the co-access graph (origin ``session``), sample its
        context cost per module (memlane.v3.context_cost) and, with ``finalize``, run the promotion
        pipeline with ``outcome`` (default: ``failed`` when the session's last tool call failed,
        else ``passed``).

        Returns:
            ``{"files": int, "context_cost": ContextCosts.record_session(...) | None, "promotion":
            PromotionReport.as_dict() | None}`` (promotion None: not finalized, or no tool call of
            the session was observed).

        Raises:
            ValidationError: a bad session id, project, outcome, complexity or work-unit reference.
        """
        files = self.observer.session_files(check_str(session_id, "session_id", max_chars=200))
        if files:
            self.coaccess.record_files(files, project=project or "", origin="session")
        out: dict[str, Any] = {"files": len(files), "context_cost": None, "promotion": None}
        if self.costs is not None:
            out["context_cost"] = self.costs.record_session(session_id, project)
        if finalize:
            chosen = outcome or ("failed" if self.observer.last_call_failed(session_id) else "passed")
            try:
                out["promotion"] = self.promoter.finalize(
                    session_id, outcome=chosen, project=project, complexity=complexity, work_unit_ref=work_unit_ref
                ).as_dict()
            except NotFound:  # nothing observed in this session: nothing to promote
                pass
        return out
