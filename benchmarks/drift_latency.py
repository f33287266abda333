"""The drift step's cost on recall (issue 41): paired recall latency with drift on and off on one
store in the same minutes, and the in-process cost of the retrieval rules on flagged hits."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_drift_latency(
    data: Path,
    *,
    n_memories: int = 10_000,
    n_queries: int = 300,
    embedder: Any,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Fill a fresh store with ``n_memories`` LoCoMo texts (as ``memlane bench latency`` does),
    then run each query twice, drift on and off in alternating order, and report both p50s and
    the paired median difference; then time ``after_recall`` on 10 hits with 3 flagged."""
    import shutil

    from benchmarks.corpus import memory_texts, queries
    from memlane.config import load_settings
    from memlane.container import open_container
    from memlane.services.inputs import RecallQuery, RememberInput

    home = Path(tempfile.mkdtemp(prefix="memlane-drift-latency-"))
    c = open_container(load_settings(home=home), embedder=embedder)
    try:
        texts = memory_texts(data, n_memories)
        for i in range(0, len(texts), 256):
            c.memories.remember_many([RememberInput(content=t) for t in texts[i : i + 256]])
            progress(f"filled {min(i + 256, len(texts))}/{len(texts)}")
        with_refs = len(c.drift._refs)
        qs = queries(data)[:n_queries]
        for q in qs[:20]:  # warm-up
            c.recall.recall(RecallQuery(query=q, limit=10, touch=False))
        on: list[float] = []
        off: list[float] = []
        for i, q in enumerate(qs):
            for enabled in (True, False) if i % 2 == 0 else (False, True):
                c.settings.drift.enabled = enabled
                t = time.perf_counter()
                c.recall.recall(RecallQuery(query=q, limit=10, touch=False))
                (on if enabled else off).append((time.perf_counter() - t) * 1000)
        c.settings.drift.enabled = True
        c.drift.drain()
        hits = c.recall.recall(RecallQuery(query=qs[0], limit=10, touch=False)).hits
        for h in hits[:3]:
            c.drift.record_signal(h.memory.id, source="bench", evidence={})
        n = 20_000
        t = time.perf_counter()
        for _ in range(n):
            c.drift.after_recall(hits)
        rules_us = (time.perf_counter() - t) / n * 1e6
        return {
            "memories": len(texts),
            "memories_with_references": with_refs,
            "queries": len(qs),
            "p50_on_ms": statistics.median(on),
            "p50_off_ms": statistics.median(off),
            "paired_median_diff_ms": statistics.median([a - b for a, b in zip(on, off)]),
            "after_recall_us_10_hits_3_flagged": rules_us,
            "hits": len(hits),
            "load_avg": os.getloadavg(),
        }
    finally:
        c.embedder = None
        c.close()
        shutil.rmtree(home, ignore_errors=True)
