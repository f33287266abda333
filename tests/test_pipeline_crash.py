"""Crash safety of the extract job (memory-pipeline-v2.md "Overview": raw-first safety;
"Worker Model": stale lease reaper): a daemon killed with SIGKILL during extraction keeps the raw
memory, and after the lease timeout the job is leased again and completes exactly once.

The LLM is a loopback Ollama server in this process; the daemon is a real ``memlane serve``
child process. Waits are bounded polls on observable state, never timing assertions.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from benchmarks.scripted_llm import Reply, ScriptedLlmServer
from conftest import Daemon
from memlane.auth import auth_headers
from memlane.pipeline.prompts import EXTRACTION_MARKER
from memlane.services.inputs import RememberInput
from memlane.storage import jobs as jobs_sql
from memlane.storage.jobs import add_ms
from memlane.workers.runtime import StaleLeaseReaper
from pipeline_helpers import StageScript, audit, derived, drain, facts, job_of, llm_settings

SOURCE = "We moved the billing service to PostgreSQL 16; Alice owns the migration scripts."
REPLY = json.dumps(
    facts(
        ("The billing service uses PostgreSQL 16.", "fact", 0.9),
        ("Alice owns the billing migration scripts.", "fact", 0.9),
    )
)
LEASE_MS = 10_000  # the smallest worker.leaseTimeoutMs the configuration allows
WAIT_S = 120


class BlockFirstExtraction:
    """Script: the first extraction call blocks (until released) after signalling ``started``;
    every later call answers at once."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._first = True
        self.inner = StageScript()
        self.inner.defaults["extraction"] = REPLY

    def __call__(self, prompt: str) -> Reply | str:
        first = False
        if prompt.startswith(EXTRACTION_MARKER):
            with self._lock:
                first, self._first = self._first, False
        if first:
            self.started.set()
            self.release.wait(WAIT_S)
        return self.inner(prompt)


def utc_now() -> str:
    """Now in the store's timestamp format (sortable as text)."""
    return jobs_sql.iso(datetime.now(UTC))


def wait_for(predicate, what: str, timeout_s: float = WAIT_S, log: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}\n{log}")


def serve(home: Path, log: Path, llm_url: str) -> Daemon:
    """A ready ``memlane serve`` with the pipeline pointed at the loopback LLM (short leases)."""
    d = Daemon(
        home,
        log,
        provider="none",
        extra_env={
            "MEMLANE_LLM__PROVIDER": "ollama",
            "MEMLANE_LLM__BASE_URL": llm_url,
            "MEMLANE_LLM__MODEL": "scripted",
            "MEMLANE_MEMORY__PIPELINE_V2__WORKER__LEASE_TIMEOUT_MS": str(LEASE_MS),
            "MEMLANE_MEMORY__PIPELINE_V2__WORKER__POLL_MS": "100",
        },
    )
    d.wait_ready()
    return d


@pytest.fixture
def script() -> BlockFirstExtraction:
    return BlockFirstExtraction()


@pytest.fixture
def llm(script: BlockFirstExtraction) -> Iterator[ScriptedLlmServer]:
    with ScriptedLlmServer(script) as s:
        yield s
        script.release.set()


def read_db(home: Path, sql: str, args: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{home / 'memories.db'}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def test_kill_9_during_extraction_then_lease_expiry_completes_exactly_once(tmp_path, llm, script) -> None:
    home = tmp_path / "home"
    home.mkdir()
    first = serve(home, tmp_path / "serve-1.log", llm.url)
    try:
        r = httpx.post(
            first.url + "/api/memory/remember", json={"content": SOURCE}, timeout=30, headers=auth_headers(home)
        )
        assert r.status_code == 200, r.text
        mid = r.json()["id"]
        wait_for(script.started.is_set, "the extraction call to reach the LLM", log=first.log())
    finally:
        first.kill()  # SIGKILL while the worker waits on the LLM
    # The raw memory is durable; the job is still leased by the dead worker.
    assert read_db(home, "SELECT content, is_deleted FROM memories WHERE id = ?", (mid,)) == [(SOURCE, 0)]
    [(job_id, status, attempts, leased_until)] = read_db(
        home, "SELECT id, status, attempts, leased_until FROM memory_jobs WHERE memory_id = ?", (mid,)
    )
    assert (status, attempts) == ("leased", 1)
    # Restart once the lease has expired: the reaper's first tick at start-up resets it.
    wait_for(lambda: utc_now() > leased_until, "the lease to expire", timeout_s=LEASE_MS / 1000 + 30)
    second = serve(home, tmp_path / "serve-2.log", llm.url)
    try:

        def done() -> bool:
            j = httpx.get(f"{second.url}/api/memory/jobs/{job_id}", timeout=10, headers=auth_headers(home)).json()
            return j.get("status") == "completed"

        wait_for(done, "the job to complete after the restart", log=second.log())
        job = httpx.get(f"{second.url}/api/memory/jobs/{job_id}", timeout=10, headers=auth_headers(home)).json()
        m = httpx.get(f"{second.url}/api/memory/{mid}", timeout=10, headers=auth_headers(home)).json()
    finally:
        second.kill()
    assert job["attempts"] == 2 and job["result"]["outcomes"]["created"] == 2
    assert m["content"] == SOURCE
    assert read_db(home, "SELECT extraction_status FROM memories WHERE id = ?", (mid,)) == [("completed",)]
    assert read_db(home, "SELECT count(*) FROM memories WHERE source_type = 'pipeline_v2'") == [(2,)]
    assert read_db(
        home, "SELECT count(*) FROM memory_history WHERE memory_id = ? AND event = 'extraction'", (mid,)
    ) == [(1,)]
    assert read_db(home, "SELECT count(*) FROM memory_jobs WHERE memory_id = ?", (mid,)) == [(1,)]
    assert llm.count(EXTRACTION_MARKER) == 2  # the killed attempt and the one that completed


def test_reaper_with_a_controlled_clock_releases_a_dead_workers_lease(open_store, tmp_path) -> None:
    script = StageScript()
    script.defaults["extraction"] = REPLY
    with ScriptedLlmServer(script) as server:
        c = open_store(llm=llm_settings(server))
        mid = c.memories.remember(RememberInput(content=SOURCE)).id
        now = utc_now()
        leased = c.db.write(lambda conn: jobs_sql.lease(conn, ["extract"], now=now, lease_timeout_ms=LEASE_MS))
        assert leased is not None and leased.memory_id == mid  # a worker that then died
        assert drain(c) == 0  # nothing to lease while the lease holds
        reaper = StaleLeaseReaper(c.db, now=lambda: add_ms(now, LEASE_MS - 1))
        reaper.run_once()
        assert reaper.reaped == 0 and job_of(c, mid).status == "leased"
        reaper = StaleLeaseReaper(c.db, now=lambda: add_ms(now, LEASE_MS + 1))
        reaper.run_once()
        assert reaper.reaped == 1 and job_of(c, mid).status == "pending"
        assert drain(c) == 1 and drain(c) == 0
        job = job_of(c, mid)
        assert (job.status, job.attempts) == ("completed", 2)
        assert len(derived(c)) == 2 and len(audit(c, mid, "extraction")) == 1
        assert server.count(EXTRACTION_MARKER) == 1
