"""Prospective hints (memory-pipeline-v2.md "Prospective Indexing (Hints)"): migration 0007 and
its FTS triggers on a real SQLite file, the max-merge rule (unit and through recall), the
enqueue hook, and hint generation by the ``hints`` worker against a real loopback HTTP server
speaking the Ollama protocol, including malformed replies."""

from __future__ import annotations

import json

import pytest

from memlane.recall.hints import (
    PROSPECTIVE_INDEX,
    HintReplyError,
    merge_hints,
    parse_hints,
)
from memlane.recall.hybrid import LegScores
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.storage import hints as hints_sql
from memlane.storage import jobs as jobs_sql
from memlane.storage.fts import match_expression
from memlane.storage.migrations import applied
from test_providers import Loopback, Reply, ollama_body, server  # noqa: F401  (the loopback fixture)

AT = "2025-01-01T00:00:00.000Z"
NO_BOOSTS = {"rehearsal_weight": 0.0, "recency_weight": 0.0}
QUIET = {
    "dampening": {"gravity_enabled": False, "hub_enabled": False, "resolution_enabled": False},
    "reranker": {"enabled": False},
}


def hints_on(**extra) -> dict:
    return {"pipeline_v2": {**QUIET, "hints": {"enabled": True, **extra}}}


# ------------------------------------------------------------------------------ storage
def test_migration_and_fts_triggers(open_store) -> None:
    c = open_store()
    assert "0007_memory_hints" in c.db.write(applied)
    m = c.memories.remember(RememberInput("We use Postgres 15 in production."))
    seq = c.memories.get(m.id).seq
    assert (
        c.db.write(lambda conn: hints_sql.replace(conn, m.id, ["Which database do we run?", "pg version"], at=AT)) == 2
    )
    expr = match_expression("what database")
    assert [s for s, _ in c.db.read(lambda conn: hints_sql.search(conn, expr, limit=10))] == [seq]
    # replace is idempotent and the delete trigger clears the old hints from the index
    c.db.write(lambda conn: hints_sql.replace(conn, m.id, ["Where does prod data live?"], at=AT))
    assert c.db.read(lambda conn: hints_sql.for_memory(conn, m.id)) == ["Where does prod data live?"]
    assert c.db.read(lambda conn: hints_sql.search(conn, expr, limit=10)) == []
    assert c.db.read(lambda conn: hints_sql.search(conn, match_expression("prod data"), limit=10)) == [(seq, 1.0)]
    c.db.write(lambda conn: conn.execute("UPDATE memory_hints SET hint = 'storage engine?'"))
    assert c.db.read(lambda conn: hints_sql.search(conn, match_expression("prod"), limit=10)) == []
    assert c.db.write(
        lambda conn: (
            conn.execute("INSERT INTO memory_hints_fts(memory_hints_fts, rank) VALUES ('integrity-check', 1)") and True
        )
    )


def test_search_keeps_one_score_per_memory(open_store) -> None:
    c = open_store()
    a = c.memories.remember(RememberInput("alpha"))
    b = c.memories.remember(RememberInput("beta"))
    c.db.write(
        lambda conn: hints_sql.replace(conn, a.id, ["kiwi kiwi kiwi", "kiwi once among many other words"], at=AT)
    )
    c.db.write(lambda conn: hints_sql.replace(conn, b.id, ["a kiwi in a long sentence of many many words"], at=AT))
    got = c.db.read(lambda conn: hints_sql.search(conn, match_expression("kiwi"), limit=10))
    seqs = [s for s, _ in got]
    assert seqs == [c.memories.get(a.id).seq, c.memories.get(b.id).seq]
    assert got[0][1] == 1.0 and 0.0 < got[1][1] < 1.0


# ------------------------------------------------------------------------------ max merge
def test_merge_hints_max_not_sum() -> None:
    merged = {
        1: (0.7 * 0.5 + 0.3 * 0.4, LegScores(0.5, 0.4)),  # content and a stronger hint
        2: (0.7 * 0.6 + 0.3 * 0.9, LegScores(0.6, 0.9)),  # content stronger than its hint
        3: (0.7 * 0.2, LegScores(0.2, 0.0)),
    }  # vector only, no hint
    hints = {1: 0.9, 2: 0.3, 4: 1.0}  # 4: only a hint matched
    out = merge_hints(merged, hints, 0.7, lambda seqs: {s: 0.25 for s in seqs})
    assert out[1][0] == pytest.approx(0.7 * 0.5 + 0.3 * 0.9)  # max(0.4, 0.9), not 0.4 + 0.9
    assert out[1][1] == LegScores(0.5, 0.9)
    assert out[2] == merged[2] or out[2][0] == pytest.approx(merged[2][0])
    assert out[3] == merged[3]
    assert out[4][0] == pytest.approx(0.7 * 0.25 + 0.3 * 1.0)
    assert merged[1][1] == LegScores(0.5, 0.4)  # input untouched


def test_merge_hints_without_vector_leg() -> None:
    merged = {1: (0.4, LegScores(None, 0.4))}
    out = merge_hints(merged, {1: 0.9, 2: 0.5}, 0.7, None)
    assert out[1] == (pytest.approx(0.9), LegScores(None, 0.9))
    assert out[2] == (pytest.approx(0.5), LegScores(None, 0.5))
    assert merge_hints(merged, {}, 0.7, None) is merged


def test_recall_hint_match_elevates_and_both_matches_keep_the_max(open_store) -> None:
    c = open_store(recall=NO_BOOSTS, memory=hints_on())
    pg = c.memories.remember(RememberInput("Production runs Postgres 15."))
    other = c.memories.remember(RememberInput("The database migration tool is Alembic."))
    q = RecallQuery("which database engine", limit=10, touch=False)
    before = {h.memory.id: h.score for h in c.recall.recall(q).hits}
    assert pg.id not in before and before[other.id] == pytest.approx(1.0)
    # a hint that matches better than any content: the hinted memory now ranks, at 1.0 (its own best)
    c.db.write(lambda conn: hints_sql.replace(conn, pg.id, ["Which database engine does production use?"], at=AT))
    # a memory matched by content and by a hint: max(1.0, h) = 1.0, never 1.0 + h
    c.db.write(lambda conn: hints_sql.replace(conn, other.id, ["database schema changes"], at=AT))
    res = c.recall.recall(q)
    got = {h.memory.id: h for h in res.hits}
    assert got[pg.id].score == pytest.approx(1.0) and got[pg.id].bm25_score == pytest.approx(1.0)
    assert got[other.id].score == pytest.approx(1.0)
    # hints disabled at call time: the hint leg is not searched
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"hints": p.hints.model_copy(update={"enabled": False})})
    assert pg.id not in {h.memory.id for h in c.recall.recall(q).hits}


def test_recall_hints_respect_filters(open_store) -> None:
    c = open_store(recall=NO_BOOSTS, memory=hints_on())
    a = c.memories.remember(RememberInput("Uses Redis for caching.", project="a"))
    c.db.write(lambda conn: hints_sql.replace(conn, a.id, ["what cache store"], at=AT))
    assert [h.memory.id for h in c.recall.recall(RecallQuery("cache store", project="a", touch=False)).hits] == [a.id]
    assert c.recall.recall(RecallQuery("cache store", project="b", touch=False)).hits == []
    c.memories.delete(a.id)
    assert c.recall.recall(RecallQuery("cache store", touch=False)).hits == []


# ------------------------------------------------------------------------------ reply parsing
@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"hints": ["What DB?", "Which version?"]}', ["What DB?", "Which version?"]),
        ('["a", "b"]', ["a", "b"]),
        ('<think>hmm {"x": 1}</think>\n```json\n{"hints": ["q1"]}\n```', ["q1"]),
        (
            'Sure! Here you go: {"hints": ["q1", "Q1", "  q2 \\n spaced  ", "", 7, null]} hope it helps',
            ["q1", "q2 spaced"],
        ),
        ('{"hints": []}', []),
        ('{"hints": ["1", "2", "3", "4", "5", "6", "7"]}', ["1", "2", "3"]),
    ],
)
def test_parse_hints(reply: str, expected: list[str]) -> None:
    assert parse_hints(reply, 3) == expected


@pytest.mark.parametrize("reply", ["no json at all", '{"hints": "one string"}', '{"other": []}', "42", ""])
def test_parse_hints_malformed(reply: str) -> None:
    with pytest.raises(HintReplyError):
        parse_hints(reply, 5)


def test_parse_hints_cuts_long_hints() -> None:
    (h,) = parse_hints(json.dumps({"hints": ["word " * 200]}), 5)
    assert len(h) <= 300 and h.endswith("word")


# ------------------------------------------------------------------------------ hook + worker
def _jobs(c) -> list:
    return [j for j in c.db.read(lambda conn: jobs_sql.list_jobs(conn)) if j.job_type == PROSPECTIVE_INDEX]


def test_hook_enqueues_only_when_enabled(open_store) -> None:
    c = open_store(memory={"pipeline_v2": QUIET})
    c.memories.remember(RememberInput("first"))
    assert _jobs(c) == []
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"hints": p.hints.model_copy(update={"enabled": True})})
    m = c.memories.remember(RememberInput("second"))
    (job,) = _jobs(c)
    assert (job.memory_id, job.status, job.dedup_key) == (m.id, "pending", m.id)
    c.settings.memory.pipeline_v2 = c.settings.memory.pipeline_v2.model_copy(update={"enabled": False})
    c.memories.remember(RememberInput("third"))
    assert len(_jobs(c)) == 1


def _worker_store(open_store, server, **hints):
    c = open_store(
        memory=hints_on(**hints), llm={"provider": "ollama", "model": "m", "base_url": server.url, "timeout_s": 5}
    )
    return c, c.workers.get("hints")


def test_worker_generates_and_stores_hints(open_store, server) -> None:
    c, w = _worker_store(open_store, server, max=2)
    m = c.memories.remember(RememberInput("We deploy with ArgoCD to the EU cluster."))
    server.script(Reply(body=ollama_body('```json\n{"hints": ["How do we deploy?", "Which cluster?", "extra"]}\n```')))
    assert w.run_once() is True
    assert c.db.read(lambda conn: hints_sql.for_memory(conn, m.id)) == ["How do we deploy?", "Which cluster?"]
    (job,) = _jobs(c)
    assert (job.status, job.result) == ("completed", {"hints": 2})
    body = server.requests[0]["json"]
    assert server.requests[0]["path"] == "/api/generate" and body["model"] == "m"
    assert "ArgoCD" in body["prompt"] and "up to 2" in body["prompt"]
    assert w.run_once() is False  # queue empty


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=ollama_body("I cannot answer that.")),  # not JSON
        Reply(body=ollama_body('{"hints": {"a": 1}}')),  # wrong shape
        Reply(body=b"this is not json"),  # broken protocol body
        Reply(body=json.dumps({"done": True}).encode()),  # no "response"
        Reply(status=500, body=b"model exploded"),  # HTTP error
    ],
)
def test_worker_malformed_reply_is_a_failed_attempt(open_store, server, reply) -> None:
    c, w = _worker_store(open_store, server)
    m = c.memories.remember(RememberInput("Tabs, not spaces."))
    server.script(reply)
    assert w.run_once() is False
    (job,) = _jobs(c)
    assert job.status == "pending" and job.attempts == 1 and job.error  # retried later with backoff
    assert c.db.read(lambda conn: hints_sql.for_memory(conn, m.id)) == []
    assert w.failures == 1


def test_worker_dead_after_max_attempts(open_store, server) -> None:
    c, w = _worker_store(open_store, server)
    c.settings.memory.pipeline_v2 = c.settings.memory.pipeline_v2.model_copy(
        update={"worker": c.settings.memory.pipeline_v2.worker.model_copy(update={"max_retries": 1})}
    )
    c.memories.remember(RememberInput("Only one try."))
    server.script(Reply(body=ollama_body("garbage")))
    w.run_once()
    (job,) = _jobs(c)
    assert job.status == "dead"


def test_worker_skips_without_llm_or_memory(open_store, server, tmp_path) -> None:
    c, w = _worker_store(open_store, server)
    m = c.memories.remember(RememberInput("to be deleted"))
    c.memories.delete(m.id)
    assert w.run_once() is True
    assert [(j.status, j.error) for j in _jobs(c)] == [("skipped", "memory missing or deleted")]
    bare = open_store(home=tmp_path / "no-llm", memory=hints_on())  # llm.provider none
    bare.memories.remember(RememberInput("no llm here"))
    assert bare.workers.get("hints").run_once() is True
    assert [(j.status, j.error) for j in _jobs(bare)] == [("skipped", "no LLM configured")]
    assert server.requests == []


def test_worker_disabled_with_the_flag(open_store, server) -> None:
    c, w = _worker_store(open_store, server)
    c.memories.remember(RememberInput("queued while enabled"))
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"hints": p.hints.model_copy(update={"enabled": False})})
    assert w.run_once() is False
    assert [j.status for j in _jobs(c)] == ["pending"]


def test_generated_hints_are_recalled(open_store, server) -> None:
    c, w = _worker_store(open_store, server)
    c.settings.recall = c.settings.recall.model_copy(update=NO_BOOSTS)
    m = c.memories.remember(RememberInput("Grafana dashboards live in the ops repo."))
    server.script(Reply(body=ollama_body('{"hints": ["where are the monitoring charts"]}')))
    w.run_once()
    hits = c.recall.recall(RecallQuery("monitoring charts", touch=False)).hits
    assert [h.memory.id for h in hits] == [m.id]
