"""The maintenance worker: diagnostics, recommendations and, in execute mode, rate-limited
repairs, with a halt tracker (memory-pipeline-v2.md "Maintenance Worker").

A cycle (:meth:`MaintenanceWorker.run_cycle`):

1. :func:`get_diagnostics` -> a report with a health score in [0, 1];
2. :func:`build_recommendations` -> repair actions;
3. observe mode: the recommendations are logged and the cycle ends. Execute mode
   (``autonomous.maintenanceMode: execute`` and pipeline mutations allowed): each
   recommended action not halted runs through :class:`Repairs` (cooldown and hourly budget
   per action; a refused one is reported as ``rate_limited``), then diagnostics are re-read
   and the score delta recorded.

Halt tracker: an action whose cycles end 3 times in a row (:data:`HALT_AFTER`) without
improving the score is halted for the worker's lifetime; a cycle with no recommendation
(healthy) resets the tracker.

Scheduling: every ``autonomous.maintenanceIntervalMs`` ms, only while
``pipeline_v2.maintenance_scheduled`` (pipeline and ``autonomous.enabled`` on, not frozen);
:meth:`run_cycle` stays callable on demand (``POST /api/maintenance/run``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from memlane.config.clock import now_iso
from memlane.config.pipeline import PipelineV2Settings
from memlane.pipeline.diagnostics import DiagnosticsReport, build_recommendations, get_diagnostics
from memlane.pipeline.repairs import RepairRateLimited, Repairs
from memlane.workers.runtime import PollingWorker

log = logging.getLogger(__name__)

#: Consecutive non-improving runs after which an action is halted.
HALT_AFTER = 3


class HaltTracker:
    """Counts each action's consecutive non-improving runs; halts it at ``limit``."""

    def __init__(self, limit: int = HALT_AFTER) -> None:
        self.limit = limit
        self.consecutive: dict[str, int] = {}
        self.halted: set[str] = set()

    def record(self, action: str, improved: bool) -> None:
        """One run of ``action``: an improvement resets its count, otherwise it grows."""
        if improved:
            self.consecutive[action] = 0
            return
        self.consecutive[action] = self.consecutive.get(action, 0) + 1
        if self.consecutive[action] >= self.limit and action not in self.halted:
            self.halted.add(action)
            log.warning("maintenance: %s halted after %d runs without improvement", action, self.limit)

    def is_halted(self, action: str) -> bool:
        return action in self.halted

    def reset(self) -> None:
        """Health is good: forget every count and halt."""
        self.consecutive.clear()
        self.halted.clear()


class MaintenanceWorker(PollingWorker):
    """Runs a maintenance cycle every ``autonomous.maintenanceIntervalMs`` ms while scheduled.

    Args:
        repairs: the rate-limited repair actions (its db is read for diagnostics).
        pipeline: returns the current pipeline settings.
        model: returns the current embedding model id (None: no embedder).
        now: the clock, ISO-8601 UTC.
    """

    def __init__(
        self,
        repairs: Repairs,
        pipeline: Callable[[], PipelineV2Settings],
        *,
        model: Callable[[], str | None] = lambda: None,
        now: Callable[[], str] = now_iso,
        name: str = "maintenance",
    ) -> None:
        super().__init__(
            name,
            poll_ms=lambda: pipeline().autonomous.maintenance_interval_ms,
            enabled=lambda: pipeline().maintenance_scheduled,
        )
        self.repairs = repairs
        self.db = repairs.db
        self._pipeline = pipeline
        self._model = model
        self._now = now
        self.halt = HaltTracker()
        self.cycles = 0
        self.last_cycle: dict[str, Any] | None = None

    def tick(self) -> bool:
        self.run_cycle()
        return False  # one cycle per interval

    def report(self) -> DiagnosticsReport:
        """The current :class:`DiagnosticsReport` (one read, no repair)."""
        return get_diagnostics(self.db, now=self._now(), model=self._model())

    def diagnose(self, report: DiagnosticsReport | None = None) -> dict[str, Any]:
        """The current report (or ``report``, read moments ago by the caller), its
        recommendations, halted actions and repair limits (no repair)."""
        report = report if report is not None else self.report()
        return {
            "report": report.as_dict(),
            "recommendations": [{"action": r.action, "reason": r.reason} for r in build_recommendations(report)],
            "halted": sorted(self.halt.halted),
            "limits": self.repairs.limits(),
            "mode": self._pipeline().autonomous.maintenance_mode,
            "last_cycle": self.last_cycle,
        }

    def run_cycle(self, *, execute: bool | None = None) -> dict[str, Any]:
        """One cycle.

        Args:
            execute: run the repairs (True), only recommend (False); None = the settings
                (``pipeline_v2.maintenance_executes``).

        Returns:
            mode, score_before, recommendations, actions (action -> outcome / ``halted`` /
            ``rate_limited`` / ``error``), score_after and delta (execute mode only).
        """
        p = self._pipeline()
        run = p.maintenance_executes if execute is None else execute
        before = get_diagnostics(self.db, now=self._now(), model=self._model())
        recs = build_recommendations(before)
        out: dict[str, Any] = {
            "at": before.at,
            "mode": "execute" if run else "observe",
            "score_before": before.score,
            "recommendations": [{"action": r.action, "reason": r.reason} for r in recs],
            "actions": {},
        }
        self.cycles += 1
        if not recs:
            self.halt.reset()
        elif not run:
            log.info(
                "maintenance (observe): score %.3f, recommended %s",
                before.score,
                ", ".join(f"{r.action} ({r.reason})" for r in recs),
            )
        else:
            ran = []
            for rec in recs:
                if self.halt.is_halted(rec.action):
                    out["actions"][rec.action] = {"status": "halted"}
                    continue
                try:
                    outcome = self.repairs.run(rec.action)
                    out["actions"][rec.action] = {"status": "done", "result": outcome.result}
                    ran.append(rec.action)
                except RepairRateLimited as exc:
                    out["actions"][rec.action] = {"status": "rate_limited", **exc.details}
                except Exception as exc:  # one failing repair does not stop the others
                    log.exception("maintenance: %s failed", rec.action)
                    out["actions"][rec.action] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
                    ran.append(rec.action)
            after = get_diagnostics(self.db, now=self._now(), model=self._model())
            out.update(score_after=after.score, delta=round(after.score - before.score, 6))
            for action in ran:
                self.halt.record(action, improved=after.score > before.score)
        out["halted"] = sorted(self.halt.halted)
        self.last_cycle = out
        return out

    def telemetry(self) -> dict[str, Any]:
        """:meth:`PollingWorker.telemetry` plus cycles, halted actions and the last cycle."""
        return {
            **super().telemetry(),
            "cycles": self.cycles,
            "halted": sorted(self.halt.halted),
            "last_cycle": self.last_cycle,
        }
