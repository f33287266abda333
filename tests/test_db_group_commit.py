"""Group commit in the single writer (storage.db.Database): queued write jobs share one
transaction, each in its own SAVEPOINT; a failing job loses only its own changes; a lost
transaction fails every job of its group; results arrive only after the COMMIT."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from memlane.storage.db import Database


@pytest.fixture()
def db(tmp_path):
    d = Database(tmp_path / "g.db", read_pool_size=1)
    d.write(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)"))
    yield d
    d.close()


def _hold_writer(db: Database) -> tuple[threading.Event, object]:
    """Queue a job that blocks the writer until the returned event is set."""
    release = threading.Event()
    fut = db.submit(lambda c: release.wait(10))
    return release, fut


def _rows(db: Database) -> dict[str, int]:
    return dict(db.read(lambda c: c.execute("SELECT k, v FROM t").fetchall()))


def test_queued_jobs_share_one_commit(db):
    commits0 = db.commits
    release, first = _hold_writer(db)
    futs = [
        db.submit(lambda c, i=i: c.execute("INSERT INTO t VALUES (?, ?)", (f"k{i}", i)).rowcount) for i in range(10)
    ]
    release.set()
    assert [f.result(10) for f in futs] == [1] * 10
    first.result(10)
    assert _rows(db) == {f"k{i}": i for i in range(10)}
    # the holder ran alone; the ten queued behind it went in one or two more transactions, not ten
    assert db.commits - commits0 <= 3


def test_failing_job_rolls_back_only_itself(db):
    release, _ = _hold_writer(db)

    def bad(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t VALUES ('bad', 1)")
        raise ValueError("boom")

    ok1 = db.submit(lambda c: c.execute("INSERT INTO t VALUES ('a', 1)"))
    failing = db.submit(bad)
    ok2 = db.submit(lambda c: c.execute("INSERT INTO t VALUES ('b', 2)"))
    dup = db.submit(lambda c: c.execute("INSERT INTO t VALUES ('a', 9)"))  # IntegrityError
    release.set()
    ok1.result(10)
    ok2.result(10)
    with pytest.raises(ValueError, match="boom"):
        failing.result(10)
    with pytest.raises(sqlite3.IntegrityError):
        dup.result(10)
    assert _rows(db) == {"a": 1, "b": 2}


def test_write_reraises_and_later_writes_work(db):
    with pytest.raises(ValueError):
        db.write(lambda c: (c.execute("INSERT INTO t VALUES ('x', 1)"), (_ for _ in ()).throw(ValueError("no"))))
    db.write(lambda c: c.execute("INSERT INTO t VALUES ('y', 2)"))
    assert _rows(db) == {"y": 2}


def test_transaction_lost_inside_a_job_fails_the_whole_group(db):
    release, _ = _hold_writer(db)
    before = db.submit(lambda c: c.execute("INSERT INTO t VALUES ('before', 1)"))
    # ROLLBACK ends the group's transaction from inside a job, as SQLite does on SQLITE_FULL/IOERR
    killer = db.submit(
        lambda c: (
            c.execute("INSERT INTO t VALUES ('killer', 1)"),
            c.execute("ROLLBACK"),
            (_ for _ in ()).throw(sqlite3.OperationalError("database or disk is full")),
        )
    )
    after = db.submit(lambda c: c.execute("INSERT INTO t VALUES ('after', 1)"))
    release.set()
    for f in (before, killer, after):
        with pytest.raises(sqlite3.Error):
            f.result(10)
    assert _rows(db) == {}  # nothing acknowledged, nothing written
    db.write(lambda c: c.execute("INSERT INTO t VALUES ('next', 1)"))  # the writer carries on
    assert _rows(db) == {"next": 1}


def test_result_only_after_commit(db):
    """A reader never sees a job's rows missing once its future has resolved."""
    seen = []
    release, _ = _hold_writer(db)
    futs = [db.submit(lambda c, i=i: c.execute("INSERT INTO t VALUES (?, ?)", (f"r{i}", i))) for i in range(20)]
    for i, f in enumerate(futs):
        f.add_done_callback(lambda _f, i=i: seen.append(f"r{i}" in _rows(db)))
    release.set()
    for f in futs:
        f.result(10)
    assert seen and all(seen)


def test_close_finishes_queued_group(tmp_path):
    d = Database(tmp_path / "c.db", read_pool_size=1)
    d.write(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY)"))
    release, _ = _hold_writer(d)
    futs = [d.submit(lambda c, i=i: c.execute("INSERT INTO t VALUES (?)", (str(i),))) for i in range(5)]
    threading.Timer(0.05, release.set).start()
    d.close()
    assert all(f.done() and f.exception() is None for f in futs)
    d2 = Database(tmp_path / "c.db", read_pool_size=1)
    assert d2.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 5
    d2.close()


def _sync_level(c: sqlite3.Connection) -> int:
    """The writer's ``PRAGMA synchronous`` inside the job (1 = NORMAL, 2 = FULL)."""
    return c.execute("PRAGMA synchronous").fetchone()[0]


def test_non_durable_group_commits_without_fsync_level(db):
    assert db.write(_sync_level) == 2  # FULL by default
    assert db.write(_sync_level, durable=False) == 1  # NORMAL: no WAL fsync for derived records
    assert db.write(_sync_level) == 2  # and back to FULL for the next durable write


def test_group_with_any_durable_job_commits_durably(db):
    release, _ = _hold_writer(db)
    lazy = db.submit(_sync_level, durable=False)
    strict = db.submit(_sync_level)
    release.set()
    # one group: the durable job decides the level for both
    assert (lazy.result(10), strict.result(10)) == (2, 2)


def test_configured_normal_stays_normal(tmp_path):
    d = Database(tmp_path / "n.db", read_pool_size=1, synchronous="NORMAL")
    try:
        assert d.write(_sync_level) == 1
        assert d.write(_sync_level, durable=False) == 1
    finally:
        d.close()


def test_non_durable_write_survives_reopen(tmp_path):
    d = Database(tmp_path / "r.db", read_pool_size=1)
    d.write(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY)"))
    d.write(lambda c: c.execute("INSERT INTO t VALUES ('x')"), durable=False)
    d.close()
    d2 = Database(tmp_path / "r.db", read_pool_size=1)
    try:
        assert d2.read(lambda c: c.execute("SELECT k FROM t").fetchall())[0][0] == "x"
    finally:
        d2.close()


def test_non_durable_write_survives_sigkill(tmp_path):
    """The claim of ``durable=False``: an acknowledged commit survives a process kill."""
    import os
    import signal
    import subprocess
    import sys

    path = tmp_path / "k.db"
    script = (
        "import sys, time\n"
        "from memlane.storage.db import Database\n"
        f"d = Database({str(path)!r}, read_pool_size=1)\n"
        "d.write(lambda c: c.execute('CREATE TABLE t (k TEXT PRIMARY KEY)'))\n"
        "d.write(lambda c: c.execute(\"INSERT INTO t VALUES ('acked')\"), durable=False)\n"
        "print('acked', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "acked"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    d = Database(path, read_pool_size=1)
    try:
        assert [r[0] for r in d.read(lambda c: c.execute("SELECT k FROM t").fetchall())] == ["acked"]
    finally:
        d.close()
