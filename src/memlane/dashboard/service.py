"""What the dashboard's pages show and do, over the container's services.

Read views (one page of rows each, paginated on the server) and the dashboard's own actions:

* :meth:`DashboardService.flag_wrong` -- the correction modal (memory-system-v3-design.md
  section 10): the corrected text becomes a new memory that supersedes the wrong one (nothing
  is overwritten: the old row and its history stay), or, for "no longer applies" without a
  correction, the memory is forgotten (soft delete, recoverable); for "duplicate", it is
  superseded by the original. Every session that injected it gets the negative training label
  the predictor learns from (:data:`FLAGGED_WRONG_LABEL`, the seed's "user explicitly deleted
  or marked obsolete" strength) with the reason :data:`FLAGGED_WRONG_REASON`.
* :meth:`DashboardService.review` -- the session-end review of what the pipeline inferred from
  a session: approve (``metadata.review = "approved"``), edit (new content, ``"edited"``) or
  reject (``"rejected"``, then forgotten).

Bad input raises :class:`memlane.errors.ValidationError` (422), unknown ids NotFound (404),
state conflicts Conflict (409): the API answers them in the one error shape.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from memlane.config import predictor as pred_settings
from memlane.config.clock import now_iso
from memlane.drift.service import warning_prefix
from memlane.errors import Conflict, ValidationError
from memlane.graph.knowledge import KnowledgeService
from memlane.observability.diagnostics import health_report, predictor_domain
from memlane.observability.logs import LEVELS
from memlane.observability.timeline import session_timeline
from memlane.predictor import policy
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.sessions.labels import DELETED_AFTER_INJECTION_LABEL
from memlane.storage import dashboard as dash_sql
from memlane.storage import drift as drift_sql
from memlane.storage import jobs as jobs_sql
from memlane.storage import predictor as pred_sql
from memlane.storage.fts import Filters
from memlane.storage.models import Memory

#: The training label of a memory the user flagged wrong, on every session that injected it.
FLAGGED_WRONG_LABEL = DELETED_AFTER_INJECTION_LABEL
FLAGGED_WRONG_REASON = "negative:user_flagged_wrong"
#: "What's wrong?" answers of the correction modal.
WRONG_REASONS = ("inaccurate", "outdated", "too_specific", "duplicate")
REVIEW_ACTIONS = ("approve", "edit", "reject")
#: Who the dashboard's writes are recorded as.
WHO = "dashboard"
#: Rows per page of every list.
PAGE_SIZE = 25
#: Sessions in the rolling NDCG@10 mean of the Predictor page.
NDCG_WINDOW = 20
#: Seconds the filter menus' values are reused.
FACETS_TTL_S = 30.0
#: Seconds the Predictor page's parsed comparisons and chart series are reused while no
#: comparison was added or replaced (:func:`memlane.storage.dashboard.comparisons_version`).
SERIES_TTL_S = 30.0
#: Comparisons the Predictor page's charts and list cover (the newest).
MAX_COMPARISONS = 1000
#: Timeline events shown on a session page (all of them: ``GET /api/timeline/{key}``).
TIMELINE_SHOWN = 80
#: Most search hits a search page can page through (the recall's own cap).
MAX_SEARCH = 1000
#: What the Logs page lists: the log ring's events or the error ring.
LOG_KINDS = ("events", "errors")
#: Prediction error types (docs/drift.md) in words.
DRIFT_KINDS = {
    "memory_drift": "drifted from a document",
    "memory_stale_file": "file missing",
    "memory_stale_entity": "entity superseded",
    "memory_external_signal": "external signal",
}


@dataclass(frozen=True, slots=True)
class Page:
    """Pagination of one list: ``page`` (1-based) of ``pages``, ``size`` rows each."""

    page: int
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size

    @property
    def has_prev(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages


def page_number(value: Any) -> int:
    """A 1-based page number from a query parameter (anything else is page 1)."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        return 1
    return min(max(1, n), 10_000_000)


def _memory_view(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id,
        "type": m.type,
        "content": m.content,
        "project": m.project,
        "tags": list(m.tags),
        "who": m.who,
        "why": m.why,
        "source_type": m.source_type,
        "source_id": m.source_id,
        "created_at": m.created_at,
        "updated_at": m.updated_at,
        "last_accessed": m.last_accessed,
        "access_count": m.access_count,
        "pinned": m.pinned,
        "is_deleted": m.is_deleted,
        "deleted_at": m.deleted_at,
        "superseded_by": m.superseded_by,
        "importance": m.importance,
        "confidence": m.confidence,
        "embedding_model": m.embedding_model,
        "metadata": m.metadata,
        "extraction_status": m.extraction_status,
        "context": m.context,
    }


def _ndcg(ranking: list[str], relevance: dict[str, float]) -> float | None:
    return policy.ndcg_of_ranking(ranking, relevance)


class DashboardService:
    """The dashboard's views and actions over ``container``'s services."""

    def __init__(self, container: Any) -> None:
        self.c = container
        self.db = container.db
        self.obs = container.observability
        self.graph = KnowledgeService(container.db)
        self._facets: tuple[float, dict[str, list[str]]] | None = None
        self._series_cache: tuple[float, Any, list[dict[str, Any]], dict[str, Any]] | None = None

    # -- health ---------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """The Health page: domains, store counts, recent sessions, latency, errors and what
        needs attention (unhealthy domains, stale or drifting memories, dead jobs, a disabled
        sidecar, maintenance advice)."""
        report = health_report(self.c, self.obs)
        stats = self.c.memories.index.state_counts()  # from memory, not a table scan (docs/decisions.md, "Indexes")

        def read(c: Any) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
            rows, total = dash_sql.sessions_page(c, limit=5, offset=0)
            return rows, total, dash_sql.drift_counts(c)

        sessions, total_sessions, drift = self.db.read(read)
        attention: list[dict[str, str]] = []
        if drift["memories"]:
            kinds = ", ".join(f"{n} {DRIFT_KINDS.get(t, t)}" for t, n in sorted(drift["by_type"].items()))
            attention.append(
                {
                    "what": f"{drift['memories']} stale or drifting memor{'y' if drift['memories'] == 1 else 'ies'}",
                    "detail": f"{drift['errors']} unresolved prediction error(s): {kinds}; recall ranks "
                    "them lower with a warning and never injects them on its own",
                    "link": "/memories?drift=flagged&state=all",
                }
            )
        for name, d in report["domains"].items():
            if d["status"] in ("unhealthy", "degraded"):
                notes = "; ".join(d.get("notes") or []) or d["status"]
                attention.append({"what": f"{name} is {d['status']}", "detail": notes, "link": f"/#domain-{name}"})
        if report["domains"]["queue"]["jobs_dead"]:
            attention.append(
                {
                    "what": f"{report['domains']['queue']['jobs_dead']} failed (dead) job(s)",
                    "detail": "retried until their attempts ran out",
                    "link": "/knowledge?jobs=dead",
                }
            )
        pred = report["domains"]["predictor"]
        if pred.get("crash_disabled"):
            attention.append(
                {
                    "what": "the predictor sidecar is disabled",
                    "detail": "repeated crashes: the baseline ranking serves until the cool-down ends",
                    "link": "/predictor",
                }
            )
        for rec in report["recommendations"]:
            attention.append(
                {"what": f"maintenance recommends {rec['action']}", "detail": rec["reason"], "link": "/api/diagnostics"}
            )
        latency = self.obs.latency.report(sparkline_minutes=60)["operations"]
        return {
            "report": report,
            "stats": stats,
            "sessions": sessions,
            "total_sessions": total_sessions,
            "latency": latency,
            "errors": self.obs.errors.recent(limit=10),
            "attention": attention,
            "drift": drift,
        }

    def _warning(self, memory_id: str) -> str | None:
        """The drift warning recall would prefix this memory with (``[STALE: ...]`` or
        ``[DRIFT: ...]``), from the drift service's in-memory flags; None when trusted."""
        drift = getattr(self.c, "drift", None)
        flags = drift.flags_of(memory_id) if drift is not None else ()
        return warning_prefix(flags) if flags else None

    # -- memories -------------------------------------------------------------------------
    def facets(self) -> dict[str, list[str]]:
        """Projects, types and source types for the filter menus (cached :data:`FACETS_TTL_S` s:
        the source types need a scan of every memory)."""
        now = time.monotonic()
        cached = self._facets
        if cached is None or now - cached[0] > FACETS_TTL_S:
            cached = (now, self.db.read(dash_sql.facet_values))
            self._facets = cached
        return cached[1]

    def memories(
        self,
        *,
        q: str | None,
        project: str | None,
        type_: str | None,
        source_type: str | None,
        pinned: bool | None,
        state: str,
        page: int,
        flagged: bool | None = None,
    ) -> dict[str, Any]:
        """One page of memories: the hybrid recall's hits for ``q`` (best first) or, without
        ``q``, the newest; filtered by project, type, source, pinned, state and ``flagged``
        (True: only stale or drifting memories, those with an unresolved prediction error).
        Each item carries ``warning``, the drift warning recall gives it (None when trusted).

        Raises:
            ValidationError: an unknown state.
        """
        if state not in dash_sql.MEMORY_STATES:
            raise ValidationError(f"state: one of {', '.join(dash_sql.MEMORY_STATES)}", details={"field": "state"})
        if not q:
            offset = (page - 1) * PAGE_SIZE
            filters = {
                "project": project,
                "type_": type_,
                "source_type": source_type,
                "pinned": pinned,
                "state": state,
                "flagged": flagged,
            }
            if source_type is None and pinned is None and flagged is None and state in ("live", "all"):
                # The total from the in-memory index, not a count over the table's rows
                # (docs/decisions.md, "Indexes"); the page itself comes from idx_memories_created.
                total = self.c.memories.index.count(
                    Filters(
                        project=project,
                        types=(type_,) if type_ else (),
                        include_deleted=state == "all",
                        exclude_superseded=state == "live",
                    )
                )
                items = self.db.read(lambda c: dash_sql.memories_rows(c, limit=PAGE_SIZE, offset=offset, **filters))
            else:
                items, total = self.db.read(
                    lambda c: dash_sql.memories_page(c, limit=PAGE_SIZE, offset=offset, **filters)
                )
            return {
                "items": [{**_memory_view(m), "score": None, "warning": self._warning(m.id)} for m in items],
                "page": Page(page, PAGE_SIZE, total),
                "searched": False,
            }
        # Filters recall cannot apply (source, pinned, states other than live) are applied to its
        # hits: it is then asked for its cap, so that a page of the filtered list can be cut.
        post = source_type is not None or pinned is not None or flagged is not None or state != "live"
        res = self.c.recall.recall(
            RecallQuery(
                query=q,
                limit=MAX_SEARCH if post else min(MAX_SEARCH, page * PAGE_SIZE + 1),
                project=project,
                types=(type_,) if type_ else (),
                include_deleted=state in ("deleted", "all"),
                touch=False,
                exclude_superseded=state == "live",
            )
        )
        hits = [
            h
            for h in res.hits
            if _keep(h.memory, source_type, pinned, state)
            and (flagged is None or flagged == (self._warning(h.memory.id) is not None))
        ]
        pg = Page(page, PAGE_SIZE, len(hits))
        shown = hits[pg.offset : pg.offset + PAGE_SIZE]
        return {
            "items": [
                {**_memory_view(h.memory), "score": round(h.score, 4), "warning": self._warning(h.memory.id)}
                for h in shown
            ],
            "page": pg,
            "searched": True,
            "legs": list(res.legs),
            "capped": len(res.hits) >= MAX_SEARCH,
        }

    def memory_card(self, memory_id: str) -> dict[str, Any]:
        """One memory with its provenance, drift state (the warning recall gives it and its
        prediction errors, open and resolved, newest first), supersede chain, history and sessions.

        Raises:
            NotFound: unknown id.
        """
        m = self.c.memories.get(memory_id)
        history = self.c.memories.history(memory_id)

        def read(c: Any) -> dict[str, Any]:
            chain = dash_sql.supersede_chain(c, memory_id)
            sessions = dash_sql.memory_sessions(c, memory_id, limit=PAGE_SIZE)
            sessions_total = dash_sql.memory_session_count(c, memory_id)
            source_session = m.source_id if m.source_id and dash_sql.session_exists(c, m.source_id) else None
            source_memory = (
                m.source_id if m.source_id and not source_session and dash_sql.memory_exists(c, m.source_id) else None
            )
            errors = [
                {**e.as_dict(), "kind": DRIFT_KINDS.get(e.error_type, e.error_type)}
                for e, _ in drift_sql.list_errors(c, memory_id=memory_id, resolved=None, limit=PAGE_SIZE)
            ]
            return {
                "chain": chain,
                "sessions": sessions,
                "sessions_total": sessions_total,
                "source_session": source_session,
                "source_memory": source_memory,
                "drift_errors": errors,
                "drift_errors_total": dash_sql.drift_error_count(c, memory_id) if errors else 0,
            }

        extra = self.db.read(read)
        return {
            "memory": _memory_view(m),
            "history": history,
            "warning": self._warning(memory_id),
            "drift_factor": round(1.0 - self.c.settings.drift.penalty, 3),
            **extra,
        }

    def flag_wrong(
        self,
        memory_id: str,
        *,
        reason: str,
        corrected: str | None = None,
        original_id: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        """The correction modal (module docstring).

        Args:
            reason: one of :data:`WRONG_REASONS`.
            corrected: the corrected text (required for inaccurate and too_specific; optional
                for outdated).
            original_id: the memory this one duplicates (required for duplicate).
            note: the user's words, recorded as the history row's ``why``.

        Returns:
            ``{"old": memory, "new": memory or None, "action": "superseded" | "forgotten",
            "labelled": sessions given the negative label}``.
        Raises:
            ValidationError: a bad reason or a missing correction. NotFound: unknown id.
            Conflict: the memory is deleted or already superseded.
        """
        if reason not in WRONG_REASONS:
            raise ValidationError(f"reason: one of {', '.join(WRONG_REASONS)}", details={"field": "reason"})
        old = self.c.memories.get(memory_id)
        if old.is_deleted or old.superseded_by is not None:
            raise Conflict("this memory is already deleted or superseded", details={"id": memory_id})
        corrected = (corrected or "").strip() or None
        why = f"flagged wrong ({reason})" + (f": {note.strip()[:300]}" if note and note.strip() else "")
        new: Memory | None = None
        if reason == "duplicate":
            if not original_id:
                raise ValidationError("original_id: the memory this one duplicates", details={"field": "original_id"})
            new = self.c.memories.get(original_id)
            if new.id == old.id or new.is_deleted:
                raise ValidationError("original_id: a different live memory", details={"field": "original_id"})
        elif corrected is not None:
            res = self.c.memories.remember(
                RememberInput(
                    content=corrected,
                    type=old.type,
                    importance=old.importance,
                    confidence=1.0,
                    project=old.project,
                    tags=old.tags,
                    metadata={"corrects": old.id, "wrong_because": reason},
                    who=WHO,
                    why=why,
                    source_type="user_correction",
                    source_id=old.id,
                )
            )
            new = self.c.memories.get(res.id)
        elif reason != "outdated":
            raise ValidationError("corrected: the corrected text", details={"field": "corrected"})
        if new is not None and new.id != old.id:
            self.c.memories.supersede(old.id, new.id, who=WHO, why=why)
            action = "superseded"
        else:
            self.c.memories.delete(old.id, who=WHO, why=why)
            action = "forgotten"
        labelled = self.db.write(
            lambda c: dash_sql.label_flagged_wrong(c, old.id, label=FLAGGED_WRONG_LABEL, reason=FLAGGED_WRONG_REASON)
        )
        return {
            "old": _memory_view(self.c.memories.get(old.id)),
            "new": _memory_view(new) if new is not None else None,
            "action": action,
            "labelled": labelled,
        }

    # -- sessions -------------------------------------------------------------------------
    def sessions(self, *, project: str | None, page: int) -> dict[str, Any]:
        """One page of sessions, newest first."""

        def read(c: Any) -> tuple[list[dict[str, Any]], int]:
            return dash_sql.sessions_page(c, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE, project=project)

        rows, total = self.db.read(read)
        return {"items": rows, "page": Page(page, PAGE_SIZE, total)}

    def session(self, key: str, *, page: int) -> dict[str, Any]:
        """One session: its row and score, injected memories and why, prompt hits, feedback and
        labels (candidates paginated), the comparison inspector, the review and the timeline.

        Raises:
            NotFound: unknown key.
        """
        detail = self.c.sessions.get(key)  # waits for the key's in-flight start; NotFound when unknown

        def read(c: Any) -> dict[str, Any]:
            pg_rows, total = dash_sql.session_candidates(c, key, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
            injected, _ = dash_sql.session_candidates(c, key, limit=1000, offset=0, injected_only=True)
            return {
                "candidates": pg_rows,
                "candidates_total": total,
                "injected": injected,
                "comparison": dash_sql.comparison_of(c, key),
                "signals": dash_sql.session_signals(c, key),
                "review": dash_sql.session_review_rows(c, key),
                "events": dash_sql.session_events(c, key),
            }

        data = self.db.read(read)
        rows = detail["memories"]
        hits = [r for r in rows if r.fts_hit_count > 0]
        rated = [r for r in rows if r.agent_feedback_count > 0]
        inspector = self._inspector(rows, data["comparison"]) if data["comparison"] else None
        review = [self._review_item(r) for r in data["review"]]
        applied = [r for r in rows if r.was_injected and ((r.label or 0) > 0.5 or r.fts_hit_count > 0)]
        return {
            "session": detail["session"],
            "score": detail["score"],
            "candidates": data["candidates"],
            "page": Page(page, PAGE_SIZE, data["candidates_total"]),
            "injected": data["injected"],
            "hits": hits,
            "rated": rated,
            "signals": data["signals"],
            "inspector": inspector,
            "review": review,
            "applied": applied,
            "timeline": (session_timeline(data["events"]) if data["events"] else [])[:TIMELINE_SHOWN],
        }

    @staticmethod
    def _review_item(r: dict[str, Any]) -> dict[str, Any]:
        import json

        meta = json.loads(r["metadata"]) if isinstance(r["metadata"], str) and r["metadata"] else {}
        auto = r["confidence"] > 0.9 and r["access_count"] >= 3
        state = meta.get("review") or ("auto_confirmed" if auto else "needs_review")
        if r["is_deleted"] and state == "needs_review":
            state = "forgotten"
        return {
            **{
                k: r[k]
                for k in (
                    "id",
                    "type",
                    "content",
                    "confidence",
                    "created_at",
                    "is_deleted",
                    "superseded_by",
                    "source_id",
                    "who",
                )
            },
            "review": state,
        }

    def _inspector(self, rows: list[Any], cmp: dict[str, Any]) -> dict[str, Any]:
        """The comparison inspector of one compared session (seed 4.6)."""
        by_id = {r.memory_id: r for r in rows}
        relevance = {k: float(v) for k, v in (cmp["relevance_scores"] or {}).items()}

        def item(mid: str, rank: int) -> dict[str, Any]:
            r = by_id.get(mid)
            return {
                "memory_id": mid,
                "rank": rank,
                "content": r.content if r else None,
                "injected": bool(r and r.was_injected),
                "fts_hits": r.fts_hit_count if r else 0,
                "relevance": relevance.get(mid),
                "label": r.label if r else None,
            }

        predictor = [item(m, i + 1) for i, m in enumerate(cmp["predictor_top_ids"])]
        baseline = [item(m, i + 1) for i, m in enumerate(cmp["baseline_top_ids"])]
        listed = set(cmp["predictor_top_ids"]) | set(cmp["baseline_top_ids"])
        fts_only = [
            {
                "memory_id": r.memory_id,
                "content": r.content,
                "fts_hits": r.fts_hit_count,
                "relevance": relevance.get(r.memory_id),
            }
            for r in rows
            if r.source == "fts_only" and r.memory_id not in listed
        ]
        diversity = [
            {"memory_id": r.memory_id, "content": r.content, "baseline_rank": r.baseline_rank, "final_rank": r.rank}
            for r in rows
            if r.was_injected and r.baseline_rank is not None and r.rank != r.baseline_rank
        ]
        gate = pred_settings.MIN_SCORER_CONFIDENCE
        fused = self._fused_ndcg(cmp)
        return {
            "comparison": cmp,
            "predictor": predictor,
            "baseline": baseline,
            "fts_only": fts_only,
            "diversity": diversity,
            "confidence_gate": gate,
            "passed_gate": cmp["scorer_confidence"] >= gate,
            "fused_ndcg": fused,
        }

    def _fused_ndcg(self, cmp: dict[str, Any]) -> float | None:
        """NDCG@10 of the RRF fusion of the comparison's two top-10s at its alpha, over its pool."""
        if not cmp["predictor_top_ids"]:
            return None
        fused = policy.rrf_fuse(
            cmp["baseline_top_ids"], cmp["predictor_top_ids"], float(cmp["alpha"]), self.c.settings.predictor.rrf_k
        )
        order = sorted(fused, key=lambda m: -fused[m])
        return _ndcg(order, {k: float(v) for k, v in (cmp["relevance_scores"] or {}).items()})

    def review(self, memory_id: str, *, action: str, content: str | None = None) -> dict[str, Any]:
        """Approve, edit or reject one memory of a session-end review (module docstring).

        Raises:
            ValidationError: a bad action or an edit without content. NotFound: unknown id.
            Conflict: the memory is deleted.
        """
        if action not in REVIEW_ACTIONS:
            raise ValidationError(f"action: one of {', '.join(REVIEW_ACTIONS)}", details={"field": "action"})
        m = self.c.memories.get(memory_id)
        if m.is_deleted:
            raise Conflict("this memory is deleted; recover it first", details={"id": memory_id})
        state = {"approve": "approved", "edit": "edited", "reject": "rejected"}[action]
        meta = {**m.metadata, "review": state, "reviewed_at": now_iso()}
        patch: dict[str, Any] = {"metadata": meta}
        if action == "edit":
            if not content or not content.strip():
                raise ValidationError("content: the edited text", details={"field": "content"})
            patch["content"] = content
        if action == "approve":
            patch["confidence"] = 1.0
        updated = self.c.memories.update(memory_id, patch, who=WHO, why=f"session review: {state}")
        if action == "reject":
            updated = self.c.memories.delete(memory_id, who=WHO, why="session review: rejected")
        return {"memory": _memory_view(updated), "review": state}

    # -- predictor ------------------------------------------------------------------------
    def predictor(self, *, page: int) -> dict[str, Any]:
        """The Predictor page: mode (``cold_start`` until a model serves past cold start,
        ``active`` after, ``disabled``), status, charts' series and a page of comparisons."""
        pred = self.c.predictor
        status = pred.status() if pred is not None else None
        minimum = self.c.settings.predictor.min_training_sessions

        def read(c: Any) -> dict[str, Any]:
            return {
                "version": dash_sql.comparisons_version(c),
                "training": dash_sql.training_series(c, limit=500),
                "recent": dash_sql.recent_scored_sessions(c, limit=10),
                "grade": dash_sql.training_grade_count(c, min_confidence=pred_settings.MIN_SCORER_CONFIDENCE),
                "outcomes": pred_sql.training_outcomes(c),
            }

        data = self.db.read(read)
        state = status["state"] if status else {}
        phase = status["phase"] if status else "disabled"
        collected = int(state.get("training_sessions", data["grade"]))
        mode = "disabled" if pred is None else ("cold_start" if phase == "collecting" else "active")
        comps, series, age = self._comparisons(data["version"])
        pg = Page(page, PAGE_SIZE, len(comps))
        return {
            "mode": mode,
            "phase": phase,
            "status": status,
            "minimum": minimum,
            "collected": collected,
            "progress": min(1.0, collected / minimum) if minimum else 1.0,
            "recent": data["recent"],
            "series": series,
            "training": data["training"],
            "outcomes": data["outcomes"],
            "comparisons": comps[pg.offset : pg.offset + PAGE_SIZE],
            "page": pg,
            "series_age_s": age,
            "domain": predictor_domain(self.c, self.obs),
            "latency": self.obs.latency.get("predictor_score").summary(),
            "latency_minutes": self.obs.latency.get("predictor_score").minutes(),
            "errors": self.obs.errors.recent(stage="predictor", limit=10),
        }

    def _comparisons(self, version: Any) -> tuple[list[dict[str, Any]], dict[str, Any], float]:
        """The newest :data:`MAX_COMPARISONS` comparisons (newest first), their chart series
        (:meth:`_series`) and the seconds since both were read: reused for up to
        :data:`SERIES_TTL_S` seconds while ``version`` (the table's
        :func:`~memlane.storage.dashboard.comparisons_version`) is unchanged, since parsing and
        fusing every comparison is most of the page's cost."""
        now = time.monotonic()
        cached = self._series_cache
        if cached is None or cached[1] != version or now - cached[0] > SERIES_TTL_S:
            rows = self.db.read(lambda c: dash_sql.comparisons_series(c, limit=MAX_COMPARISONS))
            cached = (now, version, list(reversed(rows)), self._series(rows))
            self._series_cache = cached
        return cached[2], cached[3], round(now - cached[0], 1)

    def _series(self, comps: list[dict[str, Any]]) -> dict[str, Any]:
        """Per comparison (oldest first): its outcome as a dot at its NDCG@10 margin (won, lost,
        tie, or excluded: scorer confidence under the 0.6 gate), the success rate after it and alpha; and
        the rolling NDCG@10 of baseline, predictor and fused over the last :data:`NDCG_WINDOW`
        sessions whose NDCG is defined (something in the pool had positive relevance)."""
        idx, won, lost, tie, excluded, rate, alpha = [], [], [], [], [], [], []
        nb: list[float | None] = []
        np_: list[float | None] = []
        nf: list[float | None] = []
        keys: list[str] = []
        window: list[tuple[float, float, float]] = []
        for i, c in enumerate(comps):
            idx.append(i + 1)
            keys.append(c["session_key"])
            pw, margin = c["predictor_won"], round(float(c["margin"]), 4)
            counted = float(c["scorer_confidence"]) >= pred_settings.MIN_SCORER_CONFIDENCE
            won.append(margin if counted and pw == 1 else None)
            lost.append(margin if counted and pw == 0 else None)
            tie.append(margin if counted and pw not in (0, 1) else None)
            excluded.append(margin if not counted else None)
            rate.append(c["success_rate"])
            alpha.append(c["alpha"])
            if any(float(v) > 0 for v in (c["relevance_scores"] or {}).values()):
                fused = self._fused_ndcg(c)
                window.append(
                    (c["baseline_ndcg"], c["predictor_ndcg"], fused if fused is not None else c["baseline_ndcg"])
                )
            recent = window[-NDCG_WINDOW:]
            for out, k in ((nb, 0), (np_, 1), (nf, 2)):
                out.append(round(sum(w[k] for w in recent) / len(recent), 4) if recent else None)
        defined = [i for i, v in enumerate(nb) if v is not None]
        return {
            "x": idx,
            "keys": keys,
            "won": won,
            "lost": lost,
            "tie": tie,
            "excluded": excluded,
            "success_rate": rate,
            "alpha": alpha,
            "ndcg_baseline": nb,
            "ndcg_predictor": np_,
            "ndcg_fused": nf,
            "window": NDCG_WINDOW,
            "defined": len(window),
            "last": {"baseline": nb[-1], "predictor": np_[-1], "fused": nf[-1]} if defined else None,
        }

    # -- logs -----------------------------------------------------------------------------
    def logs(
        self, *, kind: str, category: str | None, level: str | None, q: str | None, stage: str | None, page: int
    ) -> dict[str, Any]:
        """The Logs page: one page (newest first) of the log ring's events (``kind="events"``,
        filtered by category, level and above, and words) or of the error ring
        (``kind="errors"``, filtered by stage), with the counts for the filter menus.

        Raises:
            ValidationError: an unknown kind or level.
        """
        if kind not in LOG_KINDS:
            raise ValidationError(f"kind: one of {', '.join(LOG_KINDS)}", details={"field": "kind"})
        if level is not None and level.upper() not in LEVELS:
            raise ValidationError(f"level: one of {', '.join(LEVELS)}", details={"field": "level"})
        offset = (page - 1) * PAGE_SIZE
        if kind == "events":
            items, total = self.obs.logs.page(category=category, level=level, q=q, offset=offset, limit=PAGE_SIZE)
        else:
            items, total = self.obs.errors.page(stage=stage, offset=offset, limit=PAGE_SIZE)
        return {
            "kind": kind,
            "items": items,
            "page": Page(page, PAGE_SIZE, total),
            "categories": self.obs.logs.categories(),
            "stages": self.obs.errors.by_stage(),
            "levels": LEVELS,
            "filters": {"category": category, "level": level.upper() if level else None, "q": q, "stage": stage},
        }

    # -- knowledge ------------------------------------------------------------------------
    def knowledge(
        self, *, q: str | None, entity_type: str | None, page: int, jobs_status: str | None, jobs_page: int
    ) -> dict[str, Any]:
        """The Knowledge page: a page of entities, the workers, the queue and a page of jobs."""
        ents = self.graph.list_entities(q=q, entity_type=entity_type, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
        if jobs_status is not None and jobs_status not in (
            "pending",
            "leased",
            "completed",
            "failed",
            "dead",
            "skipped",
        ):
            raise ValidationError("jobs: an unknown job status", details={"field": "jobs"})

        def read(c: Any) -> dict[str, Any]:
            jobs, total = dash_sql.recent_jobs(
                c, limit=PAGE_SIZE, offset=(jobs_page - 1) * PAGE_SIZE, status=jobs_status
            )
            return {"jobs": jobs, "jobs_total": total, "counts": jobs_sql.counts_by_status(c)}

        data = self.db.read(read)
        return {
            "entities": ents["entities"],
            "page": Page(page, PAGE_SIZE, ents["total"]),
            "workers": self.c.workers.status(),
            "workers_started": self.c.workers.started,
            "pipeline": self.c.settings.memory.pipeline_v2.flags(),
            "queue": data["counts"],
            "jobs": data["jobs"],
            "jobs_page": Page(jobs_page, PAGE_SIZE, data["jobs_total"]),
            "status": self.graph.status(self.c.recall.graph_boost),
        }

    def entity(self, entity_id: str, *, page: int, mentions_page: int = 1) -> dict[str, Any]:
        """One entity: its relations (the graph), aspects, a page of its active attributes
        (``page``) and a page of the memories that mention it (``mentions_page``), in one read.

        Raises:
            NotFound: unknown entity.
        """
        e = self.graph.entity_view(
            entity_id,
            mentions_limit=PAGE_SIZE,
            mentions_offset=(mentions_page - 1) * PAGE_SIZE,
            attributes_limit=PAGE_SIZE,
            attributes_offset=(page - 1) * PAGE_SIZE,
        )
        return {
            "entity": e,
            "aspects": e["aspects"],
            "attributes": e["attributes"],
            "attr_page": Page(page, PAGE_SIZE, e["attributes_total"]),
            "mentions_page": Page(mentions_page, PAGE_SIZE, e["mentions_total"]),
            "graph": graph_layout(e),
        }


def _keep(m: Memory, source_type: str | None, pinned: bool | None, state: str) -> bool:
    if source_type is not None and (m.source_type or "") != source_type:
        return False
    if pinned is not None and m.pinned != pinned:
        return False
    if state == "live":
        return not m.is_deleted and m.superseded_by is None
    if state == "deleted":
        return m.is_deleted
    if state == "superseded":
        return m.superseded_by is not None
    return True


def graph_layout(entity: dict[str, Any], *, size: int = 480, max_nodes: int = 16) -> dict[str, Any]:
    """A radial layout of an entity's neighbourhood for the SVG graph: the entity in the centre,
    its neighbours (by relation mentions) on a circle; ``size`` px square.

    Returns:
        ``{"size", "center": {id, name, x, y}, "nodes": [{id, name, x, y}], "edges": [{x1, y1,
        x2, y2, label, lx, ly, outgoing}]}``.
    """
    cx = cy = size / 2
    radius = size / 2 - 70
    seen: dict[str, dict[str, Any]] = {}
    edges = []
    for rel in entity.get("relations", []):
        outgoing = rel["source_entity_id"] == entity["id"]
        other = rel["target_entity_id"] if outgoing else rel["source_entity_id"]
        name = rel["target_name"] if outgoing else rel["source_name"]
        if other == entity["id"]:
            continue
        if other not in seen:
            if len(seen) >= max_nodes:
                continue
            seen[other] = {"id": other, "name": name or other}
        edges.append((other, rel["relation_type"], outgoing))
    n = max(1, len(seen))
    for i, node in enumerate(seen.values()):
        angle = 2 * math.pi * i / n - math.pi / 2
        node["x"] = round(cx + radius * math.cos(angle), 1)
        node["y"] = round(cy + radius * math.sin(angle), 1)
    out_edges = []
    for other, label, outgoing in edges:
        node = seen[other]
        out_edges.append(
            {
                "x1": cx,
                "y1": cy,
                "x2": node["x"],
                "y2": node["y"],
                "label": label,
                "lx": round((cx + node["x"]) / 2, 1),
                "ly": round((cy + node["y"]) / 2, 1),
                "outgoing": outgoing,
            }
        )
    return {
        "size": size,
        "center": {"id": entity["id"], "name": entity["name"], "x": cx, "y": cy},
        "nodes": list(seen.values()),
        "edges": out_edges,
    }


__all__ = ["DashboardService", "FLAGGED_WRONG_LABEL", "FLAGGED_WRONG_REASON", "Page", "graph_layout", "page_number"]
