"""Private files (issue 37 finding 7: "memories.db is 0644 in a 0755 home"), written as the
attack "another local user reads the store": every test stats real files made by real code - an
embedded store, a real daemon process, the real hook command - and runs the real
``memlane doctor`` as a subprocess."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Daemon, api_client
from memlane.fileperms import (
    PrivateRotatingFileHandler,
    check_private,
    fix_private,
    open_private,
    private_dir,
    warn_if_loose,
)
from memlane.services.inputs import RememberInput

SID = "6c1d8b6f-3a2e-4d66-8b81-3e2f1a0c8d42"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask_022():
    """The usual login umask, under which open() and mkdir() make 0644 files and 0755 directories."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(MEMLANE_HOME=str(home), MEMLANE_CONFIG=str(home / "no-such-config.yaml"), **extra)
    return env


def _doctor(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memlane", "doctor", "--home", str(home), *args],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=60,
    )


# -- a fresh store is private ------------------------------------------------------------------


def test_a_fresh_embedded_store_is_private(tmp_path, open_store, umask_022) -> None:
    home = tmp_path / "fresh" / "home"
    c = open_store(home=home)
    with api_client(c) as cl:  # the session lifecycle writes too (sessions, transcripts, checkpoints)
        assert cl.post("/api/hooks/session-start", json={"session_key": SID}).status_code == 200
        assert (
            cl.post("/api/memory/remember", json={"content": "the deploy script is ops/deploy.sh"}).status_code == 200
        )
        assert (
            cl.post(
                "/api/hooks/session-end", json={"session_key": SID, "transcript": "user: hi", "wait": True}
            ).status_code
            == 200
        )
    c.checkpoints.flush()
    assert mode(home) == 0o700
    for name in ("memories.db", "memories.db-wal", "memories.db-shm"):
        assert (home / name).exists(), name
        assert mode(home / name) == 0o600, name
    assert check_private(home) == []


def test_a_fresh_daemon_home_is_private(tmp_path, umask_022) -> None:
    home = tmp_path / "fresh" / "home"  # does not exist: the daemon creates it
    d = Daemon(home, tmp_path / "daemon.log", provider="none")
    try:
        d.wait_ready()
        with d.client() as cl:
            assert cl.post("/api/memory/remember", json={"content": "private by default"}).status_code == 200
            assert cl.post("/api/hooks/session-start", json={"session_key": SID}).status_code == 200
            assert (
                cl.post(
                    "/api/hooks/session-end", json={"session_key": SID, "transcript": "user: hi", "wait": True}
                ).status_code
                == 200
            )
        assert mode(home) == 0o700
        for name in ("memories.db", "memories.db-wal", "memories.db-shm", "token"):
            assert mode(home / name) == 0o600, name
        assert check_private(home) == [], d.log()
        assert "can be read or changed by other users" not in d.log()
    finally:
        d.kill()


def test_the_hook_command_with_the_daemon_down_writes_private_spool_and_log(tmp_path, umask_022) -> None:
    home = tmp_path / "hookhome"  # does not exist
    payload = {
        "session_id": SID,
        "transcript_path": "/nowhere.jsonl",
        "cwd": str(tmp_path),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "hello",
    }
    p = subprocess.run(
        [sys.executable, "-m", "memlane", "hook", "user-prompt-submit"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(home, MEMLANE_DAEMON_URL="http://127.0.0.1:9"),
    )  # nothing listens on port 9
    assert p.returncode == 0 and p.stdout == ""
    spooled = list((home / "spool").glob("*.json"))
    assert len(spooled) == 1
    assert (home / "logs" / "hooks.log").exists()
    assert mode(home) == 0o700
    assert check_private(home) == []


# -- a loose home: warned at start, reported and fixed by doctor --------------------------------


def _loosen(home: Path) -> None:
    os.chmod(home, 0o755)
    for name in ("memories.db", "memories.db-wal", "memories.db-shm"):
        if (home / name).exists():
            os.chmod(home / name, 0o644)
    (home / "logs").mkdir(exist_ok=True)
    os.chmod(home / "logs", 0o755)
    log = home / "logs" / "old.log"
    log.write_text("an older memlane's log\n")
    os.chmod(log, 0o644)


def test_doctor_reports_a_loose_home_and_fix_tightens_it(tmp_path, open_store) -> None:
    home = tmp_path / "home"
    c = open_store(home=home)
    c.memories.remember(RememberInput(content="a memory another user must not read"))
    _loosen(home)

    p = _doctor(home)
    assert p.returncode == 1, p.stdout + p.stderr
    for path in (home, home / "memories.db", home / "logs", home / "logs" / "old.log"):
        assert f"{path}: " in p.stdout, p.stdout
    assert "memlane doctor --fix" in p.stdout
    assert mode(home) == 0o755  # reporting changes nothing

    p = _doctor(home, "--fix")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"fixed: {home / 'memories.db'}" in p.stdout
    assert mode(home) == 0o700 and mode(home / "logs") == 0o700
    assert mode(home / "memories.db") == 0o600 and mode(home / "logs" / "old.log") == 0o600

    p = _doctor(home, "--json")
    assert p.returncode == 0
    assert json.loads(p.stdout) == {"home": str(home), "fixed": [], "problems": []}


def test_doctor_on_a_missing_home_exits_2(tmp_path) -> None:
    p = _doctor(tmp_path / "nope")
    assert p.returncode == 2 and "does not exist" in p.stderr


def test_the_daemon_warns_once_at_start_listing_the_loose_paths(tmp_path, open_store) -> None:
    home = tmp_path / "home"
    open_store(home=home).close()
    _loosen(home)
    d = Daemon(home, tmp_path / "daemon.log", provider="none")
    try:
        d.wait_ready()
        log = d.log()
    finally:
        d.kill()
    warnings = [line for line in log.splitlines() if "can be read or changed by other users" in line]
    assert len(warnings) == 1, log
    assert f"{home}: 0755" in warnings[0] and f"{home / 'memories.db'}: 0644" in warnings[0]
    assert "memlane doctor --fix" in warnings[0]
    assert mode(home / "memories.db") == 0o644  # the daemon warns; tightening is the user's call


# -- the building blocks ----------------------------------------------------------------------


def test_fix_keeps_owner_bits_and_skips_symlinks(tmp_path) -> None:
    home = private_dir(tmp_path / "home")
    script = home / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o755)
    sub = home / "sub"
    sub.mkdir()
    os.chmod(sub, 0o750)
    outside = tmp_path / "outside.txt"
    outside.write_text("not memlane's")
    os.chmod(outside, 0o644)
    (home / "link").symlink_to(outside)
    assert [p.path for p in check_private(home)] == [script, sub]
    assert fix_private(home) == [script, sub]
    assert mode(script) == 0o700 and mode(sub) == 0o700
    assert mode(outside) == 0o644  # a link's target outside the home is left alone
    assert check_private(home) == []


def test_private_files_and_rotated_logs_are_0600_under_a_loose_umask(tmp_path, umask_022) -> None:
    d = private_dir(tmp_path / "a" / "b")
    assert mode(tmp_path / "a") == 0o700 and mode(d) == 0o700
    with open_private(d / "x.log", "a") as f:
        f.write("x")
    assert mode(d / "x.log") == 0o600
    handler = PrivateRotatingFileHandler(str(d / "r.log"), maxBytes=200, backupCount=2, encoding="utf-8")
    logger = logging.getLogger("memlane.test_security_files")
    logger.addHandler(handler)
    try:
        for i in range(50):
            logger.warning("line %d %s", i, "x" * 40)
    finally:
        logger.removeHandler(handler)
        handler.close()
    logs = sorted(p.name for p in d.iterdir() if p.name.startswith("r.log"))
    assert logs == ["r.log", "r.log.1", "r.log.2"]
    assert {mode(d / n) for n in logs} == {0o600}


def test_warn_if_loose_logs_one_line_with_at_most_20_paths(tmp_path, caplog) -> None:
    home = private_dir(tmp_path / "home")
    for i in range(25):
        (home / f"f{i:02d}").write_text("x")
        os.chmod(home / f"f{i:02d}", 0o644)
    with caplog.at_level(logging.WARNING, logger="memlane.fileperms"):
        problems = warn_if_loose(home)
    assert len(problems) == 25
    (record,) = [r for r in caplog.records if "other users" in r.getMessage()]
    assert "and 5 more" in record.getMessage() and str(home / "f19") in record.getMessage()
    assert str(home / "f20") not in record.getMessage()
