"""The daemon's predictor: score the pool, fuse with the baseline, compare, earn alpha, retrain.

predictive-memory-scorer.md Phase 3 ("Hook Flow (session-start)", "Ranking Fusion",
"Success Rate Tracking", "Exploration Sampling"), Phase 5 (config) and 5b (drift). The model
runs in the sidecar (:class:`memlane.predictor.client.SidecarClient`); every failure there
means the baseline ranking for that request, never an error to the caller.

At session-start :meth:`PredictorService.rank` logs every candidate's raw signals, asks the
sidecar for scores within ``score_timeout_ms``, fuses both rankings with RRF (alpha = the
baseline's earned weight) and may swap one injected slot for exploration. At session-end,
once labels exist, :meth:`on_session_scored` computes NDCG@10 of both rankings over one
evaluation pool, updates the success-rate EMA, records a ``predictor_comparisons`` row and
schedules a retrain every ``train_interval_sessions`` training-grade sessions.
"""

from __future__ import annotations

import base64
import logging
import math
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memlane.predictor import policy
from memlane.predictor import settings as C
from memlane.predictor.settings import PredictorSettings
from memlane.recall.memory_index import MemoryIndex, iso_to_epoch
from memlane.services.clock import now_iso
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database

__all__ = ["PredictorBackend", "PredictorService", "RankDecision"]

log = logging.getLogger(__name__)


def project_name(project: str | None) -> str | None:
    """The name a memory would use for ``project``: the last path component, lower-cased
    (``/home/me/src/acme-api`` -> ``acme-api``); None when shorter than 3 characters."""
    if not project:
        return None
    name = project.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1].strip().lower()
    return name if len(name) >= 3 else None


def _mentions(row: tuple[str, str | None] | None, project: str | None, name: str | None) -> bool:
    if row is None or not project:
        return False
    content, mem_project = row
    return mem_project == project or (name is not None and name in content.lower())


class PredictorBackend(Protocol):
    """What the service needs from a sidecar client (:class:`SidecarClient` or in-process)."""

    def start(self) -> None: ...
    def call(self, method: str, params: Any = None, *, timeout_s: float) -> Any: ...
    def status(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    @property
    def disabled(self) -> bool: ...


@dataclass
class RankDecision:
    """The predictor's part of one session-start.

    Attributes:
        order: memory ids in fused order (before topic diversity), best first.
        fused: ``{memory_id: RRF score}`` (the baseline's own scores order when alpha = 1).
        predictor_scores: ``{memory_id: model score}``; empty when the predictor did not score.
        predictor_rank: ``{memory_id: 1-based predictor rank}``.
        alpha: the baseline weight used.
        phase: collecting, warming, active, disabled or retraining.
        features: ``{memory_id: raw signals}`` logged for training.
        signals: session-level signals (local time, gap hours, alpha, phase, model version).
        error: why the predictor did not score, if it did not.
        took_ms: time spent, ms.
    """

    order: list[str]
    fused: dict[str, float]
    predictor_scores: dict[str, float] = field(default_factory=dict)
    predictor_rank: dict[str, int] = field(default_factory=dict)
    alpha: float = 1.0
    phase: str = "collecting"
    features: dict[str, dict[str, Any]] = field(default_factory=dict)
    signals: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    took_ms: float = 0.0


@dataclass(frozen=True)
class PoolMember:
    """A candidate as the predictor sees it: baseline score and rank (1-based), similarity."""

    memory_id: str
    seq: int
    baseline_score: float
    baseline_rank: int
    similarity: float | None
    bm25_score: float | None = None
    vector_score: float | None = None


class PredictorService:
    """Owns the policy state and talks to the predictor backend.

    Args:
        db: the database (the service writes comparisons, the training log, canary and state).
        index: the in-memory index (memory fields and vectors for candidate signals).
        backend: the sidecar client, or None when the predictor is off.
        settings: the eight exposed keys.
        rng: exploration randomness (seeded in tests and benchmarks).
    """

    def __init__(self, db: Database, index: MemoryIndex, backend: PredictorBackend | None,
                 settings: PredictorSettings, *, rng: random.Random | None = None) -> None:
        self.db = db
        self.index = index
        self.backend = backend
        self.settings = settings
        self.rng = rng or random.Random()
        self._lock = threading.Lock()
        self.state = policy.PolicyState.from_dict(db.read(pred_sql.load_state))
        self._trainer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlane-predictor-train")
        self._training: Future[Any] | None = None
        self.score_errors = 0
        self.scored = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the sidecar (returns at once; the first sessions use the baseline meanwhile)."""
        if self.backend is not None:
            self.backend.start()

    def close(self) -> None:
        self._trainer.shutdown(wait=True)
        if self.backend is not None:
            self.backend.close()

    @property
    def disabled(self) -> bool:
        return self.backend is None or self.backend.disabled

    def phase(self) -> str:
        with self._lock:
            return policy.phase_of(self.state, disabled=self.disabled,
                                   min_training_sessions=self.settings.min_training_sessions)

    def alpha(self) -> float:
        with self._lock:
            return 1.0 if self.disabled else policy.alpha_for(self.state)

    def status_line(self) -> str:
        """The one-line status of the session-start block (seed "4.x Agent-facing status")."""
        with self._lock:
            s = self.state
            phase = policy.phase_of(s, disabled=self.disabled, min_training_sessions=self.settings.min_training_sessions)
            if phase == "disabled":
                crashes = self.backend.status().get("crashes_last_hour", 0) if self.backend is not None else 0
                return f"[predictor: disabled | crashes={crashes}/hr | baseline fallback]"
            if phase == "retraining":
                return "[predictor: retraining | drift detected | baseline fallback]"
            if phase == "collecting":
                need = self.settings.min_training_sessions
                return f"[predictor: collecting | {min(s.training_sessions, need)}/{need} sessions | baseline only]"
            if phase == "warming":
                return f"[predictor: warming | success_rate={s.success_rate:.2f} | model_v{s.model_version} | " \
                       f"baseline only]"
            return f"[predictor: active | success_rate={s.success_rate:.2f} | \u03b1={policy.alpha_for(s):.2f} | " \
                   f"model_v{s.model_version} | {s.training_sessions} sessions]"

    # -- session-start ------------------------------------------------------------------
    def candidate_signals(self, pool: Sequence[PoolMember], now_epoch: float,
                          project: str | None = None) -> dict[str, dict[str, Any]]:
        """Raw per-candidate signals (:data:`memlane.predictor.dataset.CANDIDATE_SIGNALS`)."""
        fields = self.index.candidate_fields([p.seq for p in pool])
        name = project_name(project)
        texts = self.db.read(lambda c: pred_sql.contents_and_projects(c, [p.memory_id for p in pool])) \
            if project else {}
        out: dict[str, dict[str, Any]] = {}
        for p, f in zip(pool, fields):
            out[p.memory_id] = {
                "age_days": max(0.0, (now_epoch - f["created"]) / 86400.0) if f else 0.0,
                "importance": float(f["importance"]) if f else 0.5,
                "access_count": int(f["access_count"]) if f else 0,
                "is_superseded": bool(f["superseded"]) if f else False,
                "pinned": bool(f["pinned"]) if f else False,
                "baseline_score": float(p.baseline_score),
                "baseline_rank": int(p.baseline_rank) - 1,
                "context_similarity": None if p.similarity is None else float(p.similarity),
                "bm25_score": p.bm25_score, "vector_score": p.vector_score,
                "mentions_project": _mentions(texts.get(p.memory_id), project, name),
            }
        return out

    def rank(self, *, pool: Sequence[PoolMember], context_vector: np.ndarray | None, context_text: str,
             project: str | None, now: str, last_start: str | None) -> RankDecision:
        """Score ``pool`` and fuse it with the baseline ranking (never raises for predictor faults).

        Args:
            pool: the candidates in baseline order.
            context_vector: the session context embedding ``[E]``, or None.
            context_text: the session context (text path when there is no vector).
            project: the session's project.
            now: session start, ISO-8601 UTC.
            last_start: the previous session's start (ISO) for the session-gap signal.

        Returns:
            a :class:`RankDecision`.
        """
        t0 = time.perf_counter()
        now_epoch = iso_to_epoch(now)
        baseline = [p.memory_id for p in pool]
        local = datetime.fromtimestamp(now_epoch, tz=timezone.utc).astimezone()
        gap = max(0.0, (now_epoch - iso_to_epoch(last_start)) / 3600.0) if last_start else 0.0
        features = self.candidate_signals(pool, now_epoch, project)
        with self._lock:
            alpha = 1.0 if self.disabled else policy.alpha_for(self.state)
            phase = policy.phase_of(self.state, disabled=self.disabled,
                                    min_training_sessions=self.settings.min_training_sessions)
            version = self.state.model_version
        signals = {"session_time": local.isoformat(), "session_gap_hours": gap, "alpha": alpha, "phase": phase,
                   "model_version": version}
        decision = RankDecision(order=baseline, fused={m: 1.0 / (self.settings.rrf_k + i + 1)
                                                       for i, m in enumerate(baseline)},
                                alpha=alpha, phase=phase, features=features, signals=signals)
        if not pool or self.backend is None:
            decision.error = "predictor off" if self.backend is None else None
            return self._done(decision, t0)
        try:
            reply = self.backend.call("score", self._score_params(pool, features, context_vector, context_text,
                                                                  project, local, gap),
                                      timeout_s=self.settings.score_timeout_ms / 1000.0)
            scores = {s["id"]: float(s["score"]) for s in reply["scores"]}
            if set(scores) != set(baseline) or not all(math.isfinite(v) for v in scores.values()):
                raise ValueError("reply does not score exactly the candidates with finite numbers")
        except Exception as exc:  # PredictorUnavailable, PredictorRpcError, a malformed reply
            self.score_errors += 1
            decision.error = f"{type(exc).__name__}: {exc}"
            decision.signals["predictor_error"] = decision.error[:300]
            return self._done(decision, t0)
        self.scored += 1
        # sorted() is stable: equal scores keep their baseline order
        ranked = sorted(baseline, key=lambda m: -scores[m])
        decision.predictor_scores = scores
        decision.predictor_rank = {m: i + 1 for i, m in enumerate(ranked)}
        decision.fused = policy.rrf_fuse(baseline, ranked, alpha, self.settings.rrf_k)
        decision.order = sorted(baseline, key=lambda m: -decision.fused[m])
        return self._done(decision, t0)

    @staticmethod
    def _done(decision: RankDecision, t0: float) -> RankDecision:
        decision.took_ms = (time.perf_counter() - t0) * 1000
        return decision

    def _score_params(self, pool: Sequence[PoolMember], features: dict[str, dict[str, Any]],
                      context_vector: np.ndarray | None, context_text: str, project: str | None,
                      local: datetime, gap: float) -> dict[str, Any]:
        """The ``score`` request. Candidate vectors and texts are not sent: the sidecar reads
        them from its read-only connection (0.7 ms for 90 candidates, against ~6 ms to encode,
        pipe and decode 90 x 384 floats)."""
        params: dict[str, Any] = {
            "candidate_ids": [p.memory_id for p in pool],
            "candidates": [features[p.memory_id] for p in pool],
            "session_time": local.isoformat(), "session_gap_hours": gap, "project": project,
            "context_text": "" if context_vector is not None else context_text[:2000],
        }
        if context_vector is not None:
            params["context_embedding_b64"] = base64.b64encode(
                np.asarray(context_vector, dtype="<f4").tobytes()).decode("ascii")
        return params

    def explore(self, injected: Sequence[str], decision: RankDecision) -> tuple[str, str] | None:
        """Maybe swap the lowest injected memory for the largest-disagreement candidate.

        Disabled during cold start and whenever the predictor did not score (seed
        "Exploration Sampling"). Returns ``(replaced_id, explored_id)`` or None.
        """
        if not decision.predictor_rank or decision.phase in ("collecting", "disabled"):
            return None
        baseline_rank = {m: f["baseline_rank"] + 1 for m, f in decision.features.items()}
        return policy.pick_exploration(injected, decision.order, baseline_rank, decision.predictor_rank,
                                       self.settings.exploration_rate, self.rng)

    # -- session-end ----------------------------------------------------------------------
    def on_session_scored(self, session_key: str) -> dict[str, Any] | None:
        """Compare both rankings on the session's labels, update the EMA, maybe retrain.

        Called once labels are written. Returns the comparison row, or None when the session
        has no candidates.
        """
        def read(c: Any) -> tuple[Any, ...] | None:
            if pred_sql.has_comparison(c, session_key):
                return None  # compared once; a re-scored session never moves the EMA twice
            return (sess_sql.session_memories(c, session_key), sess_sql.get_score(c, session_key),
                    sess_sql.get_session(c, session_key), pred_sql.session_signals(c, session_key) or {})

        found = self.db.read(read)
        if found is None:
            return None
        rows, score, sess, signals = found
        ranked = [r for r in rows if r.baseline_rank is not None]
        if not ranked or score is None or sess is None:
            return None
        baseline = [r.memory_id for r in sorted(ranked, key=lambda r: r.baseline_rank or 0)]
        by_pred = [r for r in ranked if r.predictor_rank is not None]
        predictor = [r.memory_id for r in sorted(by_pred, key=lambda r: r.predictor_rank or 0)]
        injected = [r.memory_id for r in ranked if r.was_injected]
        labels = {r.memory_id: float(r.label) for r in rows if r.label is not None}
        p_ndcg, b_ndcg, relevance = policy.evaluation_ndcg(baseline, predictor, injected, labels)
        matched = sum(1 for r in ranked if r.was_injected and r.fts_hit_count > 0)
        fts_overlap = matched / len(injected) if injected else None
        confidence = float(score["confidence"])
        with self._lock:
            outcome = policy.record_comparison(
                self.state, predictor_ndcg=p_ndcg if predictor else None, baseline_ndcg=b_ndcg,
                confidence=confidence, predictor_scored=bool(predictor), project=sess.project,
                min_training_sessions=self.settings.min_training_sessions,
                train_interval_sessions=self.settings.train_interval_sessions,
                drift_reset_window=self.settings.drift_reset_window)
            state = self.state.to_dict()
            phase = policy.phase_of(self.state, disabled=self.disabled,
                                    min_training_sessions=self.settings.min_training_sessions)
        now = now_iso()
        row = {
            "session_key": session_key, "project": sess.project,
            "predictor_ndcg": p_ndcg if (p_ndcg is not None and predictor) else 0.0,
            "baseline_ndcg": b_ndcg if b_ndcg is not None else 0.0,
            "predictor_won": None if outcome.won is None else int(outcome.won),
            "margin": ((p_ndcg or 0.0) - (b_ndcg or 0.0)) if predictor else 0.0,
            "scorer_confidence": confidence, "ema_updated": int(outcome.ema_updated),
            "success_rate": state["success_rate"], "alpha": float(signals.get("alpha", 1.0)),
            "predictor_top_ids": predictor[:10], "baseline_top_ids": baseline[:10], "relevance_scores": relevance,
            "fts_overlap_score": fts_overlap, "model_version": signals.get("model_version"),
            "predictor_state": phase, "created_at": now}

        def job(conn: Any) -> None:
            if predictor:
                pred_sql.insert_comparison(conn, row)
            pred_sql.save_state(conn, state, now)

        self.db.write(job)
        if outcome.drift_reset:
            log.warning("predictor drift detected: alpha back to 1.0, retraining with the replay buffer")
        if outcome.retrain_due:
            self.schedule_retrain("drift" if outcome.drift_reset else "interval")
        return {**row, "outcome": outcome.__dict__}

    # -- training -------------------------------------------------------------------------
    def schedule_retrain(self, trigger: str) -> Future[Any] | None:
        """Queue a retrain on the training thread unless one is queued or running."""
        if self.backend is None:
            return None
        with self._lock:
            if self._training is not None and not self._training.done():
                return self._training
            self._training = self._trainer.submit(self.retrain, trigger)
            return self._training

    def wait_training(self, timeout_s: float = 300.0) -> None:
        """Block until a scheduled retrain finished (benchmarks, tests, shutdown)."""
        fut = self._training
        if fut is not None:
            fut.result(timeout=timeout_s)

    def retrain(self, trigger: str = "manual") -> dict[str, Any]:
        """Refresh the canary set if due, run ``train_from_db`` in the sidecar, log the run.

        Returns:
            the training-log row written (accepted or not), with ``error`` on failure.
        """
        now = now_iso()
        refreshed = self.db.read(pred_sql.canary_refreshed_at)
        keys = self.db.read(pred_sql.canary_keys)
        with self._lock:
            # The canary never takes more than a fifth of the training-grade sessions: early on a
            # 25-session canary would leave nothing to train on.
            size = min(C.CANARY_SIZE, self.state.training_sessions // 5)
            influential = policy.alpha_for(self.state) < 1.0
        if size and (len(keys) < size or refreshed is None or
                     iso_to_epoch(now) - iso_to_epoch(refreshed) >= C.CANARY_REFRESH_DAYS * 86400):
            self.db.write(lambda c: pred_sql.refresh_canary(c, size=size, min_confidence=C.MIN_SCORER_CONFIDENCE,
                                                            at=now))
        with self._lock:
            sessions_before = self.state.sessions_since_train
            self.state.sessions_since_train = 0
        report: dict[str, Any]
        try:
            assert self.backend is not None
            report = self.backend.call("train_from_db", {"trigger": trigger, "influential": influential},
                                       timeout_s=C.TRAIN_TIMEOUT_S)
            error = report.get("error")
        except Exception as exc:
            report, error = {}, f"{type(exc).__name__}: {exc}"
            log.warning("predictor retrain failed: %s", error)
        accepted = bool(report.get("accepted"))
        with self._lock:
            s = self.state
            if accepted:
                s.trained = True
                s.model_version = int(report.get("model_version", s.model_version + 1))
                s.last_trained = now
            if error and not accepted and not report:
                s.sessions_since_train = sessions_before  # the sidecar never ran it: try again next session
            if report:
                s.drifting = False  # the drift retrain ran (accepted or not): earn alpha again from warming
            state = s.to_dict()
            drift_resets = s.drift_resets
        row = {"model_version": state["model_version"], "trigger": trigger, "accepted": int(accepted),
               "loss": report.get("loss"), "steps": int(report.get("steps") or 0),
               "sample_count": int(report.get("sample_count") or 0), "duration_ms": float(report.get("duration_ms") or 0),
               "stop_reason": report.get("stop_reason"), "gates": report.get("gates"),
               "canary_ndcg": report.get("canary_ndcg"), "canary_ndcg_delta": report.get("canary_ndcg_delta"),
               "canary_score_variance": report.get("canary_score_variance"),
               "canary_topk_churn": report.get("canary_topk_churn"), "drift_resets": drift_resets,
               "error": error, "created_at": now}

        def job(conn: Any) -> None:
            pred_sql.insert_training_log(conn, row)
            pred_sql.save_state(conn, state, now)

        self.db.write(job)
        return row

    # -- observability ------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Phase, alpha, EMA, per-project slices, counters and the sidecar's health."""
        with self._lock:
            s = self.state.to_dict()
        out = {"enabled": self.backend is not None, "phase": self.phase(), "alpha": self.alpha(),
               "status_line": self.status_line(), "state": s, "scored_sessions": self.scored,
               "score_errors": self.score_errors,
               "training": self._training is not None and not self._training.done(),
               "settings": self.settings.model_dump()}
        if self.backend is not None:
            out["sidecar"] = self.backend.status()
        return out


def sidecar_for(settings: PredictorSettings, *, db_path: Path, home: Path, embedding_model_id: str,
                native_dim: int) -> Any:
    """Build the :class:`SidecarClient` for the daemon's data directory."""
    from memlane.predictor.client import SidecarClient, sidecar_command

    argv = sidecar_command(db_path=db_path, model_dir=home / "predictor", embedding_model_id=embedding_model_id,
                           native_dim=native_dim, base_weights=settings.base_weights, threads=settings.threads)
    return SidecarClient(argv, crash_threshold=settings.crash_disable_threshold,
                         stderr_path=home / "logs" / "predictor.log")
