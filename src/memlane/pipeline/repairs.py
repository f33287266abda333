"""Repair actions of the maintenance worker, each rate limited by a cooldown and an hourly
budget (memory-pipeline-v2.md "Maintenance Worker"; limits from ``pipeline_v2.repair``).

Actions (see :data:`memlane.pipeline.diagnostics.ACTIONS`):

* ``release_stale_leases`` -- leases past ``leased_until`` back to pending
  (``requeueCooldownMs`` / ``requeueHourlyBudget``);
* ``requeue_dead_jobs`` -- up to :data:`REQUEUE_BATCH` dead jobs back to pending with fresh
  attempts (``requeue*`` limits);
* ``check_fts_consistency`` -- FTS5 integrity check and row count; ``rebuild`` when out of sync
  (:data:`FTS_COOLDOWN_MS`, :data:`FTS_HOURLY_BUDGET`);
* ``trigger_retention_sweep`` -- one retention sweep (:data:`SWEEP_COOLDOWN_MS`,
  :data:`SWEEP_HOURLY_BUDGET`);
* ``reembed`` -- up to :data:`REEMBED_BATCH` stale memories through the embedding tracker
  (``reembed*`` limits);
* ``dedup`` -- semantic dedup: among the newest ``dedupBatchSize`` live memories, pairs whose
  content vectors have cosine >= ``dedupSemanticThreshold``; the lesser of each pair (not
  pinned, then lower importance, then newer) is soft-deleted (``dedup*`` limits). Destructive:
  needs pipeline mutations allowed and ``autonomous.allowUpdateDelete``.

A run that is refused by its limits raises :class:`RepairRateLimited` (HTTP 429) and is not
counted; every run that starts counts against the budget, whatever it finds.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from memlane.config.clock import now_iso
from memlane.config.pipeline import PipelineV2Settings
from memlane.errors import Conflict, MemlaneError, NotFound, ValidationError
from memlane.pipeline import diagnostics as dg
from memlane.pipeline.embedding_tracker import EmbeddingTracker
from memlane.pipeline.retention import sweep
from memlane.recall.memory_index import iso_to_epoch
from memlane.services.memory_service import MemoryService
from memlane.storage import jobs as jobs_sql
from memlane.storage import maintenance as mnt_sql
from memlane.storage import memories as mem_sql
from memlane.storage.fts import Filters, integrity_ok

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
REQUEUE_BATCH = 100
REEMBED_BATCH = 64
FTS_COOLDOWN_MS = 600_000
FTS_HOURLY_BUDGET = 6
SWEEP_COOLDOWN_MS = 600_000
SWEEP_HOURLY_BUDGET = 6
#: Nearest neighbours examined per memory by the dedup.
DEDUP_NEIGHBOURS = 5


class RepairRateLimited(MemlaneError):
    """A repair refused by its cooldown or hourly budget; ``details.retry_after_ms`` says when."""

    status = 429
    code = "rate_limited"


@dataclass(frozen=True, slots=True)
class RepairOutcome:
    """What one repair run did: ``result`` holds its counts; ``at`` is ISO-8601 UTC."""

    action: str
    at: str
    result: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RateLimiter:
    """Per-action cooldown (ms since the last run) and budget (runs in the last hour).

    Args:
        limits: ``action -> () -> (cooldown_ms, hourly_budget)`` (read at each check: hot config).
    """

    def __init__(self, limits: dict[str, Callable[[], tuple[int, int]]]) -> None:
        self._limits = limits
        self._runs: dict[str, deque[float]] = {a: deque() for a in limits}

    def retry_after_ms(self, action: str, now_ms: float) -> tuple[float, str | None]:
        """``(0, None)`` when ``action`` may run at ``now_ms`` (epoch ms); else the wait in ms
        and the reason (``cooldown`` or ``hourly_budget``)."""
        cooldown, budget = self._limits[action]()
        runs = self._runs[action]
        while runs and runs[0] <= now_ms - HOUR_MS:
            runs.popleft()
        if runs and now_ms - runs[-1] < cooldown:
            return cooldown - (now_ms - runs[-1]), "cooldown"
        if len(runs) >= budget:
            return runs[0] + HOUR_MS - now_ms, "hourly_budget"
        return 0.0, None

    def record(self, action: str, now_ms: float) -> None:
        """Count one run of ``action`` at ``now_ms`` (epoch ms)."""
        self._runs[action].append(now_ms)

    def state(self, action: str, now_ms: float) -> dict[str, Any]:
        """cooldown_ms, hourly_budget, runs_last_hour, retry_after_ms (0 = may run now), blocked_by."""
        wait, why = self.retry_after_ms(action, now_ms)
        cooldown, budget = self._limits[action]()
        return {
            "cooldown_ms": cooldown,
            "hourly_budget": budget,
            "runs_last_hour": len(self._runs[action]),
            "retry_after_ms": round(wait, 3),
            "blocked_by": why,
        }


class Repairs:
    """The repair actions over the container's objects.

    Args:
        memories: the memory service (its db, index, delete with history).
        pipeline: returns the current pipeline settings.
        tracker: the embedding tracker used by ``reembed`` (None: nothing to re-embed with).
        now: the clock, ISO-8601 UTC (cooldowns and budgets are measured on it).
    """

    def __init__(
        self,
        memories: MemoryService,
        pipeline: Callable[[], PipelineV2Settings],
        *,
        tracker: EmbeddingTracker | None = None,
        now: Callable[[], str] = now_iso,
    ) -> None:
        self.memories = memories
        self.db = memories.db
        self._pipeline = pipeline
        self.tracker = tracker
        self._now = now
        r = lambda: pipeline().repair  # noqa: E731
        self.limiter = RateLimiter(
            {
                dg.RELEASE_STALE_LEASES: lambda: (r().requeue_cooldown_ms, r().requeue_hourly_budget),
                dg.REQUEUE_DEAD_JOBS: lambda: (r().requeue_cooldown_ms, r().requeue_hourly_budget),
                dg.CHECK_FTS: lambda: (FTS_COOLDOWN_MS, FTS_HOURLY_BUDGET),
                dg.RETENTION_SWEEP: lambda: (SWEEP_COOLDOWN_MS, SWEEP_HOURLY_BUDGET),
                dg.REEMBED: lambda: (r().reembed_cooldown_ms, r().reembed_hourly_budget),
                dg.DEDUP: lambda: (r().dedup_cooldown_ms, r().dedup_hourly_budget),
            }
        )
        self._impl: dict[str, Callable[..., dict[str, Any]]] = {
            dg.RELEASE_STALE_LEASES: self._release_stale_leases,
            dg.REQUEUE_DEAD_JOBS: self._requeue_dead_jobs,
            dg.CHECK_FTS: self._check_fts,
            dg.RETENTION_SWEEP: self._retention_sweep,
            dg.REEMBED: self._reembed,
            dg.DEDUP: self._dedup,
        }

    def _now_ms(self, at: str) -> float:
        return iso_to_epoch(at.replace("Z", "+00:00")) * 1000.0

    def run(self, action: str, *, dry_run: bool = False) -> RepairOutcome:
        """Run ``action`` now if its cooldown and budget allow.

        Args:
            dry_run: only for ``dedup``: report the pairs, delete nothing (still rate limited).

        Raises:
            NotFound: an unknown action. RepairRateLimited: cooldown or budget. Conflict: a
            destructive action while mutations are not allowed. ValidationError: dry_run on
            another action.
        """
        if action not in self._impl:
            raise NotFound(
                f"unknown repair action {action!r:.80}; one of {list(self._impl)}",
                details={"action": action[:80], "actions": list(self._impl)},
            )
        if dry_run and action != dg.DEDUP:
            raise ValidationError("dry_run: only the dedup repair has a dry run", details={"field": "dry_run"})
        if action == dg.DEDUP and not dry_run:
            p = self._pipeline()
            if not (p.mutations_allowed and p.autonomous.allow_update_delete):
                raise Conflict(
                    "dedup deletes memories: needs pipeline mutations allowed (enabled, not shadow, not "
                    "frozen) and autonomous.allowUpdateDelete",
                    details={"action": action, **p.flags()},
                )
        at = self._now()
        now_ms = self._now_ms(at)
        wait, why = self.limiter.retry_after_ms(action, now_ms)
        if why is not None:
            raise RepairRateLimited(
                f"{action}: refused by its {why.replace('_', ' ')}; retry in {wait / 1000:.1f} s",
                details={"action": action, "blocked_by": why, "retry_after_ms": round(wait, 3)},
            )
        self.limiter.record(action, now_ms)
        result = self._impl[action](at, dry_run) if action == dg.DEDUP else self._impl[action](at)
        log.info("repair %s: %s", action, result)
        return RepairOutcome(action, at, result)

    def limits(self) -> dict[str, dict[str, Any]]:
        """Every action's limiter state now (see :meth:`RateLimiter.state`)."""
        now_ms = self._now_ms(self._now())
        return {a: self.limiter.state(a, now_ms) for a in self._impl}

    # -- actions ---------------------------------------------------------------------------
    def _release_stale_leases(self, at: str) -> dict[str, Any]:
        return {"released": self.db.write(lambda c: jobs_sql.reap_stale(c, at))}

    def _requeue_dead_jobs(self, at: str) -> dict[str, Any]:
        return {"requeued": self.db.write(lambda c: mnt_sql.requeue_dead(c, now=at, limit=REQUEUE_BATCH))}

    def _check_fts(self, at: str) -> dict[str, Any]:
        def check(c) -> tuple[bool, int, int]:
            return integrity_ok(c), mnt_sql.fts_row_count(c), mnt_sql.memory_row_count(c)

        ok, rows, total = self.db.write(check)
        before = ok and rows == total
        if before:
            return {"in_sync": True, "rebuilt": False, "fts_rows": rows, "memories": total}
        self.db.write(mnt_sql.fts_rebuild)
        ok2, rows2, total2 = self.db.write(check)
        return {
            "in_sync": ok2 and rows2 == total2,
            "rebuilt": True,
            "fts_rows_before": rows,
            "fts_rows": rows2,
            "memories": total2,
        }

    def _retention_sweep(self, at: str) -> dict[str, Any]:
        return sweep(self.db, now=at)

    def _reembed(self, at: str) -> dict[str, Any]:
        if self.tracker is None or self.tracker.embedder is None:
            return {"embedded": 0, "failed": 0, "remaining": 0, "note": "no embedder configured"}
        return self.tracker.refresh(limit=REEMBED_BATCH)

    def _dedup(self, at: str, dry_run: bool) -> dict[str, Any]:
        p = self._pipeline().repair
        index = self.memories.index
        cands = self.db.read(lambda c: mnt_sql.newest_current(c, p.dedup_batch_size))
        if not cands or index.dimensions == 0:
            return {"examined": 0, "pairs": [], "deleted": 0, "dry_run": dry_run}
        vecs, has = index.vectors_of([c[0] for c in cands])
        flt = Filters(exclude_superseded=True)
        found: list[tuple[int, int, float]] = []
        for (seq, *_), v, ok in zip(cands, vecs, has):
            if ok:
                found += [
                    (seq, s2, sc)
                    for s2, sc in index.search(v, DEDUP_NEIGHBOURS + 1, flt, context_weight=0.0)
                    if s2 != seq and sc >= p.dedup_semantic_threshold
                ]
        rows = self.db.read(lambda c: mem_sql.get_by_seqs(c, sorted({s for f in found for s in f[:2]})))
        removed: set[int] = set()
        pairs, deleted = [], 0
        for a, b, sc in sorted(found, key=lambda f: -f[2]):
            ma, mb = rows.get(a), rows.get(b)
            if ma is None or mb is None or a in removed or b in removed or ma.is_deleted or mb.is_deleted:
                continue
            # keep: pinned first, then higher importance, then the older memory
            keep, drop = sorted((ma, mb), key=lambda m: (not m.pinned, -m.importance, m.seq))
            if drop.pinned:
                continue
            removed.add(drop.seq)
            pairs.append({"keep": keep.id, "delete": drop.id, "cosine": round(sc, 4)})
            if not dry_run:
                try:
                    self.memories.delete(
                        drop.id, who="maintenance", why=f"semantic duplicate of {keep.id} (cosine {sc:.3f})"
                    )
                    deleted += 1
                except (Conflict, NotFound):
                    pass
        return {
            "examined": int(has.sum()),
            "pairs": pairs,
            "deleted": deleted,
            "dry_run": dry_run,
            "threshold": p.dedup_semantic_threshold,
        }
