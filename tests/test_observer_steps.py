"""The PreToolUse, Stop and SubagentStop hooks (docs/v3.md "The PreToolUse hook", "Work steps"): the
installed light command against a real daemon, daemon down (spooled, replayed), the file warnings
PreToolUse prints, the work steps Stop / SubagentStop / Task calls make, and connect/disconnect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import api_client, free_port
from memlane.connectors.claude_settings import connect, disconnect
from memlane.connectors.spool import spooled_files
from memlane.v3.observer import Segment, abandoned, segments
from test_hookclient import clean_env, hook_cmd, run_hook


def event(name: str, repo: Path, sid: str, **extra: Any) -> str:
    """A Claude Code hook input of ``name`` (the fields code.claude.com/docs/en/hooks lists)."""
    return json.dumps(
        {
            "session_id": sid,
            "transcript_path": "/nowhere.jsonl",
            "cwd": str(repo),
            "permission_mode": "default",
            "hook_event_name": name,
            **extra,
        }
    )


def tool(name: str, repo: Path, sid: str, tool_name: str, tool_input: dict[str, Any], use_id: str, **extra: Any) -> str:
    return event(name, repo, sid, tool_name=tool_name, tool_input=tool_input, tool_use_id=use_id, **extra)


def quiet(r: Any) -> None:
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), r


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "work" / "proj"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    return repo


def test_pre_tool_use_times_the_call_and_prints_nothing_in_the_common_case(tmp_path: Path, repo: Path, start_daemon):
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    env = clean_env(home)
    read = {"file_path": str(repo / "src" / "app.py")}
    quiet(run_hook(hook_cmd(), "pre-tool-use", tool("PreToolUse", repo, "s1", "Read", read, "toolu_1"), env))
    quiet(run_hook(hook_cmd(), "post-tool-use", tool("PostToolUse", repo, "s1", "Read", read, "toolu_1"), env))
    # a call whose start was not seen gets no duration
    quiet(run_hook(hook_cmd(), "post-tool-use", tool("PostToolUse", repo, "s1", "Read", read, "toolu_2"), env))
    assert spooled_files(home / "spool") == []
    with d.client() as c:
        signals = c.get("/api/v3/observer/signals", params={"session_id": "s1"}).json()["signals"]
    access = [s for s in signals if s["type"] == "file_access"]
    assert [s["file_path"] for s in access] == ["src/app.py", "src/app.py"]
    assert isinstance(access[0]["duration_ms"], int) and access[0]["duration_ms"] >= 0
    assert "duration_ms" not in access[1]


def test_pre_tool_use_warns_once_per_session_about_a_file_with_a_trusted_gotcha(
    tmp_path: Path, repo: Path, start_daemon
):
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    env = clean_env(home)
    project = str(repo)
    with d.client() as c:

        def remember(content: str, mtype: str, confidence: float, files: list[str], **fields: str) -> str:
            body: dict[str, Any] = {"content": content, "type": mtype, "project": project, "confidence": confidence}
            body["related_files"] = files
            if fields:
                body["type_fields"] = fields
            r = c.post("/api/memory/remember", json=body)
            assert r.status_code == 200, r.text
            return r.json()["id"]

        trusted = remember("Editing src/app.py needs <b>settings.py</b> changed too.", "gotcha", 0.9, ["src/app.py"])
        assert c.post(f"/api/v3/memories/{trusted}/verify", json={"verified": True}).status_code == 200
        unverified = remember("An unreviewed guess about src/app.py.", "gotcha", 0.9, ["src/app.py"])
        weak = remember(
            "A weak note about src/app.py.",
            "dead_end",
            0.5,
            ["src/app.py"],
            approach_tried="patching app.py",
            why_it_failed="it is generated",
        )
        assert c.post(f"/api/v3/memories/{weak}/verify", json={"verified": True}).status_code == 200
        fact = remember("A plain fact about src/app.py.", "fact", 0.9, ["src/app.py"])
        assert c.post(f"/api/v3/memories/{fact}/verify", json={"verified": True}).status_code == 200
    edit = {"file_path": str(repo / "src" / "app.py"), "old_string": "a", "new_string": "b"}
    r = run_hook(hook_cmd(), "pre-tool-use", tool("PreToolUse", repo, "w1", "Edit", edit, "toolu_1"), env)
    assert (r.returncode, r.stderr) == (0, b"")
    out = json.loads(r.stdout)
    assert set(out) == {"hookSpecificOutput"} and set(out["hookSpecificOutput"]) == {
        "hookEventName",
        "additionalContext",
    }
    assert out["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    text = out["hookSpecificOutput"]["additionalContext"]
    assert text.startswith("<memlane-file-warnings>\n") and text.endswith("</memlane-file-warnings>\n")
    assert f"- Gotcha [{trusted[:8]}]: Editing src/app.py needs &lt;b&gt;settings.py&lt;/b&gt; changed too." in text
    for other in (unverified, weak, fact):
        assert other[:8] not in text
    # the same session is not told twice; another session is; another file or tool: nothing
    quiet(run_hook(hook_cmd(), "pre-tool-use", tool("PreToolUse", repo, "w1", "Edit", edit, "toolu_2"), env))
    r = run_hook(hook_cmd(), "pre-tool-use", tool("PreToolUse", repo, "w2", "Read", edit, "toolu_3"), env)
    assert trusted[:8] in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    other_file = {"file_path": str(repo / "src" / "other.py")}
    quiet(run_hook(hook_cmd(), "pre-tool-use", tool("PreToolUse", repo, "w3", "Read", other_file, "toolu_4"), env))
    bash = {"command": f"cat {repo / 'src' / 'app.py'}"}
    quiet(run_hook(hook_cmd(), "pre-tool-use", tool("PreToolUse", repo, "w3", "Bash", bash, "toolu_5"), env))


def test_stop_subagent_stop_and_task_calls_cut_the_session_into_steps(tmp_path: Path, repo: Path, start_daemon):
    """A turn of two calls (Stop), a Task whose subagent's last call fails (SubagentStop), the Task
    call's return, then a turn that passes: four steps; Stop hooks print nothing."""
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    env = clean_env(home)
    sid = "steps-1"
    f = {"file_path": str(repo / "src" / "app.py")}
    calls = [
        ("post-tool-use", tool("PostToolUse", repo, sid, "Read", f, "t1")),
        ("post-tool-use", tool("PostToolUse", repo, sid, "Edit", f, "t2")),
        ("stop", event("Stop", repo, sid, stop_hook_active=False)),
        ("pre-tool-use", tool("PreToolUse", repo, sid, "Task", {"prompt": "fix the tests"}, "t3")),
        ("post-tool-use", tool("PostToolUse", repo, sid, "Grep", {"pattern": "x"}, "t4")),
        (
            "post-tool-use-failure",
            tool("PostToolUseFailure", repo, sid, "Bash", {"command": "pytest"}, "t5", error="Exit code 1"),
        ),
        ("subagent-stop", event("SubagentStop", repo, sid, agent_id="a-1", agent_type="general-purpose")),
        ("post-tool-use", tool("PostToolUse", repo, sid, "Task", {"prompt": "fix the tests"}, "t3")),
        ("post-tool-use", tool("PostToolUse", repo, sid, "Bash", {"command": "pytest"}, "t6")),
        ("stop", event("Stop", repo, sid, stop_hook_active=False)),
    ]
    for name, text in calls:
        quiet(run_hook(hook_cmd(), name, text, env))
    with d.client() as c:
        steps = c.get("/api/v3/observer/steps", params={"session_id": sid}).json()["steps"]
    assert steps == [
        {"first_step": 1, "last_step": 2, "end": "stop", "failed": False},
        {"first_step": 3, "last_step": 4, "end": "subagent_stop", "failed": True},
        {"first_step": 5, "last_step": 5, "end": "task", "failed": False},
        {"first_step": 6, "last_step": 6, "end": "stop", "failed": False},
    ]


def test_daemon_down_spools_pre_tool_use_and_stop_and_replays_them_in_order(tmp_path: Path, repo: Path, start_daemon):
    home = tmp_path / "home"
    env_down = clean_env(home, MEMLANE_PORT=str(free_port()))
    f = {"file_path": str(repo / "src" / "app.py")}
    quiet(run_hook(hook_cmd(), "pre-tool-use", tool("PreToolUse", repo, "d1", "Read", f, "t1"), env_down))
    quiet(run_hook(hook_cmd(), "post-tool-use", tool("PostToolUse", repo, "d1", "Read", f, "t1"), env_down))
    quiet(run_hook(hook_cmd(), "stop", event("Stop", repo, "d1", stop_hook_active=False), env_down))
    records = [json.loads(p.read_text()) for p in spooled_files(home / "spool")]
    assert [r["endpoint"] for r in records] == [
        "/api/v3/observer/pre-tool-use",
        "/api/v3/observer/tool-use",
        "/api/v3/observer/step-end",
    ]
    assert records[0]["body"]["tool_use_id"] == "t1" and records[2]["body"]["kind"] == "stop"
    started, ended = records[0]["body"]["ts_ms"], records[1]["body"]["ts_ms"]
    d = start_daemon(home, provider="none")
    with d.client() as c:  # a first request warms the daemon: the replay has a 0.5 s budget
        assert c.get("/api/v3/observer/steps", params={"session_id": "d1"}).json() == {"steps": []}
    quiet(run_hook(hook_cmd(), "post-tool-use", tool("PostToolUse", repo, "d1", "Read", f, "t2"), clean_env(home)))
    assert spooled_files(home / "spool") == []
    with d.client() as c:
        signals = c.get("/api/v3/observer/signals", params={"session_id": "d1"}).json()["signals"]
        steps = c.get("/api/v3/observer/steps", params={"session_id": "d1"}).json()["steps"]
    # the duration is the hook processes' own times, not the replay's
    assert [s.get("duration_ms") for s in signals if s["type"] == "file_access"] == [ended - started, None]
    assert [(s["last_step"], s["end"]) for s in steps] == [(1, "stop"), (2, "open")]


@pytest.mark.parametrize("name", ["pre-tool-use", "stop", "subagent-stop"])
def test_bad_input_never_blocks_the_agent(tmp_path: Path, name: str) -> None:
    """Claude Code reads exit code 2 of PreToolUse as "block this tool call" and of Stop as "keep
    going": bad input exits 0, prints nothing and is not spooled."""
    home = tmp_path / "home"
    env = clean_env(home, MEMLANE_PORT=str(free_port()))
    for stdin in (
        b"not json",
        b"[]",
        b'{"tool_name": "Read"}',
        b'{"session_id": "s", "hook_event_name": "PostToolUse"}',
    ):
        quiet(run_hook(hook_cmd(), name, stdin, env))
    if name == "pre-tool-use":
        quiet(run_hook(hook_cmd(), name, b'{"session_id": "s", "tool_input": {}}', env))
    assert spooled_files(home / "spool") == []


def test_the_routes_refuse_bad_values_with_a_422(store) -> None:
    api = api_client(store)
    for path, body in (
        ("/api/v3/observer/step-end", {"session_id": "s", "kind": "pause"}),
        ("/api/v3/observer/step-end", {"session_id": "", "kind": "stop"}),
        ("/api/v3/observer/step-end", {"session_id": "s", "kind": "stop", "ts_ms": -1}),
        ("/api/v3/observer/pre-tool-use", {"session_id": "s", "tool_name": ""}),
        ("/api/v3/observer/pre-tool-use", {"session_id": "s", "tool_name": "Read", "tool_use_id": "x" * 201}),
        ("/api/v3/observer/pre-tool-use", {"session_id": "s\x00", "tool_name": "Read"}),
        ("/api/v3/observer/tool-use", {"session_id": "s", "tool_name": "Read", "ts_ms": 10**14}),
    ):
        r = api.post(path, json=body)
        assert r.status_code == 422, (path, body, r.status_code, r.text)
    r = api.post("/api/v3/observer/step-end", json={"session_id": "never-seen", "kind": "stop"})
    assert r.json() == {"last_step": 0, "failed": False}


def test_segments_and_abandoned_steps() -> None:
    outcomes = [(1, False), (2, True), (3, False), (4, True), (5, True), (6, False)]
    segs = segments([(2, "stop"), (2, "stop"), (5, "subagent_stop")], outcomes)
    assert [s.as_dict() for s in segs] == [
        {"first_step": 1, "last_step": 2, "end": "stop", "failed": True},
        {"first_step": 3, "last_step": 5, "end": "subagent_stop", "failed": True},
        {"first_step": 6, "last_step": 6, "end": "open", "failed": False},
    ]
    assert [s.first_step for s in abandoned(segs)] == [1, 3]
    # a failed last step is how the session ended, not an abandoned one
    tail = [Segment(1, 2, "stop", False), Segment(3, 4, "stop", True)]
    assert abandoned(tail) == []
    assert [s.as_dict() for s in segments([], outcomes)] == [
        {"first_step": 1, "last_step": 6, "end": "open", "failed": False}
    ]


def test_connect_adds_pre_tool_use_stop_and_subagent_stop_and_disconnect_keeps_others(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    theirs = {"hooks": [{"type": "command", "command": "/usr/local/bin/notify-done"}]}
    settings.write_text(json.dumps({"hooks": {"Stop": [theirs]}}))
    claude_json = tmp_path / "claude.json"
    result = connect(settings, ["/opt/x/bin/memlane"], claude_json_path=claude_json)
    assert {e: result.hooks[e] for e in ("PreToolUse", "Stop", "SubagentStop")} == dict.fromkeys(
        ("PreToolUse", "Stop", "SubagentStop"), "added"
    )
    hooks = json.loads(settings.read_text())["hooks"]
    [pre] = hooks["PreToolUse"]
    assert pre["matcher"] == "" and pre["hooks"][0]["command"].endswith(" pre-tool-use")
    assert hooks["Stop"][0] == theirs and len(hooks["Stop"]) == 2
    assert "matcher" not in hooks["Stop"][1] and hooks["Stop"][1]["hooks"][0]["command"].endswith(" stop")
    [sub] = hooks["SubagentStop"]
    assert "matcher" not in sub and sub["hooks"][0]["command"].endswith(" subagent-stop")
    assert connect(settings, ["/opt/x/bin/memlane"], claude_json_path=claude_json).hooks["Stop"] == "unchanged"
    disconnect(settings, claude_json_path=claude_json)
    assert json.loads(settings.read_text())["hooks"] == {"Stop": [theirs]}


# -- the validation filter inside a session (promotion step 0) ----------------------------------
TURN_FAILED = [("Edit", "src/a.py"), ("Edit", "src/a.py"), ("Edit", "src/a.py"), ("Bash", None, "Exit code 1")]
TURN_PASSED = [("Read", "src/b.py"), ("Bash", None)]


def record_turns(obs: Any, session: str, turns: list[list[tuple]], *, boundaries: bool) -> None:
    """Record each turn's ``(tool, file or None[, error])`` calls; with ``boundaries`` a Stop after each."""
    for turn in turns:
        for call in turn:
            obs.record(
                session,
                call[0],
                {"file_path": call[1]} if call[1] else {"command": "make test"},
                project="p",
                error=call[2] if len(call) > 2 else None,
            )
        if boundaries:
            obs.step_end(session, "stop", project="p")


def test_a_failed_step_that_was_abandoned_is_discarded_and_the_rest_promoted(store) -> None:
    """Two re-edits of src/a.py (the gotcha rule, frequency 2) in a turn that ended with a failing
    call, then a turn that passed: without Stop boundaries the session is kept whole and the gotcha
    promoted; with them the first turn is an abandoned step and its signals are discarded."""
    sessions = store.observer
    obs, promoter = sessions.observer, sessions.promoter
    record_turns(obs, "whole", [TURN_FAILED, TURN_PASSED], boundaries=False)
    plan = promoter.finalize("whole", outcome="passed", project="p", dry_run=True).as_dict()
    assert (plan["steps"], plan["abandoned_steps"], plan["discarded"]) == (1, [], 0)
    assert [(m["type"], m["related_files"]) for m in plan["promoted"]] == [("gotcha", ["src/a.py"])], plan

    record_turns(obs, "turns", [TURN_FAILED, TURN_PASSED], boundaries=True)
    pending = {s["step"] for s in obs.signals("turns")}
    plan = promoter.finalize("turns", outcome="passed", project="p", dry_run=True).as_dict()
    assert plan["steps"] == 2
    assert plan["abandoned_steps"] == [{"first_step": 1, "last_step": 4, "end": "stop", "failed": True}]
    in_failed_turn = [s for s in obs.signals("turns") if s["step"] <= 4]
    assert plan["discarded"] == len(in_failed_turn) > 0 and pending >= {1, 2, 3, 4}
    assert [m["type"] for m in plan["promoted"]] == [], plan
    # the real finalize discards those signals for good and promotes from the rest
    done = promoter.finalize("turns", outcome="passed", project="p").as_dict()
    assert done["discarded"] == plan["discarded"] and done["promoted"] == []
    states = store.db.read(
        lambda c: {
            (r[0] <= 4, r[1])
            for r in c.execute("SELECT step, processed FROM observer_signals WHERE session_key = 'turns'")
        }
    )
    assert states == {(True, 2), (False, 1)}
    # discarded steps no longer feed the inference rules: only the whole session's re-edits count
    gotchas = [i for i in obs.inferences("p") if i["type"] == "gotcha"]
    assert {i["evidence"]["session"] for i in gotchas} == {"whole"}


def test_a_session_that_ends_in_failure_is_still_judged_whole(store) -> None:
    sessions = store.observer
    obs, promoter = sessions.observer, sessions.promoter
    record_turns(obs, "ends-failed", [TURN_PASSED, TURN_FAILED], boundaries=True)
    assert sessions.end("ends-failed", project="p")["promotion"]["outcome"] == "failed"
    plan = promoter.finalize("ends-failed", outcome="passed", project="p", dry_run=True).as_dict()
    assert plan["abandoned_steps"] == [] and plan["steps"] == 2


def test_a_failed_calls_error_text_is_redacted_before_it_is_stored(store) -> None:
    key = "sk-ant-api03-" + "Zq8" * 30
    obs = store.observer.observer
    obs.record("r1", "Bash", {"command": "deploy"}, project="p", error=f"Exit code 1\nANTHROPIC_API_KEY={key} rejected")
    [sig] = [s for s in obs.signals("r1") if s["type"] == "error_retry"]
    assert key not in sig["error_message"] and "[REDACTED]" in sig["error_message"]
    stored = store.db.read(
        lambda c: c.execute("SELECT error_text FROM observer_events WHERE session_key = 'r1'").fetchone()
    )
    assert key not in stored[0]


def test_a_warning_matches_the_path_the_observer_records(store, tmp_path: Path) -> None:
    """From a subdirectory, without a project: the memory names the file relative to the work
    tree's root (as promoted memories do), the call gives it absolute; it still matches."""
    from memlane.services.inputs import RememberInput

    repo = tmp_path / "wt"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    m = store.memories.remember(
        RememberInput(
            content="app.py is generated: edit app.tmpl instead.",
            type="gotcha",
            confidence=0.9,
            user_verified=True,
            related_files=("src/app.py",),
        )
    )
    out = store.tool_warnings.for_call(
        "sub-1", "Edit", {"file_path": str(repo / "src" / "app.py")}, cwd=str(repo / "src"), project=None
    )
    assert out["file"] == "src/app.py" and out["memory_ids"] == [m.id]
    assert "edit app.tmpl instead" in out["inject"]
