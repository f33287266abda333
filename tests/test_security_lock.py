"""Issue 37 finding 9: nothing locked the data directory, so two daemons (or ``import --data-dir``
beside a running daemon) ran on one home and each one's recall missed the other's writes.

Each test is the attack, against real processes: a second ``memlane serve`` on a served home,
a direct import beside it, a bench filling it; and the lock's own promises (a dead holder does
not block, the file is private, a planted symlink is refused).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import free_port
from memlane.homelock import HomeLocked, LockHolder, acquire, current_holder, lock_path

CLI_TIMEOUT_S = 120


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(
        MEMLANE_HOME=str(home),
        MEMLANE_CONFIG=str(home / "no-such-config.yaml"),
        MEMLANE_EMBEDDING__PROVIDER="none",
        MEMLANE_LOG_LEVEL="warning",
        **extra,
    )
    return env


def _memlane(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memlane", *args],
        env=_env(home, **extra),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=CLI_TIMEOUT_S,
    )


def _live_count(d) -> int:  # noqa: ANN001 - conftest.Daemon
    with d.client() as http:
        r = http.get("/api/memories", params={"limit": 1})
        assert r.status_code == 200, r.text
        return r.json()["stats"]["live"]


# ------------------------------------------------------------------ the attacks, real processes


def test_second_daemon_on_the_same_home_exits_1_naming_the_first(start_daemon, tmp_path) -> None:
    first = start_daemon(provider="none")
    with first.client() as http:
        assert (
            http.post("/api/memory/remember", json={"content": "written through the first daemon"}).status_code == 200
        )
    second = _memlane(first.home, "serve", "--host", "127.0.0.1", "--port", str(free_port()))
    assert second.returncode == 1, second.stderr
    assert f"memlane serve at {first.url} (pid {first.proc.pid}, started " in second.stderr
    assert f"holds {lock_path(first.home)}" in second.stderr
    assert "stop it first" in second.stderr
    # the first daemon was not disturbed and still holds the home
    assert first.proc.poll() is None
    assert _live_count(first) == 1
    holder = current_holder(first.home)
    assert holder is not None and holder.pid == first.proc.pid and holder.command == "memlane serve"


def test_import_data_dir_beside_a_running_daemon_is_refused(start_daemon, tmp_path) -> None:
    d = start_daemon(provider="none")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"content": f"imported memory {i}"}) + "\n" for i in range(5)))
    out = _memlane(d.home, "import", str(src), "--data-dir", str(d.home))
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"(pid {d.proc.pid}, started " in out.stderr
    assert "stop it or use --url to import through it" in out.stderr
    assert _live_count(d) == 0  # nothing was written behind the daemon's back
    # the way the message points to works: through the daemon, which then sees every line
    via = _memlane(d.home, "import", str(src), "--url", d.url)
    assert via.returncode == 0, via.stdout + via.stderr
    assert "imported 5 new" in via.stdout
    assert _live_count(d) == 5


def test_a_dead_holder_does_not_block(start_daemon, tmp_path) -> None:
    """kill -9 leaves the lock file with the dead daemon's details; the kernel released the lock."""
    d = start_daemon(provider="none")
    dead_pid = d.proc.pid
    d.kill(signal.SIGKILL)
    stale = json.loads(lock_path(d.home).read_text())
    assert stale["pid"] == dead_pid  # the message of a process that is gone
    assert current_holder(d.home) is None
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"content": "after the crash"}) + "\n")
    out = _memlane(d.home, "import", str(src), "--data-dir", str(d.home))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "imported 1 new" in out.stdout
    again = start_daemon(d.home, provider="none")  # and a new daemon starts on it
    assert _live_count(again) == 1
    assert current_holder(d.home).pid == again.proc.pid


def test_bench_filling_a_served_store_is_refused(start_daemon, tmp_path) -> None:
    d = start_daemon(provider="none")
    data = tmp_path / "unused.json"
    data.write_text("[]")  # refused before the data is read
    out = _memlane(
        d.home,
        "bench",
        "sessions",
        "--store",
        str(d.home),
        "--data",
        str(data),
        "--memories",
        "10",
        "--no-predictor",
        "--out",
        str(tmp_path / "report.json"),
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"memlane serve at {d.url} (pid {d.proc.pid}, started " in out.stderr
    assert "give the bench another --store" in out.stderr
    assert _live_count(d) == 0


# ------------------------------------------------------------------ the lock itself


def test_lock_file_is_private_holds_the_holder_and_is_emptied_on_release(tmp_path) -> None:
    home = tmp_path / "home"
    with acquire(home, "memlane test", hint="h", url="http://127.0.0.1:1") as lock:
        assert stat.S_IMODE(os.stat(lock_path(home)).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(home).st_mode) == 0o700  # a home the lock creates is private too
        data = json.loads(lock_path(home).read_text())
        assert data["pid"] == os.getpid() and data["command"] == "memlane test"
        assert data["url"] == "http://127.0.0.1:1" and data["started_at"].endswith("Z")
        assert lock.held
    assert not lock.held
    assert lock_path(home).read_text() == ""
    assert current_holder(home) is None
    lock.release()  # twice is harmless


def test_second_taker_in_the_same_process_is_refused_then_succeeds_after_release(tmp_path) -> None:
    home = tmp_path / "home"
    first = acquire(home, "memlane serve", hint="h")
    with pytest.raises(HomeLocked) as exc:
        acquire(home, "memlane import --data-dir", hint="stop it or use --url to import through it")
    assert exc.value.status == 409 and exc.value.code == "home_locked"
    assert exc.value.holder == first.holder
    assert str(exc.value).startswith(f"memlane serve (pid {os.getpid()}, started ")
    assert str(exc.value).endswith("; stop it or use --url to import through it")
    assert exc.value.details["holder"]["pid"] == os.getpid()
    first.release()
    acquire(home, "memlane import --data-dir", hint="h").release()


def test_loose_mode_is_tightened_and_a_symlink_is_refused(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    lock_path(home).write_text("")
    os.chmod(lock_path(home), 0o644)
    acquire(home, "t", hint="h").release()
    assert stat.S_IMODE(os.stat(lock_path(home)).st_mode) == 0o600
    other = tmp_path / "victim"
    other.write_text("keep me")
    lock_path(home).unlink()
    lock_path(home).symlink_to(other)
    with pytest.raises(OSError):
        acquire(home, "t", hint="h")
    assert other.read_text() == "keep me"


def test_holder_without_details_yet_is_still_reported(tmp_path) -> None:
    """A holder that has locked but not written yet (or wrote garbage): still refused, generic message."""
    import fcntl

    home = tmp_path / "home"
    home.mkdir()
    fd = os.open(lock_path(home), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"not json")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(HomeLocked, match=r"^another memlane process holds .*daemon\.lock; h$"):
            acquire(home, "t", hint="h")
        assert current_holder(home) == LockHolder(0, "unknown", "")
    finally:
        os.close(fd)
    assert current_holder(home) is None
