"""The pipeline v2 throughput benchmark (``memlane bench pipeline``): extraction jobs per second,
end to end, with a scripted LLM that answers at once.

Per repeat: a fresh data directory; N distinct memories remembered in one batch (each enqueues
an ``extract`` job, memory-pipeline-v2.md "Worker Model"); then the container's own
``extraction`` JobWorker thread is started and timed until the queue is drained (no pending or
leased ``extract`` job). Every job runs the real path: lease -> extraction over HTTP (the loopback
Ollama server of :mod:`benchmarks.scripted_llm`, two facts and a triple per memory) -> hybrid
candidates -> a decision call per fact with candidates -> one write transaction (derived
memories, audit rows, graph) -> completion. What is measured is memlane's overhead, not a model.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.corpus import memory_texts
from memlane.config import load_settings
from memlane.container import open_container
from memlane.services.inputs import RememberInput
from memlane.storage import jobs as jobs_sql

TARGET_JOBS_PER_S = 50.0
#: How often the benchmark looks at the workers' counters, s (bounds the timing error: <= 0.5 % of a 500-job run).
POLL_S = 0.02
_TOPICS = ("billing", "deploy", "search", "auth", "analytics", "mobile", "payments", "infra", "docs", "ml")
_TOOLS = ("PostgreSQL", "Redis", "Kafka", "Terraform", "React", "Rust", "Go", "Python", "ONNX", "SQLite")


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct memory texts about projects, tools and people (deterministic)."""
    out = []
    for i in range(n):
        j = i + seed * 7919
        topic, tool = _TOPICS[j % len(_TOPICS)], _TOOLS[(j // 3) % len(_TOOLS)]
        out.append(
            f"Note {j}: the {topic} team adopted {tool} for service {j % 97}; owner is engineer "
            f"{j % 31}, review cadence every {1 + j % 14} days."
        )
    return out


def _drained(c: Any) -> bool:
    counts = c.db.read(lambda conn: jobs_sql.counts_by_status(conn, ["extract"])).get("extract", {})
    return not counts.get("pending") and not counts.get("leased")


def run_once(
    texts: list[str],
    *,
    llm_url: str,
    embedding: str = "none",
    synchronous: str = "FULL",
    n_workers: int = 1,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """One repeat: one job per text through a fresh store. Returns seconds (wall), jobs_per_s, per-job
    latency (lease -> completion, ms) and the outcome totals."""
    with tempfile.TemporaryDirectory(prefix="memlane-bench-pipeline-") as home:
        settings = load_settings(
            home=Path(home),
            embedding={"provider": embedding},
            sqlite_synchronous=synchronous,
            llm={"provider": "ollama", "base_url": llm_url, "model": "scripted"},
            memory={"pipelineV2": {"worker": {"pollMs": 100, "concurrency": n_workers}}},
        )
        c = open_container(settings)
        try:
            n_jobs = len(texts)
            c.memories.remember_many([RememberInput(content=t) for t in texts])
            workers = [w for w in c.workers if w.name == "extraction" or w.name.startswith("extraction-")]
            assert len(workers) == n_workers, [w.name for w in workers]
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            # Watch the workers' own counters (no SQL poll competing with the measured work),
            # then confirm with the queue itself.
            while sum(sum(w.outcomes.values()) for w in workers) < n_jobs or not _drained(c):
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError(f"queue not drained after {timeout_s:.0f} s")
                time.sleep(POLL_S)
            seconds = time.perf_counter() - t0
            for w in workers:
                w.stop()
            jobs = c.db.read(lambda conn: jobs_sql.list_jobs(conn, job_type="extract", limit=n_jobs + 10))
        finally:
            c.close()
    status: dict[str, int] = {}
    totals = {"facts": 0, "created": 0, "deduped": 0, "llm_calls": 0, "decisions": 0}
    latencies = []
    for j in jobs:
        status[j.status] = status.get(j.status, 0) + 1
        r = j.result or {}
        totals["facts"] += r.get("facts", 0)
        totals["created"] += r.get("outcomes", {}).get("created", 0)
        totals["deduped"] += r.get("outcomes", {}).get("deduped", 0)
        totals["llm_calls"] += r.get("llm_calls", 0)
        totals["decisions"] += sum(r.get("proposals", {}).values())
        if j.leased_at:
            latencies.append(_ms_between(j.leased_at, j.updated_at))
    return {
        "jobs": n_jobs,
        "seconds": seconds,
        "jobs_per_s": n_jobs / seconds,
        "status": status,
        **totals,
        "job_latency_ms_p50": statistics.median(latencies) if latencies else None,
        "job_latency_ms_max": max(latencies) if latencies else None,
    }


def _ms_between(a: str, b: str) -> float:
    from datetime import datetime

    def p(s: str) -> datetime:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))

    return (p(b) - p(a)).total_seconds() * 1000.0


def run_pipeline_bench(
    *,
    jobs: int = 500,
    repeats: int = 3,
    embedding: str = "none",
    synchronous: str = "FULL",
    workers: int = 2,
    data: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """``repeats`` runs of ``jobs`` extraction jobs; the median jobs/s is the headline.

    Args:
        jobs: memories (= extract jobs) per repeat.
        embedding: ``none`` (BM25 candidates) or ``local`` (the ONNX embedder; facts embedded too).
        workers: extraction workers (the ``memory.pipelineV2.worker.concurrency`` setting, default 2).
        data: LoCoMo file whose real texts become the memories (``bench.corpus.memory_texts``);
            missing -> a synthetic corpus (every text sharing ~10 tokens: a harsher BM25 load).
        synchronous: SQLite ``synchronous`` (``FULL`` is the daemon default).
    Returns:
        ``{"median_jobs_per_s", "target_jobs_per_s", "meets_target", "runs": [...], "totals", "cpus", ...}``.
    """
    if data is not None and Path(data).is_file():
        texts, source = memory_texts(Path(data), jobs * repeats), f"locomo:{data}"
    else:
        texts, source = [], "synthetic"
    if len(texts) < jobs * repeats:
        texts, source = corpus(jobs * repeats), "synthetic"
    runs = []
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.scripted_llm"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        url = proc.stdout.readline().strip() if proc.stdout else ""
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the scripted LLM server did not start (got {url!r})")
        for i in range(repeats):
            if progress:
                progress(f"{jobs} jobs per repeat", i, repeats)
            runs.append(
                run_once(
                    texts[i * jobs : (i + 1) * jobs],
                    llm_url=url,
                    embedding=embedding,
                    synchronous=synchronous,
                    n_workers=workers,
                )
            )
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    median = statistics.median(r["jobs_per_s"] for r in runs)
    totals = {k: sum(r[k] for r in runs) for k in ("jobs", "facts", "created", "deduped", "llm_calls", "decisions")}
    totals["seconds"] = sum(r["seconds"] for r in runs)
    return {
        "benchmark": "pipeline",
        "jobs_per_repeat": jobs,
        "repeats": repeats,
        "embedding": embedding,
        "cpus": os.cpu_count(),
        "median_jobs_per_s": median,
        "target_jobs_per_s": TARGET_JOBS_PER_S,
        "meets_target": median >= TARGET_JOBS_PER_S,
        "median_job_latency_ms": statistics.median(
            r["job_latency_ms_p50"] for r in runs if r["job_latency_ms_p50"] is not None
        ),
        "synchronous": synchronous,
        "workers": workers,
        "corpus": source,
        "runs": runs,
        "totals": totals,
    }
