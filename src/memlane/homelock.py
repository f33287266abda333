"""An exclusive lock on a data directory: one writer process per ``$MEMLANE_HOME``.

Two processes that open the same store each keep their own in-memory vector index, FTS
statistics and caches, so one's recall misses the other's writes. ``memlane serve``, ``memlane
import --data-dir`` and the benchmarks that fill a given store take this lock before they
open the store; a second taker fails at once with a message naming the holder.

The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``$MEMLANE_HOME/daemon.lock`` (mode 0600). The
kernel releases it when the holder's file descriptor closes, including when the holder dies
(``kill -9``, a crash), so a stale file never blocks anyone: its content (the holder's pid,
command and start time, as JSON) is only the message a refused taker prints. The file is never
unlinked (unlinking would let two processes lock two different inodes under one name); a
release empties it. The descriptor is close-on-exec, so subprocesses (the predictor sidecar,
an LLM CLI) never keep the lock alive.

POSIX only (``fcntl``), as the rest of the daemon.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memlane.errors import MemlaneError

#: The lock file's name inside the home.
LOCK_FILE = "daemon.lock"
#: Most bytes of the lock file read for the refusal message.
MAX_INFO_BYTES = 4096


class HomeLocked(MemlaneError):
    """Another live process holds the home's lock; the message names it and what to do.

    Attributes:
        holder: what the holder wrote into the lock file, or None when it has not written yet.
        path: the lock file.
    """

    status = 409
    code = "home_locked"

    def __init__(self, message: str, *, holder: LockHolder | None, path: Path) -> None:
        super().__init__(message, details={"lock": str(path), "holder": None if holder is None else holder.as_dict()})
        self.holder = holder
        self.path = path


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a home: ``pid``, ``command`` (e.g. ``"memlane serve"``), ``started_at`` (ISO-8601
    UTC) and, for a daemon, the ``url`` it serves."""

    pid: int
    command: str
    started_at: str
    url: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON object written into the lock file."""
        out: dict[str, Any] = {"pid": self.pid, "command": self.command, "started_at": self.started_at}
        if self.url:
            out["url"] = self.url
        return out

    def describe(self) -> str:
        """``memlane serve at http://127.0.0.1:7437 (pid 1234, started 2026-01-01T10:00:00Z)``."""
        where = f" at {self.url}" if self.url else ""
        return f"{self.command}{where} (pid {self.pid}, started {self.started_at})"


def lock_path(home: Path) -> Path:
    """``home / "daemon.lock"``."""
    return Path(home) / LOCK_FILE


class HomeLock:
    """A held lock on one home; :meth:`release` (or leaving the ``with`` block) gives it back.

    Built by :func:`acquire`. Releasing twice is harmless. The lock also ends when the process
    exits, however it exits.
    """

    def __init__(self, path: Path, fd: int, holder: LockHolder) -> None:
        self.path = path
        self.holder = holder
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def release(self) -> None:
        """Empty the file (no stale message is left) and unlock it by closing the descriptor."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass  # the content is only a message; closing is what releases
        os.close(fd)

    def __enter__(self) -> HomeLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(home: Path, command: str, *, hint: str, url: str | None = None) -> HomeLock:
    """Take the exclusive lock on ``home`` (created 0700 if missing) or fail at once.

    Args:
        home: the data directory.
        command: what the caller is, for the message another taker prints (``"memlane serve"``).
        hint: what a refused caller should do, appended to the message
            (``"stop it or use --url to import through it"``).
        url: the daemon's URL, when the caller is a daemon (shown to refused takers).

    Returns:
        the held :class:`HomeLock`; the lock file holds this process's pid, ``command``, start
        time and ``url`` as JSON.

    Raises:
        HomeLocked: another live process holds it. The message is
            ``"memlane serve at URL (pid 1234, started ...) holds /home/daemon.lock; <hint>"``.
        OSError: the home or the lock file cannot be created or opened (permissions,
            a symlink in place of the lock file).
    """
    home = Path(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = lock_path(home)
    # O_NOFOLLOW: a symlink planted as daemon.lock is refused rather than followed (and truncated).
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _parse(_read(fd))
            who = holder.describe() if holder is not None else "another memlane process"
            raise HomeLocked(f"{who} holds {path}; {hint}", holder=holder, path=path) from None
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o600)  # an older file with looser bits: the holder's details are private
        me = LockHolder(os.getpid(), command, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), url)
        data = json.dumps(me.as_dict()).encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except BaseException:
        os.close(fd)
        raise
    return HomeLock(path, fd, me)


def current_holder(home: Path) -> LockHolder | None:
    """Who holds ``home``'s lock now, or None when nobody does (a stale file from a dead process
    counts as nobody). A holder that has not written its details yet is reported with pid 0.

    Never creates the home; raises nothing for a missing home or lock file.
    """
    path = lock_path(home)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _parse(_read(fd)) or LockHolder(0, "unknown", "")
        return None  # we got it, so nobody holds it (closing the descriptor gives it back)
    finally:
        os.close(fd)


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, MAX_INFO_BYTES, 0)
    except OSError:
        return b""


def _parse(raw: bytes) -> LockHolder | None:
    """The holder's details from the file content; None when empty or unreadable."""
    try:
        data = json.loads(raw.decode("utf-8"))
        return LockHolder(
            int(data["pid"]),
            str(data["command"]),
            str(data["started_at"]),
            str(data["url"]) if data.get("url") else None,
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
