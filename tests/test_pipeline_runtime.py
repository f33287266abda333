"""Pipeline runtime: PollingWorker backoff, JobWorker outcomes, the reaper, the registry on the
container, the enqueue hook on remember, and the status / job endpoints."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import api_client
from memlane.config import load_settings
from memlane.container import open_container
from memlane.pipeline.jobs import DERIVED_SOURCE_TYPE, EXTRACT, enqueue_extraction
from memlane.services.inputs import RememberInput
from memlane.storage import jobs as J
from memlane.storage.db import Database
from memlane.storage.migrations import migrate
from memlane.workers.runtime import JobWorker, PollingWorker, SkipJob, StaleLeaseReaper, WorkerRegistry

T0 = "2026-01-01T00:00:00.000Z"
WAIT_S = 30  # generous guard for thread tests; never a performance threshold


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> str:
        return self.t

    def advance(self, ms: float) -> None:
        self.t = J.add_ms(self.t, ms)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(tmp_path / "rt.db", read_pool_size=2)
    migrate(d)
    yield d
    d.close()


def job(db: Database, job_id: int) -> J.Job:
    return db.read(lambda c: J.get(c, job_id))


class Flaky(PollingWorker):
    def __init__(self, fails: int, **kw) -> None:
        super().__init__("flaky", **kw)
        self.fails = fails

    def tick(self) -> bool:
        if self.fails:
            self.fails -= 1
            raise RuntimeError("down")
        return True


def test_polling_worker_backs_off_on_consecutive_failures_then_recovers():
    w = Flaky(3, poll_ms=2_000, rng=random.Random(1))
    ref = random.Random(1)
    for n, base in enumerate((1_000, 2_000, 4_000), start=1):
        assert w.run_once() is False
        assert w.consecutive_failures == n and w.last_error == "RuntimeError: down"
        assert w.next_delay_ms == base + ref.uniform(0, 500)
    assert w.run_once() is True
    t = w.telemetry()
    assert t["consecutive_failures"] == 0 and t["failures"] == 3 and t["processed"] == 1 and t["ticks"] == 4
    assert t["next_delay_ms"] == 0.0 and t["name"] == "flaky" and t["running"] is False
    assert set(t) >= {"last_run_at", "last_error"}


def test_idle_tick_sleeps_poll_ms_read_at_each_tick_and_disabled_skips():
    poll = {"ms": 2_000}
    on = {"v": True}
    w = Flaky(0, poll_ms=lambda: poll["ms"], enabled=lambda: on["v"])
    w.tick = lambda: False  # type: ignore[method-assign]
    w.run_once()
    assert w.next_delay_ms == 2_000
    poll["ms"] = 150
    w.run_once()
    assert w.next_delay_ms == 150 and w.ticks == 2
    on["v"] = False
    w.run_once()
    assert w.ticks == 2


def test_job_worker_outcomes(db):
    clock = Clock()
    w = JobWorker(db, "x", now=clock, rng=random.Random(3))
    seen_threads = []

    def handler(j: J.Job) -> dict:
        seen_threads.append(threading.current_thread().name)
        db.write(lambda c: c.execute("SELECT 1"))  # allowed: no transaction is held
        if j.payload.get("skip"):
            raise SkipJob("nothing to extract")
        if j.payload.get("boom"):
            raise ValueError("bad reply")
        return {"facts": 2}

    assert w.run_once() is False  # no handler: nothing leased
    ok = db.write(lambda c: J.enqueue(c, EXTRACT, at=T0))
    w.register(EXTRACT, handler)
    assert w.job_types == [EXTRACT]
    assert w.run_once() is True
    assert job(db, ok).status == "completed" and job(db, ok).result == {"facts": 2}
    assert "memlane-writer" not in seen_threads

    sk = db.write(lambda c: J.enqueue(c, EXTRACT, at=T0, payload={"skip": True}))
    assert w.run_once() is True
    assert job(db, sk).status == "skipped" and job(db, sk).error == "nothing to extract"

    bad = db.write(lambda c: J.enqueue(c, EXTRACT, at=T0, payload={"boom": True}, max_attempts=2))
    ref = random.Random(3)
    assert w.run_once() is False
    j = job(db, bad)
    assert j.status == "pending" and j.error == "ValueError: bad reply" and j.attempts == 1
    assert j.run_after == J.add_ms(T0, 1_000 + ref.uniform(0, 500))  # backoff of the job's 1st attempt
    assert w.consecutive_failures == 1 and w.last_error == "ValueError: bad reply"
    assert w.run_once() is False  # not due yet
    clock.advance(2_000)
    assert w.run_once() is False
    assert job(db, bad).status == "dead" and job(db, bad).attempts == 2
    assert w.telemetry()["outcomes"] == {"completed": 1, "skipped": 1, "retried": 1, "dead": 1}


def test_reaper_resets_a_crashed_workers_lease(db):
    clock = Clock()
    jid = db.write(lambda c: J.enqueue(c, EXTRACT, at=T0))
    db.write(lambda c: J.lease(c, [EXTRACT], now=T0, lease_timeout_ms=10_000))
    reaper = StaleLeaseReaper(db, now=clock)
    reaper.run_once()
    assert job(db, jid).status == "leased" and reaper.next_delay_ms == 60_000
    clock.advance(10_001)
    reaper.run_once()
    assert job(db, jid).status == "pending" and reaper.telemetry()["reaped"] == 1


def test_threads_process_jobs_wake_and_stop(db):
    done = threading.Event()
    handled: list[int] = []

    def handler(j: J.Job) -> dict:
        handled.append(j.id)
        if len(handled) == 3:
            done.set()
        return {}

    reg = WorkerRegistry()
    w = reg.add(JobWorker(db, "extraction", poll_ms=600_000))  # idle sleep far longer than WAIT_S
    w.register(EXTRACT, handler)
    reg.start_all()
    try:
        assert w.running
        ids = [db.write(lambda c, i=i: enqueue_extraction(c, f"m{i}", at=T0)) for i in range(3)]
        w.wake()  # without it the worker would sleep 600 s
        assert done.wait(WAIT_S)
        assert handled == ids
    finally:
        assert reg.stop_all(timeout=WAIT_S) == []
    assert not w.running and reg.status()[0]["running"] is False
    with pytest.raises(ValueError):
        reg.add(JobWorker(db, "extraction"))


def _home(tmp_path: Path, **pipeline) -> dict:
    return {"home": tmp_path / "home", "embedding": {"provider": "none"}, "memory": {"pipeline_v2": pipeline}}


def test_container_enqueues_extraction_on_remember_and_never_for_derived_facts(tmp_path):
    c = open_container(load_settings(**_home(tmp_path, worker={"maxRetries": 5})))
    try:
        assert {"extraction", "lease-reaper"} <= {w["name"] for w in c.workers.status()}
        assert not c.workers.started and not c.workers.get("extraction").running
        mid = c.memories.remember(RememberInput(content="The deploy script lives in ops/deploy.sh")).id
        c.memories.remember(RememberInput(content="a derived fact", source_type=DERIVED_SOURCE_TYPE))
        c.memories.remember(RememberInput(content="The deploy script lives in ops/deploy.sh"))  # dedup
        jobs = c.db.read(lambda conn: J.list_jobs(conn))
        assert [(j.job_type, j.memory_id, j.max_attempts) for j in jobs] == [(EXTRACT, mid, 5)]
        c.settings.memory.pipeline_v2 = c.settings.memory.pipeline_v2.model_copy(update={"enabled": False})
        c.memories.remember(RememberInput(content="stored while the pipeline is off"))
        assert len(c.db.read(lambda conn: J.list_jobs(conn))) == 1
    finally:
        c.close()


@pytest.mark.parametrize(
    "concurrency, names",
    [(None, ["extraction", "extraction-2"]), (1, ["extraction"]), (3, ["extraction", "extraction-2", "extraction-3"])],
)
def test_worker_concurrency_setting_runs_that_many_extraction_workers(tmp_path, concurrency, names):
    worker = {} if concurrency is None else {"concurrency": concurrency}
    c = open_container(load_settings(**_home(tmp_path, worker=worker)))
    try:
        workers = [w for w in c.workers if w.name.startswith("extraction")]
        assert [w.name for w in workers] == names
        assert all(isinstance(w, JobWorker) and EXTRACT in w.job_types for w in workers)
        # every one leases from the same queue: two jobs, the second worker takes the second
        c.db.write(lambda conn: enqueue_extraction(conn, "m1", at=T0))
        c.db.write(lambda conn: enqueue_extraction(conn, "m2", at=T0))
        seen = []
        for w in workers[:2]:
            w.register(EXTRACT, lambda j, seen=seen: seen.append(j.memory_id) or {})
            assert w.run_once() is True
        if len(workers) > 1:
            assert sorted(seen) == ["m1", "m2"]
    finally:
        c.close()


def test_disabled_pipeline_processes_no_job(tmp_path):
    c = open_container(load_settings(**_home(tmp_path, enabled=False)))
    try:
        c.db.write(lambda conn: enqueue_extraction(conn, "m", at=T0))
        w = c.workers.get("extraction")
        w.register(EXTRACT, lambda j: {})
        assert w.run_once() is False and w.ticks == 0
    finally:
        c.close()


def test_close_stops_started_workers_first(tmp_path):
    c = open_container(load_settings(**_home(tmp_path)), start_workers=True)
    workers = list(c.workers)
    assert c.workers.started and all(w.running for w in workers)
    c.close()
    assert not any(w.running for w in workers)


def test_status_and_job_endpoints(tmp_path):
    c = open_container(load_settings(**_home(tmp_path, shadowMode=True)))
    try:
        mid = c.memories.remember(RememberInput(content="User prefers tabs over spaces")).id
        with api_client(c) as client:
            s = client.get("/api/pipeline/status").json()
            assert s["mode"] == "shadow" and s["mutationsAllowed"] is False
            assert s["jobs"][EXTRACT] == {"pending": 1}
            assert {"extraction", "lease-reaper"} <= {w["name"] for w in s["workers"]}
            jid = c.db.read(lambda conn: J.list_jobs(conn))[0].id
            r = client.get(f"/api/memory/jobs/{jid}")
            assert r.status_code == 200 and r.json()["memory_id"] == mid and r.json()["status"] == "pending"
            r = client.get("/api/memory/jobs/999999")
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
            assert client.get("/api/memory/jobs/abc").status_code == 422
    finally:
        c.close()


# ---------------------------------------------------------------- completion in the handler's transaction, lease-ahead


def _chained_handler(db: Database, seen: list[int], fail_on: int | None = None):
    """A handler that, like the extract handler, writes its effect, completes its job and leases
    the worker's next one in ONE transaction."""
    from memlane.workers.runtime import CompletedInTransaction, lease_ahead_hook

    def handle(j: J.Job):
        lease_next = lease_ahead_hook()

        def tx(c):
            c.execute("INSERT INTO kv_effects VALUES (?)", (j.id,))
            J.complete(c, j.id, now=T0, result={"ok": j.id})
            if lease_next is not None:
                lease_next(c)
            if fail_on == j.id:
                raise RuntimeError("failed after leasing ahead")

        db.write(tx)
        seen.append(j.id)
        return CompletedInTransaction({"ok": j.id})

    return handle


@pytest.fixture
def effects_db(db: Database) -> Database:
    db.write(lambda c: c.execute("CREATE TABLE kv_effects (job_id INTEGER)"))
    return db


def test_handler_completing_in_its_transaction_leases_ahead_one_commit_per_job(effects_db: Database):
    db = effects_db
    ids = [db.write(lambda c, i=i: J.enqueue(c, "t", dedup_key=f"k{i}", at=T0)) for i in range(5)]
    seen: list[int] = []
    w = JobWorker(db, "w", now=lambda: T0)
    w.register("t", _chained_handler(db, seen))
    commits0 = db.commits
    while w.run_once():
        pass
    assert seen == ids
    assert all(job(db, i).status == "completed" and job(db, i).result == {"ok": i} for i in ids)
    assert all(job(db, i).attempts == 1 for i in ids)
    # one lease write for the first job, then one transaction per job (effect + completion + next lease)
    assert db.commits - commits0 <= len(ids) + 2
    assert w.leased_ahead == len(ids) - 1
    assert db.read(lambda c: c.execute("SELECT count(*) FROM kv_effects").fetchone()[0]) == len(ids)


def test_a_job_leased_ahead_is_given_back_when_the_worker_stops(effects_db: Database):
    db = effects_db
    ids = [db.write(lambda c, i=i: J.enqueue(c, "t", dedup_key=f"k{i}", at=T0)) for i in range(3)]
    seen: list[int] = []
    w = JobWorker(db, "w", now=lambda: T0)
    w.register("t", _chained_handler(db, seen))
    assert w.run_once() is True  # job 1 done, job 2 leased ahead
    assert job(db, ids[1]).status == "leased"
    w.release_ahead()
    j2 = job(db, ids[1])
    assert j2.status == "pending" and j2.attempts == 0 and j2.leased_until is None
    # and a thread that stops gives its lease back too
    w.start()
    deadline = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if job(db, ids[2]).status == "completed":
            break
        deadline.wait(0.01)
    assert w.stop(WAIT_S)
    assert [job(db, i).status for i in ids] == ["completed"] * 3 and seen == ids


def test_a_handler_failing_after_leasing_ahead_leaves_no_orphan_lease(effects_db: Database):
    db = effects_db
    ids = [db.write(lambda c, i=i: J.enqueue(c, "t", dedup_key=f"k{i}", at=T0)) for i in range(2)]
    seen: list[int] = []
    w = JobWorker(db, "w", now=lambda: T0, rng=random.Random(0))
    w.register("t", _chained_handler(db, seen, fail_on=ids[0]))
    assert w.run_once() is False  # the transaction (effect, completion, next lease) rolled back
    first, second = job(db, ids[0]), job(db, ids[1])
    assert first.status == "pending" and "failed after leasing ahead" in first.error
    assert second.status == "pending" and second.attempts == 0  # its lease rolled back with the rest
    assert w._ahead is None
    assert db.read(lambda c: c.execute("SELECT count(*) FROM kv_effects").fetchone()[0]) == 0
