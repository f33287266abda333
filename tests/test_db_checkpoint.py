"""Background WAL checkpoints (storage.db.Database): the writer never checkpoints inside a
COMMIT (``wal_autocheckpoint = 0``); the checkpointer thread copies committed frames back into
the database file after writes, and stops with the database."""

from __future__ import annotations

import sqlite3
import time

from memlane.storage.db import Database


def _wait(pred, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_writer_does_not_checkpoint_in_commit(tmp_path):
    db = Database(tmp_path / "c.db", read_pool_size=1)
    try:
        assert db._writer_conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    finally:
        db.close()


def test_checkpointer_backfills_committed_frames(tmp_path):
    path = tmp_path / "c.db"
    db = Database(path, read_pool_size=1)
    try:
        db.write(lambda c: c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)"))
        for i in range(20):  # ~20 x 16 KB of rows: well over a few WAL pages
            db.write(lambda c, i=i: c.executemany("INSERT INTO t (v) VALUES (?)", [("x" * 400,)] * 40))

        def in_file() -> int:  # rows in the database file itself (immutable: the WAL is ignored)
            ro = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
            try:
                return ro.execute("SELECT count(*) FROM t").fetchone()[0]
            except sqlite3.Error:  # the table itself is not in the file yet
                return -1
            finally:
                ro.close()

        assert _wait(lambda: in_file() == 800)  # no later write, so only the checkpointer can do it
        assert db.wal_checkpoints >= 1 and db.last_wal_checkpoint is not None
        assert db.last_wal_checkpoint[2] == db.last_wal_checkpoint[1]  # every frame copied back
    finally:
        db.close()
    assert not db._wal_checkpointer.is_alive()


def test_checkpoint_after_close_reports_failure(tmp_path):
    db = Database(tmp_path / "c.db", read_pool_size=1)
    db.write(lambda c: c.execute("CREATE TABLE t (k INTEGER)"))
    db.close()
    assert db.wal_checkpoint() is None  # its connection is closed: logged, not raised
