"""The co-access graph service: bootstrap from git history, incremental updates, prediction.

Model (chosen on a validation split of httpx's history before 0.23.0; docs/v3.md): for a given
file, rank the files it changed with by ``score`` = the sum, over the commits (or sessions) that
touched both, of ``1 / (files in it - 1)``; ties by raw count. Renames move a file's history to its
new path; deleted files leave the graph. Commits of more than :data:`MAX_PAIR_FILES` files count
for each file but add no pairs (mass reformatting says nothing about which files belong together).
When a file has fewer neighbours than asked, the list is filled with the most changed files of its
directory, then of the project.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlane.coaccess.gitlog import Commit, read_history, toplevel
from memlane.config.clock import now_iso
from memlane.errors import MemlaneError, ValidationError
from memlane.storage import coaccess as co_sql
from memlane.storage.db import Database
from memlane.v3.model import check_str
from memlane.workers.runtime import PollingWorker

log = logging.getLogger(__name__)

#: Commits touching more files than this add no pairs (see the module docstring).
MAX_PAIR_FILES = 50
#: Commits applied per write transaction during a bootstrap.
BATCH = 200
#: Largest number of predictions one call returns.
MAX_K = 100


@dataclass(frozen=True, slots=True)
class Prediction:
    """One predicted file: ``score`` (co-change score, 0 for a fill-in), ``raw_count`` (commits
    or sessions with both), ``weight`` (raw_count / appearances of the given file) and ``reason``:
    ``co-change``, ``directory`` or ``popular``."""

    file: str
    score: float
    raw_count: int
    weight: float
    reason: str


def _check_project(project: str) -> str:
    if project != "":
        check_str(project, "project", max_chars=200)
    return project


def apply_commit(conn: Any, project: str, commit: Commit, *, max_pair_files: int = MAX_PAIR_FILES) -> None:
    """Apply one commit to the graph in the caller's write transaction: renames, deletions, then
    the co-change counts of the files it leaves in the tree."""
    for ch in commit.changes:
        if ch.status == "R" and ch.old_path:
            co_sql.rename(conn, project, ch.old_path, ch.path)
        elif ch.status == "D":
            co_sql.remove(conn, project, ch.path)
    co_sql.add_commit(conn, project, commit.files(), at=commit.date or now_iso(), max_pair_files=max_pair_files)


class CoAccessService:
    """Co-access graph of each project's files, in the memlane database."""

    def __init__(self, db: Database, *, max_pair_files: int = MAX_PAIR_FILES) -> None:
        self.db = db
        self.max_pair_files = max_pair_files

    def apply(self, project: str, commits: Iterable[Commit], *, replace: bool = False) -> int:
        """Apply ``commits`` (oldest first) to ``project``'s graph; ``replace`` drops the graph
        first. Returns the number applied."""
        project = _check_project(project)
        n = 0
        batch: list[Commit] = []

        def flush(first: bool) -> None:
            todo = list(batch)

            def job(conn: Any) -> None:
                if first and replace:
                    co_sql.clear(conn, project)
                for c in todo:
                    apply_commit(conn, project, c, max_pair_files=self.max_pair_files)

            self.db.write(job)
            batch.clear()

        first = True
        for c in commits:
            batch.append(c)
            n += 1
            if len(batch) >= BATCH:
                flush(first)
                first = False
        if batch or (first and replace):
            flush(first)
        return n

    def bootstrap_git(
        self, repo: Path, *, project: str = "", rev: str = "HEAD", max_commits: int | None = None
    ) -> dict[str, Any]:
        """Rebuild ``project``'s graph from ``git log`` of ``repo`` (the real git binary).

        Returns ``{"commits", "files", "edges", "took_ms"}``.

        Raises:
            ValidationError: git missing, not a repository, a bad revision, a timeout.
        """
        t0 = time.perf_counter()
        commits = read_history(repo, rev=rev, max_commits=max_commits)
        n = self.apply(project, commits, replace=True)
        return {"commits": n, **self.stats(project), "took_ms": round((time.perf_counter() - t0) * 1000, 1)}

    def stats(self, project: str = "") -> dict[str, int]:
        """Files and directed edges of ``project``'s graph."""
        project = _check_project(project)
        return self.db.read(lambda c: co_sql.stats(c, project))

    def predict(
        self, path: str, *, project: str = "", k: int = 10, fill: bool = True, suffix: str = ""
    ) -> list[Prediction]:
        """The ``k`` files most likely needed with ``path``, best first (``path`` itself never);
        ``suffix`` (e.g. ``.py``) keeps only files whose name ends with it; ``fill`` completes a
        short list from the directory's and the project's most changed files.

        Raises:
            ValidationError: an empty or over-long path, ``k`` outside [1, :data:`MAX_K`].
        """
        check_str(path, "file")
        if suffix:
            check_str(suffix, "suffix", max_chars=20)
        project = _check_project(project)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise ValidationError(f"k: must be an integer in [1, {MAX_K}]", details={"field": "k"})

        def read(conn: Any) -> list[Prediction]:
            out = [
                Prediction(f, s, n, w, "co-change") for f, s, n, w in co_sql.neighbours(conn, project, path, k, suffix)
            ]
            if fill and len(out) < k:
                seen = {p.file for p in out} | {path}
                for reason, directory in (("directory", posixpath.dirname(path)), ("popular", None)):
                    for f in co_sql.popular(conn, project, directory, k + len(seen), suffix):
                        if f not in seen:
                            out.append(Prediction(f, 0.0, 0, 0.0, reason))
                            seen.add(f)
                        if len(out) >= k:
                            return out
            return out

        return self.db.read(read)

    def record_files(self, files: Sequence[str], *, project: str = "", origin: str = "session") -> None:
        """Count one session (``origin='session'``) or commit (``'git'``) that touched ``files``."""
        project = _check_project(project)
        uniq = list(dict.fromkeys(check_str(f, "files[]") for f in files))
        at = now_iso()
        self.db.write(
            lambda c: co_sql.add_commit(c, project, uniq, at=at, max_pair_files=self.max_pair_files, origin=origin)
        )


#: Newest commits a background bootstrap reads (bounds its time on a long history).
AUTO_MAX_COMMITS = 5000


class BootstrapWorker(PollingWorker):
    """Bootstraps each project's co-access graph from ``git log`` when the project is first seen:
    every ``poll_ms`` it reads the projects whose sessions recorded a working directory, and for
    each one without a graph whose directory is inside a git work tree, runs
    :meth:`CoAccessService.bootstrap_git` on the repository's top level (newest
    :data:`AUTO_MAX_COMMITS` commits). A project is tried once per daemon run; a directory that is
    not a repository (or git missing) is skipped quietly."""

    def __init__(self, service: CoAccessService, *, poll_ms: float = 60_000) -> None:
        super().__init__("v3-coaccess-bootstrap", poll_ms=poll_ms)
        self.service = service
        self.tried: dict[str, str] = {}  # project -> outcome ("bootstrapped: N commits", "no repository", ...)

    def tick(self) -> bool:
        from memlane.storage import lifecycle as lc_sql

        roots = self.service.db.read(lc_sql.project_roots)
        did = False
        for project, cwd in roots.items():
            if project in self.tried:
                continue
            self.tried[project] = self._bootstrap(project, Path(cwd))
            did = did or self.tried[project].startswith("bootstrapped")
        return did

    def _bootstrap(self, project: str, cwd: Path) -> str:
        if not cwd.is_dir():
            return "no directory"
        if self.service.stats(project)["files"]:
            return "graph exists"
        try:
            top = toplevel(cwd)
            if top is None:
                return "no repository"
            r = self.service.bootstrap_git(top, project=project, max_commits=AUTO_MAX_COMMITS)
        except MemlaneError as exc:
            log.info("co-access bootstrap of %s skipped: %s", project, exc)
            return f"skipped: {exc}"[:300]
        log.info("co-access graph of %s: %s", project, r)
        return f"bootstrapped: {r['commits']} commits"
