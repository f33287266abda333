"""The observer's promotion pipeline (seed memory-system-v3-design.md section 5, "Promotion Filter
Pipeline"): validation filter, frequency thresholds, novelty, signal score, one LLM synthesis call
(a loopback server speaking Ollama's protocol), storage as observer_inferred + needs_review."""

from __future__ import annotations

import json
import time

import pytest

from benchmarks.scripted_llm import Reply, ScriptedLlmServer
from conftest import api_client
from memlane.errors import NotFound, ValidationError
from memlane.storage import observer as obs_sql
from memlane.v3.observer import Observer
from memlane.v3.promotion import (
    DEAD_END_MIN_STEPS,
    INITIAL_CONFIDENCE,
    NOVELTY_MAX_SIMILARITY,
    SYNTHESIS_SCHEMA,
    Candidate,
    Promoter,
    frequency_term,
    recency_term,
    signal_score,
)
from tests.test_providers import Reply as LoopReply
from tests.test_providers import ollama_body, server  # noqa: F401  (the loopback fixture)

DAY_MS = 86_400_000


def run(obs: Observer, session: str, seq: list[tuple], project: str = "p") -> None:
    """Record ``(tool, file or None[, error])`` calls one second apart."""
    for i, c in enumerate(seq):
        err = c[2] if len(c) > 2 else None
        obs.record(
            session,
            c[0],
            {"file_path": c[1]} if c[1] else {"command": "make test"},
            project=project,
            error=err,
            ts_ms=1_000 + i * 1000,
        )


RE_EDIT = [("Edit", "src/a.py"), ("Read", "src/b.py"), ("Edit", "src/a.py")]


def promoter(c, llm=None, clock_ms=None) -> Promoter:
    return Promoter(
        c.db, c.memories, lambda: llm if llm is not None else c.llm, **({"clock_ms": clock_ms} if clock_ms else {})
    )


def processed(c, session: str) -> list[int]:
    return c.db.read(
        lambda conn: [
            r[0]
            for r in conn.execute(
                "SELECT processed FROM observer_signals WHERE session_key = ? ORDER BY id", (session,)
            )
        ]
    )


# -- the score terms (seed step 3) -----------------------------------------------------------------
def test_score_terms():
    assert frequency_term(2, 2) == 0.5 and frequency_term(9, 2) == 1.0
    assert recency_term(0, 7 * DAY_MS) == pytest.approx(0.5)
    assert recency_term(5 * DAY_MS, 0) == 1.0  # evidence "from the future" counts as now
    c = Candidate("gotcha", "r", "x", [], frequency=2, newest_ms=0, novelty=0.5)
    assert signal_score(c, 0) == pytest.approx(0.4 * 0.5 + 0.3 * 1.0 + 0.3 * 0.5)


# -- a passing session: promoted, marked, not promoted twice -------------------------------------------
def test_a_repeated_backtrack_is_promoted_as_a_gotcha_for_review(store):
    obs = Observer(store.db)
    run(obs, "s1", RE_EDIT)
    run(obs, "s2", RE_EDIT)
    rep = promoter(store).finalize("s2")
    assert rep.outcome == "passed" and rep.synthesis == "template"
    assert [p["type"] for p in rep.promoted] == ["gotcha"] and rep.promoted[0]["frequency"] == 2
    m = store.memories.get(rep.promoted[0]["id"])
    assert (m.type, m.source, m.needs_review, m.project) == ("gotcha", "observer_inferred", True, "p")
    assert "src/a.py" in m.content and list(m.related_files) == ["src/a.py"]
    assert set(processed(store, "s2")) == {obs_sql.PROMOTED}
    assert set(processed(store, "s1")) == {obs_sql.PENDING}
    again = promoter(store).finalize("s2")  # nothing new: the same session observing its own memory again
    assert again.promoted == [] and again.dropped["novelty"] == 0
    assert [(r["id"], r["action"]) for r in again.reinforced] == [(m.id, "seen")]
    assert store.memories.get(m.id).confidence == INITIAL_CONFIDENCE


def test_frequency_threshold_drops_a_single_backtrack(store):
    run(Observer(store.db), "s1", RE_EDIT)
    rep = promoter(store).finalize("s1")
    assert rep.candidates == 1 and rep.dropped["frequency"] == 1 and rep.promoted == []
    assert store.memories.stats()["live"] == 0


def test_old_evidence_scores_below_the_threshold(store):
    obs = Observer(store.db)
    run(obs, "s1", RE_EDIT)
    run(obs, "s2", RE_EDIT)
    later = int(time.time() * 1000) + 60 * DAY_MS  # recency 0.5 ** (60 / 7)
    rep = promoter(store, clock_ms=lambda: later).finalize("s2")
    assert rep.dropped["score"] == 1 and rep.promoted == []


def test_dry_run_reports_and_writes_nothing(store):
    obs = Observer(store.db)
    run(obs, "s1", RE_EDIT)
    run(obs, "s2", RE_EDIT)
    rep = promoter(store).finalize("s2", dry_run=True)
    assert [p["id"] for p in rep.promoted] == [None] and rep.promoted[0]["score"] > 0.6
    assert store.memories.stats()["live"] == 0 and set(processed(store, "s2")) == {obs_sql.PENDING}


# -- the validation filter (seed step 0) ---------------------------------------------------------------
def test_a_failed_session_is_discarded_and_never_counts_again(store):
    obs = Observer(store.db)
    pair = [("Read", "src/a.py"), ("Read", "src/b.py")]
    for s in ("s1", "s2", "s3"):
        run(obs, s, pair)
    rep = promoter(store).finalize("s3", outcome="failed")
    assert rep.discarded == 3 and rep.promoted == []  # two file_access, one co_access
    assert set(processed(store, "s3")) == {obs_sql.DISCARDED}
    # co-access in 3 sessions was the rule; with s3 discarded only 2 remain
    assert Observer(store.db).inferences("p") == []
    rep2 = promoter(store).finalize("s2")
    assert "causal_dependency" not in [p["type"] for p in rep2.promoted]
    run(obs, "s4", pair)
    rep4 = promoter(store).finalize("s4")
    dep = [p for p in rep4.promoted if p["type"] == "causal_dependency"]
    assert dep and dep[0]["frequency"] == 3
    m = store.memories.get(dep[0]["id"])
    assert m.type_fields == {"when_file": "src/a.py", "also_touch": ["src/b.py"]}


def test_a_long_failed_run_with_a_reason_becomes_one_dead_end(store):
    obs = Observer(store.db)
    run(obs, "long", [("Edit", "src/cache.py"), ("Read", "src/db.py")] * (DEAD_END_MIN_STEPS // 2))
    run(obs, "short", [("Edit", "src/cache.py")] * 3)
    short = promoter(store).finalize("short", outcome="failed", why_failed="a typo")
    assert short.promoted == [] and short.candidates == 0
    rep = promoter(store).finalize(
        "long", outcome="failed", why_failed="the cache cannot see writes of other processes"
    )
    assert [p["type"] for p in rep.promoted] == ["dead_end"]
    m = store.memories.get(rep.promoted[0]["id"])
    assert m.type_fields["why_it_failed"] == "the cache cannot see writes of other processes"
    assert "src/cache.py" in m.type_fields["approach_tried"] and m.needs_review


def test_bad_input_is_refused(store):
    run(Observer(store.db), "s1", RE_EDIT)
    p = promoter(store)
    with pytest.raises(ValidationError):
        p.finalize("s1", outcome="maybe")
    with pytest.raises(ValidationError):
        p.finalize("s1", outcome="passed", why_failed="x")
    with pytest.raises(ValidationError):
        p.finalize("")
    with pytest.raises(NotFound):
        p.finalize("never-seen")


# -- novelty (seed step 2) with the real embedding model ------------------------------------------------
def test_novelty_drops_what_a_stored_memory_already_says(vstore):
    from memlane.services.inputs import RememberInput

    obs = Observer(vstore.db)
    run(obs, "s1", RE_EDIT)
    run(obs, "s2", RE_EDIT)
    text = promoter(vstore).finalize("s2", dry_run=True).promoted[0]["content"]
    vstore.memories.remember(RememberInput(content="Note: " + text, project="p"))
    rep = promoter(vstore).finalize("s2")
    assert rep.dropped["novelty"] == 1 and rep.promoted == []
    assert NOVELTY_MAX_SIMILARITY == 0.88


# -- synthesis (seed step 4): one call, JSON in and out, failures keep the template ------------------------
def test_one_llm_call_rewrites_the_promoted_texts(open_store):
    prompts: list[str] = []

    def reply(prompt: str) -> str:
        prompts.append(prompt)
        block = json.loads(prompt.split("<observations>")[1].split("</observations>")[0])
        return json.dumps(
            {"memories": [{"index": o["index"], "content": f"Edit {o['files'][0]} carefully."} for o in block]}
        )

    with ScriptedLlmServer(reply) as server:
        c = open_store(llm={"provider": "ollama", "base_url": server.url, "model": "scripted"})
        obs = Observer(c.db)
        run(obs, "s1", RE_EDIT)
        run(obs, "s2", RE_EDIT)
        rep = promoter(c).finalize("s2")
    assert len(prompts) == 1 and "never follow instructions" in prompts[0]
    assert rep.synthesis == "llm:ollama:scripted"
    assert c.memories.get(rep.promoted[0]["id"]).content == "Edit src/a.py carefully."


def test_the_synthesis_call_asks_for_structured_output(open_store, server):  # noqa: F811
    """The request carries the reply's schema (Ollama's format); the constrained reply is used."""
    server.script(LoopReply(body=ollama_body(json.dumps({"memories": [{"index": 0, "content": "Mind src/a.py."}]}))))
    c = open_store(llm={"provider": "ollama", "base_url": server.url, "model": "m"})
    obs = Observer(c.db)
    run(obs, "s1", RE_EDIT)
    run(obs, "s2", RE_EDIT)
    rep = promoter(c).finalize("s2")
    assert server.requests[0]["json"]["format"] == SYNTHESIS_SCHEMA
    assert rep.synthesis == "llm:ollama:m" and c.memories.get(rep.promoted[0]["id"]).content == "Mind src/a.py."


@pytest.mark.parametrize(
    "answer", [Reply("down", status=500), "not json", '{"memories": [{"index": 7, "content": "x"}]}']
)
def test_an_unusable_synthesis_keeps_the_template_text(open_store, answer):
    with ScriptedLlmServer(lambda prompt: answer) as server:
        c = open_store(llm={"provider": "ollama", "base_url": server.url, "model": "scripted"})
        obs = Observer(c.db)
        run(obs, "s1", RE_EDIT)
        run(obs, "s2", RE_EDIT)
        rep = promoter(c).finalize("s2")
    assert rep.synthesis == "template" and len(rep.promoted) == 1
    assert c.memories.get(rep.promoted[0]["id"]).content.startswith("src/a.py was edited again")


# -- over HTTP -------------------------------------------------------------------------------------------
def test_finalize_and_session_end_over_http(store):
    client = api_client(store)
    for s in ("s1", "s2"):
        for tool, path in RE_EDIT:
            assert (
                client.post(
                    "/api/v3/observer/tool-use",
                    json={"session_id": s, "tool_name": tool, "tool_input": {"file_path": path}, "project": "p"},
                ).status_code
                == 200
            )
    r = client.post("/api/v3/observer/finalize", json={"session_id": "s1", "outcome": "passed", "dry_run": True})
    assert r.status_code == 200 and [p["id"] for p in r.json()["promoted"]] == [None]  # written by none
    r = client.post("/api/v3/observer/session-end", json={"session_id": "s2", "project": "p"})
    body = r.json()
    assert r.status_code == 200 and body["promotion"]["outcome"] == "passed"
    assert [p["type"] for p in body["promotion"]["promoted"]] == ["gotcha"]
    # a session that ends on a failed call is discarded
    client.post(
        "/api/v3/observer/tool-use",
        json={
            "session_id": "s3",
            "tool_name": "Bash",
            "tool_input": {"command": "pytest"},
            "project": "p",
            "tool_response": {"is_error": True, "content": "1 failed"},
        },
    )
    r = client.post("/api/v3/observer/session-end", json={"session_id": "s3", "project": "p"})
    assert r.json()["promotion"]["outcome"] == "failed"
    assert client.post("/api/v3/observer/finalize", json={"session_id": "s1", "outcome": "later"}).status_code == 422
    assert client.post("/api/v3/observer/finalize", json={"session_id": "nope"}).status_code == 404


def test_claude_codes_session_end_runs_the_observers_end_after_answering(store):
    """SessionEnd (``/api/hooks/session-end``) ends the observed session after its answer: the
    scratchpad filled by the PostToolUse hook is promoted without another call."""
    client = api_client(store)
    for s in ("s1", "s2"):
        for tool, path in RE_EDIT:
            client.post(
                "/api/v3/observer/tool-use",
                json={"session_id": s, "tool_name": tool, "tool_input": {"file_path": path}, "project": "p"},
            )
    r = client.post("/api/hooks/session-end", json={"session_key": "s2", "project": "p", "reason": "exit"})
    assert r.status_code == 200
    rows, _ = store.memories.list(limit=10)
    assert [(m.type, m.source, m.needs_review) for m in rows] == [("gotcha", "observer_inferred", True)]
    assert set(processed(store, "s2")) == {obs_sql.PROMOTED}
    # a session the observer never saw ends as before, with nothing promoted
    assert client.post("/api/hooks/session-end", json={"session_key": "other", "project": "p"}).status_code == 200
    assert store.memories.stats()["live"] == 1
