"""``memlane bench sessions``: session-start and prompt-submit latency through a real daemon.

Fills a store with ``n`` realistic memories of one project (LoCoMo text, importances and ages
spread deterministically over 0.3-0.9 and the last 60 days, 1 % pinned) in process, then
starts ``memlane serve`` on it and drives sessions over HTTP: session-start, prompts (LoCoMo
questions) and session-end. Reports p50/p95/p99 (ms, client-side) and the largest candidate
pool seen. A store directory can be kept and reused (``store``): filling 100,000 memories
embeds every one of them once.

With the predictor on, a fresh store is in cold start (alpha = 1): the session-start hook
answers before the predictor's scores and records its ranking right after. ``alpha`` < 1
seeds an earned policy state instead (cold start exited, that alpha), so every start waits
for the predictor's scores and fuses them, as once the predictor has influence.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from benchmarks.corpus import memory_texts, queries
from benchmarks.daemon import free_port, start_daemon
from benchmarks.latency import wait_for_job_backlog, wait_for_predictor
from benchmarks.metrics import latency_summary
from memlane.auth import auth_headers
from memlane.config import load_settings
from memlane.config.clock import to_iso
from memlane.container import open_container
from memlane.homelock import acquire as acquire_home
from memlane.services.inputs import RememberInput

PROJECT = "/bench/project"
FILL_CHUNK = 2000


def fill_store(home: Path, data: Path, n: int, progress: Callable[[str, int, int], None] | None = None) -> int:
    """Make ``home`` hold at least ``n`` live memories of PROJECT; returns the live count."""
    c = open_container(load_settings(home=home, sqlite_synchronous="NORMAL"), warmup=True)
    try:
        have = c.memories.stats()["live"]
        if have >= n:
            return have
        texts = memory_texts(data, n)[have:]
        rng = random.Random(7)
        now = datetime.now(UTC)
        done = 0
        for start in range(0, len(texts), FILL_CHUNK):
            chunk = texts[start : start + FILL_CHUNK]
            items = [
                RememberInput(
                    content=t,
                    project=PROJECT,
                    importance=round(rng.uniform(0.3, 0.9), 2),
                    created_at=to_iso(now - timedelta(days=rng.uniform(0, 60))),
                    pinned=rng.random() < 0.01,
                    who="bench",
                )
                for t in chunk
            ]
            c.memories.remember_many(items)
            done += len(chunk)
            if progress:
                progress("filling the store (embedding every memory)", have + done, n)
        return c.memories.stats()["live"]
    finally:
        c.close()


def seed_alpha(
    home: Path, alpha: float, *, embedding_model_id: str = "all-MiniLM-L6-v2-onnx-int8", native_dim: int = 384
) -> None:
    """Store a policy state whose alpha is ``alpha`` (trained, cold start exited, past the early
    floors, a non-negative margin EMA) in ``home``'s database, read by the next daemon, and a
    model for its sidecar to serve (``predictor/model.bin``, the untrained weights in the
    sidecar's own checkpoint format, unless one is there): the daemon starts its sidecar only
    when there is a model, and every start with alpha < 1 waits for its scores.

    The bench's sessions carry no agent feedback (confidence < 0.6), so none of them moves the
    EMA or counts toward a retrain: alpha stays put for the whole run.

    Raises:
        ValueError: ``alpha`` outside [0, 1).
    """
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    from memlane.config import predictor as C
    from memlane.predictor import policy
    from memlane.storage import predictor as pred_sql
    from memlane.storage.db import connect

    state = policy.PolicyState(
        success_rate=1.0 - alpha,
        comparisons=C.COLD_START_WINDOW,
        recent_wins=[1] * C.COLD_START_WINDOW,
        trained=True,
        model_version=1,
        cold_start_exited=True,
        sessions_since_exit=C.EARLY_ACTIVE_RAMP_SESSIONS,
        training_sessions=1000,
        margin_ema=0.1,
        recent_margins=[0.1] * C.MARGIN_WINDOW,
    )
    assert abs(policy.alpha_for(state) - alpha) < 1e-9
    conn = connect(home / "memories.db")
    try:
        conn.execute("BEGIN IMMEDIATE")
        pred_sql.save_state(conn, state.to_dict(), to_iso(datetime.now(UTC)))
        conn.execute("COMMIT")
    finally:
        conn.close()
    if not (home / "predictor" / C.CHECKPOINT_NAME).is_file():
        from memlane.predictor.engine import PredictorEngine

        PredictorEngine(
            home / "predictor", embedding_model_id=embedding_model_id, native_dim=native_dim
        ).save_checkpoint()


def run_sessions(
    data: Path,
    *,
    n_memories: int,
    n_sessions: int = 100,
    prompts_per_session: int = 3,
    store: Path | None = None,
    gap_s: float = 0.5,
    predictor: bool = True,
    alpha: float | None = None,
    phase: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Fill (or reuse) a store, start a daemon on it and time the hooks.

    ``gap_s`` (seconds) passes between one session's end and the next start, as between real
    sessions; in it the daemon embeds the next session's context (with 0 the start races that
    work and usually embeds the context itself). With ``predictor`` the daemon runs its
    predictor sidecar and every session-start is scored by it (measuring starts only once
    the sidecar is ready); without it the predictor is disabled. Timing starts once the
    daemon's job queue is drained (:func:`wait_for_job_backlog`). ``alpha`` (< 1, with the
    predictor) seeds an earned policy state (:func:`seed_alpha`) so every start waits for and
    fuses the predictor's scores. ``phase`` (a methodology phase name, e.g. ``coding``) is sent
    with every session-start and prompt: the phase-weighted ranking is timed (docs/v3.md).

    Returns:
        ``{"store_size", "sessions", "session_start", "prompt_submit", "session_end"`` (client-side
        latency summaries, ms), ``"session_start_in_daemon"`` (the service's own time, the reply's
        ``took_ms``: the rest is HTTP), ``"job_backlog"`` (the wait for the job queue),
        ``"samples_ms": {hook: [ms per request]}`` (to pool interleaved runs),
        ``"max_candidate_pool", "mean_candidate_pool", "mean_injected", "predictor", "processes"}``
        (``processes``: ``GET /health``'s, the daemon's and the sidecar's pid and resident memory
        after the run).
    """
    tmp = tempfile.TemporaryDirectory(prefix="memlane-sessions-") if store is None else None
    home = Path(tmp.name) if tmp else store
    assert home is not None
    home.mkdir(parents=True, exist_ok=True)
    try:
        # Written directly, so under the home's lock: a daemon already serving this store is
        # refused here with its pid instead of missing the fill (memlane.homelock).
        with acquire_home(home, "memlane bench sessions", hint="stop it first, or give the bench another --store"):
            size = fill_store(home, data, n_memories, progress)
            if predictor and alpha is not None:
                seed_alpha(home, alpha)
        qs = queries(data)
        port = free_port()
        proc = start_daemon(home, port, env={"MEMLANE_PREDICTOR__ENABLED": "true" if predictor else "false"})
        starts, prompts, ends, pools, injected = [], [], [], [], []
        served: list[float] = []  # session-start time inside the daemon (its took_ms)
        run = f"{int(time.time())}"
        with_phase = {"phase": phase} if phase is not None else {}
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, headers=auth_headers(home)) as http:
                if predictor:
                    wait_for_predictor(http)
                backlog = wait_for_job_backlog(http)
                for w in range(
                    3
                ):  # warm-up, not measured; the measured starts' request (their context is cached after)
                    http.post(
                        "/api/hooks/session-start",
                        json={"session_key": f"warm-{run}-{w}", "project": PROJECT, "cwd": PROJECT, "harness": "bench"},
                    )
                for i in range(n_sessions):
                    key = f"bench-{run}-{i}"
                    t = time.perf_counter()
                    r = http.post(
                        "/api/hooks/session-start",
                        json={"session_key": key, "project": PROJECT, "cwd": PROJECT, "harness": "bench", **with_phase},
                    )
                    starts.append((time.perf_counter() - t) * 1000)
                    r.raise_for_status()
                    body = r.json()
                    served.append(float(body.get("took_ms", 0.0)))
                    pools.append(body["candidate_count"])
                    injected.append(len(body["injected"]))
                    for j in range(prompts_per_session):
                        q = qs[(i * prompts_per_session + j) % len(qs)]
                        t = time.perf_counter()
                        http.post(
                            "/api/hooks/user-prompt-submit",
                            json={"session_key": key, "prompt": q, "project": PROJECT, **with_phase},
                        ).raise_for_status()
                        prompts.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    http.post(
                        "/api/hooks/session-end",
                        json={
                            "session_key": key,
                            "project": PROJECT,
                            "cwd": PROJECT,
                            "transcript": "\n".join(qs[i : i + 3]),
                        },
                    ).raise_for_status()
                    ends.append((time.perf_counter() - t) * 1000)
                    time.sleep(gap_s)
                    if progress:
                        progress("sessions", i + 1, n_sessions)
                pstatus = http.get("/api/predictor/status").json()
                processes = http.get("/health").json().get("processes")  # resident memory after the run
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
        return {
            "store_size": size,
            "sessions": n_sessions,
            "prompts_per_session": prompts_per_session,
            "gap_s": gap_s,
            "phase": phase,
            "session_start": latency_summary(starts),
            "prompt_submit": latency_summary(prompts),
            "session_end": latency_summary(ends),
            "job_backlog": backlog,
            "session_start_in_daemon": latency_summary(served),
            "samples_ms": {
                "session_start": [round(x, 3) for x in starts],
                "session_start_in_daemon": [round(x, 3) for x in served],
                "prompt_submit": [round(x, 3) for x in prompts],
                "session_end": [round(x, 3) for x in ends],
            },
            "processes": processes,
            "max_candidate_pool": max(pools),
            "mean_candidate_pool": sum(pools) / len(pools),
            "mean_injected": sum(injected) / len(injected),
            "predictor": {
                "enabled": predictor,
                "scored_sessions": pstatus.get("scored_sessions"),
                "score_errors": pstatus.get("score_errors"),
                "phase": pstatus.get("phase"),
                "alpha": pstatus.get("alpha"),
                "deferred_sessions": pstatus.get("deferred_sessions"),
                "pending_records": pstatus.get("pending_records"),
                "score_latency_ms": pstatus.get("score_latency_ms"),
            },
        }
    finally:
        if tmp:
            tmp.cleanup()
