"""``memlane bench predictor --dataset simulated``: a generated user over 200 sessions.

The user (:mod:`benchmarks.simulated_user`) has patterns LoCoMo cannot show: several
projects sharing topics, time-of-day habits, facts that go stale before they are
superseded, and a change of project mid-way. Every session runs through the daemon's code
path: memories are remembered when the user writes them, supersessions go through
``MemoryService.supersede``, the session starts with ``ranking="relevance"`` (the baseline is
the hybrid recall score of the session context, restricted to the project and global
memories), the predictor sidecar scores the same pool and RRF fuses both with the earned
alpha; the agent rates the relevant memories it found in the pool with their relevance and
the injected others 0.0; the session ends (labels, comparison, EMA, retrain every 10).

Reported: NDCG@10 (graded gains, ideal over all relevant memories) of baseline, predictor
and fused rankings per session and as learning curves, the session at which cold start
exits, alpha over time, drift resets, fused - baseline over the last 50 sessions with a
paired bootstrap 95 % interval, and recovery after the project change.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.bootstrap import paired_bootstrap
from benchmarks.predictor_locomo import session_rankings
from benchmarks.simulated_user import SimulatedUser, generate
from memlane.config import Settings
from memlane.config.clock import to_iso
from memlane.container import open_container
from memlane.embedding.base import Embedder
from memlane.ndcg import ndcg_at_k
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import EndInput, StartInput
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql

__all__ = ["render", "run_simulated"]

Progress = Callable[[str, int, int], None]
WINDOW = 10


def _ndcg(order: Sequence[str], relevance: dict[str, float], k: int = 10) -> float:
    """NDCG@k of ``order`` with the simulated user's relevance as gains, unclipped, the ideal
    over every relevant memory (also those outside the pool), 0.0 when nothing is relevant."""
    return ndcg_at_k(order, relevance, k, clip_negative=False, undefined=0.0)


def _utc(local: datetime) -> str:
    """A naive local wall-clock time as ISO-8601 UTC (the daemon's clock format)."""
    return to_iso(local.astimezone().astimezone(UTC).replace(tzinfo=None))


def run_simulated(
    *,
    embedder: Embedder,
    workdir: Path,
    sessions: int = 200,
    seed: int = 0,
    change_at: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the simulated user through the daemon's session path; returns the JSON report."""
    t_start = time.perf_counter()
    user: SimulatedUser = generate(seed=seed, sessions=sessions, change_at=change_at or sessions // 2)
    home = workdir / f"simulated-{seed}"
    shutil.rmtree(home, ignore_errors=True)
    settings = Settings(
        home=home,
        embedding={"provider": "local"},
        sqlite_synchronous="NORMAL",
        sessions={"candidate_pool_size": 100, "inject_limit": 10, "inject_budget_chars": 100_000},
        predictor={"enabled": True},
    )
    c = open_container(settings, embedder=embedder, predictor=True)
    ids: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    try:
        assert c.predictor is not None and c.predictor.backend is not None
        c.predictor.rng = random.Random(seed)
        if not c.predictor.backend.wait_ready(120):  # type: ignore[attr-defined]
            raise RuntimeError("the predictor sidecar did not start")
        pending = list(user.memories)
        for s in user.sessions:
            now = _utc(s.local_time)
            new = [m for m in pending if m.created_session <= s.index]
            pending = [m for m in pending if m.created_session > s.index]
            if new:
                written = to_iso_minus(now, minutes=1)
                res = c.memories.remember_many(
                    [
                        RememberInput(
                            content=m.content,
                            type=m.type,
                            project=m.project,
                            importance=m.importance,
                            created_at=written,
                            source_type="simulated",
                            source_id=m.key,
                        )
                        for m in new
                    ]
                )
                for m, r in zip(new, res):
                    ids[m.key] = r.id
            for new_key, old_key in s.supersede_events:
                if new_key in ids and old_key in ids:
                    c.memories.supersede(ids[old_key], ids[new_key], who="simulated-user", why="fact changed")
            key = f"sim-{seed}-{s.index}"
            c.sessions.start(
                StartInput(session_key=key, project=s.project, context=s.context, ranking="relevance", now=now)
            )
            cands = c.db.read(lambda conn: sess_sql.session_memories(conn, key))
            signals = c.db.read(lambda conn: pred_sql.session_signals(conn, key)) or {}
            relevance = {ids[k]: v for k, v in s.relevant.items() if k in ids}
            baseline, predictor, fused, alpha = session_rankings(cands, signals, c.settings.predictor.rrf_k)
            served = [r.memory_id for r in sorted(cands, key=lambda r: r.rank)]
            injected = [r.memory_id for r in cands if r.was_injected]
            in_pool = set(baseline)
            ratings = {m: v for m, v in relevance.items() if m in in_pool}
            ratings.update({m: 0.0 for m in injected if m not in relevance})
            c.sessions.feedback(key, ratings)
            c.sessions.end(EndInput(session_key=key, now=to_iso_minus(now, minutes=-45)), wait=True)
            c.predictor.wait_training(600)
            st = c.predictor.status()["state"]
            rows.append(
                {
                    "session": s.index,
                    "project": s.project,
                    "slot": s.slot,
                    "vague": s.vague,
                    "alpha": alpha,
                    "phase": signals.get("phase"),
                    "model_version": signals.get("model_version"),
                    "success_rate": st["success_rate"],
                    "drift_resets": st["drift_resets"],
                    "predictor_scored": bool(predictor),
                    "relevant": len(relevance),
                    "relevant_in_pool": sum(1 for m in relevance if m in in_pool),
                    "ndcg10_baseline": _ndcg(baseline, relevance),
                    "ndcg10_predictor": _ndcg(predictor or baseline, relevance),
                    "ndcg10_fused": _ndcg(fused, relevance),
                    "ndcg10_served": _ndcg(served, relevance),
                }
            )
            if progress:
                progress("simulated sessions", s.index + 1, len(user.sessions))
        log = c.db.read(lambda conn: pred_sql.training_log(conn, limit=10_000))
    finally:
        c.embedder = None
        c.close()
    return {
        "dataset": "simulated",
        "seed": seed,
        "sessions": sessions,
        "change_at": user.change_at,
        "user": user.stats(),
        "description": user.describe(),
        "embedding_model": embedder.model_id,
        **summarize(rows, user.change_at, seed=seed),
        "rows": rows,
        "trainings": len(log),
        "accepted_trainings": sum(1 for r in log if r["accepted"]),
        "seconds": time.perf_counter() - t_start,
    }


def to_iso_minus(iso: str, *, minutes: int) -> str:
    """``iso`` (UTC, 'Z') shifted back by ``minutes`` (negative: forward)."""
    t = datetime.fromisoformat(iso.replace("Z", "+00:00")).replace(tzinfo=None)
    return to_iso(t - timedelta(minutes=minutes))


def summarize(rows: list[dict[str, Any]], change_at: int, *, seed: int = 0) -> dict[str, Any]:
    """Learning curves, cold-start exit, alpha milestones, last-50 comparison, recovery."""
    curves = []
    for lo in range(0, len(rows), WINDOW):
        w = rows[lo : lo + WINDOW]
        curves.append(
            {
                "sessions": f"{lo + 1}-{lo + len(w)}",
                **{
                    k: sum(r[k] for r in w) / len(w)
                    for k in ("ndcg10_baseline", "ndcg10_predictor", "ndcg10_fused", "alpha")
                },
            }
        )
    exit_at = next((r["session"] + 1 for r in rows if r["phase"] == "active"), None)
    alpha_half = next((r["session"] + 1 for r in rows if r["alpha"] <= 0.5), None)
    last = rows[-50:]
    last50 = paired_bootstrap([r["ndcg10_fused"] for r in last], [r["ndcg10_baseline"] for r in last], seed=seed)
    last50_pred = paired_bootstrap(
        [r["ndcg10_predictor"] for r in last], [r["ndcg10_baseline"] for r in last], seed=seed
    )
    before = rows[max(0, change_at - 20) : change_at]
    margin_before = sum(r["ndcg10_fused"] - r["ndcg10_baseline"] for r in before) / max(1, len(before))
    recovery = None
    for i in range(change_at, len(rows) - WINDOW + 1):
        w = rows[i : i + WINDOW]
        if sum(r["ndcg10_fused"] - r["ndcg10_baseline"] for r in w) / WINDOW >= min(margin_before, 0.10) - 0.02:
            recovery = i + WINDOW - change_at
            break
    resets = [r["session"] + 1 for i, r in enumerate(rows) if i and r["drift_resets"] > rows[i - 1]["drift_resets"]]
    return {
        "curves": curves,
        "cold_start_exit_session": exit_at,
        "alpha_le_0_5_session": alpha_half,
        "alpha_at": {str(n): rows[n - 1]["alpha"] for n in (30, 50, 80, 100, 120, 150, 200) if n <= len(rows)},
        "last50_fused_vs_baseline": last50,
        "last50_predictor_vs_baseline": last50_pred,
        "fused_minus_baseline_before_change": margin_before,
        "recovery_sessions_after_change": recovery,
        "drift_reset_sessions": resets,
        "targets": {
            "cold_start_exit_by_30": exit_at is not None and exit_at <= 30,
            "alpha_le_0_5_by_80": alpha_half is not None and alpha_half <= 80,
            "last50_fused_ge_baseline_plus_0.10": last50["diff"] >= 0.10,
            "recovery_within_20": recovery is not None and recovery <= 20,
        },
    }


def render(console: Any, report: dict[str, Any]) -> None:
    """Print the learning curves and the targets."""
    from rich.table import Table

    t = Table(title=f"simulated user (seed {report['seed']}): NDCG@10 per {WINDOW} sessions")
    for col in ("sessions", "baseline", "predictor", "fused", "alpha"):
        t.add_column(col)
    for row in report["curves"]:
        t.add_row(
            row["sessions"],
            f"{row['ndcg10_baseline']:.3f}",
            f"{row['ndcg10_predictor']:.3f}",
            f"{row['ndcg10_fused']:.3f}",
            f"{row['alpha']:.2f}",
        )
    console.print(t)
    l50 = report["last50_fused_vs_baseline"]
    console.print(
        f"cold start exit: session {report['cold_start_exit_session']}; alpha <= 0.5 from session "
        f"{report['alpha_le_0_5_session']}; drift resets at {report['drift_reset_sessions']}; "
        f"project change at {report['change_at']}, recovery after "
        f"{report['recovery_sessions_after_change']} sessions"
    )
    console.print(
        f"last 50 sessions: fused {l50['mean_a']:.3f} vs baseline {l50['mean_b']:.3f}: "
        f"{l50['diff']:+.3f} [{l50['lo']:+.3f}, {l50['hi']:+.3f}] (95% paired bootstrap)"
    )
    console.print(f"targets: {report['targets']}")
