"""Pruning and lifecycle of V3 memories (seed memory-system-v3-design.md section 13; docs/v3.md).

Rules (a memory that is pinned or user-verified is never touched by a rule; "prune" is memlane's
soft delete with ``who="lifecycle"`` and the rule as ``why``: the memory leaves recall, can be
recovered, and the retention sweep removes it for good after its tombstone window):

============== ====================================================================================
rule           what
============== ====================================================================================
session        scope ``session``, older than :data:`SESSION_DAYS` (7) days: pruned
decayed        a half-life (``decay_half_life_days``; work_state 7, dead_end 90 by default):
               confidence x 0.5^(days since last access / half-life) below :data:`MIN_CONFIDENCE`
               (0.2): pruned
low_confidence scope ``global`` or ``module``, confidence below 0.2 and not accessed for
               :data:`IDLE_DAYS` (60) days: pruned
file_missing   a related file missing under the project's root: marked stale (``stale_at``)
files_gone     ``commit_auto`` memories (module_insight in the seed) whose related files are all
               missing: pruned
recipe_expired ``workflow_recipe`` not validated (``type_fields.last_validated_at``, else created)
               for :data:`RECIPE_DAYS` (60) days: pruned
recipe_changed ``workflow_recipe`` whose step's ``canonical_file`` changed after it was last
               validated (file modification time): marked stale
============== ====================================================================================

The ``context_cost`` rolling window (seed: "retain the last 30 sessions of data per module. Prune
older samples") is applied to the samples, not to memories: each run deletes every module's
context-cost samples beyond its newest 30 (:meth:`memlane.v3.context_cost.ContextCosts.trim`;
reported as ``samples_trimmed``).

File rules need the project's root: given by the caller, else the working directory of the
project's latest session. Paths that are absolute or leave the root (``..``) are not judged.
User controls: :meth:`LifecycleService.archive_work_unit` (a merged work unit's memories),
:meth:`LifecycleService.prune_low_confidence` (threshold and idle days of the user's choosing),
:meth:`LifecycleService.run` with ``dry_run``. The background :class:`LifecycleWorker` runs the job
at start and after every :data:`SESSIONS_BETWEEN_RUNS` (20) ended sessions.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memlane.config.clock import now_iso
from memlane.errors import MemlaneError, ValidationError
from memlane.services.memory_service import MemoryService
from memlane.storage import lifecycle as lc_sql
from memlane.storage.db import Database
from memlane.storage.lifecycle import Candidate
from memlane.v3.context_cost import ContextCosts
from memlane.v3.model import check_str
from memlane.workers.runtime import PollingWorker

log = logging.getLogger(__name__)

SESSION_DAYS = 7.0
MIN_CONFIDENCE = 0.2
IDLE_DAYS = 60.0
RECIPE_DAYS = 60.0
SESSIONS_BETWEEN_RUNS = 20
WHO = "lifecycle"


def _days(since: str | None, now: datetime) -> float:
    if not since:
        return 0.0
    t = datetime.fromisoformat(since.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return max(0.0, (now - t).total_seconds() / 86400.0)


def _inside(root: Path, rel: str) -> Path | None:
    """``root/rel`` when ``rel`` is a relative path that stays inside ``root``; else None."""
    if not rel or os.path.isabs(rel):
        return None
    p = (root / rel).resolve()
    try:
        p.relative_to(root.resolve())
    except ValueError:
        return None
    return p


def decide(m: Candidate, now: datetime, root: Path | None) -> tuple[str, str] | None:
    """The first rule that applies to ``m``: ``("prune" | "stale", rule)``, or None."""
    idle = _days(m.last_accessed or m.created_at, now)
    if m.scope == "session" and _days(m.created_at, now) > SESSION_DAYS:
        return "prune", "session"
    if m.decay_half_life_days and m.confidence * 0.5 ** (idle / m.decay_half_life_days) < MIN_CONFIDENCE:
        return "prune", "decayed"
    if m.scope in ("global", "module") and m.confidence < MIN_CONFIDENCE and idle > IDLE_DAYS:
        return "prune", "low_confidence"
    if m.type == "workflow_recipe":
        validated = m.type_fields.get("last_validated_at") or m.created_at
        try:
            if _days(validated, now) > RECIPE_DAYS:
                return "prune", "recipe_expired"
        except ValueError:
            pass
    if root is None:
        return None
    if m.related_files:
        paths = [p for p in (_inside(root, f) for f in m.related_files) if p is not None]
        missing = [p for p in paths if not p.exists()]
        if m.source == "commit_auto" and paths and len(missing) == len(paths):
            return "prune", "files_gone"
        if missing and m.stale_at is None:
            return "stale", "file_missing"
    if m.type == "workflow_recipe" and m.stale_at is None:
        validated = m.type_fields.get("last_validated_at") or m.created_at
        try:
            vt = datetime.fromisoformat(str(validated).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
        for step in m.type_fields.get("steps", []):
            p = _inside(root, step.get("canonical_file") or "")
            if p is not None and p.exists() and p.stat().st_mtime > vt:
                return "stale", "recipe_changed"
    return None


class LifecycleService:
    """Runs the lifecycle rules and the user's pruning controls over the store."""

    def __init__(self, db: Database, memories: MemoryService) -> None:
        self.db = db
        self.memories = memories
        self.costs = ContextCosts(db, memories)

    def run(
        self,
        *,
        project: str | None = None,
        project_root: str | None = None,
        dry_run: bool = False,
        now: str | None = None,
    ) -> dict[str, Any]:
        """Apply the rules once. ``project_root`` (a directory) is used for ``project`` (or for
        every memory when no project is given); otherwise each project's latest session's
        working directory. Returns ``{"pruned", "stale_marked", "by_rule": {rule: n}, "ids":
        {rule: [...]}, "samples_trimmed", "dry_run"}`` (``ids`` capped at 100 per rule;
        ``samples_trimmed``: context-cost samples beyond the rolling window).

        Raises:
            ValidationError: ``project_root`` is not a directory; a bad ``now``.
        """
        at = now or now_iso()
        try:
            now_dt = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            raise ValidationError("now: expected an ISO-8601 time", details={"field": "now"}) from None
        if project is not None:
            check_str(project, "project", max_chars=200)
        given_root = None
        if project_root is not None:
            given_root = Path(check_str(project_root, "project_root")).expanduser()
            if not given_root.is_dir():
                raise ValidationError(
                    f"project_root: not a directory: {project_root[:200]}", details={"field": "project_root"}
                )
        roots = {} if given_root is not None else self.db.read(lc_sql.project_roots)
        cands = self.db.read(lambda c: lc_sql.candidates(c, project))
        by_rule: Counter[str] = Counter()
        ids: dict[str, list[str]] = {}
        prune: list[tuple[str, str]] = []
        stale: list[str] = []
        for m in cands:
            root = given_root
            if root is None and m.project in roots and Path(roots[m.project]).is_dir():
                root = Path(roots[m.project])
            d = decide(m, now_dt, root)
            if d is None:
                continue
            action, rule = d
            by_rule[rule] += 1
            ids.setdefault(rule, [])
            if len(ids[rule]) < 100:
                ids[rule].append(m.id)
            (prune.append((m.id, rule)) if action == "prune" else stale.append(m.id))
        pruned = stale_marked = 0
        if not dry_run:
            for mid, rule in prune:
                if self._delete(mid, f"lifecycle rule {rule}"):
                    pruned += 1
            if stale:
                stale_marked = self.db.write(lambda c: lc_sql.mark_stale(c, stale, at))
        else:
            pruned, stale_marked = len(prune), len(stale)
        return {
            "pruned": pruned,
            "stale_marked": stale_marked,
            "by_rule": dict(by_rule),
            "ids": ids,
            "samples_trimmed": self.costs.trim(dry_run=dry_run),
            "dry_run": dry_run,
        }

    def _delete(self, memory_id: str, why: str) -> bool:
        """Soft-delete one memory; False when it changed meanwhile (deleted, gone)."""
        try:
            self.memories.delete(memory_id, who=WHO, why=why)
        except MemlaneError as exc:
            log.info("lifecycle: %s left alone: %s", memory_id, exc)
            return False
        return True

    def archive_work_unit(self, methodology: str, work_unit: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Archive (soft-delete) the memories of a merged work unit (``work_unit`` = the outermost
        hierarchy entry). Pinned and user-verified memories stay. Returns ``{"archived", "ids"}``."""
        check_str(methodology, "methodology", max_chars=100)
        check_str(work_unit, "work_unit")
        ids = self.db.read(lambda c: lc_sql.work_unit_ids(c, methodology, work_unit))
        if not dry_run:
            ids = [mid for mid in ids if self._delete(mid, f"work unit {methodology}:{work_unit} merged")]
        return {"archived": len(ids), "ids": ids[:100], "dry_run": dry_run}

    def prune_low_confidence(
        self,
        *,
        threshold: float = MIN_CONFIDENCE,
        idle_days: float = 30.0,
        project: str | None = None,
        dry_run: bool = False,
        now: str | None = None,
    ) -> dict[str, Any]:
        """The user's "prune low-confidence memories": every unprotected memory (any scope) with
        confidence below ``threshold`` not accessed for ``idle_days``. Returns ``{"pruned", "ids"}``.

        Raises:
            ValidationError: threshold outside [0, 1] or negative idle_days.
        """
        if isinstance(threshold, bool) or not 0.0 <= threshold <= 1.0:
            raise ValidationError("threshold: must be in [0, 1]", details={"field": "threshold"})
        if isinstance(idle_days, bool) or not idle_days >= 0:
            raise ValidationError("idle_days: must be >= 0", details={"field": "idle_days"})
        if project is not None:
            project = check_str(project, "project")
        now_dt = datetime.fromisoformat((now or now_iso()).replace("Z", "+00:00"))
        cands = self.db.read(lambda c: lc_sql.candidates(c, project))
        ids = [
            m.id
            for m in cands
            if m.confidence < threshold and _days(m.last_accessed or m.created_at, now_dt) >= idle_days
        ]
        if not dry_run:
            ids = [mid for mid in ids if self._delete(mid, f"pruned by the user: confidence < {threshold}")]
        return {"pruned": len(ids), "ids": ids[:100], "dry_run": dry_run}


class LifecycleWorker(PollingWorker):
    """Runs :meth:`LifecycleService.run` at its first tick and again each time
    :data:`SESSIONS_BETWEEN_RUNS` more sessions have ended (checked every ``poll_ms``)."""

    def __init__(
        self,
        service: LifecycleService,
        *,
        poll_ms: float = 60_000,
        every: int = SESSIONS_BETWEEN_RUNS,
        now: Callable[[], str] = now_iso,
    ) -> None:
        super().__init__("v3-lifecycle", poll_ms=poll_ms)
        self.service = service
        self.every = every
        self._now = now
        self._last_ended: int | None = None
        self.last_report: dict[str, Any] | None = None

    def tick(self) -> bool:
        ended = self.service.db.read(lc_sql.ended_sessions)
        if self._last_ended is not None and ended - self._last_ended < self.every:
            return False
        self._last_ended = ended
        self.last_report = self.service.run(now=self._now())
        if self.last_report["pruned"] or self.last_report["stale_marked"]:
            log.info("lifecycle: %s", self.last_report["by_rule"])
        return False
