"""Private files: nobody but the user reads or writes memlane's home.

The home (``$MEMLANE_HOME``, default ``~/.memlane``) holds the memories, the transcripts, the
token and the logs. memlane creates the home and every directory in it with mode 0700 and
every file with mode 0600: the database (:func:`create_private_file` before SQLite opens it;
SQLite gives its ``-wal`` and ``-shm`` files the database file's mode), the logs
(:class:`PrivateRotatingFileHandler`, :func:`open_private`), the spool, ``config.yaml`` and the
token. ``memlane serve`` and the hook commands also set the process umask to 0o077
(:func:`set_private_umask`), so whatever else they create is private too; the explicit modes
cover a daemon embedded in another process.

A home made by an older memlane, or by hand, can be looser: :func:`check_private` lists every
directory or file in it that a group or other users may access, the daemon logs them once at
start (:func:`warn_if_loose`), and ``memlane doctor --fix`` tightens them (:func:`fix_private`).

This module is a leaf: standard library only.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Mode of the home and of every directory memlane creates in it.
PRIVATE_DIR_MODE = 0o700
#: Mode of every file memlane creates in the home.
PRIVATE_FILE_MODE = 0o600
#: Permission bits that give a group or other users access.
LOOSE_BITS = 0o077
#: Paths listed in the start-up warning before "and N more".
WARN_LIST_MAX = 20


@dataclass(frozen=True)
class Problem:
    """One path in the home that a group or other users may access.

    Attributes:
        path: the directory or file.
        mode: its permission bits now (e.g. ``0o644``).
        expected: the mode memlane gives such a path (``0o700`` directory, ``0o600`` file).
        kind: ``"dir"`` or ``"file"``.
    """

    path: Path
    mode: int
    expected: int
    kind: str

    def describe(self) -> str:
        """``/home/u/.memlane/memories.db: 0644 (group/other can access; expected 0600)``."""
        return f"{self.path}: {self.mode:04o} (group/other can access; expected {self.expected:04o})"


def set_private_umask() -> int:
    """Set the process umask to 0o077 (new files 0600, new directories 0700); returns the old one."""
    return os.umask(0o077)


def private_dir(path: Path | str) -> Path:
    """Create ``path`` (and missing parents) with mode 0700 for every directory created here.

    An existing directory is left as it is (:func:`check_private` reports it when loose).

    Raises:
        OSError: the directory cannot be created.
    """
    path = Path(path).expanduser()
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # created meanwhile by another process
        os.chmod(d, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask, never widened: exact 0700
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
    return path


def create_private_file(path: Path | str) -> bool:
    """Create ``path`` empty with mode 0600 unless it exists; True when it was created here.

    Used before SQLite opens a new database: SQLite creates files with 0644 (less the umask),
    and gives a database's ``-wal`` and ``-shm`` files the database file's mode.

    Raises:
        OSError: the file cannot be created (other than because it exists).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def open_private(path: Path | str, mode: str = "a", encoding: str | None = "utf-8") -> IO:
    """``open(path, mode)`` for appending or writing, creating the file with mode 0600.

    Args:
        path: the file (its directory must exist).
        mode: ``"a"``, ``"w"``, ``"ab"`` or ``"wb"``.
        encoding: text encoding (ignored for binary modes).

    Raises:
        ValueError: another mode. OSError: the file cannot be opened.
    """
    flags = {"a": os.O_APPEND, "w": os.O_TRUNC}.get(mode.rstrip("b"))
    if flags is None:
        raise ValueError(f"open_private: mode must be a, w, ab or wb, not {mode!r}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, PRIVATE_FILE_MODE)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding=encoding)


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose files (the current one and each after a rollover) are created
    with mode 0600, whatever the umask."""

    def _open(self):  # noqa: ANN202 - logging's own signature
        return open_private(self.baseFilename, "a", encoding=self.encoding or "utf-8")


def _loose(mode: int) -> bool:
    return bool(mode & LOOSE_BITS)


def check_private(home: Path | str) -> list[Problem]:
    """Every directory or file under ``home`` (the home included) a group or others may access.

    Symbolic links are not followed and not reported (their own mode means nothing on Linux).
    A missing home has no problems. Paths that vanish during the walk are skipped.

    Returns:
        Problems in path order, the home first.
    """
    home = Path(home).expanduser()
    problems: list[Problem] = []
    try:
        st = os.lstat(home)
    except OSError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return []
    if _loose(st.st_mode):
        problems.append(Problem(home, stat.S_IMODE(st.st_mode), PRIVATE_DIR_MODE, "dir"))
    for root, dirs, files, root_fd in os.fwalk(home, follow_symlinks=False):
        for name in sorted(dirs) + sorted(files):
            try:
                st = os.lstat(name, dir_fd=root_fd)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode) or not _loose(st.st_mode):
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            problems.append(
                Problem(
                    Path(root) / name,
                    stat.S_IMODE(st.st_mode),
                    PRIVATE_DIR_MODE if is_dir else PRIVATE_FILE_MODE,
                    "dir" if is_dir else "file",
                )
            )
    return sorted(problems, key=lambda p: (p.path != home, str(p.path)))


def fix_private(home: Path | str) -> list[Path]:
    """Remove group and other permission bits from every path :func:`check_private` reports.

    The owner's bits are kept (a 0755 directory becomes 0700, a 0644 file 0600). A path that
    cannot be changed (another owner, a read-only file system) is skipped and logged; a
    following :func:`check_private` still reports it.

    Returns:
        The paths whose mode was changed, in the order of :func:`check_private`.
    """
    fixed: list[Path] = []
    for p in check_private(home):
        try:
            os.chmod(p.path, p.mode & ~LOOSE_BITS)
        except OSError as exc:
            logging.getLogger(__name__).warning("cannot tighten %s: %s", p.path, exc)
            continue
        fixed.append(p.path)
    return fixed


def warn_if_loose(home: Path | str, log: logging.Logger | None = None) -> list[Problem]:
    """Log one warning listing the loose paths of ``home`` (at most :data:`WARN_LIST_MAX`) and
    the command that fixes them; returns the problems (empty: nothing logged)."""
    problems = check_private(home)
    if problems:
        shown = "; ".join(p.describe() for p in problems[:WARN_LIST_MAX])
        more = f"; and {len(problems) - WARN_LIST_MAX} more" if len(problems) > WARN_LIST_MAX else ""
        (log or logging.getLogger(__name__)).warning(
            "%d path(s) in %s can be read or changed by other users: %s%s. Fix: memlane doctor --fix --home %s",
            len(problems),
            home,
            shown,
            more,
            home,
        )
    return problems
