"""Structural classification (memory-pipeline-v2.md "Structural Classification"): the
``structural_classify`` job assigns aspects and kinds to an entity's unclassified attributes,
batched per entity; with an LLM (a real loopback HTTP server speaking Ollama's /api/generate)
or, without one, with the deterministic rules. Real SQLite files."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memlane.graph import persist_extraction
from memlane.graph.classify import CLASSIFY_WORKER, ClassifyHandler, build_prompt, parse_reply
from memlane.graph.store import CLASSIFY_JOB
from memlane.providers.ollama import OllamaProvider
from memlane.services.inputs import RememberInput
from memlane.storage import graph as graph_sql
from memlane.storage import jobs as jobs_sql
from memlane.workers.runtime import SkipJob
from tests.test_providers import Reply, ollama_body, server  # noqa: F401  (the loopback fixture)

AT = "2026-01-01T00:00:00.000Z"


def rows(c, sql: str, *args: Any) -> list[dict]:
    return c.db.read(lambda conn: [dict(r) for r in conn.execute(sql, args)])


@pytest.fixture
def store(open_store):
    """Linker off (only extracted attributes exist), pipeline on (the classify worker runs)."""
    c = open_store(memory={"pipelineV2": {"graph": {"enabled": False}}})
    mid = c.memories.remember(RememberInput(content="the daemon notes")).id
    c.db.write(
        lambda conn: persist_extraction(
            conn,
            memory_id=mid,
            entities=[],
            at=AT,
            relations=[
                {"source": "Daemon", "target": "SQLite", "relation": "decided to use", "confidence": 0.9},
                {"source": "Daemon", "target": "FastAPI", "relation": "is served by", "confidence": 0.8},
            ],
        )
    )
    return c


def daemon(c) -> graph_sql.Entity:
    return c.db.read(lambda conn: graph_sql.entity_by_canonical(conn, "daemon"))


def lease(c) -> jobs_sql.Job:
    job = c.db.write(lambda conn: jobs_sql.lease(conn, [CLASSIFY_JOB], now=AT, lease_timeout_ms=60_000))
    assert job is not None
    return job


def classified(c) -> dict[str, tuple[str, str, float]]:
    return {
        r["content"]: (r["aspect"], r["kind"], r["importance"])
        for r in rows(
            c,
            "SELECT x.content, x.kind, x.importance, a.name AS aspect FROM entity_attributes x "
            "LEFT JOIN entity_aspects a ON a.id = x.aspect_id",
        )
    }


def test_without_llm_the_deterministic_rules_classify(store) -> None:
    out = ClassifyHandler(store.db, lambda: None)(lease(store))
    assert out == {"entity_id": daemon(store).id, "classified": 2, "by_llm": 0, "batches": 1, "entity_type": None}
    assert classified(store) == {
        "decided to use SQLite": ("decisions", "constraint", 0.85),
        "is served by FastAPI": ("properties", "attribute", 0.5),
    }
    assert daemon(store).entity_type == "extracted"


def test_with_llm_aspects_kinds_and_type_come_from_the_reply(store, server) -> None:  # noqa: F811
    reply = {
        "type": "system",
        "assignments": [
            {"i": 0, "aspect": "Storage", "kind": "constraint", "new": True},
            {"i": 1, "aspect": "Serving", "kind": "attribute", "new": True},
        ],
    }
    server.script(Reply(body=ollama_body("<think>hmm</think>```json\n" + json.dumps(reply) + "\n```")))
    llm = OllamaProvider(model="m", base_url=server.url, timeout_s=5)
    try:
        out = ClassifyHandler(store.db, lambda: llm)(lease(store))
    finally:
        llm.close()
    assert out["by_llm"] == 2 and out["entity_type"] == "system"
    assert classified(store) == {
        "decided to use SQLite": ("Storage", "constraint", 0.85),
        "is served by FastAPI": ("Serving", "attribute", 0.5),
    }
    assert daemon(store).entity_type == "system"
    prompt = server.requests[0]["json"]["prompt"]
    assert "Entity: Daemon" in prompt and "0. decided to use SQLite" in prompt and "infer the entity type" in prompt
    schema = server.requests[0]["json"]["format"]  # structured output: the reply's schema
    assert schema["required"] == ["assignments", "type"] and "system" in schema["properties"]["type"]["enum"]
    assert schema["properties"]["assignments"]["items"]["properties"]["kind"]["enum"] == ["attribute", "constraint"]


def test_items_the_llm_misses_fall_back_to_the_rules(store, server) -> None:  # noqa: F811
    server.script(Reply(body=ollama_body('[{"i": 1, "aspect": "Serving", "kind": "bogus"}, {"i": 7, "aspect": "x"}]')))
    llm = OllamaProvider(model="m", base_url=server.url, timeout_s=5)
    try:
        out = ClassifyHandler(store.db, lambda: llm)(lease(store))
    finally:
        llm.close()
    assert out["by_llm"] == 1 and out["entity_type"] is None
    assert classified(store) == {
        "decided to use SQLite": ("decisions", "constraint", 0.85),
        "is served by FastAPI": ("Serving", "attribute", 0.5),
    }


def test_llm_failure_fails_the_job_and_leaves_attributes_unclassified(store, server) -> None:  # noqa: F811
    server.script(Reply(status=500, body=b"boom"))
    llm = OllamaProvider(model="m", base_url=server.url, timeout_s=5)
    try:
        with pytest.raises(Exception, match="500"):
            ClassifyHandler(store.db, lambda: llm)(lease(store))
    finally:
        llm.close()
    assert all(a is None for a, _, _ in classified(store).values())


def test_batches_of_batch_size(store) -> None:
    out = ClassifyHandler(store.db, lambda: None, batch_size=1)(lease(store))
    assert out["batches"] == 2 and out["classified"] == 2


def test_nothing_to_classify_or_no_entity_is_skipped(store) -> None:
    job = lease(store)
    ClassifyHandler(store.db, lambda: None)(job)
    with pytest.raises(SkipJob, match="nothing to classify"):
        ClassifyHandler(store.db, lambda: None)(job)
    gone = jobs_sql.Job(**{**job.as_dict(), "payload": {"entity_id": "nope"}})
    with pytest.raises(SkipJob, match="no longer exists"):
        ClassifyHandler(store.db, lambda: None)(gone)


def test_the_wired_worker_completes_the_job(store) -> None:
    p = store.settings.memory.pipeline_v2  # the worker runs while enabled and graph.enabled
    assert not store.workers.get(CLASSIFY_WORKER).run_once()
    store.settings.memory.pipeline_v2 = p.model_copy(update={"graph": p.graph.model_copy(update={"enabled": True})})
    worker = store.workers.get(CLASSIFY_WORKER)
    assert worker.run_once() is True
    (job,) = rows(store, "SELECT status, result FROM memory_jobs WHERE job_type = ?", CLASSIFY_JOB)
    assert job["status"] == "completed" and json.loads(job["result"])["classified"] == 2


@pytest.mark.parametrize(
    "text", ["", "not json", "{}", '{"assignments": 3}', "[1, 2]", '[{"i": true}]', '[{"i": 0, "aspect": "  "}]']
)
def test_parse_reply_never_raises(text: str) -> None:
    assert parse_reply(text, 2) == ({}, None)


def test_prompt_suggests_aspects_by_type() -> None:
    e = graph_sql.Entity("id", "Ada", "ada", "person", None, 1, AT, AT)
    prompt = build_prompt(e, ["preferences"], ["likes tea"])
    assert "Suggested aspects: preferences, background" in prompt and "infer the entity type" not in prompt
