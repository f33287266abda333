"""The Claude Code connector: hook input mapping, the transcript guard and parsers, the spool,
the settings editor (connect/disconnect), and the hook command against a daemon that is down
(a subprocess) or up (a loopback stand-in implementing the five hook endpoints)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from conftest import free_port
from memlane.cli.hooks import connect_app, disconnect_app
from memlane.config import load_settings
from memlane.connectors import spool as spool_mod
from memlane.connectors.claude_code import (
    ENDPOINTS,
    SettingsFileError,
    build_body,
    connect,
    disconnect,
    run_hook,
)
from memlane.connectors.events import HookEvent, find_project_root, from_claude_code
from memlane.connectors.spool import enforce_caps, replay_spool, spool_event, spooled_files
from memlane.connectors.transcript import (
    last_memory_feedback,
    read_transcript,
    transcript_text,
)

SID = "8f2c6a4e-3b1d-4c55-9a70-2d1e0f9b7c31"
MID = "3f9a1c2e-7b44-4d0a-9e1f-0c2b8d6a5e17"


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git checkout (a ``.git`` directory) with a nested working directory."""
    root = tmp_path / "work" / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "src" / "pkg").mkdir(parents=True)
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Stands in for ``~/.claude/projects``."""
    r = tmp_path / "claude" / "projects"
    (r / "-work-proj").mkdir(parents=True)
    return r


def line(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


def user(text: Any, **extra: Any) -> str:
    return line(
        {
            "type": "user",
            "uuid": os.urandom(4).hex(),
            "sessionId": SID,
            "cwd": "/work/proj",
            "message": {"role": "user", "content": text},
            **extra,
        }
    )


def assistant(*blocks: dict[str, Any]) -> str:
    return line(
        {
            "type": "assistant",
            "uuid": os.urandom(4).hex(),
            "sessionId": SID,
            "message": {
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": list(blocks),
                "stop_reason": "end_turn",
            },
        }
    )


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls"}}
TOOL_RESULT = [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.py\nb.py"}]


def realistic_transcript(last_assistant_text: str) -> str:
    return (
        "\n".join(
            [
                line({"type": "permission-mode", "permissionMode": "default", "sessionId": SID}),
                line({"type": "file-history-snapshot", "messageId": "m1", "snapshot": {"trackedFileBackups": {}}}),
                user("What files are here?"),
                assistant({"type": "thinking", "thinking": "let me look"}, TOOL_USE),
                user(TOOL_RESULT),
                assistant(text("Two files: a.py and b.py.")),
                user("<command-name>/model</command-name>", isMeta=True),
                "{this line is not json",
                user("Now summarise b.py"),
                assistant(TOOL_USE),
                user(TOOL_RESULT),
                assistant(text(last_assistant_text)),
                line({"type": "system", "subtype": "stop_hook_summary", "hookCount": 1}),
            ]
        )
        + "\n"
    )


def payload(event: str, cwd: Path, transcript: Path | str = "/nowhere.jsonl", **extra: Any) -> dict[str, Any]:
    base = {
        "session_id": SID,
        "transcript_path": str(transcript),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": event,
        "model": "claude-sonnet-4-5-20250929",
    }
    return {**base, **extra}


# --- events -----------------------------------------------------------------------------------


def test_session_start_maps_to_the_git_root(repo: Path) -> None:
    ev = from_claude_code("session-start", payload("SessionStart", repo / "src" / "pkg", source="resume"))
    assert ev == HookEvent(
        event="session-start",
        session_key=SID,
        cwd=str(repo / "src" / "pkg"),
        project=str(repo.resolve()),
        source="resume",
        transcript_path="/nowhere.jsonl",
        permission_mode="default",
    )
    assert ev.harness == "claude-code"


def test_each_event_maps_its_own_fields(repo: Path) -> None:
    ups = from_claude_code("UserPromptSubmit", payload("UserPromptSubmit", repo, prompt="fix the bug"))
    assert (ups.event, ups.prompt, ups.source) == ("user-prompt-submit", "fix the bug", None)
    end = from_claude_code("session-end", payload("SessionEnd", repo, reason="prompt_input_exit"))
    assert (end.event, end.reason, end.prompt) == ("session-end", "prompt_input_exit", None)
    pc = from_claude_code(
        "pre-compact", payload("PreCompact", repo, trigger="manual", custom_instructions="keep the API decisions")
    )
    assert (pc.event, pc.trigger, pc.custom_instructions) == ("pre-compact", "manual", "keep the API decisions")
    auto = from_claude_code("pre-compact", payload("PreCompact", repo, trigger="auto", custom_instructions=None))
    assert auto.custom_instructions is None


def test_project_falls_back_to_cwd_and_accepts_a_git_file(tmp_path: Path) -> None:
    plain = tmp_path / "plain" / "dir"
    plain.mkdir(parents=True)
    assert find_project_root(plain) == str(plain.resolve())
    worktree = tmp_path / "wt"
    (worktree / "sub").mkdir(parents=True)
    (worktree / ".git").write_text("gitdir: /elsewhere/.git/worktrees/wt\n")
    assert find_project_root(worktree / "sub") == str(worktree.resolve())
    assert os.path.isabs(find_project_root("relative/dir"))


@pytest.mark.parametrize(
    "event,data,match",
    [
        ("session-start", {"cwd": "/tmp"}, "session_id"),
        ("session-start", {"session_id": "  ", "cwd": "/tmp"}, "session_id"),
        ("session-start", {"session_id": 42, "cwd": "/tmp"}, "session_id"),
        ("session-start", {"session_id": "s", "cwd": ["/tmp"]}, "cwd"),
        ("session-start", {"session_id": "s", "source": 3}, "source"),
        ("user-prompt-submit", {"session_id": "s", "cwd": "/tmp"}, "prompt"),
        ("user-prompt-submit", {"session_id": "s", "prompt": {"x": 1}}, "prompt"),
        ("session-end", {"session_id": "s", "hook_event_name": "SessionStart"}, "SessionStart"),
        ("notification", {"session_id": "s"}, "unknown hook event"),
        ("pre-tool-use", {"session_id": "s", "tool_input": {}}, "tool_name"),
    ],
)
def test_bad_input_is_a_clear_value_error(event: str, data: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        from_claude_code(event, data)


def test_a_non_object_payload_is_refused() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        from_claude_code("session-start", ["not", "an", "object"])  # type: ignore[arg-type]


# --- transcript guard -------------------------------------------------------------------------


def test_a_regular_file_under_the_root_is_read(root: Path) -> None:
    f = root / "-work-proj" / f"{SID}.jsonl"
    f.write_text(realistic_transcript("done"))
    assert read_transcript(str(f), [root], 1_000_000) == f.read_text()
    assert read_transcript(None, [root]) is None


def test_paths_outside_the_roots_are_refused(root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    outside = tmp_path / "secret.jsonl"
    outside.write_text("secret")
    caplog.set_level(logging.WARNING)
    assert read_transcript(str(outside), [root]) is None
    assert read_transcript(str(root / ".." / ".." / "secret.jsonl"), [root]) is None
    assert read_transcript("/etc/passwd", [root]) is None
    assert read_transcript(str(root / "missing.jsonl"), [root]) is None
    assert "outside the allowed roots" in caplog.text


def test_a_symlink_escaping_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("secret")
    (root / "-work-proj" / "link.jsonl").symlink_to(outside)
    (root / "-work-proj" / "passwd.jsonl").symlink_to("/etc/passwd")
    (root / "escape").symlink_to(tmp_path)
    assert read_transcript(str(root / "-work-proj" / "link.jsonl"), [root]) is None
    assert read_transcript(str(root / "-work-proj" / "passwd.jsonl"), [root]) is None
    assert read_transcript(str(root / "escape" / "outside.jsonl"), [root]) is None
    inside = root / "-work-proj" / "real.jsonl"
    inside.write_text("ok")
    (root / "-work-proj" / "inner-link.jsonl").symlink_to(inside)
    assert read_transcript(str(root / "-work-proj" / "inner-link.jsonl"), [root]) == "ok"


def test_directories_fifos_devices_and_oversize_files_are_refused(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert read_transcript(str(root / "-work-proj"), [root]) is None
    fifo = root / "-work-proj" / "fifo.jsonl"
    os.mkfifo(fifo)
    assert read_transcript(str(fifo), [root]) is None  # returns at once: never opened for a blocking read
    (root / "-work-proj" / "null.jsonl").symlink_to("/dev/null")
    assert read_transcript(str(root / "-work-proj" / "null.jsonl"), [root, Path("/dev")]) is None
    big = root / "-work-proj" / "big.jsonl"
    big.write_bytes(b"x" * 2048)
    assert read_transcript(str(big), [root], max_bytes=1024) is None
    assert "not a regular file" in caplog.text and "over the 1024-byte cap" in caplog.text
    assert read_transcript(str(big), [root], max_bytes=4096) == "x" * 2048


def test_tail_mode_reads_whole_lines_from_a_large_file(root: Path) -> None:
    f = root / "-work-proj" / "t.jsonl"
    f.write_text("first line that is long\n" + "second\n" + "third\n")
    assert read_transcript(str(f), [root], max_bytes=10, tail_bytes=10) == "third\n"


# --- transcript parsing -----------------------------------------------------------------------


def test_transcript_text_keeps_only_text_turns() -> None:
    rendered = transcript_text(realistic_transcript("b.py defines the parser."))
    assert rendered == (
        "user: What files are here?\nassistant: Two files: a.py and b.py.\n"
        "user: Now summarise b.py\nassistant: b.py defines the parser."
    )
    assert transcript_text("") == "" and transcript_text("[1, 2]\nnull\n{}") == ""


def test_feedback_with_a_memory_feedback_key_is_clamped_and_cleaned() -> None:
    reply = (
        "Done.\n```json\n"
        + json.dumps(
            {
                "memory_feedback": {
                    MID: 0.8,
                    "a1b2c3d4": 3,
                    "deadbeef": -7.5,
                    "cafe0001": "great",
                    "f00dbabe": True,
                    "0badf00d": None,
                }
            }
        )
        + "\n```"
    )
    assert last_memory_feedback(realistic_transcript(reply)) == {MID: 0.8, "a1b2c3d4": 1.0, "deadbeef": -1.0}


def test_feedback_in_tags_after_tags_and_in_a_fence_after_the_request() -> None:
    tagged = 'Answer.\n<memory-feedback>{"a1b2c3d4": 0.5, "deadbeef": -0.25}</memory-feedback>'
    assert last_memory_feedback(realistic_transcript(tagged)) == {"a1b2c3d4": 0.5, "deadbeef": -0.25}
    after = 'Answer.\n<memory-feedback></memory-feedback>\n{"a1b2c3d4": 1}'
    assert last_memory_feedback(realistic_transcript(after)) == {"a1b2c3d4": 1.0}
    fenced = 'Answer.\n\nMemory feedback:\n```json\n{"a1b2c3d4": 0.2, "not an id": 1}\n```'
    assert last_memory_feedback(realistic_transcript(fenced)) == {"a1b2c3d4": 0.2}


def test_no_feedback_in_the_latest_message_is_none() -> None:
    assert last_memory_feedback(realistic_transcript('Here is the config:\n```json\n{"port": 7437}\n```')) is None
    assert last_memory_feedback(realistic_transcript('{"memory_feedback": {"a1b2c3d4": "x"}}')) is None
    older = (
        realistic_transcript('{"memory_feedback": {"a1b2c3d4": 1}}')
        + user("next?")
        + "\n"
        + assistant(text("ok"))
        + "\n"
    )
    assert last_memory_feedback(older) is None
    assert last_memory_feedback("") is None


def test_feedback_is_found_when_the_new_prompt_is_already_in_the_transcript() -> None:
    jsonl = realistic_transcript('All set. {"memory_feedback": {"a1b2c3d4": 0.9}}') + user("the new prompt") + "\n"
    assert last_memory_feedback(jsonl) == {"a1b2c3d4": 0.9}
    split = "\n".join(
        [
            user("go"),
            assistant(text('{"memory_feedback": {"a1b2c3d4": -0.5}}')),
            assistant(TOOL_USE),
            user(TOOL_RESULT),
            assistant(text("finished")),
        ]
    )
    assert last_memory_feedback(split) == {"a1b2c3d4": -0.5}


# --- spool ------------------------------------------------------------------------------------


def test_spool_writes_sortable_atomic_files(tmp_path: Path) -> None:
    d = tmp_path / "spool"
    paths = [spool_event(d, "/api/hooks/session-start", {"session_key": str(i)}) for i in range(5)]
    assert [p.name for p in spooled_files(d)] == [os.path.basename(p) for p in paths]
    assert [json.loads(p.read_text())["body"]["session_key"] for p in spooled_files(d)] == list("01234")
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]


def test_spool_caps_drop_the_oldest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "spool"
    caplog.set_level(logging.WARNING)
    for i in range(8):
        spool_event(d, "/api/hooks/session-end", {"session_key": str(i)}, max_files=5)
    assert [json.loads(p.read_text())["body"]["session_key"] for p in spooled_files(d)] == list("34567")
    assert caplog.text.count("dropped the oldest event") == 3
    assert enforce_caps(d, max_files=1000, max_bytes=2 * spooled_files(d)[0].stat().st_size + 10) == 3
    assert len(spooled_files(d)) == 2
    assert spool_event(d, "/x", {"transcript": "y" * 5000}, max_bytes=1000) is None


class Stub:
    """A loopback stand-in for the daemon: the five hook endpoints with scripted replies."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.script: dict[str, list[tuple[int, Any, float]]] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
                stub.requests.append((self.path, body))
                queue = stub.script.get(self.path)
                status, reply, delay = queue.pop(0) if queue else (200, stub.default(self.path), 0.0)
                time.sleep(delay)
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def default(path: str) -> dict[str, Any]:
        if path == "/api/hooks/session-start":
            return {"inject": "## Memories\n- the staging db is orion", "status": "new"}
        if path == "/api/hooks/user-prompt-submit":
            return {"inject": "- relevant: use uv, not pip"}
        if path == "/api/hooks/pre-compaction":
            return {"inject": "keep this", "summary_prompt": "summarise", "digest": "d"}
        if path in ("/api/hooks/session-end", "/api/hooks/compaction-complete"):
            return {"ok": True}
        return {"error": {"code": "not_found", "message": path, "details": {}}}

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Any:
    s = Stub()
    yield s
    s.close()


def test_replay_sends_in_order_and_rejects_4xx(tmp_path: Path, stub: Stub) -> None:
    d = tmp_path / "spool"
    for i in range(3):
        spool_event(d, "/api/hooks/session-end", {"session_key": f"s{i}"})
    stub.script["/api/hooks/session-end"] = [(200, {}, 0), (422, {"error": {"code": "validation_error"}}, 0)]
    with httpx.Client(base_url=stub.url) as client:
        assert replay_spool(client, d) == (2, 1)
    assert [b["session_key"] for _, b in stub.requests] == ["s0", "s1", "s2"]
    assert spooled_files(d) == [] and len(spooled_files(d / "rejected")) == 1


def test_replay_keeps_files_when_the_daemon_is_down_and_gives_up_after_repeated_5xx(tmp_path: Path, stub: Stub) -> None:
    d = tmp_path / "spool"
    spool_event(d, "/api/hooks/session-end", {"session_key": "a"})
    spool_event(d, "/api/hooks/session-end", {"session_key": "b"})
    with httpx.Client(base_url=f"http://127.0.0.1:{free_port()}") as down:
        assert replay_spool(down, d, timeout_s=1) == (0, 1)
    assert len(spooled_files(d)) == 2
    stub.script["/api/hooks/session-end"] = [(503, {}, 0)] * spool_mod.MAX_ATTEMPTS
    with httpx.Client(base_url=stub.url) as client:
        for _ in range(spool_mod.MAX_ATTEMPTS - 1):
            assert replay_spool(client, d) == (0, 1)  # stops at the head: order is kept
        assert len(spooled_files(d)) == 2
        assert replay_spool(client, d) == (0, 1)  # 5th 503 -> rejected/
        assert replay_spool(client, d) == (1, 0)  # then "b" goes through
    assert spooled_files(d) == [] and len(spooled_files(d / "rejected")) == 1
    assert [b["session_key"] for _, b in stub.requests].count("a") == spool_mod.MAX_ATTEMPTS


def test_replay_respects_its_time_budget(tmp_path: Path, stub: Stub) -> None:
    d = tmp_path / "spool"
    for i in range(3):
        spool_event(d, "/api/hooks/session-end", {"session_key": f"s{i}"})
    stub.script["/api/hooks/session-end"] = [(200, {}, 2.0)]
    start = time.monotonic()
    with httpx.Client(base_url=stub.url) as client:
        replay_spool(client, d, budget_s=0.3, timeout_s=4)
    assert time.monotonic() - start < 1.5
    assert len(spooled_files(d)) == 3  # the timed-out one is kept (attempt counted)


# --- connect / disconnect ---------------------------------------------------------------------

SETTINGS = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "model": "sonnet",
    "env": {"BASH_DEFAULT_TIMEOUT_MS": "60000"},
    "permissions": {"allow": ["Bash(npm run test:*)"], "deny": ["Read(./.env)"]},
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [{"type": "command", "command": "python3 ~/.claude/hooks/guard.py", "timeout": 30}],
            }
        ],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "cat ~/notes/today.md"}]}],
    },
    "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},
}
CLAUDE_JSON = {
    "numStartups": 42,
    "hasCompletedOnboarding": True,
    "theme": "dark",
    "mcpServers": {"playwright": {"type": "stdio", "command": "npx", "args": ["@playwright/mcp@latest"], "env": {}}},
    "projects": {"/work/proj": {"allowedTools": [], "mcpServers": {}, "history": []}},
}
CMD = ["/opt/memlane/bin/memlane"]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(SETTINGS, indent=2))
    claude_json = tmp_path / "home" / ".claude.json"
    claude_json.write_text(json.dumps(CLAUDE_JSON))
    return settings, claude_json


def backups(p: Path) -> list[Path]:
    return sorted(p.parent.glob(p.name + ".memlane-backup-*"))


def test_connect_is_idempotent_and_disconnect_restores_the_original(files: tuple[Path, Path]) -> None:
    settings, claude_json = files
    first = connect(settings, CMD, claude_json_path=claude_json)
    assert first.hooks == dict.fromkeys(
        [
            "SessionStart",
            "UserPromptSubmit",
            "SessionEnd",
            "PreCompact",
            "PostToolUse",
            "PostToolUseFailure",
            "PreToolUse",
            "Stop",
            "SubagentStop",
        ],
        "added",
    )
    assert first.mcp == "added" and first.changed
    data = json.loads(settings.read_text())
    # someone else's PreToolUse group is kept as it was, ours follows it
    theirs = SETTINGS["hooks"]["PreToolUse"]
    assert data["hooks"]["PreToolUse"][: len(theirs)] == theirs and len(data["hooks"]["PreToolUse"]) == len(theirs) + 1
    assert data["hooks"]["SessionStart"][0] == SETTINGS["hooks"]["SessionStart"][0]
    assert data["hooks"]["SessionStart"][1] == {
        "matcher": "",
        "hooks": [{"type": "command", "command": "/opt/memlane/bin/memlane hook session-start", "timeout": 10}],
    }
    assert data["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"].endswith("memlane hook user-prompt-submit")
    assert {k: v for k, v in data.items() if k != "hooks"} == {k: v for k, v in SETTINGS.items() if k != "hooks"}
    mcp = json.loads(claude_json.read_text())
    assert mcp["mcpServers"]["memlane"] == {"type": "stdio", "command": CMD[0], "args": ["mcp", "serve"], "env": {}}
    assert mcp["mcpServers"]["playwright"] == CLAUDE_JSON["mcpServers"]["playwright"]
    assert json.loads(backups(settings)[0].read_text()) == SETTINGS
    assert json.loads(backups(claude_json)[0].read_text()) == CLAUDE_JSON

    before = settings.read_bytes(), claude_json.read_bytes()
    again = connect(settings, CMD, claude_json_path=claude_json)
    assert set(again.hooks.values()) == {"unchanged"} and again.mcp == "unchanged" and not again.changed
    assert (settings.read_bytes(), claude_json.read_bytes()) == before
    assert len(backups(settings)) == 1 and len(backups(claude_json)) == 1

    gone = disconnect(settings, claude_json_path=claude_json)
    assert set(gone.hooks.values()) == {"removed"} and gone.mcp == "removed"
    assert json.loads(settings.read_text()) == SETTINGS
    assert json.loads(claude_json.read_text()) == CLAUDE_JSON
    assert not disconnect(settings, claude_json_path=claude_json).changed


def test_connect_into_missing_files_and_disconnect_removes_what_it_created(tmp_path: Path) -> None:
    settings, claude_json = tmp_path / ".claude" / "settings.json", tmp_path / ".claude.json"
    connect(settings, [sys.executable, "-m", "memlane"], claude_json_path=claude_json)
    assert (settings.stat().st_mode & 0o777) == 0o600 and backups(settings) == []
    assert json.loads(claude_json.read_text())["mcpServers"]["memlane"]["args"] == ["-m", "memlane", "mcp", "serve"]
    disconnect(settings, claude_json_path=claude_json)
    assert json.loads(settings.read_text()) == {} and json.loads(claude_json.read_text()) == {}


def test_a_new_command_updates_our_entries_only(files: tuple[Path, Path]) -> None:
    settings, claude_json = files
    connect(settings, CMD, claude_json_path=claude_json)
    result = connect(settings, ["/new path/memlane"], claude_json_path=claude_json)
    assert set(result.hooks.values()) == {"updated"} and result.mcp == "updated"
    data = json.loads(settings.read_text())
    ours = [h["command"] for g in data["hooks"]["SessionEnd"] for h in g["hooks"]]
    assert ours == ["'/new path/memlane' hook session-end"]
    disconnect(settings, claude_json_path=claude_json)
    assert json.loads(settings.read_text()) == SETTINGS


def test_someone_elses_memlane_mcp_server_is_left_alone(files: tuple[Path, Path]) -> None:
    settings, claude_json = files
    theirs = {**CLAUDE_JSON, "mcpServers": {"memlane": {"type": "http", "url": "http://10.0.0.2/mcp"}}}
    claude_json.write_text(json.dumps(theirs))
    assert connect(settings, CMD, claude_json_path=claude_json).mcp == "skipped"
    assert disconnect(settings, claude_json_path=claude_json).mcp == "skipped"
    assert json.loads(claude_json.read_text()) == theirs


def test_malformed_files_are_an_error_and_nothing_is_written(files: tuple[Path, Path]) -> None:
    settings, claude_json = files
    for bad in ('{"hooks": {', '["a list"]', '{"hooks": []}', '{"hooks": {"SessionStart": {}}}'):
        settings.write_text(bad)
        with pytest.raises(SettingsFileError, match="nothing was changed"):
            connect(settings, CMD, claude_json_path=claude_json)
        assert settings.read_text() == bad and backups(settings) == []
    assert json.loads(claude_json.read_text()) == CLAUDE_JSON  # checked first, so untouched too
    settings.write_text(json.dumps(SETTINGS))
    claude_json.write_text('{"mcpServers": "oops"}')
    with pytest.raises(SettingsFileError, match="mcpServers"):
        connect(settings, CMD, claude_json_path=claude_json)
    assert json.loads(settings.read_text()) == SETTINGS and backups(settings) == []


def test_a_symlinked_settings_file_stays_a_symlink(files: tuple[Path, Path], tmp_path: Path) -> None:
    settings, claude_json = files
    target = tmp_path / "dotfiles" / "settings.json"
    target.parent.mkdir()
    target.write_text(settings.read_text())
    settings.unlink()
    settings.symlink_to(target)
    connect(settings, CMD, claude_json_path=claude_json)
    assert settings.is_symlink() and "memlane hook" in target.read_text()


def test_the_connect_and_disconnect_commands(files: tuple[Path, Path]) -> None:
    settings, claude_json = files
    runner = CliRunner()
    args = ["claude-code", "--settings", str(settings), "--claude-json", str(claude_json), "--command", CMD[0]]
    out = runner.invoke(connect_app, args)
    assert out.exit_code == 0, out.output
    assert "hook SessionStart: added" in out.output and "MCP server memlane: added" in out.output
    assert "backup:" in out.output
    assert "nothing changed" in runner.invoke(connect_app, args).output
    out = runner.invoke(disconnect_app, args[:5])
    assert out.exit_code == 0 and "hook PreCompact: removed" in out.output
    assert json.loads(settings.read_text()) == SETTINGS
    settings.write_text("{broken")
    out = runner.invoke(connect_app, args)
    assert out.exit_code == 1 and "cannot be read as JSON" in out.output and "nothing was changed" in out.output
    assert settings.read_text() == "{broken"


# --- the hook command -------------------------------------------------------------------------


def _hook_subprocess(event: str, stdin: str, home: Path, port: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(MEMLANE_HOME=str(home), MEMLANE_PORT=str(port), MEMLANE_CONFIG=str(home / "none.yaml"))
    return subprocess.run(
        [sys.executable, "-c", "from memlane.cli.hooks import hook_app; hook_app()", event],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def test_hook_with_the_daemon_down_spools_prints_nothing_and_exits_0(tmp_path: Path, repo: Path) -> None:
    home = tmp_path / "mhome"
    p = _hook_subprocess(
        "session-start", json.dumps(payload("SessionStart", repo, source="startup")), home, free_port()
    )
    assert p.returncode == 0 and p.stdout == ""
    [spooled] = spooled_files(home / "spool")
    record = json.loads(spooled.read_text())
    assert record["endpoint"] == "/api/hooks/session-start"
    assert record["body"] == {
        "session_key": SID,
        "project": str(repo.resolve()),
        "cwd": str(repo),
        "harness": "claude-code",
        "source": "startup",
        "permission_mode": "default",
    }
    assert "event spooled" in (home / "logs" / "hooks.log").read_text()


@pytest.mark.parametrize("stdin", ["", "not json", "[]", '{"cwd": "/tmp"}', '{"session_id": 7}'])
def test_hook_with_bad_input_prints_nothing_and_logs(tmp_path: Path, stdin: str) -> None:
    home = tmp_path / "mhome"
    p = _hook_subprocess("user-prompt-submit", stdin, home, free_port())
    assert p.returncode == 0 and p.stdout == ""
    assert "bad input ignored" in (home / "logs" / "hooks.log").read_text()
    assert spooled_files(home / "spool") == []


def _settings(home: Path, url: str):  # noqa: ANN202
    return load_settings(home=home, daemon_url=url)


def test_hook_with_the_daemon_up(tmp_path: Path, repo: Path, root: Path, stub: Stub) -> None:
    home = tmp_path / "mhome"
    s = _settings(home, stub.url)
    transcript = root / "-work-proj" / f"{SID}.jsonl"
    transcript.write_text(realistic_transcript(f'Done. {{"memory_feedback": {{"{MID[:8]}": 0.7}}}}'))

    out = run_hook(
        "session-start",
        json.dumps(payload("SessionStart", repo, transcript, source="startup")),
        s,
        transcript_roots=[root],
    )
    assert json.loads(out) == {
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": "## Memories\n- the staging db is orion",
        }
    }
    out = run_hook(
        "user-prompt-submit",
        json.dumps(payload("UserPromptSubmit", repo, transcript, prompt="next")),
        s,
        transcript_roots=[root],
    )
    assert json.loads(out)["hookSpecificOutput"] == {
        "hookEventName": "UserPromptSubmit",
        "additionalContext": "- relevant: use uv, not pip",
    }
    path, body = stub.requests[-1]
    assert path == "/api/hooks/user-prompt-submit"
    assert body == {
        "session_key": SID,
        "project": str(repo.resolve()),
        "cwd": str(repo),
        "harness": "claude-code",
        "prompt": "next",
        "memory_feedback": {MID[:8]: 0.7},
        "permission_mode": "default",
    }

    stub.script["/api/hooks/user-prompt-submit"] = [(200, {"inject": ""}, 0)]
    assert run_hook("user-prompt-submit", json.dumps(payload("UserPromptSubmit", repo, prompt="x")), s) == ""
    assert "memory_feedback" not in stub.requests[-1][1]  # refused transcript path: no feedback, no error

    assert (
        run_hook(
            "pre-compact",
            json.dumps(payload("PreCompact", repo, transcript, trigger="auto", custom_instructions="")),
            s,
        )
        == ""
    )
    assert stub.requests[-1] == (
        "/api/hooks/pre-compaction",
        {
            "session_key": SID,
            "project": str(repo.resolve()),
            "cwd": str(repo),
            "harness": "claude-code",
            "trigger": "auto",
            "custom_instructions": "",
        },
    )

    assert (
        run_hook(
            "session-end",
            json.dumps(payload("SessionEnd", repo, transcript, reason="logout")),
            s,
            transcript_roots=[root],
        )
        == ""
    )
    path, body = stub.requests[-1]
    assert path == "/api/hooks/session-end" and body["reason"] == "logout"
    assert body["transcript"].startswith("user: What files are here?\nassistant: Two files")
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text(transcript.read_text())
    run_hook(
        "session-end", json.dumps(payload("SessionEnd", repo, outside, reason="other")), s, transcript_roots=[root]
    )
    assert "transcript" not in stub.requests[-1][1]


def test_spooled_events_are_replayed_on_the_next_hook_and_422_goes_to_rejected(
    tmp_path: Path, repo: Path, stub: Stub
) -> None:
    home = tmp_path / "mhome"
    down = _settings(home, f"http://127.0.0.1:{free_port()}")
    run_hook("session-end", json.dumps(payload("SessionEnd", repo, reason="clear", session_id="old-1")), down)
    run_hook("session-end", json.dumps(payload("SessionEnd", repo, reason="clear", session_id="old-2")), down)
    assert len(spooled_files(home / "spool")) == 2

    stub.script["/api/hooks/session-end"] = [
        (200, {}, 0),
        (422, {"error": {"code": "validation_error", "message": "bad", "details": {}}}, 0),
    ]
    up = _settings(home, stub.url)
    out = run_hook("session-start", json.dumps(payload("SessionStart", repo, source="clear")), up)
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert stub.paths() == ["/api/hooks/session-end", "/api/hooks/session-end", "/api/hooks/session-start"]
    assert [b["session_key"] for _, b in stub.requests[:2]] == ["old-1", "old-2"]
    assert spooled_files(home / "spool") == []
    [rejected] = spooled_files(home / "spool" / "rejected")
    assert json.loads(rejected.read_text())["body"]["session_key"] == "old-2"

    run_hook("session-start", json.dumps(payload("SessionStart", repo, source="startup")), up)
    assert stub.paths().count("/api/hooks/session-end") == 2  # no retry of the rejected event


def test_5xx_and_slow_answers_are_spooled_and_print_nothing(tmp_path: Path, repo: Path, stub: Stub) -> None:
    home = tmp_path / "mhome"
    s = _settings(home, stub.url)
    stub.script["/api/hooks/session-start"] = [(500, {"error": {"code": "internal_error"}}, 0)]
    assert run_hook("session-start", json.dumps(payload("SessionStart", repo)), s) == ""
    assert len(spooled_files(home / "spool")) == 1
    stub.script["/api/hooks/session-start"] = [(200, {"inject": "late"}, 0), (200, {"inject": "late"}, 2.0)]
    assert (
        run_hook("user-prompt-submit", json.dumps(payload("UserPromptSubmit", repo, prompt="hi")), s, timeout_s=0.3)
        != ""
    )  # the replayed session-start went through first
    assert run_hook("session-start", json.dumps(payload("SessionStart", repo)), s, timeout_s=0.3) == ""
    [spooled] = spooled_files(home / "spool")
    assert json.loads(spooled.read_text())["endpoint"] == "/api/hooks/session-start"


def test_a_4xx_on_the_live_event_is_logged_not_spooled(tmp_path: Path, repo: Path, stub: Stub) -> None:
    home = tmp_path / "mhome"
    stub.script["/api/hooks/user-prompt-submit"] = [
        (422, {"error": {"code": "validation_error", "message": "prompt too long", "details": {}}}, 0)
    ]
    assert (
        run_hook(
            "user-prompt-submit", json.dumps(payload("UserPromptSubmit", repo, prompt="p")), _settings(home, stub.url)
        )
        == ""
    )
    assert spooled_files(home / "spool") == []
    assert "prompt too long" in (home / "logs" / "hooks.log").read_text()


def test_build_body_caps_the_transcript_and_endpoints_match_the_contract(repo: Path, root: Path) -> None:
    big = root / "-work-proj" / "big.jsonl"
    big.write_text("\n".join(user(f"message {i} " + "x" * 100) for i in range(200)))
    ev = from_claude_code("session-end", payload("SessionEnd", repo, big, reason="other"))
    body = build_body(ev, transcript_roots=[root], max_body_bytes=4096)
    assert len(body["transcript"].encode()) <= 2048 and body["transcript"].endswith("message 199 " + "x" * 100)
    assert set(ENDPOINTS.values()) == {
        "/api/hooks/session-start",
        "/api/hooks/user-prompt-submit",
        "/api/hooks/session-end",
        "/api/hooks/pre-compaction",
        "/api/v3/observer/tool-use",  # post-tool-use and its failure
        "/api/v3/observer/pre-tool-use",
        "/api/v3/observer/step-end",  # stop and subagent-stop
    }
