"""Reading a project's history with the real ``git`` binary.

:func:`read_history` runs ``git log --reverse --no-merges --name-status -M`` (the seed's
``git log --name-only`` bootstrap, with the status letters so renames and deletions are followed)
and parses it into :class:`Commit` records. :func:`replay_into_repo` does the opposite for the
benchmark: it writes a recorded history into a fresh repository through ``git fast-import``, so the
bootstrap reads real ``git log`` output of that history.

git runs without a pager, hooks, fsmonitor or system config, and with a timeout: reading a
repository never runs a program the repository names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from memlane.errors import ValidationError
from memlane.v3.model import check_str

#: Seconds one git command may take.
GIT_TIMEOUT_S = 120
_SAFE = [
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.pager=cat",
    "-c",
    "log.showSignature=false",
    "-c",
    "core.quotePath=false",
    "--no-pager",
]
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def unquote_path(text: str) -> str:
    """A path as git prints it: C-style quoted (``"a\\tb"``, octal bytes) when it holds a tab, a
    newline, a quote or a backslash; otherwise as is."""
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        return text
    body, out, i = text[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            octal = body[i + 1 : i + 4]
            if len(octal) == 3 and all(c in "01234567" for c in octal):
                out.append(int(octal, 8) & 0xFF)
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out += ch.encode()
        i += 1
    return out.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Change:
    """One file change: ``status`` A/M/D/T/C/R (the similarity score dropped), ``path`` the path
    after the change, ``old_path`` the path before a rename or copy."""

    status: str
    path: str
    old_path: str | None = None


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit: full SHA, ISO-8601 date, subject and its changes in git's order."""

    sha: str
    date: str
    subject: str = ""
    changes: tuple[Change, ...] = field(default_factory=tuple)

    def files(self) -> list[str]:
        """The paths the commit leaves in the tree (every change but deletions), in order, distinct."""
        out: list[str] = []
        for c in self.changes:
            if c.status != "D" and c.path not in out:
                out.append(c.path)
        return out


def git_binary() -> str:
    """The git executable's path.

    Raises:
        ValidationError: git is not installed.
    """
    exe = shutil.which("git")
    if exe is None:
        raise ValidationError("git is not installed: the co-access bootstrap needs the git binary")
    return exe


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        proc = subprocess.run(
            [git_binary(), "-C", str(repo), *_SAFE, *args],
            input=stdin,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            env=_env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ValidationError(f"git {args[0]} took longer than {GIT_TIMEOUT_S} s in {str(repo)[:200]}") from None
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ValidationError(f"git {args[0]} failed in {str(repo)[:200]}: {(msg[-1] if msg else '')[:300]}")
    return proc.stdout


def toplevel(path: Path) -> Path | None:
    """The top level of the git work tree containing ``path``, or None when it is in none.

    Raises:
        ValidationError: git is missing or times out.
    """
    try:
        out = _git(path, "rev-parse", "--show-toplevel")
    except ValidationError as exc:
        if "failed" in str(exc):
            return None
        raise
    top = out.decode("utf-8", "replace").strip()
    return Path(top) if top else None


def parse_log(text: str) -> list[Commit]:
    """Parse ``git log --name-status -M --format=%x1e%H%x1f%cI%x1f%s`` output (oldest first when
    run with ``--reverse``). Lines of a change are ``STATUS<TAB>PATH`` or ``R100<TAB>OLD<TAB>NEW``."""
    commits: list[Commit] = []
    for block in text.split("\x1e"):
        if not block.strip():
            continue
        head, _, body = block.partition("\n")
        parts = head.split("\x1f")
        if len(parts) < 3:
            continue
        changes: list[Change] = []
        for line in body.splitlines():
            cols = line.split("\t")
            if len(cols) < 2 or not cols[0]:
                continue
            status = cols[0][0]
            if status in ("R", "C") and len(cols) >= 3:
                changes.append(Change(status, unquote_path(cols[2]), unquote_path(cols[1])))
            else:
                changes.append(Change(status, unquote_path(cols[1])))
        commits.append(Commit(parts[0], parts[1], parts[2], tuple(changes)))
    return commits


def read_history(repo: Path, *, rev: str = "HEAD", max_commits: int | None = None) -> list[Commit]:
    """The non-merge commits reachable from ``rev`` in ``repo``, oldest first (``max_commits``:
    only the newest that many).

    Raises:
        ValidationError: not a git repository, a bad revision, git missing or failing, or a timeout.
    """
    if not repo.is_dir():
        raise ValidationError(f"not a directory: {str(repo)[:200]}")
    check_str(rev, "rev", max_chars=200)
    if rev.startswith("-") or any(c.isspace() for c in rev):
        raise ValidationError("rev: expected a git revision (no leading '-', no spaces)")
    args = ["log", "--reverse", "--no-merges", "--name-status", "-M", "--no-color", "--format=%x1e%H%x1f%cI%x1f%s"]
    if max_commits is not None:
        if max_commits < 1:
            raise ValidationError("max_commits: must be at least 1")
        args.insert(1, f"--max-count={int(max_commits)}")
    out = _git(repo, *args, rev, "--")
    return parse_log(out.decode("utf-8", "replace"))


def _quote(path: str) -> str:
    """A path for a fast-import command (C-style quoted when it needs it)."""
    if any(c in path for c in ' "\\\n') or path.startswith('"'):
        return '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return path


def replay_into_repo(commits: Iterable[Commit], repo: Path) -> int:
    """Create ``repo`` (a new git repository) whose branch ``main`` replays ``commits`` in order:
    the same paths added, modified, renamed and deleted, at the same dates. File contents are
    synthetic (a fixed body per file plus one line per commit that touched it), so git's rename
    detection sees a rename as one. Returns the number of commits written.

    Raises:
        ValidationError: git is missing or fast-import fails.
    """
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q", "-b", "main")
    body: dict[str, bytes] = {}
    chunks: list[bytes] = []
    n = 0
    for c in commits:
        dt = datetime.fromisoformat(c.date)
        off = dt.utcoffset()
        minutes = int(off.total_seconds() // 60) if off is not None else 0
        tz = f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
        msg = (c.subject or c.sha).encode()
        ops: list[bytes] = []
        for ch in c.changes:
            if ch.status == "D":
                if ch.path in body:
                    del body[ch.path]
                    ops.append(f"D {_quote(ch.path)}\n".encode())
                continue
            if ch.old_path is not None and ch.status == "R" and ch.old_path in body:
                body[ch.path] = body.pop(ch.old_path)
                ops.append(f"R {_quote(ch.old_path)} {_quote(ch.path)}\n".encode())
            base = body.get(ch.path) or "".join(f"{ch.path} line {i}\n" for i in range(40)).encode()
            body[ch.path] = base + f"{c.sha[:12]}\n".encode()
            data = body[ch.path]
            ops.append(f"M 100644 inline {_quote(ch.path)}\ndata {len(data)}\n".encode() + data + b"\n")
        chunks.append(
            f"commit refs/heads/main\ncommitter memlane bench <bench@localhost> "
            f"{int(dt.timestamp())} {tz}\ndata {len(msg)}\n".encode()
            + msg
            + b"\n"
            + b"".join(ops)
            + b"\n"
        )
        n += 1
    _git(repo, "fast-import", "--quiet", "--done", stdin=b"".join(chunks) + b"done\n")
    _git(repo, "reset", "-q", "--hard", "main")
    return n
