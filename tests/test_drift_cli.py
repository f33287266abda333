"""The drift CLI against a real daemon (subprocesses): ``memlane drift list``, ``memlane drift
resolve`` and ``memlane stale scan``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cli(d, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMLANE_HOME": str(d.home), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "memlane", *args, "--url", d.url], capture_output=True, text=True, env=env, timeout=120
    )


def test_list_resolve_and_scan(start_daemon, tmp_path: Path):
    d = start_daemon(provider="none")
    root = tmp_path / "proj"
    root.mkdir()
    (root / "notes.md").write_text("x\n")
    with d.client() as http:
        a = http.post("/api/memory/remember", json={"content": "Ticket ENG-7 is open."}).json()["id"]
        b = http.post(
            "/api/memory/remember", json={"content": "Decisions are in notes.md.", "project": str(root)}
        ).json()["id"]
        eid = http.post(f"/api/memory/{a}/signal", json={"source": "linear", "evidence": {"state": "done"}}).json()[
            "error_id"
        ]
    r = cli(d, "drift", "list")
    assert r.returncode == 0, r.stderr
    assert "memory_external_signal" in r.stdout and "Ticket ENG-7 is open." in r.stdout
    (root / "notes.md").unlink()
    r = cli(d, "stale", "scan", "--project", str(root))
    assert r.returncode == 0, r.stderr
    assert "1 stale" in r.stdout and f"{b[:8]}  notes.md is missing" in r.stdout
    r = cli(d, "drift", "list", "--type", "memory_stale_file")
    assert "notes.md" in r.stdout and "ENG-7" not in r.stdout
    assert cli(d, "drift", "resolve", str(eid)).returncode == 0
    r = cli(d, "drift", "resolve", str(eid))
    assert r.returncode == 1 and "no open prediction error" in r.stderr
    r = cli(d, "drift", "list", "--type", "nope")
    assert r.returncode == 1 and "error_type" in r.stderr
