"""``memlane bench latency --pipeline-stages``: the memory-pipeline-v2 recall stages on or off.

* :func:`write_stage_config` writes the data directory's ``config.yaml`` before the daemon starts:
  hints, graph boost and the three dampening stages on (``--pipeline-stages``: the set memory
  pipeline v2 names for its latency target), the reranker too with ``--reranker`` (it is off by
  default), or everything off (``--no-pipeline-stages``).
* :func:`restart_with_hints`: the bench has no LLM, so with the stages on it writes
  :data:`HINTS_PER_MEMORY` synthetic hints per memory (LoCoMo questions, deterministic) straight
  into ``memory_hints`` while the daemon is stopped, then restarts it: the hint leg then
  searches a realistic index (3 hints x the store size).
* :func:`stage_overhead` measures in process, on the filled store, each stage's cost per recall:
  every query runs once per variant (all off, each stage alone, hints + graph + dampening, all
  four on), interleaved; reported
  as median ms per recall and the median difference to "all off" (ms).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from memlane.storage import hints as hints_sql
from memlane.storage.db import Database

#: Synthetic hints written per memory when the stages are on.
HINTS_PER_MEMORY = 3
#: Queries run per variant before measuring (caches, model).
WARMUP = 10

_DAMPENING = ("gravityEnabled", "hubEnabled", "resolutionEnabled")


#: The graph boost's weight when the bench turns it on (the seed's).
GRAPH_WEIGHT = 0.15


def stage_flags(on: bool, reranker: bool = False) -> dict[str, Any]:
    """The ``memory.pipelineV2`` mapping turning hints, graph boost and dampening ``on`` (or off);
    the reranker is on only when both ``on`` and ``reranker``."""
    # the boost at the seed's weight: memlane ships it at 0 (docs/benchmarks.md), which would time nothing
    return {
        "hints": {"enabled": on},
        "graph": {"enabled": on, "boost_weight": GRAPH_WEIGHT if on else 0.0},
        "reranker": {"enabled": on and reranker},
        "dampening": {k: on for k in _DAMPENING},
    }


def write_stage_config(home: Path, on: bool, reranker: bool = False) -> Path:
    """Write ``home/config.yaml`` with the recall stages of :func:`stage_flags`. Returns its path."""
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump({"memory": {"pipelineV2": stage_flags(on, reranker)}}), encoding="utf-8")
    return path


@contextmanager
def stage_config(home: Path, on: bool, reranker: bool = False) -> Iterator[Path]:
    """Write the stage config (:func:`write_stage_config`) and point ``MEMLANE_CONFIG`` at it while
    the context lasts (the daemon subprocess and in-process stores read it even when the caller's
    environment names another config file); restored on exit."""
    path = write_stage_config(home, on, reranker)
    old = os.environ.get("MEMLANE_CONFIG")
    os.environ["MEMLANE_CONFIG"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("MEMLANE_CONFIG", None)
        else:
            os.environ["MEMLANE_CONFIG"] = old


def add_synthetic_hints(db_path: Path, questions: list[str], per_memory: int = HINTS_PER_MEMORY, seed: int = 0) -> int:
    """Give every live memory ``per_memory`` hints drawn from ``questions`` (seeded). Returns the
    number of hints written."""
    rng = random.Random(seed)
    db = Database(db_path)
    try:
        ids = db.read(lambda c: [r[0] for r in c.execute("SELECT id FROM memories WHERE is_deleted = 0")])
        at = "2025-01-01T00:00:00.000Z"

        def job(conn) -> int:
            return sum(hints_sql.replace(conn, i, rng.sample(questions, per_memory), at=at) for i in ids)

        return db.write(job)
    finally:
        db.close()


def restart_with_hints(
    proc: subprocess.Popen, home: Path, port: int, questions: list[str], start: Callable[[Path, int], subprocess.Popen]
) -> tuple[subprocess.Popen, int]:
    """Stop the daemon, write synthetic hints into its database, start it again on ``port``.
    Returns (the new process, hints written)."""
    proc.terminate()
    proc.wait(timeout=60)
    from memlane.config import load_settings

    n = add_synthetic_hints(load_settings(home=home).db_path, questions)
    return start(home, port), n


def _variant(on: set[str]) -> dict[str, Any]:
    """pipeline_v2 update for the stages in ``on`` (hints, graph, dampening, rerank)."""
    return {
        "hints": {"enabled": "hints" in on},
        "graph": {"enabled": "graph" in on, "boost_weight": GRAPH_WEIGHT if "graph" in on else 0.0},
        "reranker": {"enabled": "rerank" in on},
        "dampening": {k: "dampening" in on for k in ("gravity_enabled", "hub_enabled", "resolution_enabled")},
    }


def stage_overhead(home: Path, questions: list[str], n_queries: int = 200) -> dict[str, Any]:
    """In-process recall (limit 10) over the store in ``home`` with each stage alone, hints + graph +
    dampening (the set the pipeline's latency target names), and all four on.

    Returns:
        ``{"queries", "median_ms": {variant: ms}, "overhead_ms": {variant: median ms - off median ms},
        "stage_ms": {hints|dampening|rerank: median ms inside the stage, over the runs it was on},
        "hints_stored"}``.
    """
    from memlane.config import load_settings
    from memlane.container import open_container
    from memlane.services.inputs import RecallQuery

    variants = {
        "off": set(),
        "hints": {"hints"},
        "graph": {"graph"},
        "dampening": {"dampening"},
        "rerank": {"rerank"},
        "hints+graph+dampening": {"hints", "graph", "dampening"},
        "all": {"hints", "graph", "dampening", "rerank"},
    }
    c = open_container(load_settings(home=home), warmup=True)
    try:
        c.recall.warm()  # as the daemon does at start
        c.recall.fts.wait()
        base = c.settings.memory.pipeline_v2

        def use(name: str) -> None:
            upd = _variant(variants[name])
            c.settings.memory.pipeline_v2 = base.model_copy(
                update={k: getattr(base, k).model_copy(update=v) for k, v in upd.items()}
            )

        times: dict[str, list[float]] = {v: [] for v in variants}
        names = list(variants)
        for i in range(WARMUP + n_queries):
            q = RecallQuery(questions[i % len(questions)], limit=10, touch=False, ranker="heuristic")
            for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate: no variant always first
                use(name)
                if name == "all" and i == WARMUP and c.recall.stages is not None:
                    for d in c.recall.stages.timings.values():
                        d.clear()
                t = time.perf_counter()
                c.recall.recall(q)
                if i >= WARMUP:
                    times[name].append((time.perf_counter() - t) * 1000)
        med = {v: statistics.median(t) for v, t in times.items()}
        diffs = {v: statistics.median(a - b for a, b in zip(times[v], times["off"])) for v in variants if v != "off"}
        stage_ms = {
            k: statistics.median(d) if d else None
            for k, d in (c.recall.stages.timings.items() if c.recall.stages else [])
        }
        return {
            "queries": n_queries,
            "median_ms": med,
            "overhead_ms": diffs,
            "stage_ms": stage_ms,
            "hints_stored": c.db.read(hints_sql.count),
        }
    finally:
        c.close()


def render_stages(report: dict[str, Any]) -> str:
    """One-paragraph summary of the ``pipeline_stages`` part of a latency report."""
    on = (
        "hints, graph boost, dampening"
        + (" and the reranker" if report.get("reranker") else "")
        + " on"
        + ("" if report.get("reranker") else " (reranker off, its default)")
    )
    lines = [f"recall stages over HTTP: {on if report['enabled'] else 'all off'}"]
    if "hints_written" in report:
        lines[0] += f"; synthetic hints written: {report['hints_written']}"
    ip = report.get("in_process")
    if ip:
        med, over = ip["median_ms"], ip["overhead_ms"]
        lines.append(
            f"in process, {ip['queries']} recalls per variant, median ms per recall: "
            + ", ".join(f"{k} {v:.2f}" for k, v in med.items())
        )
        lines.append(
            "overhead vs all off (median of per-query differences, ms): "
            + ", ".join(f"{k} {v:+.2f}" for k, v in over.items())
        )
        lines.append(
            "inside the stage (median ms): "
            + ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} -" for k, v in ip["stage_ms"].items())
        )
    return "\n".join(lines)
