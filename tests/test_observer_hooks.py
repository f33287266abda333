"""The observer's Claude Code hooks (PostToolUse, PostToolUseFailure): the installed light command against a real
daemon, replaying real hook payloads (tests/fixtures/claude_code_hooks/README.md), daemon
down (spooled, replayed), malformed input, and connect/disconnect of the hook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import free_port
from memlane.connectors.claude_settings import connect, disconnect
from memlane.connectors.spool import spooled_files
from memlane.hookclient import MAX_TOOL_TEXT_CHARS
from test_hookclient import clean_env, hook_cmd, run_hook

FIXTURE = Path(__file__).parent / "fixtures" / "claude_code_hooks" / "post_tool_use.json"


def real_payloads() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text())


def in_repo(p: dict[str, Any], repo: Path, session_id: str | None = None) -> str:
    """The real payload with its working directory moved into ``repo`` (file paths too), so the
    project root resolves on this machine; everything else as recorded."""
    old = p["cwd"]
    text = json.dumps(p).replace(old, str(repo))
    q = json.loads(text)
    if session_id:
        q["session_id"] = session_id
    return json.dumps(q)


def test_real_post_tool_use_payloads_feed_the_observer(tmp_path: Path, start_daemon) -> None:
    """14 real PostToolUse inputs of one session through the installed command: each exits 0
    and prints nothing; the scratchpad holds each file call with its path relative to the
    session's directory, the co-access pairs, no error; a dry-run finalize reports what would
    be promoted, and nothing is stored by it."""
    repo = tmp_path / "work" / "proj"
    (repo / ".git").mkdir(parents=True)
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    env = clean_env(home)
    payloads = real_payloads()
    sid = payloads[0]["session_id"]
    for p in payloads:
        r = run_hook(hook_cmd(), "post-tool-use", in_repo(p, repo), env)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    assert spooled_files(home / "spool") == []
    with d.client() as c:
        signals = c.get("/api/v3/observer/signals", params={"session_id": sid}).json()["signals"]
        by_type: dict[str, list[dict[str, Any]]] = {}
        for s in signals:
            by_type.setdefault(s["type"], []).append(s)
        accessed = [s["file_path"] for s in by_type["file_access"]]
        assert accessed == [
            "setup.py",
            "requirements.txt",
            "requirements.txt",
            "quantstats/version.py",
            "quantstats/version.py",
            "CHANGELOG.md",
            "CHANGELOG.md",
        ], accessed
        assert "error_retry" not in by_type
        pairs = {tuple(sorted((s["file_a"], s["file_b"]))) for s in by_type["co_access"]}
        assert ("requirements.txt", "setup.py") in pairs, pairs
        assert ("CHANGELOG.md", "quantstats/version.py") in pairs, pairs
        assert len(signals) == 11
        # One session crosses no frequency threshold (co-access in >= 3 sessions): nothing to promote.
        plan = c.post("/api/v3/observer/finalize", json={"session_id": sid, "dry_run": True}).json()
        assert (plan["signals"], plan["candidates"], plan["promoted"]) == (11, 0, []), plan
    # The same recorded calls as two more sessions: the pairs now recur in 3 sessions.
    for again in ("replay-2", "replay-3"):
        for p in payloads:
            r = run_hook(hook_cmd(), "post-tool-use", in_repo(p, repo, again), env)
            assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    with d.client() as c:
        before = c.get("/api/memories", params={"limit": 100}).json()
        plan = c.post("/api/v3/observer/finalize", json={"session_id": "replay-3", "dry_run": True}).json()
        assert c.get("/api/memories", params={"limit": 100}).json() == before
    promoted = {(m["type"], tuple(m["related_files"])) for m in plan["promoted"]}
    assert promoted == {
        ("causal_dependency", ("CHANGELOG.md", "quantstats/version.py")),
        ("causal_dependency", ("requirements.txt", "setup.py")),
        ("prefetch_pattern", ("CHANGELOG.md", "requirements.txt", "setup.py")),
        ("prefetch_pattern", ("quantstats/version.py",)),
    }, plan
    assert plan["synthesis"] == "template" and all(m["id"] is None for m in plan["promoted"])


def test_daemon_down_spools_a_trimmed_body_and_the_next_call_replays_it(tmp_path: Path, start_daemon) -> None:
    """Daemon down: exit 0, nothing printed, one spooled event for the observer endpoint whose
    body carries the file path but not the file's contents (a successful call's response is
    not sent; long strings are cut). Daemon up: the next hook call replays it first."""
    repo = tmp_path / "work" / "proj"
    (repo / ".git").mkdir(parents=True)
    home = tmp_path / "home"
    payloads = real_payloads()
    read, edit = payloads[1], payloads[4]
    big = json.loads(in_repo(edit, repo, "down-1"))
    big["tool_input"]["new_string"] = "x" * (MAX_TOOL_TEXT_CHARS * 3)
    env_down = clean_env(home, MEMLANE_PORT=str(free_port()))
    for text in (in_repo(read, repo, "down-1"), json.dumps(big)):
        r = run_hook(hook_cmd(), "post-tool-use", text, env_down)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    records = [json.loads(f.read_text()) for f in spooled_files(home / "spool")]
    assert [r["endpoint"] for r in records] == ["/api/v3/observer/tool-use"] * 2
    assert records[0]["body"]["tool_input"]["file_path"] == str(repo / "setup.py")
    assert "tool_response" not in records[0]["body"]
    assert len(records[1]["body"]["tool_input"]["new_string"]) == MAX_TOOL_TEXT_CHARS

    d = start_daemon(home, provider="none")
    # Claude Code's PostToolUseFailure input (code.claude.com/docs/en/hooks): the failure text in `error`
    failed = {
        "session_id": "down-1",
        "hook_event_name": "PostToolUseFailure",
        "cwd": str(repo),
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "tool_use_id": "toolu_9",
        "error": "Exit code 1\nFAILED tests/test_api.py::test_login",
        "is_interrupt": False,
    }
    for _ in range(2):
        r = run_hook(hook_cmd(), "post-tool-use-failure", json.dumps(failed), clean_env(home))
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    assert spooled_files(home / "spool") == []
    with d.client() as c:
        signals = c.get("/api/v3/observer/signals", params={"session_id": "down-1"}).json()["signals"]
    assert [s["type"] for s in signals].count("file_access") == 2, signals
    retries = [s for s in signals if s["type"] == "error_retry"]
    assert [(s["tool_name"], s["retry_count"]) for s in retries] == [("Bash", 1), ("Bash", 2)], signals
    assert retries[0]["error_message"].startswith("Exit code 1")


def test_a_malformed_tool_payload_prints_nothing_and_is_not_spooled(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = clean_env(home, MEMLANE_PORT=str(free_port()))
    for stdin in (
        b'{"session_id": "s"}',
        b'{"session_id": "s", "tool_name": "Read", "tool_input": [1]}',
        b'{"session_id": "s", "tool_name": 3}',
        b"not json",
        b'{"session_id": "s", "tool_name": "Read", "hook_event_name": "PreToolUse"}',
    ):
        r = run_hook(hook_cmd(), "post-tool-use", stdin, env)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    assert spooled_files(home / "spool") == []
    assert (home / "logs" / "hooks.log").read_text().count("bad input ignored") == 5


def test_connect_adds_the_tool_call_hooks_and_disconnect_removes_only_them(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    theirs = {"matcher": "Bash", "hooks": [{"type": "command", "command": "/usr/local/bin/audit-bash"}]}
    settings.write_text(json.dumps({"hooks": {"PostToolUse": [theirs]}}))
    claude_json = tmp_path / "claude.json"
    connect(settings, ["/opt/x/bin/memlane"], claude_json_path=claude_json)
    groups = json.loads(settings.read_text())["hooks"]["PostToolUse"]
    assert groups[0] == theirs and len(groups) == 2
    ours = groups[1]
    assert ours["matcher"] == "" and len(ours["hooks"]) == 1
    assert ours["hooks"][0]["command"].endswith(" post-tool-use") and ours["hooks"][0]["timeout"] == 5
    [failure] = json.loads(settings.read_text())["hooks"]["PostToolUseFailure"]
    assert failure["matcher"] == "" and failure["hooks"][0]["command"].endswith(" post-tool-use-failure")
    disconnect(settings, claude_json_path=claude_json)
    assert json.loads(settings.read_text())["hooks"] == {"PostToolUse": [theirs]}
