"""V3 memory schema (issue 42 item 1): migration 0014 keeps every memory; the V3 fields are
accepted, checked, stored and filtered through the service, the HTTP API, MCP and the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid

import pytest

from conftest import api_client
from memlane.errors import ValidationError
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.storage.migrations import MIGRATIONS
from memlane.storage.v3 import V3Filter
from memlane.v3.model import V3_TYPES
from memlane.v3.service import V3Service

V3_NAME = "0014_v3_schema"


def _old_store(home, n: int) -> list[str]:
    """A database at the schema before 0014, filled the way the code before V3 wrote memories."""
    home.mkdir(parents=True)
    conn = sqlite3.connect(home / "memories.db")
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    for name, script in MIGRATIONS:
        if name >= V3_NAME:
            break
        conn.executescript(script)
        conn.execute("INSERT INTO schema_migrations VALUES (?, '2026-01-01T00:00:00Z')", (name,))
    ids = []
    for i in range(n):
        mid = str(uuid.uuid4())
        text = f"legacy memory {i}: the deploy script for service{i} lives in ops/deploy{i}.sh"
        conn.execute(
            """INSERT INTO memories (id, type, content, normalized_content, content_hash, importance,
                   confidence, project, tags, metadata, created_at, updated_at, pinned)
               VALUES (?,?,?,?,?,0.5,1.0,?,?,'{}','2026-01-01T00:00:00.000Z','2026-01-01T00:00:00.000Z',?)""",
            (
                mid,
                "fact" if i % 2 else "decision",
                text,
                text.lower(),
                f"hash{i}",
                "infra" if i % 3 else None,
                json.dumps([f"t{i}"]),
                int(i == 0),
            ),
        )
        ids.append(mid)
    conn.commit()
    conn.close()
    return ids


def test_migration_keeps_every_memory_recallable(open_store, tmp_path):
    home = tmp_path / "old"
    ids = _old_store(home, 30)
    c = open_store(home=home)
    applied = c.db.read(lambda conn: [r[0] for r in conn.execute("SELECT name FROM schema_migrations")])
    assert V3_NAME in applied
    for i, mid in enumerate(ids):
        m = c.memories.get(mid)
        assert m.content.startswith(f"legacy memory {i}:")
        assert (m.scope, m.source, m.related_files, m.needs_review, m.user_verified, m.type_fields) == (
            "global",
            "agent_explicit",
            (),
            False,
            False,
            {},
        )
        assert m.tags == (f"t{i}",) and m.pinned == (i == 0)
    for i in (0, 7, 29):
        hits = c.recall.recall(RecallQuery(query=f"deploy script service{i}", limit=3)).hits
        assert hits and hits[0].memory.id == ids[i]
    # the old memories are listed by the V3 filter's defaults too
    svc = V3Service(c.db, c.memories, c.recall)
    assert svc.search(V3Filter(scopes=("global",)), limit=100)[1] == 30


def test_remember_v3_fields_round_trip_and_defaults(store):
    r = store.memories.remember(
        RememberInput(
            content="Retrying the auth mock with sleeps does not fix the race",
            type="dead_end",
            scope="module",
            source="observer_inferred",
            needs_review=True,
            related_files=("src/auth.py", "src/auth.py", "tests/t.py"),
            related_modules=("auth",),
            commit_sha="ABCDEF1234",
            citation_text="auth mock race",
            work_unit_ref={"methodology": "native", "hierarchy": ["spec-12", "subtask-3"]},
            type_fields={"approach_tried": "sleep before assert", "why_it_failed": "the race is in the mock"},
        )
    )
    m = store.memories.get(r.id)
    assert m.related_files == ("src/auth.py", "tests/t.py")  # duplicates dropped, order kept
    assert m.commit_sha == "abcdef1234" and m.methodology == "native"
    assert m.decay_half_life_days == 90.0  # the seed's dead_end half-life
    assert m.work_unit_ref == {"methodology": "native", "hierarchy": ["spec-12", "subtask-3"]}
    # a type with a fixed scope gets it by default
    r2 = store.memories.remember(
        RememberInput(
            content="auth module costs 40k tokens per session",
            type="context_cost",
            type_fields={"module": "auth", "average_tokens_per_session": 40000},
        )
    )
    assert store.memories.get(r2.id).scope == "module"
    w = store.memories.remember(RememberInput(content="half done: the parser", type="work_state"))
    assert store.memories.get(w.id).decay_half_life_days == 7.0


@pytest.mark.parametrize(
    "item,field",
    [
        (dict(type="dead_end", type_fields={"approach_tried": "x"}), "type_fields.why_it_failed"),
        (dict(type="gotcha", type_fields={"approach_tried": "x"}), "type_fields"),
        (dict(scope="galaxy"), "scope"),
        (dict(source="rumour"), "source"),
        (dict(scope="work_unit"), "work_unit_ref"),
        (dict(work_unit_ref={"methodology": "native", "hierarchy": []}), "work_unit_ref.hierarchy"),
        (dict(work_unit_ref={"methodology": "native", "hierarchy": ["a"], "spec": 1}), "work_unit_ref"),
        (dict(commit_sha="not-a-sha"), "commit_sha"),
        (
            dict(
                type="workflow_recipe",
                scope="session",
                type_fields={"task_pattern": "x", "steps": [{"order": 1, "description": "y"}]},
            ),
            "scope",
        ),
        (
            dict(
                type="workflow_recipe", type_fields={"task_pattern": "x", "steps": [{"order": -1, "description": "y"}]}
            ),
            "type_fields.steps[0].order",
        ),
        (
            dict(type="e2e_observation", type_fields={"observation_type": "vibes", "mcp_tool_used": "click"}),
            "type_fields.observation_type",
        ),
        (dict(related_files=["ok", ""]), "related_files[]"),
        (dict(citation_text="x" * 201), "citation_text"),
        (dict(decay_half_life_days=0), "decay_half_life_days"),
    ],
)
def test_bad_v3_values_are_refused_naming_the_field(store, item, field):
    with pytest.raises(ValidationError) as exc:
        store.memories.remember(RememberInput(content="some memory text", **item))
    assert exc.value.details["field"] == field
    assert store.memories.live_count() == 0


def test_every_v3_type_is_accepted_with_its_required_fields(store):
    required = {
        "e2e_observation": {"observation_type": "timing", "mcp_tool_used": "click_by_text"},
        "dead_end": {"approach_tried": "a", "why_it_failed": "b"},
        "work_unit_outcome": {"succeeded": False, "failure_reason": "tests", "files_modified": ["a.py"]},
        "workflow_recipe": {
            "task_pattern": "add an IPC handler",
            "steps": [
                {"order": 1, "description": "declare the channel", "canonical_file": "src/ipc.ts", "canonical_line": 40}
            ],
        },
        "context_cost": {"module": "auth", "average_tokens_per_session": 1.5},
        "prefetch_pattern": {"module_trigger": "auth", "always_read_files": ["src/auth.py"]},
        "task_calibration": {"module": "auth", "average_actual_steps": 12, "average_planned_steps": 8},
        "causal_dependency": {"when_file": "schema.sql", "also_touch": ["migrations.py"]},
    }
    for t in V3_TYPES:
        r = store.memories.remember(RememberInput(content=f"a {t} memory", type=t, type_fields=required.get(t, {})))
        assert store.memories.get(r.id).type_fields == required.get(t, {}), t


def test_update_checks_v3_fields_against_the_new_type(store):
    r = store.memories.remember(RememberInput(content="use the retry wrapper", type="pattern"))
    with pytest.raises(ValidationError):
        store.memories.update(r.id, {"type": "dead_end"})  # dead_end needs its fields
    m = store.memories.update(
        r.id,
        {
            "type": "dead_end",
            "type_fields": {"approach_tried": "a", "why_it_failed": "b"},
            "related_files": ["x.py"],
            "needs_review": True,
        },
    )
    assert (m.type, m.related_files, m.needs_review) == ("dead_end", ("x.py",), True)
    changes = store.memories.history(r.id)[-1].changes
    assert changes["related_files"] == [[], ["x.py"]] and changes["needs_review"] == [False, True]


def test_api_accepts_filters_and_old_clients_keep_working(store):
    client = api_client(store)
    old = client.post("/api/memory/remember", json={"content": "User prefers tabs", "type": "preference"})
    assert old.status_code == 200
    body = client.get(f"/api/memory/{old.json()['id']}").json()
    assert body["scope"] == "global" and body["source"] == "agent_explicit"
    ids = {}
    for name, extra in {
        "a": {
            "scope": "module",
            "related_files": ["httpx/_client.py"],
            "source": "observer_inferred",
            "needs_review": True,
        },
        "b": {
            "scope": "work_unit",
            "work_unit_ref": {"methodology": "native", "hierarchy": ["spec-7", "t1"]},
            "related_files": ["httpx/_models.py"],
        },
        "c": {"source": "user_taught", "commit_sha": "0123abcd"},
    }.items():
        r = client.post("/api/memory/remember", json={"content": f"client timeout note {name}", **extra})
        assert r.status_code == 200, r.text
        ids[name] = r.json()["id"]
    bad = client.post("/api/memory/remember", json={"content": "x", "scope": "galaxy"})
    assert bad.status_code == 422 and bad.json()["error"]["details"]["field"] == "scope"

    def listed(**params):
        r = client.get("/api/v3/memories", params=params)
        assert r.status_code == 200, r.text
        return {m["id"] for m in r.json()["items"]}

    assert listed(scope="module") == {ids["a"]}
    assert listed(related_file="httpx/_models.py") == {ids["b"]}
    assert listed(work_unit="spec-7") == {ids["b"]}
    assert listed(source="user_taught") == {ids["c"]}
    assert listed(commit_sha="0123ABCD") == {ids["c"]}
    assert listed(needs_review="true") == {ids["a"]}
    assert client.get("/api/v3/memories", params={"scope": "galaxy"}).status_code == 422

    rec = client.post(
        "/api/v3/recall", json={"query": "client timeout note", "scopes": ["global"], "sources": ["user_taught"]}
    )
    assert rec.status_code == 200 and [h["id"] for h in rec.json()["results"]] == [ids["c"]]
    plain = client.post("/api/memory/recall", json={"query": "client timeout note", "limit": 10}).json()
    assert {h["id"] for h in plain["results"]} == set(ids.values())

    v = client.post(f"/api/v3/memories/{ids['a']}/verify", json={"verified": True})
    assert v.status_code == 200 and v.json()["user_verified"] and not v.json()["needs_review"]
    p = client.patch(f"/api/memory/{ids['c']}", json={"related_modules": ["transport"], "scope": "module"})
    assert p.status_code == 200 and p.json()["related_modules"] == ["transport"]
    stats = client.get("/api/v3/stats").json()
    assert stats["by_scope"] == {"module": 2, "global": 1, "work_unit": 1} and stats["user_verified"] == 1


def test_relations_through_the_api(store):
    client = api_client(store)
    a = client.post("/api/memory/remember", json={"content": "use httpx.Timeout(5)"}).json()["id"]
    b = client.post("/api/memory/remember", json={"content": "tests assert a 5 s timeout"}).json()["id"]
    r = client.post("/api/v3/relations", json={"source_id": b, "target_id": a, "relation": "validates"})
    assert r.status_code == 200, r.text
    assert (
        client.post("/api/v3/relations", json={"source_id": a, "target_id": a, "relation": "validates"}).status_code
        == 422
    )
    assert (
        client.post("/api/v3/relations", json={"source_id": a, "target_id": b, "relation": "likes"}).status_code == 422
    )
    assert (
        client.post(
            "/api/v3/relations", json={"source_id": a, "target_id": "nope", "relation": "required_with"}
        ).status_code
        == 404
    )
    rel = client.get("/api/v3/relations", params={"memory_id": a}).json()["relations"]
    assert [(x["source_id"], x["relation"], x["target_id"]) for x in rel] == [(b, "validates", a)]
    assert client.delete("/api/v3/relations", params={"source_id": b, "target_id": a}).json() == {"removed": 1}


async def _mcp_v3_round_trip(s) -> None:
    from test_mcp import error_text, ok

    await s.call_tool("memory_store", {"content": "the pool limit default is 100"})
    stored = ok(
        await s.call_tool(
            "memory_store",
            {
                "content": "the pool limit lives in httpx/_config.py",
                "type": "gotcha",
                "scope": "module",
                "related_files": ["httpx/_config.py"],
                "work_unit_ref": {"methodology": "native", "hierarchy": ["spec-9"]},
            },
        )
    )
    hits = ok(await s.call_tool("memory_search", {"query": "pool limit", "related_file": "httpx/_config.py"}))
    assert [h["id"] for h in hits] == [stored["id"]]
    assert len(ok(await s.call_tool("memory_search", {"query": "pool limit"}))) == 2
    assert ok(await s.call_tool("memory_search", {"query": "pool limit", "scopes": ["session"]})) == []
    full = ok(await s.call_tool("memory_get", {"id": stored["id"]}))
    assert full["scope"] == "module" and full["work_unit_ref"]["hierarchy"] == ["spec-9"]
    assert "scope" in error_text(await s.call_tool("memory_store", {"content": "x y", "scope": "galaxy"}))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_v3_fields_in_process(tmp_path, anyio_backend):
    from test_mcp import InProcessDaemon, http_session

    d = InProcessDaemon(tmp_path / "home")
    d.start()
    try:
        async with http_session(d.url) as s:
            await _mcp_v3_round_trip(s)
    finally:
        d.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_v3_fields_over_stdio(tmp_path, start_daemon, anyio_backend):
    from test_mcp import stdio_session

    d = start_daemon(provider="none")
    async with stdio_session(d.url, tmp_path, token_home=d.home) as s:
        await _mcp_v3_round_trip(s)


def test_cli_remember_and_list_v3_against_a_daemon(start_daemon):
    d = start_daemon(provider="none")
    env = {**os.environ, "MEMLANE_HOME": str(d.home)}

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "memlane", *args, "--url", d.url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    r = cli(
        "remember",
        "never mock the transport in integration tests",
        "--type",
        "dead_end",
        "--scope",
        "module",
        "--file",
        "httpx/_transports/default.py",
        "--work-unit",
        "native:spec-3/t2",
        "--needs-review",
        "--fields",
        '{"approach_tried": "mock transport", "why_it_failed": "hid the bug"}',
    )
    assert r.returncode == 0, r.stderr
    assert cli("remember", "plain old memory").returncode == 0
    bad = cli("remember", "x", "--work-unit", "nocolon")
    assert bad.returncode == 1 and "--work-unit" in bad.stderr
    out = cli("memories", "list", "--file", "httpx/_transports/default.py", "--json")
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)["items"]
    assert len(items) == 1 and items[0]["work_unit_ref"]["hierarchy"] == ["spec-3", "t2"]
    rec = cli("recall", "mock the transport", "--needs-review", "--json")
    assert rec.returncode == 0, rec.stderr
    assert [h["type"] for h in json.loads(rec.stdout)["results"]] == ["dead_end"]
    rec = cli("recall", "mock the transport", "--reviewed", "--json")
    assert rec.returncode == 0 and json.loads(rec.stdout)["results"] == []


def test_hostile_values_are_422_never_500(store, tmp_path):
    client = api_client(store)
    a = client.post("/api/memory/remember", json={"content": "first memory"}).json()["id"]
    cases = [
        ("POST", "/api/memory/remember", {"content": "x y", "citation_text": "bad \ud800 half"}),
        ("POST", "/api/memory/remember", {"content": "x y", "related_files": ["a\x00b"]}),
        (
            "POST",
            "/api/memory/remember",
            {"content": "x y", "type": "work_state", "type_fields": {"methodology_state": {"x": "\udfff"}}},
        ),
        ("POST", "/api/v3/relations", {"source_id": a, "target_id": "\ud800", "relation": "validates"}),
        ("POST", "/api/v3/coaccess/bootstrap", {"repo": "/tmp/\x00evil"}),
        ("POST", "/api/v3/coaccess/bootstrap", {"repo": str(tmp_path), "rev": "\ud800"}),
        ("POST", "/api/v3/recall", {"query": "x", "scopes": ["global"] * 5, "related_file": "\ud800"}),
    ]
    for method, path, body in cases:
        # json.dumps escapes lone surrogates (\\ud800), as a hostile client would send them
        r = client.request(method, path, content=json.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code == 422, (path, body, r.status_code, r.text)
        assert r.json()["error"]["code"] == "validation_error"
    many = [("type", f"t{i}") for i in range(101)]
    assert client.get("/api/v3/memories", params=many).status_code == 422
    dup = [("scope", "global")] * 2000
    r = client.get("/api/v3/memories", params=dup)
    assert r.status_code == 200 and r.json()["total"] == 1
