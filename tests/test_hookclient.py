"""The light hook client (memlane.hookclient, the ``memlane-hook`` command Claude Code runs).

Everything here is the real thing: the installed console script as a subprocess with the
payload on stdin, real daemons (``memlane serve``) on real SQLite stores with the token on, the
real spool and log files, Claude Code's settings file edited by the real connector.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import memlane
from conftest import api_client, free_port
from memlane.config import load_settings
from memlane.connectors.claude_settings import connect, default_hook_cmd, default_memlane_cmd, disconnect, entry_cmd
from memlane.connectors.spool import replay_spool, spool_event, spooled_files
from memlane.container import open_container
from memlane.hookclient import (
    CONFIG_KEYS,
    HOOKS_DISABLED_ENV,
    lock_url,
    read_config_scalars,
    resolve_target,
    split_url,
)

SID = "5b0d7a1e-2f44-4c8e-9d3a-7e6f1c2b9a40"
PROMPT_SID = "0c3e9b7d-81a2-4f6e-b5d4-2a9c8e7f1d63"
HEAVY = (
    "httpx",
    "pydantic",
    "pydantic_settings",
    "typer",
    "rich",
    "fastapi",
    "starlette",
    "uvicorn",
    "numpy",
    "torch",
    "onnxruntime",
    "tokenizers",
    "yaml",
    "orjson",
    "mcp",
)
#: Standard-library modules the light client keeps out of its start-up on purpose (each cost
#: milliseconds: docs/hooks.md); a regression here is a slower hook, not a wrong one.
SLOW_STDLIB = (
    "logging",
    "http",
    "email",
    "ssl",
    "dataclasses",
    "inspect",
    "typing",
    "secrets",
    "hmac",
    "tempfile",
    "json",
    "re",
    "enum",
    "socket",
    "selectors",
    "pathlib",
    "collections",
    "contextlib",
    "functools",
    "urllib",
    "ipaddress",
    "datetime",
    "traceback",
    "warnings",
    "site",
)
MEMORIES = [
    "The deploy script lives in ops/deploy.sh and needs the staging token",
    "The staging database is called orion and runs Postgres 16",
    "The user prefers tabs over spaces in Python files",
    "Run the test suite with make test before pushing a branch",
    "The CI pipeline caches the virtualenv between runs",
]
EVENTS = [
    ("session-start", {"hook_event_name": "SessionStart", "source": "startup"}),
    (
        "user-prompt-submit",
        {"hook_event_name": "UserPromptSubmit", "prompt": "how do we deploy to staging with the deploy script?"},
    ),
    ("pre-compact", {"hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": "keep decisions"}),
    ("session-end", {"hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}),
]
#: The observer's tool-call hook (a Read, Claude Code's tool_response shape).
TOOL_EVENT = (
    "post-tool-use",
    {
        "hook_event_name": "PostToolUse",
        "tool_name": "Read",
        "tool_use_id": "toolu_1",
        "tool_input": {"file_path": "ops/deploy.sh"},
        "tool_response": {"type": "text", "file": {"filePath": "ops/deploy.sh", "content": "#!/bin/sh\n"}},
    },
)

#: The hooks before a tool call and at the end of a turn / a subagent's task.
STEP_EVENTS = [
    (
        "pre-tool-use",
        {
            "hook_event_name": "PreToolUse",
            "tool_name": "Edit",
            "tool_use_id": "toolu_2",
            "tool_input": {"file_path": "ops/deploy.sh", "old_string": "a", "new_string": "b"},
        },
    ),
    ("stop", {"hook_event_name": "Stop", "stop_hook_active": False}),
    ("subagent-stop", {"hook_event_name": "SubagentStop", "stop_hook_active": False, "agent_id": "a1"}),
]


#: The directory holding the memlane package under test (what the installed command appends to sys.path).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(memlane.__file__)))


def hook_cmd() -> list[str]:
    """The command ``memlane connect claude-code`` installs from this interpreter's environment:
    this interpreter without site, isolated, running the client from this package."""
    cmd = default_hook_cmd()
    assert cmd == entry_cmd(sys.executable, PACKAGE_ROOT), cmd
    assert cmd[:4] == [sys.executable, "-S", "-I", "-c"] and "from memlane.hookclient import main" in cmd[4]
    return cmd


def console_script() -> list[str]:
    """The ``memlane-hook`` console script beside this interpreter (the same client, with site)."""
    script = Path(sys.executable).parent / "memlane-hook"
    assert script.is_file(), f"memlane-hook is not installed beside {sys.executable}"
    return [str(script)]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(MEMLANE_HOME=str(home), MEMLANE_CONFIG=str(home / "no-such-config.yaml"), **extra)
    return env


def run_hook(
    cmd: list[str], event: str, stdin: str | bytes, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[bytes]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run([*cmd, event, *args], input=data, capture_output=True, env=env, timeout=120)


def payload(
    event_extra: dict[str, Any], cwd: Path, transcript: Path | str = "/nowhere.jsonl", session_id: str = SID
) -> str:
    return json.dumps(
        {
            "session_id": session_id,
            "transcript_path": str(transcript),
            "cwd": str(cwd),
            "permission_mode": "default",
            **event_extra,
        }
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "work" / "proj"
    (root / ".git").mkdir(parents=True)
    return root


# --- imports ----------------------------------------------------------------------------------


@pytest.mark.parametrize("event,extra", [*EVENTS, TOOL_EVENT, *STEP_EVENTS])
def test_the_entry_point_imports_no_heavy_module(tmp_path: Path, repo: Path, event: str, extra: dict[str, Any]) -> None:
    """Importing the light entry point as the installed command runs it (no site, isolated),
    and running a whole hook call with it (the transcript read for the prompt and session-end
    hooks), leaves every heavy library and the slow standard-library modules out of
    sys.modules (the old `memlane hook` loaded typer, pydantic, httpx, torch...)."""
    root = PACKAGE_ROOT
    probe = (
        "import sys\n"
        "sys.path.append(sys.argv[1])\n"
        "import memlane.hookclient\n"
        "after_import = sorted(sys.modules)\n"
        "memlane.hookclient.main([sys.argv[2]])\n"
        "sys.stderr.write(repr([after_import, sorted(sys.modules)]))\n"
    )
    home, user_home = tmp_path / "home", tmp_path / "user"
    transcript = transcript_file(user_home, repo)  # its last turn rates a memory: the feedback is parsed
    p = subprocess.run(
        [sys.executable, "-S", "-I", "-c", probe, root, event],
        input=payload(extra, repo, transcript).encode(),
        capture_output=True,
        env=clean_env(home, MEMLANE_PORT=str(free_port()), HOME=str(user_home)),
        timeout=60,
    )
    assert p.returncode == 0 and p.stdout == b"", p.stderr[-2000:]
    after_import, after_call = ast.literal_eval(p.stderr.decode())
    leaves = {
        "memlane",
        "memlane.auth",
        "memlane.hookclient",
        "memlane.connectors",
        "memlane.connectors.events",
        "memlane.connectors.cjson",
        "memlane.connectors.spool",
        "memlane.connectors.hooklog",
        "memlane.projectroot",
    }
    for modules, allowed in ((after_import, leaves), (after_call, leaves | {"memlane.connectors.transcript"})):
        assert sorted(m for m in modules if m.split(".")[0] in HEAVY) == []
        # memlane's own heavy layers stay out too: only the leaf modules are loaded
        assert {m for m in modules if m.startswith("memlane")} <= allowed
        assert sorted(m for m in modules if m.split(".")[0] in SLOW_STDLIB) == []
    assert ("memlane.connectors.transcript" in after_call) == (event in ("user-prompt-submit", "session-end", "stop"))
    [spooled] = spooled_files(home / "spool")  # the call really ran (daemon down: spooled)
    body = json.loads(spooled.read_text())["body"]
    if event == "user-prompt-submit":
        assert body["memory_feedback"] == {"deadbeef": 0.5}
    if event == "session-end":
        assert "ops/deploy.sh" in body["transcript"]
    if event == "post-tool-use":
        assert (body["tool_name"], body["tool_input"], "tool_response" in body) == (
            "Read",
            {"file_path": "ops/deploy.sh"},
            False,
        )
    if event == "pre-tool-use":
        assert (body["tool_name"], body["tool_use_id"], isinstance(body["ts_ms"], int)) == ("Edit", "toolu_2", True)
    if event in ("stop", "subagent-stop"):
        assert body["kind"] == event.replace("-", "_") and body["session_id"]


def test_the_console_script_keeps_heavy_modules_out(tmp_path: Path, repo: Path) -> None:
    """The ``memlane-hook`` console script (with site) loads none of the heavy libraries either."""
    probe = (
        "import sys\n"
        "import memlane.hookclient\n"
        "memlane.hookclient.main(['session-start'])\n"
        "sys.stderr.write(repr(sorted(sys.modules)))\n"
    )
    home = tmp_path / "home"
    p = subprocess.run(
        [sys.executable, "-c", probe],
        input=payload(EVENTS[0][1], repo).encode(),
        capture_output=True,
        env=clean_env(home, MEMLANE_PORT=str(free_port())),
        timeout=60,
    )
    assert p.returncode == 0 and p.stdout == b"", p.stderr[-2000:]
    modules = ast.literal_eval(p.stderr.decode())
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY) == []
    assert len(spooled_files(home / "spool")) == 1


# --- against real daemons ---------------------------------------------------------------------


def seed_store(home: Path, project: Path) -> None:
    """A real store with a few memories of ``project`` (BM25 only), closed again."""
    c = open_container(load_settings(home=home, embedding={"provider": "none"}))
    try:
        r = api_client(c).post(
            "/api/memory/remember",
            json={
                "memories": [
                    {"content": m, "project": str(project.resolve()), "type": "fact", "importance": 0.8}
                    for m in MEMORIES
                ]
            },
        )
        assert r.status_code == 200, r.text
    finally:
        c.close()


def transcript_file(home_dir: Path, repo: Path) -> Path:
    """A Claude Code transcript under ``$HOME/.claude/projects`` whose last assistant turn rates a memory."""
    path = home_dir / ".claude" / "projects" / "-work-proj" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        {"type": "user", "message": {"role": "user", "content": "How do we deploy?"}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": 'Use ops/deploy.sh. {"memory_feedback": {"deadbeef": 0.5}}'}],
            },
        },
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def session_view(client: Any, key: str) -> dict[str, Any]:
    """What the daemon recorded for a session, without clock-dependent fields."""
    r = client.get(f"/api/sessions/{key}")
    assert r.status_code == 200, r.text

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {
                k: strip(v)
                for k, v in x.items()
                if not any(t in k for t in ("_at", "time", "latency", "_ms", "duration"))
            }
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(r.json())


def differences(a: Any, b: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """Every leaf where two JSON values differ, as ``(path, a, b)``; numbers within 1e-3 are the
    same (a decayed score moves with the seconds between the two runs)."""
    if isinstance(a, float) or isinstance(b, float):
        return (
            [] if isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) < 1e-3 else [(where, a, b)]
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [(where, a, b)]


def test_same_answers_as_the_old_command_for_every_event(tmp_path: Path, repo: Path, start_daemon) -> None:
    """Two copies of one store, each behind its own daemon with the token on: the old `memlane
    hook EVENT` against one and the installed `memlane-hook EVENT` against the other, the same
    payloads in the same order. Same stdout byte for byte, same sessions recorded."""
    old_home, new_home = tmp_path / "old-home", tmp_path / "new-home"
    seed_store(old_home, repo)
    shutil.copytree(old_home, new_home)
    # A prompt block even with BM25 only; no predictor: whether its sidecar answers a score
    # request within the deadline depends on the machine's load, not on the hook client.
    daemon_env = {"MEMLANE_SESSIONS__PROMPT_MIN_SCORE": "0", "MEMLANE_PREDICTOR__ENABLED": "false"}
    old_d = start_daemon(old_home, provider="none", env=daemon_env)
    new_d = start_daemon(new_home, provider="none", env=daemon_env)
    user_home = tmp_path / "user"
    transcript = transcript_file(user_home, repo)
    # The old command finds its daemon from the settings (MEMLANE_PORT); the new one is given
    # only the home and finds the daemon's URL in the lock file it wrote.
    old_env = clean_env(old_home, MEMLANE_PORT=str(old_d.port), HOME=str(user_home))
    new_env = clean_env(new_home, HOME=str(user_home))
    old_cmd = [sys.executable, "-m", "memlane", "hook"]
    # The prompt in a session of its own: after a session-start every memory was already shown
    # in that session, and a prompt injects only what the agent has not seen.
    sessions = {"user-prompt-submit": PROMPT_SID}
    for event, extra in EVENTS:
        stdin = payload(extra, repo, transcript, session_id=sessions.get(event, SID))
        old = run_hook(old_cmd, event, stdin, old_env)
        new = run_hook(hook_cmd(), event, stdin, new_env)
        assert (new.returncode, new.stderr) == (0, b""), new.stderr
        assert old.returncode == 0
        assert new.stdout == old.stdout, event
        if event in ("session-start", "user-prompt-submit"):
            answer = json.loads(new.stdout)["hookSpecificOutput"]
            assert answer["hookEventName"] == dict(EVENTS)[event]["hook_event_name"]
            assert "ops/deploy.sh" in answer["additionalContext"]
            assert new.stdout.endswith(b"}\n") and new.stdout.count(b"\n") == 1
        else:
            assert new.stdout == b""
    assert spooled_files(new_home / "spool") == [] and spooled_files(old_home / "spool") == []
    with old_d.client() as a, new_d.client() as b:
        for key in (SID, PROMPT_SID):
            assert differences(session_view(a, key), session_view(b, key)) == []
        assert session_view(b, PROMPT_SID)["session"]["prompt_count"] == 1


def test_daemon_down_spools_and_the_next_call_replays_when_it_is_back(tmp_path: Path, repo: Path, start_daemon) -> None:
    """Daemon down: exit 0, nothing on stdout or stderr, the event spooled (0600) and logged
    (0600). Back up: the next hook call replays the spool first, then answers. The spool is
    the old one: files the old writer spooled replay through the new client and vice versa."""
    home = tmp_path / "home"
    env_down = clean_env(home, MEMLANE_PORT=str(free_port()))
    for event, extra in (EVENTS[0], EVENTS[3]):
        p = run_hook(hook_cmd(), event, payload(extra, repo, session_id="gone-1"), env_down)
        assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    files = spooled_files(home / "spool")
    assert [json.loads(f.read_text())["endpoint"] for f in files] == [
        "/api/hooks/session-start",
        "/api/hooks/session-end",
    ]
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    log = home / "logs" / "hooks.log"
    assert log.stat().st_mode & 0o777 == 0o600
    assert log.read_text().count("event spooled") == 2
    # one more event spooled by the old writer (the daemon's own spool module, as `memlane hook` does)
    spool_event(home / "spool", "/api/hooks/session-start", {"session_key": "gone-2", "harness": "claude-code"})

    d = start_daemon(home, provider="none")
    p = run_hook(hook_cmd(), "session-start", payload(EVENTS[0][1], repo), clean_env(home))  # URL from the lock
    assert p.returncode == 0 and json.loads(p.stdout)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert spooled_files(home / "spool") == [] and spooled_files(home / "spool" / "rejected") == []
    with d.client() as c:
        gone = c.get("/api/sessions/gone-1").json()
        assert gone["session"]["ended_at"] is not None, gone  # start and end replayed, in order
        assert c.get("/api/sessions/gone-2").status_code == 200

        # ...and the old replay (httpx) delivers what the light client spooled.
        env_down = clean_env(home, MEMLANE_DAEMON_URL=f"http://127.0.0.1:{free_port()}")
        p = run_hook(hook_cmd(), "session-start", payload(EVENTS[0][1], repo, session_id="gone-3"), env_down)
        assert (p.returncode, p.stdout) == (0, b"") and len(spooled_files(home / "spool")) == 1
        assert replay_spool(c, home / "spool") == (1, 0)
        assert c.get("/api/sessions/gone-3").status_code == 200


def test_the_token_is_sent_and_a_wrong_one_is_refused_quietly(tmp_path: Path, repo: Path, start_daemon) -> None:
    """With the token on, the daemon answers the hook only with the home's token; with a wrong
    one it answers 401: nothing printed, nothing spooled (a retry cannot succeed), logged."""
    home = tmp_path / "home"
    seed_store(home, repo)
    d = start_daemon(home, provider="none")
    env = clean_env(home)
    ok = run_hook(hook_cmd(), "session-start", payload(EVENTS[0][1], repo, session_id="tok-1"), env)
    assert "ops/deploy.sh" in json.loads(ok.stdout)["hookSpecificOutput"]["additionalContext"]
    # A hook of another home (its own token) pointed at this daemon. Rewriting this home's token
    # file instead would be a rotation, which the daemon adopts within a second.
    other = tmp_path / "other-home"
    other.mkdir(mode=0o700)
    (other / "token").write_text("not-the-token\n")
    bad_env = clean_env(other, MEMLANE_DAEMON_URL=d.url)
    bad = run_hook(hook_cmd(), "session-start", payload(EVENTS[0][1], repo, session_id="tok-2"), bad_env)
    assert (bad.returncode, bad.stdout, bad.stderr) == (0, b"", b"")
    assert spooled_files(other / "spool") == []
    assert "HTTP 401" in (other / "logs" / "hooks.log").read_text()
    with d.client() as c:
        assert c.get("/api/sessions/tok-2").status_code == 404
    # the memlane-hook console script runs the same client: the token is sent, the answer printed
    ok = run_hook(console_script(), "session-start", payload(EVENTS[0][1], repo, session_id="tok-3"), env)
    assert (ok.returncode, ok.stderr) == (0, b"")
    assert "ops/deploy.sh" in json.loads(ok.stdout)["hookSpecificOutput"]["additionalContext"]


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"not json",
        b"[]",
        b'{"cwd": "/tmp"}',
        b'{"session_id": 7}',
        b'{"session_id": "s"}',
        b"\xff\xfe\x00garbage",
        b"[" * 100_000,
        b'{"session_id": "s", "prompt": "x", "hook_event_name": "SessionEnd"}',
    ],
)
def test_a_malformed_payload_prints_nothing_and_exits_0(tmp_path: Path, stdin: bytes) -> None:
    home = tmp_path / "home"
    p = run_hook(hook_cmd(), "user-prompt-submit", stdin, clean_env(home, MEMLANE_PORT=str(free_port())))
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert spooled_files(home / "spool") == []
    assert "bad input ignored" in (home / "logs" / "hooks.log").read_text()


@pytest.mark.parametrize(
    "args",
    [[], ["stop"], ["session-start", "--timeout", "nan"], ["session-start", "--bogus"], ["session-start", "--timeout"]],
)
def test_bad_arguments_print_nothing_and_exit_0(tmp_path: Path, repo: Path, args: list[str]) -> None:
    home = tmp_path / "home"
    p = subprocess.run(
        [*hook_cmd(), *args],
        input=payload(EVENTS[0][1], repo).encode(),
        capture_output=True,
        env=clean_env(home, MEMLANE_PORT=str(free_port())),
        timeout=60,
    )
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert spooled_files(home / "spool") == []


def test_hooks_disabled_in_memlanes_own_judge_process(tmp_path: Path, repo: Path) -> None:
    from memlane.providers.claude_cli import HOOKS_DISABLED_ENV as JUDGE_ENV

    assert HOOKS_DISABLED_ENV == JUDGE_ENV
    home = tmp_path / "home"
    p = run_hook(
        hook_cmd(),
        "session-start",
        payload(EVENTS[0][1], repo),
        clean_env(home, MEMLANE_PORT=str(free_port()), **{HOOKS_DISABLED_ENV: "1"}),
    )
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert not (home / "spool").exists()


# --- finding the daemon without the settings machinery ----------------------------------------


def test_config_scalars_agree_with_yaml_whenever_they_are_read(tmp_path: Path) -> None:
    """Whatever the light reader takes from config.yaml is what PyYAML reads there; what it
    cannot read safely it leaves to the default (and logs)."""
    text = "\n".join(
        [
            "# memlane",
            "home: ~/data/memlane  # a comment",
            "host: '127.0.0.2'",
            'daemon_url: "http://localhost:9000"',
            "port: 7555",
            "hook_timeout_s: 2.5",
            "max_body_bytes: 2048",
            "log_level: debug",
            "sessions:",
            "  port: 1",
            "embedding: {provider: none}",
            "port_x: 3",
        ]
    )
    path = tmp_path / "config.yaml"
    path.write_text(text)
    light, full = read_config_scalars(path), yaml.safe_load(text)
    assert light == {k: full[k] for k in CONFIG_KEYS}
    for unreadable in (
        "port: 0x1d1d",
        "port: &p 7000",
        "host: *alias",
        "daemon_url: !!str http://x",
        'host: "a\\tb"',
        "port: [1]",
        "port: 7_000",
        "hook_timeout_s: 1e3",
        "host: |",
    ):
        path.write_text(unreadable + "\n")
        assert read_config_scalars(path) == {}, unreadable
    path.write_text("port: 1\nport: 2\n")
    assert read_config_scalars(path) == {"port": 2} == yaml.safe_load(path.read_text())
    assert read_config_scalars(tmp_path / "missing.yaml") == {}


def test_where_the_url_comes_from(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("port: 7600\nhook_timeout_s: 1.5\n")
    base = {"MEMLANE_HOME": str(home)}
    assert resolve_target(base).url == "http://127.0.0.1:7600"
    assert resolve_target(base).timeout_s == 1.5
    # a live daemon's lock file beats config.yaml
    (home / "daemon.lock").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "command": "memlane serve",
                "started_at": "2026-01-01T00:00:00Z",
                "url": "http://0.0.0.0:7700",
            }
        )
    )
    assert lock_url(home) == "http://127.0.0.1:7700"
    assert resolve_target(base).url == "http://127.0.0.1:7700"
    # the environment beats the lock file
    assert resolve_target({**base, "MEMLANE_PORT": "7800"}).url == "http://127.0.0.1:7800"
    assert resolve_target({**base, "MEMLANE_DAEMON_URL": "http://[::1]:7900"}).url == "http://[::1]:7900"
    assert resolve_target({**base, "MEMLANE_HOOK_TIMEOUT_S": "0.5"}).timeout_s == 0.5
    # a lock left by a dead process is ignored
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (home / "daemon.lock").write_text(
        json.dumps({"pid": dead.pid, "command": "memlane serve", "started_at": "x", "url": "http://127.0.0.1:7700"})
    )
    assert lock_url(home) is None and resolve_target(base).url == "http://127.0.0.1:7600"
    (home / "daemon.lock").write_text("")  # released
    assert lock_url(home) is None
    (home / "config.yaml").unlink()
    assert resolve_target(base).url == "http://127.0.0.1:7437" and resolve_target(base).timeout_s == 4.0


@pytest.mark.parametrize(
    "url,parts",
    [
        ("http://127.0.0.1:7437", ("http", "127.0.0.1", 7437, "")),
        ("http://localhost:9000/memlane/", ("http", "localhost", 9000, "/memlane")),
        ("https://example.org", ("https", "example.org", 443, "")),
        ("http://[::1]:7437", ("http", "::1", 7437, "")),
        ("http://::1:7437", ("http", "::1", 7437, "")),
    ],
)
def test_split_url(url: str, parts: tuple[str, str, int, str]) -> None:
    assert split_url(url) == parts


@pytest.mark.parametrize("url", ["ftp://x", "127.0.0.1:7437", "http://h:port", "http://h:70000"])
def test_split_url_refuses_what_it_cannot_reach(url: str) -> None:
    with pytest.raises(ValueError):
        split_url(url)


# --- the connector ----------------------------------------------------------------------------

OTHERS = {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "python3 ~/guard.py", "timeout": 30}]}],
    "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "cat ~/notes/today.md"}]}],
}


def fake_install(tmp_path: Path) -> Path:
    """A bin directory as pip lays it out: `memlane` and `memlane-hook` side by side."""
    bin_dir = tmp_path / "venv with space" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("memlane", "memlane-hook"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_connect_installs_the_light_command_and_replaces_the_old_one(tmp_path: Path) -> None:
    bin_dir = fake_install(tmp_path)
    settings, claude_json = tmp_path / "settings.json", tmp_path / ".claude.json"
    old = {
        **OTHERS,
        "SessionEnd": [
            {
                "matcher": "",
                "hooks": [{"type": "command", "command": "/old/venv/bin/memlane hook session-end", "timeout": 15}],
            }
        ],
        "PreCompact": [
            {
                "matcher": "",
                "hooks": [
                    {"type": "command", "command": "/usr/bin/python3 -m memlane.hookclient pre-compact", "timeout": 10}
                ],
            }
        ],
    }
    settings.write_text(json.dumps({"model": "sonnet", "hooks": old}))
    result = connect(settings, [str(bin_dir / "memlane")], claude_json_path=claude_json)
    assert result.hooks == {
        "SessionStart": "added",
        "UserPromptSubmit": "added",
        "SessionEnd": "updated",
        "PreCompact": "updated",
        "PostToolUse": "added",
        "PostToolUseFailure": "added",
        "PreToolUse": "added",
        "Stop": "added",
        "SubagentStop": "added",
    }
    hooks = json.loads(settings.read_text())["hooks"]
    for event, cc in (
        ("session-start", "SessionStart"),
        ("user-prompt-submit", "UserPromptSubmit"),
        ("session-end", "SessionEnd"),
        ("pre-compact", "PreCompact"),
        ("post-tool-use", "PostToolUse"),
        ("post-tool-use-failure", "PostToolUseFailure"),
        ("pre-tool-use", "PreToolUse"),
        ("stop", "Stop"),
        ("subagent-stop", "SubagentStop"),
    ):
        ours = [h["command"] for g in hooks[cc] for h in g["hooks"] if "memlane" in h["command"]]
        assert ours == [shlex.join([str(bin_dir / "memlane-hook"), event])]
    pre = OTHERS["PreToolUse"]
    assert hooks["PreToolUse"][: len(pre)] == pre and len(hooks["PreToolUse"]) == len(pre) + 1
    assert hooks["SessionStart"][0] == OTHERS["SessionStart"][0]
    mcp = json.loads(claude_json.read_text())["mcpServers"]["memlane"]
    assert (mcp["command"], mcp["args"]) == (str(bin_dir / "memlane"), ["mcp", "serve"])
    assert not connect(settings, [str(bin_dir / "memlane")], claude_json_path=claude_json).changed

    # disconnect removes ours in every form (a stale old-form entry included), keeps the rest
    data = json.loads(settings.read_text())
    data["hooks"]["Stop"] = [{"hooks": [{"type": "command", "command": "'/x y/memlane' hook session-end"}]}]
    settings.write_text(json.dumps(data))
    gone = disconnect(settings, claude_json_path=claude_json)
    assert gone.hooks["SessionStart"] == "removed" and gone.hooks.get("Stop") == "removed"
    assert json.loads(settings.read_text()) == {"model": "sonnet", "hooks": OTHERS}


def test_connect_with_python_m_memlane_uses_the_entry_file_or_python_m_memlane_hookclient(tmp_path: Path) -> None:
    """``python -m memlane`` of this interpreter gets the installed form (no site, ``-c``);
    of another interpreter, ``python -m memlane.hookclient``. disconnect removes either."""
    settings = tmp_path / "settings.json"
    connect(settings, [sys.executable, "-m", "memlane"], register_mcp=False)
    commands = [
        h["command"] for gs in json.loads(settings.read_text())["hooks"].values() for g in gs for h in g["hooks"]
    ]
    assert shlex.join([*hook_cmd(), "session-start"]) in commands
    disconnect(settings, unregister_mcp=False)
    assert json.loads(settings.read_text()) == {}
    other = str(tmp_path / "other venv" / "bin" / "python3")
    connect(settings, [other, "-m", "memlane"], register_mcp=False)
    commands = [
        h["command"] for gs in json.loads(settings.read_text())["hooks"].values() for g in gs for h in g["hooks"]
    ]
    assert shlex.join([other, "-m", "memlane.hookclient", "session-start"]) in commands
    disconnect(settings, unregister_mcp=False)
    assert json.loads(settings.read_text()) == {}


def test_the_installed_command_runs_as_claude_code_runs_it(tmp_path: Path, repo: Path) -> None:
    """`memlane connect claude-code` from this environment, then the SessionStart command it
    wrote, run through a shell with the payload on stdin (daemon down: spooled, silent)."""
    settings = tmp_path / "settings.json"
    connect(settings, default_memlane_cmd(), register_mcp=False)
    [group] = json.loads(settings.read_text())["hooks"]["SessionStart"]
    command = group["hooks"][0]["command"]
    assert shlex.split(command) == [*hook_cmd(), "session-start"]
    home = tmp_path / "home"
    p = subprocess.run(
        ["/bin/sh", "-c", command],
        input=payload(EVENTS[0][1], repo).encode(),
        capture_output=True,
        env=clean_env(home, MEMLANE_PORT=str(free_port())),
        timeout=60,
    )
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert len(spooled_files(home / "spool")) == 1
    # the console script, still installed, does the same
    p = run_hook(
        console_script(), "session-start", payload(EVENTS[0][1], repo), clean_env(home, MEMLANE_PORT=str(free_port()))
    )
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert len(spooled_files(home / "spool")) == 2
    # disconnect removes the installed form, and only it
    disconnect(settings, unregister_mcp=False)
    assert json.loads(settings.read_text()) == {}


def test_a_broken_install_never_exits_with_claude_codes_blocking_code(tmp_path: Path, repo: Path) -> None:
    """Claude Code reads exit code 2 as "block this prompt and show stderr". An installed command
    whose package has gone (a venv rebuilt for another Python) fails with 1, an ImportError: the
    program is given with -c, where ``python FILE`` would exit 2 for a missing file."""
    cmd = entry_cmd(sys.executable, str(tmp_path / "gone" / "site-packages"))
    p = subprocess.run(
        ["/bin/sh", "-c", shlex.join([*cmd, "user-prompt-submit"])],
        input=payload(EVENTS[1][1], repo).encode(),
        capture_output=True,
        timeout=60,
    )
    assert (p.returncode, p.stdout) == (1, b"")
    assert b"ModuleNotFoundError" in p.stderr


def test_memlane_hook_still_works_and_delegates(tmp_path: Path, repo: Path) -> None:
    """The old command keeps working (it now runs the same code as the light client)."""
    home = tmp_path / "home"
    p = run_hook(
        [sys.executable, "-m", "memlane", "hook"],
        "session-start",
        payload(EVENTS[0][1], repo),
        clean_env(home, MEMLANE_PORT=str(free_port())),
    )
    assert (p.returncode, p.stdout) == (0, b"")
    [spooled] = spooled_files(home / "spool")
    assert json.loads(spooled.read_text())["body"]["session_key"] == SID


def test_a_daemon_killed_mid_session_leaves_no_stale_url(tmp_path: Path, repo: Path, start_daemon) -> None:
    """kill -9 leaves the lock file's content behind; its pid is dead, so the hook does not
    trust its URL: it falls back to the settings and spools."""
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    d.kill(signal.SIGKILL)
    assert json.loads((home / "daemon.lock").read_text())["url"] == d.url  # stale content stays
    assert lock_url(home) is None
    config = tmp_path / "config.yaml"  # the settings' port: nobody listens there
    config.write_text(f"port: {free_port()}\n")
    p = run_hook(
        hook_cmd(), "session-end", payload(EVENTS[3][1], repo), {**clean_env(home), "MEMLANE_CONFIG": str(config)}
    )
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert len(spooled_files(home / "spool")) == 1


# --- the HTTP exchange ------------------------------------------------------------------------


class RawServer:
    """A loopback TCP server that answers every connection with fixed bytes (then closes, or
    holds the connection open when ``hold``): what a daemon, a proxy or a broken server could send."""

    def __init__(self, answer: bytes, *, hold: bool = False) -> None:
        import socket
        import threading

        self.answer, self.hold, self.requests = answer, hold, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(
                    [ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0]
                )
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append((head.decode(), body))
                conn.sendall(self.answer)
                if self.hold:
                    self._stop.wait(30)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.mark.parametrize(
    "answer,expected",
    [
        (
            b'HTTP/1.1 200 OK\r\ncontent-length: 11\r\ncontent-type: application/json\r\n\r\n{"inject":1}extra',
            (200, '{"inject":1'),
        ),
        (
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\n{"a":\r\n3\r\n 1}\r\n0\r\nX-Trailer: t\r\n\r\n',
            (200, '{"a": 1}'),
        ),
        (b'HTTP/1.0 503 Service Unavailable\r\n\r\n{"error": "busy"}', (503, '{"error": "busy"}')),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n", (204, "")),
    ],
)
def test_answers_are_read_whichever_way_they_are_framed(answer: bytes, expected: tuple[int, str]) -> None:
    from memlane.hookclient import http_poster

    server = RawServer(answer)
    try:
        post = http_poster(server.url, {"Authorization": "Bearer t0k", "X-Memlane-Client": "hook"})
        assert post("/api/hooks/session-start", b'{"session_key": "k"}', 5.0) == expected
        head, body = server.requests[0]
        assert head.startswith("POST /api/hooks/session-start HTTP/1.1\r\n") and body == b'{"session_key": "k"}'
        assert "Authorization: Bearer t0k" in head and "Connection: close" in head
        assert f"Host: {server.url.split('//')[1]}" in head
    finally:
        server.close()


@pytest.mark.parametrize(
    "answer",
    [
        b"",
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n",
    ],
)
def test_a_malformed_answer_is_a_delivery_error(answer: bytes) -> None:
    from memlane.connectors.spool import DeliveryError, DeliveryTimeout
    from memlane.hookclient import http_poster

    server = RawServer(answer)
    try:
        with pytest.raises(DeliveryError) as caught:
            http_poster(server.url, {})("/api/hooks/session-end", b"{}", 5.0)
        assert not isinstance(caught.value, DeliveryTimeout)
    finally:
        server.close()


def test_no_answer_in_time_is_a_delivery_timeout_and_nothing_is_sent_for_a_bad_path() -> None:
    from memlane.connectors.spool import DeliveryTimeout
    from memlane.hookclient import http_poster

    server = RawServer(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial", hold=True)
    try:
        post = http_poster(server.url, {})
        with pytest.raises(DeliveryTimeout):
            post("/api/hooks/session-end", b"{}", 0.3)
        assert post("/api/hooks/session-end HTTP/1.1\r\nX: y", b"{}", 0.3)[0] == 400
        assert post("api/no-slash", b"{}", 0.3)[0] == 400
        assert len(server.requests) == 1
    finally:
        server.close()
    with pytest.raises(ValueError):
        http_poster("http://127.0.0.1:1", {"X-Bad": "a\r\nInjected: 1"})


# --- the log ----------------------------------------------------------------------------------


def test_direct_log_lines_read_like_logging_and_the_file_rotates_privately(tmp_path: Path) -> None:
    import logging

    from memlane.connectors.hooklog import LogFile, format_line

    record = logging.LogRecord("memlane.connectors", logging.WARNING, __file__, 1, "hook %s: %d", ("x", 3), None)
    expected = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s").format(record)
    assert format_line("WARNING", "memlane.connectors", "hook x: 3", now=record.created) == expected + "\n"

    log = LogFile(tmp_path / "logs" / "hooks.log", max_bytes=100, backups=2)
    for i in range(12):
        log.write(f"line {i:02d} " + "x" * 30 + "\n")
    log.close()
    files = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert files == ["hooks.log", "hooks.log.1", "hooks.log.2"]
    assert all((tmp_path / "logs" / f).stat().st_mode & 0o777 == 0o600 for f in files)
    assert (tmp_path / "logs").stat().st_mode & 0o777 == 0o700
    assert "line 11" in (tmp_path / "logs" / "hooks.log").read_text()


def test_an_unusable_home_still_prints_nothing_and_exits_0(tmp_path: Path, repo: Path) -> None:
    """A home that cannot be created (a file in its path): no spool, no log, and still exit 0
    with nothing on stdout or stderr (logging's last-resort handler never prints)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    env = clean_env(blocker / "home", MEMLANE_PORT=str(free_port()))
    for event, extra in EVENTS:
        p = run_hook(hook_cmd(), event, payload(extra, repo), env)
        assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    p = run_hook(hook_cmd(), "session-start", b"not json", env)
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
