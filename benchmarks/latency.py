"""``memlane bench latency``: remember and recall latency through a real daemon process.

Starts ``python -m memlane serve`` on a fresh temporary data directory and a free port, fills
the store over HTTP in batches (measuring ingest throughput, embeddings included), then
measures single ``POST /api/memory/remember`` and ``POST /api/memory/recall`` (limit 10)
requests one at a time, client-side, with LoCoMo questions as queries.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from benchmarks.corpus import memory_texts, queries
from benchmarks.daemon import free_port, start_daemon
from benchmarks.metrics import latency_summary
from benchmarks.stages import restart_with_hints, stage_config, stage_overhead
from memlane.auth import auth_headers

#: Memories per HTTP batch while filling the store.
FILL_BATCH = 256
#: Requests sent before measuring (model and cache warm-up).
WARMUP = 20


def _backlog(http: httpx.Client) -> int:
    jobs = http.get("/api/pipeline/status").json().get("jobs", {})
    return sum(n for counts in jobs.values() for status, n in counts.items() if status in ("pending", "leased"))


def wait_for_job_backlog(http: httpx.Client, timeout_s: float = 180.0) -> dict[str, Any]:
    """Wait until the daemon's job queue is drained (pending + leased = 0), at most ``timeout_s``.

    Filling the store enqueues one pipeline job per memory; the daemon works through them
    right after it starts (thousands of short write transactions over ~15 s at 4,000 memories;
    with no LLM configured every extraction job is recorded as skipped, which still writes).
    Requests timed during that burst measure the burst (and a BM25 leg on SQL while the
    in-memory FTS copy is rebuilt), not the steady state.

    Returns:
        ``{"initial": jobs queued when the wait began, "left": jobs still queued, "waited_s"}``.
    """
    t0 = time.monotonic()
    initial = left = _backlog(http)
    while left and time.monotonic() - t0 < timeout_s:
        time.sleep(0.5)
        left = _backlog(http)
    return {"initial": initial, "left": left, "waited_s": round(time.monotonic() - t0, 1)}


def wait_for_predictor(http: httpx.Client, timeout_s: float = 120.0) -> float:
    """Wait until the daemon's predictor sidecar is ready (or the predictor is off, or the
    sidecar is dormant: no model yet, the untrained model scores in the daemon); returns the
    seconds waited. The sidecar loads PyTorch when the daemon starts (seconds of CPU on one of
    the two cores); requests timed meanwhile measure that start-up, not the steady state.

    Raises:
        RuntimeError: not ready within ``timeout_s``.
    """
    t0 = time.monotonic()
    while True:
        status = http.get("/api/predictor/status").json()
        sidecar = status.get("sidecar") or {}
        if not status.get("enabled", True) or sidecar.get("ready") or sidecar.get("state") == "dormant":
            return round(time.monotonic() - t0, 1)
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"the predictor sidecar did not become ready in {timeout_s:.0f} s")
        time.sleep(0.2)


def run_latency(
    data: Path,
    *,
    n_memories: int = 10_000,
    n_queries: int = 300,
    n_remembers: int = 300,
    port: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
    pipeline_stages: bool | None = None,
    reranker: bool = False,
    ranker_paired: bool = False,
) -> dict[str, Any]:
    """Fill a fresh daemon with ``n_memories`` texts and time single requests.

    ``pipeline_stages``: True = hints (with synthetic hints), graph boost and dampening on (the
    reranker too when ``reranker``), plus each stage's in-process overhead
    (``benchmarks.stages``); False = all off; None = the defaults. ``ranker_paired``: after
    the recall timing, each query once more with ``ranker: learned`` and once with ``ranker:
    heuristic``, in alternating order, on the same daemon in the same minutes
    (``recall_by_ranker``: a summary per ranker and how many answers each ranker gave).

    Returns:
        ``{"store_size", "fill": {memories, seconds, memories_per_s, batch},
        "recall": latency summary (ms), "remember": latency summary (ms), "job_backlog": the wait
        for the daemon's job queue before recall is timed (:func:`wait_for_job_backlog`), "pipeline_stages": None or
        {"enabled", "hints_written", "in_process"}}``.
    """
    texts = memory_texts(data, n_memories + n_remembers)
    fill, extra = texts[:n_memories], texts[n_memories:]
    qs = queries(data)
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="memlane-latency-") as tmp, contextlib.ExitStack() as stack:
        stages: dict[str, Any] | None = (
            None
            if pipeline_stages is None
            else {"enabled": pipeline_stages, "reranker": bool(pipeline_stages and reranker)}
        )
        if pipeline_stages is not None:
            stack.enter_context(stage_config(Path(tmp), pipeline_stages, reranker))
        proc = start_daemon(Path(tmp), port)
        try:
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=300, headers=auth_headers(Path(tmp))
            ) as http:
                t0 = time.perf_counter()
                for start in range(0, len(fill), FILL_BATCH):
                    batch = [{"content": t, "who": "bench"} for t in fill[start : start + FILL_BATCH]]
                    http.post("/api/memory/remember", json={"memories": batch}).raise_for_status()
                    if progress:
                        progress("filling the store", min(start + FILL_BATCH, len(fill)), len(fill))
                fill_s = time.perf_counter() - t0
                if pipeline_stages and stages is not None:  # no LLM here: synthetic hints, daemon stopped
                    proc, stages["hints_written"] = restart_with_hints(proc, Path(tmp), port, qs, start_daemon)
                backlog = wait_for_job_backlog(http, timeout_s=600.0)  # recall in the steady state
                backlog["predictor_wait_s"] = wait_for_predictor(http)
                for q in qs[:WARMUP]:
                    http.post("/api/memory/recall", json={"query": q, "limit": 10}).raise_for_status()
                recall_ms = []
                for i in range(n_queries):
                    q = qs[(WARMUP + i) % len(qs)]
                    t = time.perf_counter()
                    http.post("/api/memory/recall", json={"query": q, "limit": 10}).raise_for_status()
                    recall_ms.append((time.perf_counter() - t) * 1000)
                    if progress:
                        progress("recall", i + 1, n_queries)
                by_ranker = paired_rankers(http, qs, n_queries, progress) if ranker_paired else None
                remember_ms = []
                for i, text in enumerate(extra):
                    t = time.perf_counter()
                    http.post("/api/memory/remember", json={"content": text}).raise_for_status()
                    remember_ms.append((time.perf_counter() - t) * 1000)
                    if progress:
                        progress("remember", i + 1, len(extra))
                size = http.get("/health").json()["memories"]
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if pipeline_stages and stages is not None:
            stages["in_process"] = stage_overhead(Path(tmp), qs, min(n_queries, 200))
    return {
        "store_size": size,
        "fill": {"memories": len(fill), "seconds": fill_s, "memories_per_s": len(fill) / fill_s, "batch": FILL_BATCH},
        "recall": latency_summary(recall_ms),
        "remember": latency_summary(remember_ms),
        "job_backlog": backlog,
        "pipeline_stages": stages,
        "recall_by_ranker": by_ranker,
    }


def paired_rankers(
    http: httpx.Client, qs: list[str], n_queries: int, progress: Callable[[str, int, int], None] | None = None
) -> dict[str, Any]:
    """Recall latency (limit 10) with the learned ranker and the heuristic one, each query once
    with each, the first of the pair alternating: ``{"learned": summary, "heuristic": summary,
    "answered": {ranker named in the answer: count}, "paired_median_diff_ms": median of
    learned - heuristic per query}``."""
    times: dict[str, list[float]] = {"learned": [], "heuristic": []}
    answered: dict[str, int] = {}
    for i in range(n_queries):
        q = qs[(WARMUP + i) % len(qs)]
        for r in ("learned", "heuristic") if i % 2 == 0 else ("heuristic", "learned"):
            t = time.perf_counter()
            resp = http.post("/api/memory/recall", json={"query": q, "limit": 10, "ranker": r})
            times[r].append((time.perf_counter() - t) * 1000)
            resp.raise_for_status()
            got = resp.json().get("ranker", "?")
            answered[f"{r}->{got}"] = answered.get(f"{r}->{got}", 0) + 1
        if progress:
            progress("recall, learned vs heuristic", i + 1, n_queries)
    diffs = sorted(a - b for a, b in zip(times["learned"], times["heuristic"]))
    return {
        "learned": latency_summary(times["learned"]),
        "heuristic": latency_summary(times["heuristic"]),
        "answered": answered,
        "paired_median_diff_ms": diffs[len(diffs) // 2] if diffs else None,
    }
