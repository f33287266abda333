"""Pruning and lifecycle of V3 memories (issue 42 item 7): one test per rule of the seed's
section 13 tables (each with the case just inside the limit), the protections (pinned, kept), the
user controls through the service, HTTP, CLI-facing routes and MCP, and the background worker."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from conftest import api_client
from memlane.errors import ValidationError
from memlane.services.inputs import RememberInput
from memlane.v3.lifecycle import LifecycleService, LifecycleWorker

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def ago(days: float) -> str:
    return (NOW - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def remember(c, text: str, days: float, **kw) -> str:
    return c.memories.remember(RememberInput(content=text, created_at=ago(days), **kw)).id


def run(c, root=None, **kw):
    return LifecycleService(c.db, c.memories).run(now=NOW.isoformat(), project_root=str(root) if root else None, **kw)


CASES = [
    # (rule, memory past the limit, memory just inside it)
    ("session", dict(scope="session", days=8), dict(scope="session", days=6)),
    ("decayed", dict(type="work_state", days=17), dict(type="work_state", days=15)),  # 0.5^(d/7) vs 0.2
    (
        "decayed",
        dict(type="dead_end", days=210, type_fields={"approach_tried": "a", "why_it_failed": "b"}),
        dict(type="dead_end", days=200, type_fields={"approach_tried": "a", "why_it_failed": "b"}),
    ),
    ("low_confidence", dict(confidence=0.1, days=61), dict(confidence=0.1, days=59)),
    ("low_confidence", dict(confidence=0.1, days=61, scope="module"), dict(confidence=0.3, days=400)),
    (
        "recipe_expired",
        dict(
            type="workflow_recipe",
            days=61,
            type_fields={"task_pattern": "add a route", "steps": [{"order": 1, "description": "edit app.py"}]},
        ),
        dict(
            type="workflow_recipe",
            days=59,
            type_fields={"task_pattern": "add a route", "steps": [{"order": 1, "description": "edit app.py"}]},
        ),
    ),
]


@pytest.mark.parametrize("rule,old,young", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_pruning_rule(store, rule, old, young):
    old, young = dict(old), dict(young)
    a = remember(store, "past the limit", old.pop("days"), **old)
    b = remember(store, "inside the limit", young.pop("days"), **young)
    report = run(store)
    assert report["by_rule"] == {rule: 1} and report["ids"][rule] == [a] and report["pruned"] == 1
    assert store.memories.get(a).is_deleted and not store.memories.get(b).is_deleted
    last = store.memories.history(a)[-1]
    assert (last.event, last.who, last.why) == ("deleted", "lifecycle", f"lifecycle rule {rule}")
    store.memories.recover(a)  # pruned is recoverable


def test_recent_access_keeps_a_decaying_memory(store):
    mid = remember(store, "half done: the parser", 30, type="work_state")
    store.db.write(lambda c: c.execute("UPDATE memories SET last_accessed = ? WHERE id = ?", (ago(2), mid)))
    assert run(store)["pruned"] == 0


def test_file_rules_mark_stale_or_prune(store, tmp_path):
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "here.py").write_text("x")
    (tmp_path / "outside.py").write_text("x")
    here = remember(store, "here.py parses headers", 1, related_files=("src/here.py",))
    gone = remember(store, "gone.py did the retries", 1, related_files=("src/gone.py", "src/here.py"))
    insight = remember(
        store,
        "the old cache module",
        1,
        type="module_insight",
        source="commit_auto",
        related_files=("src/cache.py", "src/cache_util.py"),
    )
    partly = remember(
        store,
        "cache and here",
        1,
        type="module_insight",
        source="commit_auto",
        related_files=("src/cache.py", "src/here.py"),
    )
    escape = remember(store, "outside the root", 1, related_files=("../outside.py", "/etc/passwd"))
    no_root = run(store)
    assert no_root["by_rule"] == {}  # without a root, files are not judged
    report = run(store, root)
    assert report["by_rule"] == {"file_missing": 2, "files_gone": 1}
    assert store.memories.get(insight).is_deleted
    assert store.memories.get(gone).stale_at and store.memories.get(partly).stale_at
    assert not store.memories.get(here).stale_at and not store.memories.get(escape).stale_at
    assert run(store, root)["by_rule"] == {}  # already stale: not counted again


def test_recipe_whose_canonical_file_changed_is_stale(store, tmp_path):
    (tmp_path / "app.py").write_text("routes")
    validated = datetime.fromtimestamp(time.time() - 3600, UTC).isoformat()
    fields = {
        "task_pattern": "add a route",
        "last_validated_at": validated,
        "steps": [{"order": 1, "description": "edit", "canonical_file": "app.py"}],
    }
    mid = store.memories.remember(
        RememberInput(content="to add a route edit app.py", type="workflow_recipe", type_fields=fields)
    ).id
    now = datetime.now(UTC).isoformat()
    svc = LifecycleService(store.db, store.memories)
    assert svc.run(project_root=str(tmp_path), now=now)["by_rule"] == {"recipe_changed": 1}
    assert store.memories.get(mid).stale_at and not store.memories.get(mid).is_deleted
    os.utime(tmp_path / "app.py", (time.time() - 7200, time.time() - 7200))
    other = store.memories.remember(
        RememberInput(content="to add a view edit app.py", type="workflow_recipe", type_fields=fields)
    ).id
    assert svc.run(project_root=str(tmp_path), now=now)["by_rule"] == {}
    assert not store.memories.get(other).stale_at


def test_pinned_and_kept_memories_are_never_pruned(store):
    pinned = remember(store, "pinned session note", 30, scope="session", pinned=True)
    kept = remember(store, "kept low confidence", 300, confidence=0.05, user_verified=True)
    assert run(store)["pruned"] == 0
    assert not store.memories.get(pinned).is_deleted and not store.memories.get(kept).is_deleted


def test_dry_run_changes_nothing(store):
    mid = remember(store, "an old session note", 30, scope="session")
    report = run(store, dry_run=True)
    assert report["pruned"] == 1 and report["dry_run"] and not store.memories.get(mid).is_deleted


def test_user_controls_archive_and_prune_low_confidence(store):
    svc = LifecycleService(store.db, store.memories)
    ref = {"methodology": "native", "hierarchy": ["spec-12", "t1"]}
    a = remember(
        store, "spec 12 outcome", 1, type="work_unit_outcome", type_fields={"succeeded": True}, work_unit_ref=ref
    )
    b = remember(store, "spec 12 note", 1, scope="work_unit", work_unit_ref=ref, pinned=True)
    c = remember(
        store, "spec 13 note", 1, scope="work_unit", work_unit_ref={"methodology": "native", "hierarchy": ["spec-13"]}
    )
    r = svc.archive_work_unit("native", "spec-12")
    assert r["archived"] == 1 and r["ids"] == [a]
    assert store.memories.get(a).is_deleted and not store.memories.get(b).is_deleted
    assert not store.memories.get(c).is_deleted
    low = remember(store, "maybe wrong", 40, confidence=0.3)
    assert svc.prune_low_confidence(threshold=0.5, idle_days=30, now=NOW.isoformat())["ids"] == [low]
    with pytest.raises(ValidationError):
        svc.prune_low_confidence(threshold=1.5)
    with pytest.raises(ValidationError):
        svc.run(project_root="/no/such/dir")


def test_lifecycle_routes(store):
    client = api_client(store)
    sid = remember(store, "an old session note", 30, scope="session")
    keep = remember(store, "another old session note", 30, scope="session")
    assert client.post(f"/api/v3/memories/{keep}/keep").json()["user_verified"] is True
    pin = client.post(f"/api/v3/memories/{sid}/pin", json={"pinned": True})
    assert pin.status_code == 200 and pin.json()["pinned"] is True
    assert client.post("/api/v3/lifecycle/run", json={"dry_run": True}).json()["pruned"] == 0
    client.post(f"/api/v3/memories/{sid}/pin", json={"pinned": False})
    r = client.post("/api/v3/lifecycle/run", json={})
    assert r.status_code == 200 and r.json()["by_rule"] == {"session": 1}
    assert client.get(f"/api/memory/{sid}").json()["is_deleted"] is True
    assert client.post("/api/v3/lifecycle/run", json={"project_root": "/no/such"}).status_code == 422
    assert client.post("/api/v3/lifecycle/prune-low-confidence", json={"threshold": 2.0}).status_code == 422
    arch = client.post("/api/v3/lifecycle/archive", json={"methodology": "native", "work_unit": "x", "dry_run": True})
    assert arch.status_code == 200 and arch.json()["archived"] == 0
    assert client.post("/api/v3/memories/nope/keep").status_code == 404


def test_worker_runs_at_start_then_every_20_ended_sessions(store):
    svc = LifecycleService(store.db, store.memories)
    w = LifecycleWorker(svc, every=20, now=lambda: NOW.isoformat())
    a = remember(store, "session note one", 30, scope="session")
    w.run_once()
    assert store.memories.get(a).is_deleted and w.last_report["pruned"] == 1
    b = remember(store, "session note two", 30, scope="session")

    def end_sessions(n: int, start: int) -> None:
        store.db.write(
            lambda c: c.executemany(
                "INSERT INTO sessions (session_key, started_at, status, ended_at) VALUES (?, ?, 'ended', ?)",
                [(f"s{start + i}", ago(1), ago(1)) for i in range(n)],
            )
        )

    end_sessions(19, 0)
    w.run_once()
    assert not store.memories.get(b).is_deleted  # 19 ended since the last run: not yet
    end_sessions(1, 19)
    w.run_once()
    assert store.memories.get(b).is_deleted


def test_worker_is_registered_on_the_container(store):
    assert store.workers.get("v3-lifecycle").name == "v3-lifecycle"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_prune_and_keep(tmp_path, anyio_backend):
    from test_mcp import InProcessDaemon, http_session, ok

    d = InProcessDaemon(tmp_path / "home")
    d.start()
    try:
        old = d.container.memories.remember(
            RememberInput(content="a session note from long ago", scope="session", created_at="2020-01-01T00:00:00Z")
        ).id
        kept = d.container.memories.remember(
            RememberInput(
                content="another session note from long ago", scope="session", created_at="2020-01-01T00:00:00Z"
            )
        ).id
        async with http_session(d.url) as s:
            assert ok(await s.call_tool("memory_modify", {"id": kept, "keep": True}))["user_verified"] is True
            dry = ok(await s.call_tool("memory_prune", {}))
            assert dry == {"pruned": 1, "stale_marked": 0, "by_rule": {"session": 1}, "dry_run": True}
            assert not d.container.memories.get(old).is_deleted
            done = ok(await s.call_tool("memory_prune", {"dry_run": False}))
            assert done["pruned"] == 1 and d.container.memories.get(old).is_deleted
            assert not d.container.memories.get(kept).is_deleted
    finally:
        d.stop()


def test_file_rules_use_the_latest_sessions_directory(store, tmp_path):
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    (old_dir / "a.py").write_text("x")
    store.db.write(
        lambda c: c.executemany(
            "INSERT INTO sessions (session_key, project, cwd, started_at) VALUES (?, 'p', ?, ?)",
            [("s1", str(old_dir), "2026-01-01T00:00:00Z"), ("s2", str(new_dir), "2026-02-01T00:00:00Z")],
        )
    )
    mid = remember(store, "a.py holds the parser", 1, project="p", related_files=("a.py",))
    assert run(store)["by_rule"] == {"file_missing": 1}  # judged under the newer directory, where a.py is not
    assert store.memories.get(mid).stale_at
