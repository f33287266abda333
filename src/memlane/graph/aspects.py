"""Aspect feedback (memory-pipeline-v2.md "Aspect Feedback").

After a session ends, the memories that prompt-submit recall matched during it
(``session_memories.fts_hit_count > 0``, written by the sessions service) confirm the aspects
their attributes sit under: per aspect the FTS hits are summed (``confirmations``) and
``weight += delta * confirmations``, clamped to [``min_weight``, ``max_weight``]. Aspects whose
memories were ignored do not gain.

Decay: every ``decay_every_sessions`` processed sessions, aspects not updated for more than
``stale_days`` days lose ``decay_rate`` of weight, floored at ``min_weight``.

The :class:`AspectFeedbackWorker` polls for ended sessions not yet fed back (recorded in
``aspect_feedback_sessions``, so each session counts once even across restarts): nothing is
added to the prompt or session-end paths. Telemetry (seed names): ``feedbackAspectsUpdated``,
``feedbackFtsConfirmations``, ``feedbackDecayedAspects``, ``feedbackPropagatedAttributes``
(always 0: propagation to attributes is not implemented).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memlane.config.clock import now_iso
from memlane.storage import graph as graph_sql
from memlane.storage.db import Database
from memlane.storage.jobs import add_ms
from memlane.workers.runtime import PollingWorker

DAY_MS = 86_400_000
#: The aspect-feedback worker's name in the container's registry.
FEEDBACK_WORKER = "aspect-feedback"


@dataclass(frozen=True)
class AspectFeedbackConfig:
    """Aspect feedback parameters.

    Attributes:
        delta: weight added per FTS confirmation (fraction).
        min_weight, max_weight: the weight's bounds, in [0, 1].
        stale_days: days without an update before an aspect decays.
        decay_rate: weight removed per decay pass (fraction).
        decay_every_sessions: sessions processed between decay passes (1 = every session).
        sessions_per_tick: ended sessions the worker processes per tick.
        poll_ms: the worker's delay when idle, ms.
    """

    delta: float = 0.02
    min_weight: float = 0.1
    max_weight: float = 1.0
    stale_days: float = 14.0
    decay_rate: float = 0.05
    decay_every_sessions: int = 10
    sessions_per_tick: int = 20
    poll_ms: float = 30_000


def apply_fts_overlap_feedback(
    conn: sqlite3.Connection, session_key: str, cfg: AspectFeedbackConfig, at: str
) -> dict[str, int]:
    """Feed one session's FTS hits back into aspect weights (seed: applyFtsOverlapFeedback), and
    record the session as done. Run inside a write transaction.

    Returns:
        ``{"aspects_updated", "fts_confirmations"}``.
    """
    confirmations = graph_sql.fts_confirmations_by_aspect(conn, session_key)
    updated = 0
    for aspect_id, n in sorted(confirmations.items()):
        updated += graph_sql.add_aspect_weight(
            conn, aspect_id, cfg.delta * n, min_weight=cfg.min_weight, max_weight=cfg.max_weight, at=at
        )
    total = sum(confirmations.values())
    graph_sql.record_session_feedback(conn, session_key, confirmations=total, aspects=updated, at=at)
    return {"aspects_updated": updated, "fts_confirmations": total}


def decay_aspect_weights(conn: sqlite3.Connection, cfg: AspectFeedbackConfig, at: str) -> int:
    """Decay aspects not updated for more than ``stale_days`` (seed: decayAspectWeights); returns
    how many decayed. Run inside a write transaction."""
    return graph_sql.decay_stale_aspects(
        conn, stale_before=add_ms(at, -cfg.stale_days * DAY_MS), rate=cfg.decay_rate, min_weight=cfg.min_weight, at=at
    )


class AspectFeedbackWorker(PollingWorker):
    """Applies aspect feedback for ended sessions, and the decay every N sessions.

    Args:
        db: the database.
        cfg: the parameters.
        enabled: read every tick (e.g. ``graph.enabled``).
        now: clock, ISO-8601 UTC.
    """

    def __init__(
        self,
        db: Database,
        cfg: AspectFeedbackConfig = AspectFeedbackConfig(),
        *,
        name: str = FEEDBACK_WORKER,
        enabled: Callable[[], bool] | None = None,
        now: Callable[[], str] = now_iso,
    ) -> None:
        super().__init__(name, poll_ms=cfg.poll_ms, enabled=enabled)
        self.db = db
        self.cfg = cfg
        self._now = now
        self._since_decay = 0
        self._tlock = threading.Lock()
        self.feedback = {
            "feedbackAspectsUpdated": 0,
            "feedbackFtsConfirmations": 0,
            "feedbackDecayedAspects": 0,
            "feedbackPropagatedAttributes": 0,
            "sessions": 0,
        }

    def tick(self) -> bool:
        """Process up to ``sessions_per_tick`` ended sessions; True when any was processed."""
        keys = self.db.read(lambda c: graph_sql.ended_sessions_without_feedback(c, self.cfg.sessions_per_tick))
        if not keys:
            return False
        for key in keys:
            self.process(key)
        return True

    def process(self, session_key: str) -> dict[str, int]:
        """Feed back one session (one write transaction), then decay when due."""
        at = self._now()
        res = self.db.write(lambda c: apply_fts_overlap_feedback(c, session_key, self.cfg, at))
        decayed = 0
        self._since_decay += 1
        if self._since_decay >= max(1, self.cfg.decay_every_sessions):
            self._since_decay = 0
            decayed = self.db.write(lambda c: decay_aspect_weights(c, self.cfg, at))
        with self._tlock:
            self.feedback["feedbackAspectsUpdated"] += res["aspects_updated"]
            self.feedback["feedbackFtsConfirmations"] += res["fts_confirmations"]
            self.feedback["feedbackDecayedAspects"] += decayed
            self.feedback["sessions"] += 1
        return {**res, "decayed": decayed}

    def telemetry(self) -> dict[str, Any]:
        """:meth:`PollingWorker.telemetry` plus the feedback counters."""
        with self._tlock:
            return {**super().telemetry(), **self.feedback}
