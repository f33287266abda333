"""SQLite connections: one writer thread fed by one queue, and a pool of readers (WAL).

The pattern of datasette: every write job runs on the single write connection under
``BEGIN IMMEDIATE``, its result handed back through a future; reads borrow a connection
from a fixed pool. Jobs that queue up while the writer is busy share one transaction, each
in its own SAVEPOINT, and one COMMIT (group commit: one fsync for many writers). PRAGMAs:
``journal_mode=WAL``, ``busy_timeout``, ``foreign_keys=ON``, ``synchronous`` configurable (FULL by default: an acknowledged write survives power loss,
not only a process kill).

A write job may be submitted with ``durable=False`` (derived records such as a session-start's
candidate log): a group of only such jobs commits with ``synchronous=NORMAL``, i.e. without the
WAL fsync. Such a commit survives a process kill (the WAL is written before COMMIT returns)
but may roll back on power loss or an OS crash until the next durable commit or checkpoint
fsyncs the WAL (SQLite "WAL mode": "a transaction committed in WAL mode with
synchronous=NORMAL might roll back following a power loss or system crash"). A group with
any durable job commits with the configured level.

WAL checkpoints run on their own thread and connection, never inside a write. SQLite's default
(``wal_autocheckpoint`` = 1000 pages) makes the COMMIT that crosses 1,000 WAL pages copy them
all back into the database file and fsync it before it returns: one in every few
session-start writes would pay for it (each start's candidate log dirties many random leaves
of ``idx_session_memories_memory``), and that set the write's tail latency
(docs/architecture.md, "Storage", has the measurement). The writer connection sets
``wal_autocheckpoint = 0``; after each COMMIT
it wakes the checkpointer, which runs ``PRAGMA wal_checkpoint(PASSIVE)`` at most once per
:data:`WAL_CHECKPOINT_INTERVAL_S` (SQLite "Checkpointing": a PASSIVE checkpoint never blocks the
writer or readers and never invokes the busy handler). Its fsyncs are those SQLite's own
checkpoint would do, so durability is unchanged.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from memlane.errors import StorageError
from memlane.fileperms import create_private_file, private_dir

T = TypeVar("T")
log = logging.getLogger(__name__)

_STOP = object()

#: Most queued write jobs that share one transaction (group commit).
MAX_GROUP_COMMIT = 64

#: Least time between two background WAL checkpoints, s (module docstring). At most this much
#: committed work waits in the WAL before it is copied back into the database file.
WAL_CHECKPOINT_INTERVAL_S = 1.0


def connect(
    path: Path | str, *, busy_timeout_ms: int = 5000, read_only: bool = False, synchronous: str = "FULL"
) -> sqlite3.Connection:
    """Open one connection with memlane's PRAGMAs.

    Args:
        path: the database file (created unless ``read_only``).
        busy_timeout_ms: how long a blocked statement waits for a lock, ms.
        read_only: open with ``mode=ro`` and ``query_only``.
        synchronous: ``FULL`` or ``NORMAL``.

    Raises:
        StorageError: the file cannot be opened.
    """
    try:
        if read_only:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None)
        else:
            conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        if not read_only:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'NORMAL' if synchronous.upper() == 'NORMAL' else 'FULL'}")
        else:
            conn.execute("PRAGMA query_only = ON")
        return conn
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open database {path}: {exc}") from exc


def open_readonly(path: str | Path) -> sqlite3.Connection:
    """A read-only connection of the predictor sidecar and offline readers: URI ``mode=ro`` plus
    ``PRAGMA query_only``, ``busy_timeout`` 5 s, plain tuple rows, usable from any thread.

    Raises:
        sqlite3.Error: the file cannot be opened.
    """
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


@contextmanager
def savepoint(conn: sqlite3.Connection, name: str) -> Iterator[None]:
    """Run the block in ``SAVEPOINT name`` inside the caller's transaction: released when the block
    ends, rolled back to (then released) when it raises, the exception propagating. The caller
    decides whether a failure is fatal; the enclosing transaction stays usable either way.

    Args:
        conn: a connection inside a write transaction (a write job's).
        name: an SQL identifier (a constant of the caller, never user input).
    Raises:
        sqlite3.Error: the savepoint statements failed; whatever the block raised.
    """
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


class Database:
    """The single writer and the reader pool over one SQLite file.

    Args:
        path: database file; its directory is created (0700) and a new file is created 0600.
        read_pool_size: number of reader connections.
        busy_timeout_ms: SQLite busy_timeout, ms.
        synchronous: ``FULL`` (default) or ``NORMAL``.

    ``write(fn)`` runs ``fn(conn)`` on the writer thread inside ``BEGIN IMMEDIATE`` and commits
    (rolls back if ``fn`` raises, re-raising it in the caller). Jobs queued while the writer is
    busy share one transaction, each in its own SAVEPOINT (group commit, :meth:`_run_group`). ``read(fn)`` runs ``fn(conn)``
    on a pooled reader in the calling thread.
    """

    def __init__(
        self, path: Path | str, *, read_pool_size: int = 4, busy_timeout_ms: int = 5000, synchronous: str = "FULL"
    ) -> None:
        self.path = Path(path)
        # Private files: the directory 0700 when created here, a new database file 0600 before
        # SQLite opens it (SQLite itself would create it 0644; its -wal and -shm copy its mode).
        try:
            private_dir(self.path.parent)
            create_private_file(self.path)
        except OSError as exc:
            raise StorageError(f"cannot create database {path}: {exc}") from exc
        self._busy = busy_timeout_ms
        self._writer_conn = connect(self.path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        #: The configured level, and the one the writer connection is set to right now.
        self._durable_level = "NORMAL" if synchronous.upper() == "NORMAL" else "FULL"
        self._level = self._durable_level
        self._jobs: queue.Queue = queue.Queue()
        self._closed = False
        #: COMMITs done by the writer, and the write jobs they carried (group-commit telemetry).
        self.commits = 0
        self.grouped_jobs = 0
        #: Background checkpoints run, and the last one's (busy, WAL frames, frames checkpointed).
        self.wal_checkpoints = 0
        self.last_wal_checkpoint: tuple[int, int, int] | None = None
        self._writer_conn.execute("PRAGMA wal_autocheckpoint = 0")  # the checkpointer's job instead
        self._wal_checkpoint_conn = connect(self.path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        self._wake_wal_checkpointer = threading.Event()
        self._stopping = threading.Event()
        self._wal_checkpointer = threading.Thread(
            target=self._wal_checkpoint_loop, name="memlane-wal-checkpointer", daemon=True
        )
        self._wal_checkpointer.start()
        self._writer = threading.Thread(target=self._write_loop, name="memlane-writer", daemon=True)
        self._writer.start()
        self._pool: queue.Queue[sqlite3.Connection] = queue.Queue()
        self._readers: list[sqlite3.Connection] = []
        for _ in range(read_pool_size):
            conn = connect(self.path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
            conn.execute("PRAGMA query_only = ON")
            self._readers.append(conn)
            self._pool.put(conn)

    # -- writes ------------------------------------------------------------------------
    def _write_loop(self) -> None:
        stop = False
        while not stop:
            item = self._jobs.get()
            if item is _STOP:
                break
            batch = [item]
            while len(batch) < MAX_GROUP_COMMIT:  # group commit: whatever is already queued
                try:
                    nxt = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
            live = [job for job in batch if job[1].set_running_or_notify_cancel()]
            if live:
                self._set_level(self._durable_level if any(d for _, _, d in live) else "NORMAL")
            self._run_group([(fn, fut) for fn, fut, _ in live])

    def _set_level(self, level: str) -> None:
        """Set the writer's ``PRAGMA synchronous`` (outside a transaction) when it changes."""
        if level != self._level:
            try:
                self._writer_conn.execute(f"PRAGMA synchronous = {level}")
                self._level = level
            except sqlite3.Error as exc:  # keep the current level; the group still runs
                log.warning("cannot set synchronous=%s: %s", level, exc)

    def _run_group(self, batch: list[tuple[Callable[[sqlite3.Connection], object], Future]]) -> None:
        """Run queued write jobs in ONE ``BEGIN IMMEDIATE`` transaction, each in its own SAVEPOINT,
        and COMMIT once (group commit: one fsync for the lot).

        A job that raises is rolled back to its savepoint and gets its exception; the others are
        unaffected. No future is resolved before the COMMIT returns, so a job reported done is
        durable. If the COMMIT fails, or SQLite aborts the whole transaction inside a job (disk
        full, I/O error), every job of the group gets the error: none was acknowledged.
        """
        if not batch:
            return
        conn = self._writer_conn
        outcomes: list[tuple[Future, bool, object]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, fut in batch:
                conn.execute("SAVEPOINT memlane_job")
                try:
                    result = fn(conn)
                except BaseException as exc:
                    if not conn.in_transaction:  # SQLite rolled everything back
                        raise
                    conn.execute("ROLLBACK TO memlane_job")
                    conn.execute("RELEASE memlane_job")
                    outcomes.append((fut, False, exc))
                else:
                    conn.execute("RELEASE memlane_job")
                    outcomes.append((fut, True, result))
            conn.execute("COMMIT")
        except BaseException as exc:  # the group is lost: nobody was acknowledged
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        self.commits += 1
        self.grouped_jobs += len(batch)
        self._wake_wal_checkpointer.set()
        for fut, ok, value in outcomes:
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)  # type: ignore[arg-type]

    # -- WAL checkpoints ---------------------------------------------------------------
    def _wal_checkpoint_loop(self) -> None:
        """Copy committed WAL frames back into the database file, off the write path."""
        last = 0.0
        while True:
            self._wake_wal_checkpointer.wait()
            if self._stopping.is_set():
                return
            wait = WAL_CHECKPOINT_INTERVAL_S - (time.monotonic() - last)
            if wait > 0 and self._stopping.wait(wait):  # commits in the meantime join this one
                return
            self._wake_wal_checkpointer.clear()
            last = time.monotonic()
            self.wal_checkpoint()

    def wal_checkpoint(self) -> tuple[int, int, int] | None:
        """Run one ``PRAGMA wal_checkpoint(PASSIVE)`` on the checkpointer's connection.

        Returns:
            (busy, frames in the WAL, frames checkpointed), as SQLite reports them; None if
            SQLite failed (logged; the next commit wakes the checkpointer again).
        """
        try:
            row = self._wal_checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint failed: %s", exc)
            return None
        self.wal_checkpoints += 1
        self.last_wal_checkpoint = (int(row[0]), int(row[1]), int(row[2]))
        return self.last_wal_checkpoint

    def submit(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> Future:
        """Queue a write job without waiting; returns its future.

        ``durable=False``: the job may commit with ``synchronous=NORMAL`` (module docstring):
        it survives a process kill, not necessarily a power loss. For derived records only.

        Raises:
            StorageError: the database is closed.
        """
        if self._closed:
            raise StorageError("database is closed")
        fut: Future = Future()
        self._jobs.put((fn, fut, durable))
        return fut

    def write(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction on the writer; wait for it.

        ``durable``: as in :meth:`submit`.

        Raises:
            whatever ``fn`` raises (after rollback); StorageError for SQLite failures.
        """
        return self.wait(self.submit(fn, durable=durable))

    def wait(self, fut: Future[T]) -> T:
        """Wait for a job :meth:`submit` queued and return its result (what :meth:`write` returns).

        Raises:
            whatever the job raised (after rollback); StorageError for SQLite failures.
        """
        try:
            return fut.result()
        except sqlite3.Error as exc:
            raise StorageError(f"write failed: {exc}") from exc

    # -- reads -------------------------------------------------------------------------
    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """Borrow a read connection (``query_only``) for the duration of the block."""
        if self._closed:
            raise StorageError("database is closed")
        conn = self._pool.get()
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._pool.put(conn)

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on a pooled reader.

        Raises:
            StorageError: SQLite failed.
        """
        with self.reader() as conn:
            try:
                return fn(conn)
            except sqlite3.Error as exc:
                raise StorageError(f"read failed: {exc}") from exc

    def close(self) -> None:
        """Finish queued writes, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(_STOP)
        self._writer.join(timeout=30)
        self._stopping.set()
        self._wake_wal_checkpointer.set()
        self._wal_checkpointer.join(timeout=30)
        self._wal_checkpoint_conn.close()
        try:
            self._writer_conn.execute("PRAGMA optimize")
        except sqlite3.Error:
            pass
        self._writer_conn.close()
        for conn in self._readers:
            conn.close()


def inserted_rowid(cur: sqlite3.Cursor) -> int:
    """The rowid of the row the ``INSERT`` just run on ``cur`` added.

    Raises:
        StorageError: the cursor ran no ``INSERT`` (sqlite3 reports no rowid).
    """
    rowid = cur.lastrowid
    if rowid is None:
        raise StorageError("no row was inserted")
    return rowid
