"""Controlled writes through the real extract job (memory-pipeline-v2.md "Pipeline Modes",
"Controlled Writes"): every mode, the confidence gate, dedup, supersession in full mode, the
audit rows, no LLM -> skipped, failures and replays. The LLM is a loopback HTTP server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pipeline import run_pipeline_bench
from benchmarks.replay.extract import NO_PROVIDER, render, run_extract_replay
from benchmarks.scripted_llm import Reply, ScriptedLlmServer
from memlane.config import load_settings
from memlane.pipeline.extract_job import NO_LLM_REASON, make_handler
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.workers.runtime import CompletedInTransaction
from pipeline_helpers import StageScript, audit, derived, drain, facts, job_of, llm_settings

SOURCE = "We moved the billing service from MySQL to PostgreSQL 16 last week; Alice owns the migration."
F1 = ("The billing service uses PostgreSQL 16.", "fact", 0.9)
F2 = ("Alice owns the billing migration scripts.", "fact", 0.85)


@pytest.fixture
def script() -> StageScript:
    return StageScript()


@pytest.fixture
def server(script: StageScript) -> Iterator[ScriptedLlmServer]:
    with ScriptedLlmServer(script) as s:
        yield s


@pytest.fixture
def pstore(open_store, server: ScriptedLlmServer):
    """``pstore(kind="ollama", embedding=None, **pipelineV2)`` -> a store whose LLM is the loopback server."""

    def make(kind: str = "ollama", embedding: Any = None, **pipeline: Any):
        return open_store(embedding=embedding, llm=llm_settings(server, kind), memory={"pipelineV2": pipeline})

    return make


def remember(c, content: str = SOURCE, **kw: Any) -> str:
    return c.memories.remember(RememberInput(content=content, **kw)).id


# ---------------------------------------------------------------- controlled-write


@pytest.mark.parametrize("kind", ["ollama", "openai"])
def test_controlled_write_adds_facts_linked_to_the_source(pstore, script: StageScript, kind: str) -> None:
    c = pstore(kind)
    src = remember(c, project="billing", tags=["infra"])
    script.add(
        "extraction",
        facts(
            F1,
            F2,
            entities=[
                {"source": "billing service", "relationship": "uses", "target": "PostgreSQL 16", "confidence": 0.9}
            ],
        ),
    )
    assert drain(c) == 1
    job = job_of(c, src)
    assert job.status == "completed" and job.result["mode"] == "controlled-write"
    assert job.result["outcomes"]["created"] == 2 and job.result["facts"] == 2
    new = derived(c)
    assert sorted(m.content for m in new) == sorted([F1[0], F2[0]])
    for m in new:
        assert (m.source_type, m.source_id, m.who, m.why) == ("pipeline_v2", src, "pipeline-v2", "extracted-fact")
        assert m.metadata["source_memory_id"] == src and m.metadata["extraction_model"] == f"{kind}:scripted"
        assert m.project == "billing" and m.tags == ("infra",) and m.type == "fact"
        assert [h.event for h in c.memories.history(m.id)] == ["created"]
        assert (
            c.db.read(
                lambda conn: conn.execute(  # derived memories are never re-extracted
                    "SELECT count(*) FROM memory_jobs WHERE memory_id = ?", (m.id,)
                ).fetchone()[0]
            )
            == 0
        )
    assert c.memories.get(src).extraction_status == "completed"
    rows = audit(c, src)
    assert [(r["changes"]["action"], r["changes"]["outcome"]) for r in rows] == [("ADD", "created")] * 2
    for r in rows:
        ch = r["changes"]
        assert ch["job_id"] == job.id and ch["source_memory_id"] == src and ch["fact_count"] == 2
        assert ch["entity_count"] == 1 and ch["fact_confidence"] in (0.9, 0.85) and ch["memory_id"]
        assert r["new_content"] in (F1[0], F2[0]) and r["who"] == "pipeline-v2"
    [summary] = audit(c, src, "extraction")
    assert summary["changes"]["status"] == "completed" and summary["changes"]["outcomes"]["created"] == 2
    # the index follows: BM25 recall finds the derived fact
    hits = c.recall.recall(RecallQuery(query="PostgreSQL 16 billing", limit=5, touch=False)).hits
    assert F1[0] in [h.memory.content for h in hits]


def test_controlled_write_records_none_and_blocks_update_delete(pstore, script: StageScript) -> None:
    c = pstore()
    old = remember(c, "The billing service uses MySQL 5.7 in production.")
    drain(c)  # the old memory's own (empty) extraction
    src = remember(c)
    script.add("extraction", facts(F1, F2, ("The billing service runs in production.", "fact", 0.9)))
    script.add(
        "decision",
        {"action": "UPDATE", "targetId": old, "confidence": 0.9, "reason": "db changed"},
        {"action": "DELETE", "targetId": old, "confidence": 0.8, "reason": "obsolete"},
        {"action": "NONE", "confidence": 0.9, "reason": "already stored"},
    )
    drain(c)
    outcomes = [(r["changes"]["action"], r["changes"]["outcome"], r["changes"]["reason"]) for r in audit(c, src)]
    assert outcomes == [
        ("UPDATE", "blocked", "destructive_mutations_blocked"),
        ("DELETE", "blocked", "destructive_mutations_blocked"),
        ("NONE", "recorded", "no_action"),
    ]
    m = c.memories.get(old)
    assert m.superseded_by is None and not m.is_deleted and m.content.startswith("The billing service uses MySQL")
    assert derived(c) == []
    assert audit(c, src)[0]["old_content"] == m.content  # the target's content is in the audit row


# ---------------------------------------------------------------- shadow


@pytest.mark.parametrize(
    "flags, reason", [({"shadowMode": True}, "shadow_mode"), ({"mutationsFrozen": True}, "mutations_frozen")]
)
def test_shadow_writes_no_memories_but_audits(pstore, script: StageScript, flags, reason) -> None:
    c = pstore(**flags)
    src = remember(c)
    before = c.memories.stats()["total"]
    script.add("extraction", facts(F1, F2))
    drain(c)
    assert c.memories.stats()["total"] == before and derived(c) == []
    assert [(r["changes"]["outcome"], r["changes"]["reason"], r["changes"]["mode"]) for r in audit(c, src)] == [
        ("shadow", reason, "shadow")
    ] * 2
    assert c.memories.get(src).extraction_status == "shadow"
    job = job_of(c, src)
    assert job.status == "completed" and job.result["status"] == "shadow"


# ---------------------------------------------------------------- full mode: supersede, never overwrite


def test_full_mode_supersedes_instead_of_overwriting_or_deleting(
    open_store, server: ScriptedLlmServer, script: StageScript
) -> None:
    events: list[tuple[str, str]] = []
    c = open_store(
        llm=llm_settings(server, "ollama"),
        memory={"pipelineV2": {"allowUpdateDelete": True}},
        memory_listeners=[lambda e, m: events.append((e, m.id))],
    )
    old1 = remember(c, "The deploy cache is disabled in staging.")
    old2 = remember(c, "The billing service uses MySQL 5.7 in production.")
    drain(c)
    src = remember(c, "Today we enabled the deploy cache in staging and moved billing to PostgreSQL 16.")
    new1, new2 = "The deploy cache is enabled in staging.", "The billing service uses PostgreSQL 16 in production."
    script.add("extraction", facts((new1, "fact", 0.9), (new2, "fact", 0.9)))
    script.add(
        "decision",
        {"action": "UPDATE", "targetId": old1, "confidence": 0.9, "reason": "flag flipped"},
        {"action": "DELETE", "targetId": old2, "confidence": 0.9, "reason": "MySQL is gone"},
    )
    drain(c)
    rows = audit(c, src)
    assert [(r["changes"]["action"], r["changes"]["outcome"]) for r in rows] == [
        ("UPDATE", "superseded"),
        ("DELETE", "superseded"),
    ]
    assert rows[0]["changes"]["review_needed"] is True  # enabled/disabled antonym
    assert rows[0]["changes"]["contradiction"]["syntactic"] == "antonym:enabled/disabled"
    by_content = {m.content: m for m in derived(c)}
    for old, text in ((old1, new1), (old2, new2)):
        o = c.memories.get(old)
        assert o.superseded_by == by_content[text].id and not o.is_deleted  # nothing is lost
        assert by_content[text].metadata["supersedes"] == old
        h = c.memories.history(old)
        assert h[-1].event == "superseded" and h[-1].new_content == text
        assert ("superseded", old) in events
    hits = c.recall.recall(
        RecallQuery(query="deploy cache staging", limit=10, touch=False, exclude_superseded=True)
    ).hits
    assert old1 not in [h.memory.id for h in hits] and by_content[new1].id in [h.memory.id for h in hits]
    job = job_of(c, src)
    assert sorted(job.result["superseded_ids"]) == sorted([old1, old2]) and job.result["review_needed"] >= 1


def test_full_mode_semantic_contradiction_is_advisory(pstore, script: StageScript, server) -> None:
    c = pstore(allowUpdateDelete=True, semanticContradictionEnabled=True)
    old = remember(c, "The analytics team stores event data in PostgreSQL clusters.")
    drain(c)
    src = remember(c, "Analytics migrated event data to MongoDB.")
    script.add("extraction", facts(("The analytics team stores event data in MongoDB clusters.", "fact", 0.9)))
    script.add("decision", {"action": "UPDATE", "targetId": old, "confidence": 0.9, "reason": "migrated"})
    script.add("contradiction", '{"contradicts": true, "confidence": 0.9, "reasoning": "different databases"}')
    drain(c)
    [row] = audit(c, src)
    assert row["changes"]["contradiction"]["semantic"]["contradicts"] is True
    assert row["changes"]["review_needed"] is True and row["changes"]["outcome"] == "superseded"
    assert server.count("You compare two statements") == 1


# ---------------------------------------------------------------- gates


def test_confidence_gate(pstore, script: StageScript) -> None:
    c = pstore()
    src = remember(c)
    script.add("extraction", facts(F1, ("Alice might own the billing scripts.", "fact", 0.69)))
    drain(c)
    assert [(r["changes"]["outcome"], r["changes"]["reason"]) for r in audit(c, src)] == [
        ("created", "applied"),
        ("skipped", "low_fact_confidence"),
    ]
    c.settings.memory.pipeline_v2.extraction.min_confidence = 0.5  # read per job: applies at once
    src2 = remember(c, "Second memory about Alice and the billing scripts.")
    script.add("extraction", facts(("Alice might own the billing scripts.", "fact", 0.69)))
    drain(c)
    assert audit(c, src2)[0]["changes"]["outcome"] == "created"


def test_dedup_against_store_and_within_one_job(pstore, script: StageScript) -> None:
    c = pstore()
    existing = remember(c, "the billing service uses postgresql 16")
    drain(c)
    src = remember(c)
    script.add("extraction", facts(F1, F2, ("Alice owns the  billing migration scripts!", "fact", 0.9)))
    drain(c)
    rows = [r["changes"] for r in audit(c, src)]
    assert [(r["outcome"], r["memory_id"] == existing) for r in rows][0] == ("deduped", True)
    assert rows[1]["outcome"] == "created" and rows[2]["outcome"] == "deduped"
    assert rows[2]["memory_id"] == rows[1]["memory_id"]
    assert len(derived(c)) == 1 and job_of(c, src).result["outcomes"]["deduped"] == 2


# ---------------------------------------------------------------- no LLM, failures, replays


def test_no_llm_provider_skips_and_records(open_store) -> None:
    c = open_store()
    assert c.extraction_llm is None
    src = remember(c)
    drain(c)
    job = job_of(c, src)
    assert (job.status, job.error) == ("skipped", NO_LLM_REASON)
    m = c.memories.get(src)
    assert m.extraction_status == "skipped" and m.content == SOURCE and not m.is_deleted
    assert audit(c, src, "extraction") == []  # no history line per memory when no LLM is configured


def test_malformed_extraction_completes_with_warnings(pstore, script: StageScript) -> None:
    c = pstore()
    src = remember(c)
    script.add("extraction", "<think>I will answer</think> sorry, I cannot produce JSON today")
    drain(c)
    job = job_of(c, src)
    assert job.status == "completed" and job.result["facts"] == 0 and job.result["warning_count"] == 1
    assert "not JSON" in job.result["warnings"][0] and c.memories.get(src).extraction_status == "completed"


def test_hallucinated_target_is_dropped_with_a_warning(pstore, script: StageScript) -> None:
    c = pstore(allowUpdateDelete=True)
    remember(c, "The billing service uses MySQL 5.7 in production.")
    drain(c)
    src = remember(c)
    script.add("extraction", facts(F1))
    script.add("decision", {"action": "UPDATE", "targetId": "00000000-dead-beef", "confidence": 0.9, "reason": "x"})
    drain(c)
    job = job_of(c, src)
    assert job.result["outcomes"] == dict.fromkeys(job.result["outcomes"], 0)
    assert any("hallucinated" in w for w in job.result["warnings"]) and derived(c) == []


def test_llm_failure_retries_then_marks_failed(pstore, script: StageScript) -> None:
    c = pstore(worker={"maxRetries": 1})
    src = remember(c)
    script.add("extraction", Reply("upstream exploded", status=500))
    drain(c)
    job = job_of(c, src)
    assert job.status == "dead" and "500" in job.error
    assert c.memories.get(src).extraction_status == "failed"
    assert audit(c, src, "extraction")[0]["changes"]["status"] == "failed"


def test_a_committed_attempt_is_never_applied_twice(pstore, script: StageScript) -> None:
    c = pstore()
    src = remember(c)
    script.add("extraction", facts(F1, F2))
    handler = make_handler(c.memories, c.settings, lambda: c.extraction_llm)
    job = job_of(c, src)
    first = handler(job)
    # the writes and the job's completion committed together, with the result
    assert isinstance(first, CompletedInTransaction) and first.result["outcomes"]["created"] == 2
    stored = job_of(c, src)
    assert stored.status == "completed" and stored.result == first.result
    # leased again anyway (e.g. the reaper reset a lease that outlived its timeout): not re-applied
    again = handler(job)
    assert again["replayed"] is True
    assert len(derived(c)) == 2 and len(audit(c, src, "extraction")) == 1


def test_with_embeddings_vectors_are_prefetched_and_indexed(pstore, script: StageScript) -> None:
    c = pstore(embedding="local")
    src = remember(c)
    script.add("extraction", facts(F1))
    drain(c)
    [m] = derived(c)
    assert m.embedding_model == c.embedder.model_id
    res = c.recall.recall(RecallQuery(query="which database does billing run on", limit=3, touch=False))
    assert "vector" in res.legs and m.id in [h.memory.id for h in res.hits]
    assert audit(c, src)[0]["changes"]["outcome"] == "created"


# ---------------------------------------------------------------- surfaces: replay --extract, bench pipeline

LOCOMO = Path(__file__).resolve().parents[1] / ".." / "shared" / "bench-data" / "locomo" / "locomo10.json"


@pytest.mark.skipif(not LOCOMO.is_file(), reason="LoCoMo not present in ../shared/bench-data")
def test_replay_locomo_extract(tmp_path: Path, server: ScriptedLlmServer, script: StageScript) -> None:
    script.defaults["extraction"] = json.dumps(
        facts(
            F1,
            F2,
            entities=[
                {"source": "billing service", "relationship": "uses", "target": "PostgreSQL 16", "confidence": 0.9}
            ],
        )
    )
    s = load_settings(home=tmp_path / "unused", embedding={"provider": "none"}, llm=llm_settings(server))
    report = run_extract_replay(LOCOMO, settings=s, max_conversations=1, max_sessions=3)
    assert report["sessions"] == 3 and report["jobs"] == {"completed": 3}
    assert report["facts"] == 6 and report["entities"] == 3
    assert report["outcomes"] == {"created": 2, "deduped": 4} and report["deduped"] == 4
    assert report["derived_memories"] == 2 and sum(report["decisions"].values()) == 6
    assert any("facts: 6" in line for line in render(report))
    none = run_extract_replay(
        LOCOMO,
        settings=load_settings(home=tmp_path / "x", embedding={"provider": "none"}),
        max_conversations=1,
        max_sessions=1,
    )
    assert none["provider"] is None and render(none) == [f"extraction not run: {NO_PROVIDER}"]


def test_replay_extract_cli_without_provider_exits_0(tmp_path: Path) -> None:
    data = tmp_path / "tiny-locomo.json"
    data.write_text(
        json.dumps(
            [
                {
                    "sample_id": "c1",
                    "conversation": {
                        "speaker_a": "A",
                        "speaker_b": "B",
                        "session_1_date_time": "1:56 pm on 8 May, 2023",
                        "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "I adopted a dog named Rex."}],
                    },
                    "qa": [],
                }
            ]
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(
        MEMLANE_HOME=str(tmp_path / "home"),
        MEMLANE_CONFIG=str(tmp_path / "none.yaml"),
        MEMLANE_EMBEDDING__PROVIDER="none",
    )
    r = subprocess.run(
        [sys.executable, "-m", "memlane", "replay", "locomo", "--extract", "--data", str(data)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "no LLM provider configured" in r.stdout


def test_bench_pipeline_small_run() -> None:
    report = run_pipeline_bench(jobs=12, repeats=1, workers=2, data=None)
    [run] = report["runs"]
    assert run["status"] == {"completed": 12} and run["facts"] == 24 and run["llm_calls"] >= 12
    assert report["corpus"] == "synthetic" and report["median_jobs_per_s"] > 0 and report["workers"] == 2
