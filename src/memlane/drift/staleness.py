"""File staleness: the sweep over every file reference, with git renames and deletions
(memory-system-v3-design.md "File Staleness Detection"; docs/drift.md).

:func:`git_changes` asks the real ``git`` binary (optional: without git, or outside a
repository, the sweep only ``stat`` s) for the renames and deletions of a repository since a
time: ``git log -M --diff-filter=RD --name-status --reverse --since=...`` (committed history,
renames chained in order) plus ``git diff -M --name-status HEAD`` (what is staged or changed
in the working tree). :func:`plan` turns a missing referenced path into a rename (the path it
became, when that file exists) or a deletion.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

#: Seconds one git command may take before the sweep goes on without git.
GIT_TIMEOUT_S = 30.0


@dataclass
class GitChanges:
    """Renames ``old -> new`` (chained: the last name) and deleted paths, repository-relative."""

    renames: dict[str, str] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    def add(self, status: str, paths: list[str]) -> None:
        """Apply one ``--name-status`` row (``R<score>`` old new, or ``D`` path) in history order."""
        if status.startswith("R") and len(paths) == 2:
            old, new = paths
            for k, v in list(self.renames.items()):  # a -> old earlier: a now ends at new
                if v == old:
                    self.renames[k] = new
            self.renames[old] = new
            self.deleted.discard(new)
        elif status.startswith("D") and paths:
            self.deleted.add(paths[0])

    def final(self, path: str) -> tuple[str, str | None]:
        """``("renamed", new)``, ``("deleted", None)`` or ``("unknown", None)`` for a path."""
        new = self.renames.get(path)
        if new is not None and new not in self.deleted:
            return "renamed", new
        if path in self.deleted or (new is not None and new in self.deleted):
            return "deleted", None
        return "unknown", None


def git_root(path: str) -> str | None:
    """The repository root containing ``path``, or None (no git binary, not a repository)."""
    if shutil.which("git") is None or not os.path.isdir(path):
        return None
    try:
        r = subprocess.run(
            ["git", "-C", path, "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _rows(out: str) -> list[tuple[str, list[str]]]:
    rows = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0][:1] in ("R", "D"):
            rows.append((parts[0], parts[1:]))
    return rows


def git_changes(root: str, *, since: str | None = None) -> GitChanges:
    """Renames and deletions in the repository at ``root`` since ``since`` (ISO time; None: all
    history), then those of the working tree against HEAD. Errors leave what was read."""
    ch = GitChanges()
    cmd = ["git", "-C", root, "log", "-M", "--diff-filter=RD", "--name-status", "--reverse", "--format="]
    if since:
        cmd.append(f"--since={since}")
    for args in (cmd, ["git", "-C", root, "diff", "-M", "--name-status", "HEAD"]):
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            for status, paths in _rows(r.stdout):
                ch.add(status, paths)
    return ch
