"""The composition root (memlane.container): every service is a declared field built with its
dependencies, the extension points are passed to constructors, nothing is attached afterwards."""

from __future__ import annotations

import dataclasses

from memlane.container import Container
from memlane.services.inputs import RememberInput
from memlane.storage import jobs as jobs_sql
from memlane.workers.runtime import JobWorker


def test_every_attribute_of_the_container_is_a_declared_field(open_store) -> None:
    c = open_store()
    declared = {f.name for f in dataclasses.fields(Container)}
    assert set(vars(c)) == declared
    optional = {"llm", "extraction_llm", "predictor", "embedder"}  # none configured here
    assert all(getattr(c, name) is not None for name in declared - optional)
    assert c.recall.drift is c.drift and c.sessions.drift is c.drift
    assert c.recall.stages is not None and c.recall.graph_boost is not None and c.recall.ranker is not None


def test_workers_are_built_in_their_order_with_the_extraction_concurrency(open_store) -> None:
    c = open_store(memory={"pipelineV2": {"worker": {"concurrency": 3}}})
    assert [w.name for w in c.workers] == [
        "extraction",
        "lease-reaper",
        "structural-classify",
        "aspect-feedback",
        "hints",
        "extraction-2",
        "extraction-3",
        "documents",
        "embedding-tracker",
        "retention",
        "maintenance",
        "v3-lifecycle",
        "v3-coaccess-bootstrap",
    ]
    extraction = [c.workers.get(n) for n in ("extraction", "extraction-2", "extraction-3")]
    assert all(isinstance(w, JobWorker) and w.job_types == ["extract"] for w in extraction)


def test_the_observability_hub_hears_every_job_worker(open_store) -> None:
    c = open_store()
    job_workers = [w for w in c.workers if isinstance(w, JobWorker)]
    assert len(job_workers) >= 4
    assert all(c.observability.on_job in w.listeners for w in job_workers)


def test_memory_listeners_given_to_open_container_hear_changes(open_store) -> None:
    events: list[tuple[str, str]] = []
    c = open_store(memory_listeners=[lambda event, memory: events.append((event, memory.id))])
    m = c.memories.remember(RememberInput("The staging cache is on."))
    c.memories.update(m.id, {"content": "The staging cache is off."})
    c.memories.delete(m.id)
    assert events == [("updated", m.id), ("deleted", m.id)]


def _extract_jobs(c: Container) -> int:
    return sum(j.job_type == "extract" for j in c.db.read(jobs_sql.list_jobs))


def test_a_hot_pipeline_flag_reaches_the_hooks_built_at_open(open_store) -> None:
    c = open_store(memory={"pipelineV2": {"enabled": False}})
    c.memories.remember(RememberInput("first"))
    assert _extract_jobs(c) == 0
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"enabled": True})  # what POST /api/config does
    c.memories.remember(RememberInput("second"))
    assert _extract_jobs(c) == 1
