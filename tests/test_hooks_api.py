"""The hook endpoints (``/api/hooks/*``) and the session endpoints (``/api/sessions/*``) through
fastapi's TestClient over real SQLite stores: happy paths, bad payloads (always the one error
shape, never a 5xx), and the documented answer keys."""

from __future__ import annotations

import json

import pytest

from conftest import api_client
from memlane.services.inputs import RememberInput
from test_sessions_end import TRANSCRIPT, Reply, judge, verdict  # noqa: F401  (judge is a fixture)

HOOKS = [
    "/api/hooks/session-start",
    "/api/hooks/user-prompt-submit",
    "/api/hooks/session-end",
    "/api/hooks/pre-compaction",
    "/api/hooks/compaction-complete",
]
#: The smallest valid body of each endpoint, minus session_key.
MINIMAL = {"/api/hooks/user-prompt-submit": {"prompt": "hello"}}
TEN_MB = "p" * (10 * 1024 * 1024)


def assert_error(r, status: int | tuple[int, ...], code: str | tuple[str, ...] | None = None) -> dict:
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status_code in statuses, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"code", "message", "details"}
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["details"], dict)
    if code is not None:
        assert err["code"] in (code if isinstance(code, tuple) else (code,))
    return err


@pytest.fixture
def api(open_store):
    c = open_store()
    for i, text in enumerate(
        [
            "The zebra cluster hosts the billing service.",
            "Walrus is the name of the nightly backup job.",
            "Okapi dashboards show the p99 latency.",
        ]
    ):
        c.memories.remember(RememberInput(content=text, importance=0.9 - i / 10, project="proj"))
    with api_client(c) as client:
        yield client, c


@pytest.fixture
def client(api):
    return api[0]


# ------------------------------------------------------------------ happy paths


def test_full_session_over_http(client) -> None:
    r = client.post(
        "/api/hooks/session-start",
        json={
            "session_key": "h1",
            "project": "proj",
            "cwd": "/src/proj",
            "harness": "claude-code",
            "source": "startup",
            "future_field": {"ignored": True},
        },
    )
    assert r.status_code == 200, r.text
    start = r.json()
    assert set(start) == {
        "session_key",
        "status",
        "inject",
        "predictor_state",
        "candidate_count",
        "injected",
        "took_ms",
        "phase",
    }
    assert start["phase"]["methodology"] == "native" and start["phase"]["phase"] is None  # no phase known
    assert (start["session_key"], start["status"], start["predictor_state"]) == ("h1", "new", "collecting")
    assert start["candidate_count"] == 3 and len(start["injected"]) == 3
    assert start["inject"].startswith("[memlane: collecting | 0/10 sessions | baseline only]\n")
    assert all(set(i) == {"id", "short_id"} and i["short_id"] == i["id"][:8] for i in start["injected"])

    again = client.post("/api/hooks/session-start", json={"session_key": "h1"}).json()
    assert (again["status"], again["inject"], again["injected"]) == ("existing", "", [])

    zebra = start["injected"][0]["id"]
    r = client.post(
        "/api/hooks/user-prompt-submit",
        json={
            "session_key": "h1",
            "prompt": "which cluster is zebra?",
            "project": "proj",
            "memory_feedback": {zebra[:8]: 0.8},
        },
    )
    assert r.status_code == 200, r.text
    p = r.json()
    assert set(p) == {"session_key", "inject", "matched", "injected", "feedback", "took_ms", "phase"}
    assert p["matched"] == [zebra] and p["injected"] == [] and p["inject"] == ""
    assert p["feedback"] == {"applied": 1, "ignored": 0}

    r = client.post("/api/hooks/session-end", json={"session_key": "h1", "transcript": TRANSCRIPT, "reason": "logout"})
    assert r.status_code == 200, r.text
    end = r.json()
    assert set(end) == {
        "session_key",
        "scoring",
        "scorer",
        "score",
        "confidence",
        "labels",
        "transcript_stored",
        "summary_job_id",
        "judge",
    }
    assert end["judge"] is None  # no LLM judge configured
    assert (end["scoring"], end["scorer"], end["labels"], end["transcript_stored"]) == ("done", "behavioral", 3, True)
    assert isinstance(end["summary_job_id"], int)

    view = client.get("/api/sessions/h1")
    assert view.status_code == 200, view.text
    v = view.json()
    assert set(v) == {"session", "score", "memories"}
    assert v["session"]["session_key"] == "h1" and v["session"]["status"] == "ended"
    assert v["session"]["prompt_count"] == 1 and v["session"]["harness"] == "claude-code"
    assert v["score"]["scorer"] == "behavioral"
    mems = {m["memory_id"]: m for m in v["memories"]}
    assert len(mems) == 3
    assert mems[zebra]["fts_hit_count"] == 1 and mems[zebra]["agent_relevance_score"] == 0.8
    assert mems[zebra]["label"] is not None and mems[zebra]["raw_label"] is not None
    assert isinstance(mems[zebra]["label_reason"], list)

    s = client.get("/api/sessions/summary")
    assert s.status_code == 200
    summary = s.json()
    assert summary["sessions"] == 1 and summary["ended"] == 1 and summary["prompts"] == 1
    assert summary["candidates"] == 3 and summary["injected"] == 3 and summary["fts_hits"] == 1
    assert summary["ratings"] == 1 and summary["labelled"] == 3
    assert summary["scores_by_scorer"] == {"behavioral": 1}


def test_summary_of_an_empty_store(client) -> None:
    s = client.get("/api/sessions/summary").json()
    assert s["sessions"] == 0 and s["candidates"] == 0 and s["scores_by_scorer"] == {}
    assert s["training_grade_sessions"] == 0


def test_unknown_session_is_404(client) -> None:
    assert_error(client.get("/api/sessions/nope"), 404, "not_found")
    assert_error(client.get("/api/sessions/" + "k" * 300), (413, 422))


def test_session_key_with_spaces_and_unicode(client) -> None:
    key = "sess 日本 🎉/ä"
    assert client.post("/api/hooks/session-start", json={"session_key": key}).status_code == 200
    from urllib.parse import quote

    r = client.get("/api/sessions/" + quote(key, safe=""))
    assert r.status_code == 200 and r.json()["session"]["session_key"] == key


def test_session_end_with_llm_judge_over_http(open_store, judge) -> None:
    c = open_store(llm=judge.openai())
    mid = c.memories.remember(RememberInput(content="The zebra cluster hosts billing.")).id
    with api_client(c) as client:
        client.post("/api/hooks/session-start", json={"session_key": "j"})
        judge.script(Reply(verdict({mid[:8]: 0.9}, score=0.8)))
        r = client.post("/api/hooks/session-end", json={"session_key": "j", "transcript": TRANSCRIPT, "wait": True})
        assert r.status_code == 200, r.text
        assert (r.json()["scoring"], r.json()["scorer"], r.json()["score"], r.json()["judge"]) == (
            "done",
            "llm",
            0.8,
            "done",
        )
        judge.script(Reply(verdict({})))
        r = client.post("/api/hooks/session-end", json={"session_key": "j2", "transcript": TRANSCRIPT})
        assert r.json()["scoring"] == "queued" and r.json()["scorer"] is None
        c.sessions.wait_idle()
        assert client.get("/api/sessions/j2").json()["score"]["scorer"] == "llm"
        m = client.get("/api/sessions/j").json()["memories"][0]
        assert m["relevance_score"] == 0.9


def test_pre_compaction_and_compaction_complete_shape(api) -> None:
    client, c = api
    client.post("/api/hooks/session-start", json={"session_key": "cp", "project": "proj"})
    client.post("/api/hooks/user-prompt-submit", json={"session_key": "cp", "prompt": "zebra"})
    r = client.post(
        "/api/hooks/pre-compaction",
        json={
            "session_key": "cp",
            "project": "proj",
            "trigger": "auto",
            "custom_instructions": "keep the billing details",
            "harness": "claude-code",
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"session_key", "inject", "summary_prompt", "digest"}
    assert body["session_key"] == "cp"
    assert all(isinstance(body[k], str) for k in ("inject", "summary_prompt", "digest"))
    if c.sessions.checkpoints is None:
        assert body["inject"] == body["summary_prompt"] == body["digest"] == ""
    r = client.post(
        "/api/hooks/compaction-complete",
        json={"session_key": "cp", "project": "proj", "summary": "We fixed the billing cluster."},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"session_key", "recorded"} and isinstance(body["recorded"], bool)
    if c.sessions.checkpoints is None:
        assert body["recorded"] is False
    r = client.post("/api/hooks/compaction-complete", json={"session_key": "cp"})
    assert r.status_code == 200 and r.json()["recorded"] is False  # nothing to record


def test_user_prompt_submit_defaults(client) -> None:
    r = client.post("/api/hooks/user-prompt-submit", json={"session_key": "p", "prompt": ""})
    assert r.status_code == 200
    assert r.json()["inject"] == "" and r.json()["feedback"] == {"applied": 0, "ignored": 0}


def test_replay_clock(client) -> None:
    r = client.post("/api/hooks/session-start", json={"session_key": "rp", "now": "2030-01-01T00:00:00+02:00"})
    assert r.status_code == 200
    assert client.get("/api/sessions/rp").json()["session"]["started_at"] == "2029-12-31T22:00:00.000Z"


# ------------------------------------------------------------------ bad payloads


BAD_BODIES = [
    ({}, 422, "validation_error"),  # missing session_key
    ({"session_key": None}, 422, "validation_error"),
    ({"session_key": 123}, 422, "validation_error"),
    ({"session_key": ["a"]}, 422, "validation_error"),
    ({"session_key": True}, 422, "validation_error"),
    ({"session_key": ""}, 422, "validation_error"),
    ({"session_key": "   "}, 422, "validation_error"),
    ({"session_key": "a\x00b"}, 422, "validation_error"),
    ({"session_key": "k" * 300}, (413, 422), ("payload_too_large", "validation_error")),
    ({"session_key": "ok", "project": 5}, 422, "validation_error"),
    ({"session_key": "ok", "project": "p" * 5000}, (413, 422), ("payload_too_large", "validation_error")),
    ({"session_key": "ok", "harness": {"x": 1}}, 422, "validation_error"),
    ({"session_key": "ok", "now": 1700000000}, 422, "validation_error"),
]
#: Endpoints that read ``now`` (the compaction hooks accept and ignore it).
READS_NOW = HOOKS[:3]


@pytest.mark.parametrize("path", HOOKS)
def test_bad_payloads(client, path) -> None:
    bodies = BAD_BODIES + (
        [({"session_key": "ok", "now": "yesterday"}, 422, "validation_error")] if path in READS_NOW else []
    )
    for body, status, code in bodies:
        r = client.post(path, json={**MINIMAL.get(path, {}), **body})
        try:
            assert_error(r, status, code)
        except AssertionError as exc:
            raise AssertionError(f"{path} {json.dumps(body)[:80]}: {exc}") from None
    # nothing was recorded by any of them
    assert client.get("/api/sessions/summary").json()["sessions"] == 0


INVALID_JSON = [b"{not json", b'{"session_key": "a",}', b"", b"\xff\xfe{}", b"[]", b"null", b'"just a string"', b"42"]


@pytest.mark.parametrize("path", HOOKS + ["/api/sessions/feedback"])
def test_invalid_json_bodies(client, path) -> None:
    for raw in INVALID_JSON:
        r = client.post(path, content=raw, headers={"content-type": "application/json"})
        try:
            assert_error(r, (400, 422), ("invalid_json", "validation_error"))
        except AssertionError as exc:
            raise AssertionError(f"{path} {raw!r}: {exc}") from None
    r = client.post(path, content=b"{not json", headers={"content-type": "application/json"})
    assert_error(r, 400, "invalid_json")


@pytest.mark.parametrize("path", HOOKS)
def test_wrong_content_type_never_5xx(client, path) -> None:
    r = client.post(path, content=b"session_key=a", headers={"content-type": "application/x-www-form-urlencoded"})
    assert 400 <= r.status_code < 500
    assert_error(r, r.status_code)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/hooks/user-prompt-submit", {"prompt": 5}),
        ("/api/hooks/user-prompt-submit", {"prompt": None}),
        ("/api/hooks/user-prompt-submit", {}),  # missing prompt
        ("/api/hooks/session-start", {"context": ["a"]}),
        ("/api/hooks/session-start", {"source": 1}),
        ("/api/hooks/session-end", {"transcript": {"turns": []}}),
        ("/api/hooks/session-end", {"wait": "yes"}),
        ("/api/hooks/session-end", {"reason": 3}),
        ("/api/hooks/pre-compaction", {"trigger": 1}),
        ("/api/hooks/pre-compaction", {"context": 1.5}),
        ("/api/hooks/compaction-complete", {"summary": ["x"]}),
    ],
)
def test_wrong_field_types_are_422_naming_the_field(client, path, body) -> None:
    err = assert_error(client.post(path, json={"session_key": "wt", **body}), 422, "validation_error")
    field = next(iter(body), "prompt")
    assert any(e["field"].split(".")[0] == field for e in err["details"]["errors"]), err


@pytest.mark.parametrize(
    "path, field",
    [
        ("/api/hooks/user-prompt-submit", "prompt"),
        ("/api/hooks/session-start", "context"),
        ("/api/hooks/pre-compaction", "context"),
        ("/api/hooks/compaction-complete", "summary"),
    ],
)
def test_ten_megabyte_fields_are_rejected_cleanly(client, path, field) -> None:
    body = {"session_key": "big", **MINIMAL.get(path, {}), field: TEN_MB}
    err = assert_error(client.post(path, json=body), (413, 422), ("payload_too_large", "validation_error"))
    assert err["details"].get("field", field) == field


def test_ten_megabyte_prompt_changes_nothing(api) -> None:
    client, c = api
    client.post("/api/hooks/session-start", json={"session_key": "big"})
    r = client.post("/api/hooks/user-prompt-submit", json={"session_key": "big", "prompt": TEN_MB})
    assert_error(r, 413, "payload_too_large")
    assert client.get("/api/sessions/big").json()["session"]["prompt_count"] == 0


def test_body_over_the_server_limit_is_413(open_store) -> None:
    c = open_store(max_body_bytes=64 * 1024)
    with api_client(c) as client:
        r = client.post("/api/hooks/session-end", json={"session_key": "x", "transcript": "t" * 100_000})
        assert_error(r, 413, "payload_too_large")


def test_oversize_transcript_is_413(open_store) -> None:
    c = open_store(sessions={"max_transcript_chars": 1000})
    with api_client(c) as client:
        r = client.post("/api/hooks/session-end", json={"session_key": "x", "transcript": "t" * 1001})
        err = assert_error(r, 413, "payload_too_large")
        assert err["details"]["field"] == "transcript"
        assert client.get("/api/sessions/x").status_code == 404  # nothing recorded


def test_unpaired_surrogate_in_prompt_is_422(client) -> None:
    raw = b'{"session_key": "s", "prompt": "bad \\ud800 surrogate"}'
    r = client.post("/api/hooks/user-prompt-submit", content=raw, headers={"content-type": "application/json"})
    assert_error(r, 422, "validation_error")


@pytest.mark.parametrize(
    "body",
    [
        {"session_key": "k"},  # missing memory_feedback
        {"memory_feedback": {}},  # missing session_key
        {"session_key": "k", "memory_feedback": ["a"]},
        {"session_key": "k", "memory_feedback": 0.5},
        {"session_key": 5, "memory_feedback": {}},
        {"session_key": "k", "memory_feedback": {}, "extra": 1},  # this endpoint forbids extras
    ],
)
def test_feedback_endpoint_bad_payloads(client, body) -> None:
    assert_error(client.post("/api/sessions/feedback", json=body), 422, "validation_error")


def test_feedback_endpoint_empty_key_is_422(client) -> None:
    assert_error(
        client.post("/api/sessions/feedback", json={"session_key": "", "memory_feedback": {}}), 422, "validation_error"
    )


def test_huge_integer_feedback_score_is_not_a_500(api) -> None:
    client, c = api
    start = client.post("/api/hooks/session-start", json={"session_key": "hi"}).json()
    short = start["injected"][0]["short_id"]
    big = "9" * 400
    r = client.post(
        "/api/sessions/feedback",
        headers={"content-type": "application/json"},
        content=f'{{"session_key": "hi", "memory_feedback": {{"{short}": {big}}}}}',
    )
    assert r.status_code == 200 and r.json() == {"applied": 1, "ignored": 0}
    r = client.post(
        "/api/hooks/user-prompt-submit",
        headers={"content-type": "application/json"},
        content=f'{{"session_key": "hi", "prompt": "x", "memory_feedback": {{"{short}": -{big}}}}}',
    )
    assert r.status_code == 200 and r.json()["feedback"] == {"applied": 1, "ignored": 0}
    m = {x["memory_id"][:8]: x for x in client.get("/api/sessions/hi").json()["memories"]}
    assert m[short]["agent_relevance_score"] == 0.0 and m[short]["agent_feedback_count"] == 2


def test_nothing_answers_5xx_on_a_mixed_barrage(client) -> None:
    bodies = [
        {"session_key": "m", "prompt": "x", "memory_feedback": {"a" * 10_000: 1}},
        {"session_key": "m", "prompt": "x", "memory_feedback": "{" * 10_000},
        {"session_key": "m", "prompt": "x", "memory_feedback": {str(i): i for i in range(5000)}},
        {"session_key": "m", "prompt": "\u202e\u0000"[:1] * 1000},
        {"session_key": "m", "prompt": '" OR 1=1 -- NEAR( AND * ^'},
        {"session_key": "m", "transcript": "", "wait": False},
        {"session_key": "m", "source": "compact"},
    ]
    for path in HOOKS:
        for body in bodies:
            r = client.post(path, json=body)
            assert r.status_code < 500, (path, body, r.text)


def test_session_start_record_is_queued_after_the_response(api) -> None:
    """The hook holds the start's record until its response is out, then a background task
    queues it: with no further request for the key, it is in the store."""
    client, c = api
    r = client.post("/api/hooks/session-start", json={"session_key": "bg1", "project": "proj"})
    assert r.status_code == 200 and r.json()["status"] == "new"
    c.db.write(lambda conn: None)  # FIFO writer: anything queued before this has committed
    n = c.db.read(
        lambda conn: conn.execute("SELECT count(*) FROM session_memories WHERE session_key = 'bg1'").fetchone()[0]
    )
    assert n == r.json()["candidate_count"] > 0
    assert len(c.sessions.inflight) == 0
