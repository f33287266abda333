"""The memory_jobs queue (storage/jobs.py): dedup, atomic leasing, retry with backoff, dead, reaper."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from memlane.pipeline.jobs import EXTRACT, enqueue_extraction
from memlane.storage import jobs as J
from memlane.storage.db import Database
from memlane.storage.migrations import migrate
from memlane.workers.runtime import backoff_ms

T0 = "2026-01-01T00:00:00.000Z"


def at(seconds: float) -> str:
    return J.add_ms(T0, seconds * 1000)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(tmp_path / "jobs.db", read_pool_size=2)
    migrate(d)
    yield d
    d.close()


def lease(db: Database, now: str, types=(EXTRACT,), timeout_ms: int = 300_000) -> J.Job | None:
    return db.write(lambda c: J.lease(c, list(types), now=now, lease_timeout_ms=timeout_ms))


def get(db: Database, job_id: int) -> J.Job:
    job = db.read(lambda c: J.get(c, job_id))
    assert job is not None
    return job


def test_add_ms_and_iso_format():
    assert at(1.5) == "2026-01-01T00:00:01.500Z"
    assert J.add_ms(T0, 300_000) == "2026-01-01T00:05:00.000Z"


def test_enqueue_extraction_dedups_while_pending_or_leased(db):
    a = db.write(lambda c: enqueue_extraction(c, "m1", at=T0))
    assert db.write(lambda c: enqueue_extraction(c, "m1", at=at(1))) == a
    b = db.write(lambda c: enqueue_extraction(c, "m2", at=at(1)))
    assert b != a
    job = lease(db, at(2))
    assert job is not None and job.id == a
    assert db.write(lambda c: enqueue_extraction(c, "m1", at=at(3))) == a  # leased: still the same
    db.write(lambda c: J.complete(c, a, now=at(4), result={"facts": 0}))
    c_id = db.write(lambda c: enqueue_extraction(c, "m1", at=at(5)))
    assert c_id not in (a, b)
    j = get(db, a)
    assert j.status == "completed" and j.result == {"facts": 0} and j.leased_until is None
    assert get(db, c_id).memory_id == "m1" and get(db, c_id).dedup_key == "m1"


def test_lease_takes_the_oldest_due_job_of_the_asked_types(db):
    db.write(lambda c: J.enqueue(c, "other", at=T0))
    late = db.write(lambda c: J.enqueue(c, EXTRACT, at=at(1), memory_id="late"))
    later_due = db.write(lambda c: J.enqueue(c, EXTRACT, at=at(0.5), memory_id="due-later", run_after=at(100)))
    first = db.write(lambda c: J.enqueue(c, EXTRACT, at=at(0.1), memory_id="first"))
    job = lease(db, at(10), timeout_ms=60_000)
    assert job is not None and job.id == first
    assert job.status == "leased" and job.attempts == 1
    assert job.leased_at == at(10) and job.leased_until == at(70)
    assert lease(db, at(10)).id == late
    assert lease(db, at(10)) is None  # later_due is not due, "other" not asked
    assert lease(db, at(100)).id == later_due
    assert lease(db, at(100), types=()) is None
    assert lease(db, at(100), types=("other",)).job_type == "other"


def test_fail_returns_to_pending_after_the_backoff_then_dead(db):
    jid = db.write(lambda c: J.enqueue(c, EXTRACT, at=T0, max_attempts=3))
    now = T0
    for attempt in (1, 2):
        job = lease(db, now)
        assert job is not None and job.attempts == attempt
        status = db.write(lambda c: J.fail(c, job, f"boom {attempt}", now=now, backoff_ms=2_000))
        assert status == "pending"
        j = get(db, jid)
        assert j.status == "pending" and j.run_after == J.add_ms(now, 2_000) and j.error == f"boom {attempt}"
        assert lease(db, J.add_ms(now, 1_999)) is None  # not before run_after
        now = J.add_ms(now, 2_000)
    job = lease(db, now)
    assert job.attempts == 3
    assert db.write(lambda c: J.fail(c, job, "boom 3", now=now, backoff_ms=2_000)) == "dead"
    j = get(db, jid)
    assert j.status == "dead" and j.run_after is None and j.error == "boom 3"
    assert lease(db, at(3600)) is None


def test_max_attempts_one_dies_at_the_first_failure(db):
    db.write(lambda c: enqueue_extraction(c, "m", at=T0, max_attempts=1))
    job = lease(db, T0)
    assert db.write(lambda c: J.fail(c, job, "x", now=T0, backoff_ms=0)) == "dead"


def test_reaper_resets_only_expired_leases(db):
    a = db.write(lambda c: J.enqueue(c, EXTRACT, at=T0))
    b = db.write(lambda c: J.enqueue(c, EXTRACT, at=at(1)))
    lease(db, T0, timeout_ms=10_000)  # until T0+10 s
    lease(db, at(5), timeout_ms=10_000)  # until T0+15 s
    assert db.write(lambda c: J.reap_stale(c, at(10))) == 0
    assert db.write(lambda c: J.reap_stale(c, at(12))) == 1
    ja, jb = get(db, a), get(db, b)
    assert ja.status == "pending" and ja.attempts == 1 and ja.leased_until is None and ja.error == "lease expired"
    assert jb.status == "leased"
    again = lease(db, at(12))
    assert again.id == a and again.attempts == 2


def test_counts_and_list(db):
    ids = [db.write(lambda c, i=i: enqueue_extraction(c, f"m{i}", at=at(i))) for i in range(4)]
    db.write(lambda c: J.enqueue(c, "document_ingest", at=T0))
    lease(db, at(10))
    db.write(lambda c: J.skip(c, ids[1], "nothing to extract", now=at(10)))
    counts = db.read(J.counts_by_status)
    assert counts == {EXTRACT: {"leased": 1, "skipped": 1, "pending": 2}, "document_ingest": {"pending": 1}}
    assert db.read(lambda c: J.counts_by_status(c, ["document_ingest"])) == {"document_ingest": {"pending": 1}}
    pending = db.read(lambda c: J.list_jobs(c, job_type=EXTRACT, status="pending", newest_first=False))
    assert [j.id for j in pending] == [ids[2], ids[3]]
    assert [j.id for j in db.read(lambda c: J.list_jobs(c, limit=2))] == [ids[3] + 1, ids[3]]
    assert db.read(lambda c: J.list_jobs(c, memory_id="m1"))[0].error == "nothing to extract"
    assert db.read(lambda c: J.latest_for_memory(c, "m0", EXTRACT)).status == "leased"
    assert db.read(lambda c: J.latest_for_memory(c, "nope", EXTRACT)) is None


def test_two_databases_on_one_file_never_lease_the_same_job(tmp_path):
    path = tmp_path / "shared.db"
    a, b = Database(path, read_pool_size=1), Database(path, read_pool_size=1)
    try:
        migrate(a)
        n = 200
        a.write(lambda c: [enqueue_extraction(c, f"m{i}", at=at(i)) for i in range(n)])
        got: dict[str, list[int]] = {"a": [], "b": []}
        start = threading.Barrier(2)

        def drain(name: str, db: Database) -> None:
            start.wait()
            while (job := lease(db, at(n + 1))) is not None:
                got[name].append(job.id)

        threads = [threading.Thread(target=drain, args=(k, d)) for k, d in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        every = got["a"] + got["b"]
        assert len(every) == n and len(set(every)) == n
        assert Counter(j.attempts for j in a.read(lambda c: J.list_jobs(c, limit=n))) == {1: n}
    finally:
        a.close()
        b.close()


def test_backoff_sequence_doubles_from_1s_to_a_30s_cap_with_500ms_jitter():
    assert [backoff_ms(n, jitter_ms=0) for n in range(0, 8)] == [0, 1000, 2000, 4000, 8000, 16000, 30000, 30000]
    assert backoff_ms(10_000, jitter_ms=0) == 30_000
    rng, ref = random.Random(7), random.Random(7)
    for n in range(1, 9):
        d = backoff_ms(n, rng=rng)
        base = min(1000 * 2 ** (n - 1), 30_000)
        assert base <= d <= base + 500
        assert d == base + ref.uniform(0, 500)
