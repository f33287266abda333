"""User-prompt-submit over real SQLite stores: Phase 0 verification items 4 and 5 (FTS hit
tracking, fts_only inserts), the relevance threshold, no re-injection, and agent feedback
(agent-relevance-feedback.md) through the service and through ``POST /api/sessions/feedback``."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest

from conftest import api_client
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import FeedbackResult, PromptInput, StartInput
from memlane.storage import sessions as sess_sql

NOW_DT = datetime.now(UTC)


def ago(days: float) -> str:
    return (NOW_DT - timedelta(days=days)).isoformat()


def remember(c, content: str, **kw) -> str:
    return c.memories.remember(RememberInput(content=content, **kw)).id


def by_id(c, key: str) -> dict[str, sess_sql.SessionMemory]:
    return {r.memory_id: r for r in c.db.read(lambda conn: sess_sql.session_memories(conn, key))}


def prompt(c, key: str, text: str, **kw):
    return c.sessions.prompt(PromptInput(key, text, **kw))


@pytest.fixture
def kitchen(open_store):
    """A BM25-only store with five distinctive memories and a started session ``k`` where only
    the top two (by importance) were injected."""
    c = open_store(sessions={"inject_limit": 2})
    ids = {
        "zebra": remember(c, "The zebra cluster hosts the billing service.", importance=0.9),
        "walrus": remember(c, "Walrus is the name of the nightly backup job.", importance=0.8),
        "okapi": remember(c, "Okapi dashboards show the p99 latency.", importance=0.7),
        "narwhal": remember(c, "Narwhal is the codename of the mobile app rewrite.", importance=0.6),
        "quokka": remember(c, "Quokka handles feature flags for the web client.", importance=0.5),
    }
    res = c.sessions.start(StartInput("k"))
    assert [i["id"] for i in res.injected] == [ids["zebra"], ids["walrus"]]
    return c, ids


# ------------------------------------------------------------------ Phase 0, item 4


def test_phase0_4_fts_hit_count_increments(kitchen) -> None:
    """After user-prompt-submit, fts_hit_count increments for the matched memories."""
    c, ids = kitchen
    r1 = prompt(c, "k", "which cluster hosts zebra?")
    assert r1.matched == [ids["zebra"]]
    r2 = prompt(c, "k", "tell me about the zebra cluster and the okapi dashboards")
    assert set(r2.matched) == {ids["zebra"], ids["okapi"]}
    prompt(c, "k", "nothing related at all: xylophone")
    got = by_id(c, "k")
    assert got[ids["zebra"]].fts_hit_count == 2  # injected, matched twice
    assert got[ids["okapi"]].fts_hit_count == 1  # candidate, not injected, matched once
    assert got[ids["walrus"]].fts_hit_count == 0
    assert got[ids["narwhal"]].fts_hit_count == 0
    assert all(r.source == "effective" for r in got.values())  # no new rows for pool members
    assert len(got) == 5
    sess = c.db.read(lambda conn: sess_sql.get_session(conn, "k"))
    assert sess.prompt_count == 3


# ------------------------------------------------------------------ Phase 0, item 5


def test_phase0_5_fts_only_inserts(open_store) -> None:
    """Memories matched by a prompt but outside the candidate pool are inserted as fts_only."""
    c = open_store()
    pooled = remember(c, "Pelican is the staging load balancer.", importance=0.9)
    faded = remember(c, "Flamingo was the old CI server.", importance=0.5, created_at=ago(90))  # below 0.1
    c.sessions.start(StartInput("f"))
    assert set(by_id(c, "f")) == {pooled}
    late = remember(c, "Flamingo's replacement is Heron.", importance=0.9)  # created mid-session

    r = prompt(c, "k-ignored", "warmup")  # another session: no effect on "f"
    assert r.matched == []
    r = prompt(c, "f", "what was flamingo?")
    assert set(r.matched) == {faded, late}
    got = by_id(c, "f")
    for mid in (faded, late):
        row = got[mid]
        assert row.source == "fts_only"
        assert row.was_injected is False
        assert row.fts_hit_count == 1
        assert row.effective_score is None and row.similarity is None and row.baseline_rank is None
        assert row.rank > got[pooled].rank
        assert 0.45 <= row.final_score <= 1.5  # the prompt recall score (graph / resolution boosts may lift it above 1)
    assert got[faded].rank != got[late].rank
    prompt(c, "f", "flamingo again")
    got2 = by_id(c, "f")
    assert got2[faded].fts_hit_count == 2 and len(got2) == 3  # no duplicate row
    assert got2[pooled].fts_hit_count == 0


def test_prompt_for_unknown_session_creates_it_and_records_fts_only(open_store) -> None:
    c = open_store()
    mid = remember(c, "Capybara is the name of the search index.")
    r = prompt(c, "never-started", "capybara index", project=None, harness="opencode")
    assert r.matched == [mid] and r.injected == [mid]
    sess = c.db.read(lambda conn: sess_sql.get_session(conn, "never-started"))
    assert sess.status == "active" and sess.prompt_count == 1 and sess.harness == "opencode"
    assert by_id(c, "never-started")[mid].source == "fts_only"


# ------------------------------------------------------------------ threshold and re-injection


def test_threshold_irrelevant_prompt_injects_nothing(open_store) -> None:
    c = open_store(embedding="local")
    dep = remember(c, "The deploy script pushes the Docker image to the staging registry before production.")
    remember(c, "The user prefers tabs over spaces in Python files.")
    remember(c, "Database backups run nightly at 02:00 UTC to an S3 bucket.")
    for q in ("What is the weather forecast for Lisbon on Tuesday?", "How do I bake sourdough bread at home?"):
        r = prompt(c, "t", q)
        assert r.inject == "" and r.injected == [] and r.matched == []
    r = prompt(c, "t", "how does the deploy script push the docker image?")
    assert r.injected == [dep]
    assert r.inject.startswith("<memlane-memories>\nMemories related to this prompt: These are notes recalled")
    assert f"[{dep[:8]}]" in r.inject and "<memory-feedback>" in r.inject


def test_memory_injected_at_start_is_not_reinjected(open_store) -> None:
    c = open_store(embedding="local")
    dep = remember(c, "The deploy script pushes the Docker image to the staging registry before production.")
    start = c.sessions.start(StartInput("r", context="deployment"))
    assert [i["id"] for i in start.injected] == [dep]
    r = prompt(c, "r", "how does the deploy script push the docker image?")
    assert r.matched == [dep]
    assert r.injected == [] and r.inject == ""
    assert by_id(c, "r")[dep].fts_hit_count == 1


def test_prompt_injected_memory_is_not_shown_twice(kitchen) -> None:
    c, ids = kitchen
    r1 = prompt(c, "k", "narwhal codename")
    assert r1.injected == [ids["narwhal"]]
    r2 = prompt(c, "k", "narwhal codename again please")
    assert r2.matched == [ids["narwhal"]] and r2.injected == [] and r2.inject == ""


def test_empty_prompt_records_nothing_but_counts(kitchen) -> None:
    c, ids = kitchen
    r = prompt(c, "k", "   ")
    assert (r.inject, r.matched, r.injected) == ("", [], [])
    assert all(x.fts_hit_count == 0 for x in by_id(c, "k").values())
    assert c.db.read(lambda conn: sess_sql.get_session(conn, "k")).prompt_count == 1


def test_prompt_budget_and_limit(open_store) -> None:
    c = open_store(sessions={"prompt_limit": 2, "prompt_budget_chars": 400})
    for i in range(5):
        remember(c, f"Axolotl fact {i}: " + "x" * 60)
    r = prompt(c, "b", "axolotl fact")
    assert len(r.matched) >= 3
    assert len(r.injected) == 2
    lines = [ln for ln in r.inject.splitlines() if ln.startswith("- [")]
    assert len(lines) == 2 and sum(len(ln) + 1 for ln in lines) <= 400


# ------------------------------------------------------------------ agent feedback


def fb(c, key: str, raw) -> FeedbackResult:
    return c.sessions.feedback(key, raw)


def test_feedback_running_mean(kitchen) -> None:
    c, ids = kitchen
    z = ids["zebra"]
    assert fb(c, "k", {z[:8]: 0.8}) == FeedbackResult(1, 0)
    assert fb(c, "k", {z[:8]: 0.4}) == FeedbackResult(1, 0)
    row = by_id(c, "k")[z]
    assert row.agent_relevance_score == pytest.approx(0.6)
    assert row.agent_feedback_count == 2
    assert fb(c, "k", {z: 1.0}) == FeedbackResult(1, 0)  # the full id works too
    row = by_id(c, "k")[z]
    assert row.agent_relevance_score == pytest.approx((0.8 + 0.4 + 1.0) / 3)
    assert row.agent_feedback_count == 3
    # untouched rows stay NULL / 0
    w = by_id(c, "k")[ids["walrus"]]
    assert w.agent_relevance_score is None and w.agent_feedback_count == 0


def test_feedback_through_prompts(kitchen) -> None:
    c, ids = kitchen
    z, w = ids["zebra"][:8], ids["walrus"][:8]
    r = prompt(c, "k", "first", memory_feedback={z: 0.8, w: -0.2})
    assert (r.feedback.applied, r.feedback.ignored) == (2, 0)
    r = prompt(c, "k", "second", memory_feedback=json.dumps({"memory_feedback": {z: 0.4}}))
    assert (r.feedback.applied, r.feedback.ignored) == (1, 0)
    got = by_id(c, "k")
    assert got[ids["zebra"]].agent_relevance_score == pytest.approx(0.6)
    assert got[ids["zebra"]].agent_feedback_count == 2
    assert got[ids["walrus"]].agent_relevance_score == pytest.approx(-0.2)


def test_feedback_bad_entries_ignored(kitchen) -> None:
    c, ids = kitchen
    z, w, o = ids["zebra"], ids["walrus"], ids["okapi"]
    res = fb(
        c,
        "k",
        {
            z[:8]: 0.5,
            "deadbeef": 0.9,  # unknown id
            w[:8]: "very useful",  # not a number
            o[:8]: math.nan,  # NaN
            ids["narwhal"][:8]: True,  # bool is not a score
            ids["quokka"][:8]: None,
            f"[{w[:8]}]": math.inf,  # infinite
        },
    )
    assert res == FeedbackResult(1, 6)
    got = by_id(c, "k")
    assert got[z].agent_relevance_score == pytest.approx(0.5)
    assert all(got[m].agent_feedback_count == 0 for m in (w, o, ids["narwhal"], ids["quokka"]))


def test_feedback_out_of_range_is_clamped(kitchen) -> None:
    c, ids = kitchen
    assert fb(c, "k", {ids["zebra"][:8]: 1.7, ids["walrus"][:8]: -3}) == FeedbackResult(2, 0)
    got = by_id(c, "k")
    assert got[ids["zebra"]].agent_relevance_score == 1.0
    assert got[ids["walrus"]].agent_relevance_score == -1.0


def test_feedback_huge_integers_are_clamped_not_a_crash(kitchen) -> None:
    """A JSON integer too large for a float (e.g. 400 nines) once raised OverflowError (HTTP 500)."""
    c, ids = kitchen
    assert fb(c, "k", {ids["zebra"][:8]: 10**400, ids["walrus"][:8]: -(10**400)}) == FeedbackResult(2, 0)
    assert fb(c, "k", json.dumps({ids["okapi"][:8]: 10**400})) == FeedbackResult(1, 0)
    got = by_id(c, "k")
    assert got[ids["zebra"]].agent_relevance_score == 1.0
    assert got[ids["walrus"]].agent_relevance_score == -1.0
    assert got[ids["okapi"]].agent_relevance_score == 1.0


def test_feedback_bracketed_and_padded_ids(kitchen) -> None:
    c, ids = kitchen
    assert fb(c, "k", {f"[{ids['zebra'][:8]}]": 0.3, f" {ids['okapi'][:8]} ": 0.2}) == FeedbackResult(2, 0)


@pytest.mark.parametrize(
    "raw",
    ["{not json", '["a", "b"]', "42", "", [("a", 1)], [0.5], 0.7, None, {"memory_feedback": "oops"}, '{"x": ' * 5000],
)
def test_feedback_malformed_input_never_fails(kitchen, raw) -> None:
    c, ids = kitchen
    res = fb(c, "k", raw)
    assert res.applied == 0
    assert all(r.agent_feedback_count == 0 for r in by_id(c, "k").values())


def test_feedback_for_unknown_session_or_memory_outside_it(kitchen) -> None:
    c, ids = kitchen
    assert fb(c, "no-such-session", {ids["zebra"][:8]: 0.5}) == FeedbackResult(0, 1)
    other = remember(c, "A memory nobody saw in session k.", importance=0.01)
    assert fb(c, "k", {other: 0.5}) == FeedbackResult(0, 1)


def test_feedback_disabled_by_settings(open_store) -> None:
    c = open_store(sessions={"agent_feedback": False})
    mid = remember(c, "Some fact.")
    start = c.sessions.start(StartInput("off"))
    assert "<memory-feedback>" not in start.inject
    assert fb(c, "off", {mid[:8]: 1.0}) == FeedbackResult(0, 0)
    assert by_id(c, "off")[mid].agent_feedback_count == 0


def test_feedback_via_http(kitchen) -> None:
    c, ids = kitchen
    z = ids["zebra"]
    with api_client(c) as client:
        r = client.post("/api/sessions/feedback", json={"session_key": "k", "memory_feedback": {z[:8]: 0.8}})
        assert r.status_code == 200 and r.json() == {"applied": 1, "ignored": 0}
        r = client.post(
            "/api/sessions/feedback", json={"session_key": "k", "memory_feedback": json.dumps({z: 0.4, "nope": 1})}
        )
        assert r.status_code == 200 and r.json() == {"applied": 1, "ignored": 1}
        r = client.post("/api/sessions/feedback", json={"session_key": "k", "memory_feedback": "{broken"})
        assert r.status_code == 200 and r.json() == {"applied": 0, "ignored": 1}
        # the prompt hook carries feedback too, and a malformed value never fails the prompt
        for bad in (["a", 1], 5, {"x": "y"}, "{oops"):
            r = client.post(
                "/api/hooks/user-prompt-submit", json={"session_key": "k", "prompt": "zebra", "memory_feedback": bad}
            )
            assert r.status_code == 200, r.text
            assert r.json()["feedback"]["applied"] == 0
        r = client.post("/api/sessions/feedback", json={"memory_feedback": {}})
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    row = by_id(c, "k")[z]
    assert row.agent_relevance_score == pytest.approx(0.6) and row.agent_feedback_count == 2
