"""Shared pieces of the pipeline v2 tests: a per-stage script for the loopback LLM server,
a store wired to it, and readers of jobs and audit rows."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from benchmarks.scripted_llm import Reply, ScriptedLlmServer
from memlane.pipeline.prompts import CONTRADICTION_MARKER, DECISION_MARKER, EXTRACTION_MARKER
from memlane.storage import jobs as jobs_sql
from memlane.storage import pipeline_audit as audit_sql

STAGES = {"extraction": EXTRACTION_MARKER, "decision": DECISION_MARKER, "contradiction": CONTRADICTION_MARKER}


class StageScript:
    """Replies per stage, in order; when a stage's queue is empty its default answers."""

    def __init__(self) -> None:
        self.queues: dict[str, list[Reply | str]] = defaultdict(list)
        self.defaults: dict[str, Reply | str] = {
            "extraction": '{"facts": [], "entities": []}',
            "decision": '{"action": "ADD", "confidence": 0.9, "reason": "new information"}',
            "contradiction": '{"contradicts": false, "confidence": 0.1, "reasoning": "compatible"}',
        }

    def add(self, stage: str, *replies: Reply | str | dict) -> None:
        self.queues[stage].extend(json.dumps(r) if isinstance(r, dict) else r for r in replies)

    def __call__(self, prompt: str) -> Reply | str:
        for stage, marker in STAGES.items():
            if prompt.startswith(marker):
                q = self.queues[stage]
                return q.pop(0) if q else self.defaults[stage]
        return Reply("no such stage", status=500)


def facts(*items: tuple[str, str, float], entities: list[dict] | None = None) -> dict:
    """An extraction reply: ``facts((content, type, confidence), ...)``."""
    return {"facts": [{"content": c, "type": t, "confidence": k} for c, t, k in items], "entities": entities or []}


def llm_settings(server: ScriptedLlmServer, kind: str = "ollama") -> dict[str, Any]:
    if kind == "openai":
        return {"provider": "openai", "base_url": server.url + "/v1", "model": "scripted"}
    return {"provider": "ollama", "base_url": server.url, "model": "scripted"}


def drain(c: Any, limit: int = 50) -> int:
    """Run the extraction worker's ticks in this thread until it finds no job; returns jobs done."""
    w = c.workers.get("extraction")
    n = 0
    for _ in range(limit):
        did = w.run_once()
        if not did and w.consecutive_failures == 0:
            break
        n += 1
    return n


def job_of(c: Any, memory_id: str) -> jobs_sql.Job:
    job = c.db.read(lambda conn: jobs_sql.latest_for_memory(conn, memory_id, "extract"))
    assert job is not None
    return job


def audit(c: Any, memory_id: str, event: str = "proposal") -> list[dict[str, Any]]:
    return c.db.read(lambda conn: audit_sql.events(conn, memory_id, event))


def derived(c: Any) -> list[Any]:
    """Every memory the pipeline wrote (source_type pipeline_v2), oldest first."""
    rows, _ = c.memories.list(limit=1000, include_deleted=True, order="oldest")
    return [m for m in rows if m.source_type == "pipeline_v2"]
