"""The co-access graph (issue 42 item 4): bootstrap from a real git repository's history through
the git binary, size-discounted ranking, renames and deletions followed, the HTTP routes, and the
prefetch benchmark on httpx's real history against the co-change-count baseline."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import api_client
from memlane.coaccess.gitlog import read_history, unquote_path
from memlane.coaccess.graph import MAX_PAIR_FILES, CoAccessService
from memlane.errors import ValidationError

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")
COCHANGE = Path(__file__).resolve().parents[1] / ".." / "shared" / "bench-data" / "cochange"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


class Repo:
    """A real git repository built commit by commit with the git binary."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")
        self.n = 0

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.path), *args], env=ENV, check=True, capture_output=True, text=True
        ).stdout

    def commit(self, *files: str, rename: tuple[str, str] | None = None, delete: str | None = None) -> None:
        self.n += 1
        if rename:
            self.git("mv", *rename)
        if delete:
            self.git("rm", "-q", delete)
        for f in files:
            p = self.path / f
            p.parent.mkdir(parents=True, exist_ok=True)
            with p.open("a") as fh:
                fh.write(f"{f} base line\n" * (20 if not p.exists() or p.stat().st_size == 0 else 0) + f"c{self.n}\n")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", f"commit {self.n}")


@pytest.fixture
def repo(tmp_path) -> Repo:
    r = Repo(tmp_path / "repo")
    # app.py changes twice with util.py in two-file commits, three times with each of 8 files in
    # ten-file commits: the count baseline puts the big-commit files first, the graph util.py.
    big = [f"pkg/m{i}.py" for i in range(8)]
    r.commit("app.py", "util.py")
    for _ in range(3):
        r.commit("app.py", "other.py", *big)
    r.commit("app.py", "util.py")
    r.commit("old_name.py", "app.py")
    r.commit(rename=("old_name.py", "new_name.py"))
    r.commit("gone.py", "app.py")
    r.commit(delete="gone.py")
    r.commit(*[f"wide/f{i}.py" for i in range(MAX_PAIR_FILES + 1)], "app.py")  # too wide: no pairs
    r.commit("pkg/m0.py")
    r.commit("docs/naïve name.md", "util.py")
    return r


def test_git_history_is_read_with_renames_deletions_and_unicode(repo):
    commits = read_history(repo.path)
    assert len(commits) == 12
    renamed = [ch for c in commits for ch in c.changes if ch.status == "R"]
    assert [(ch.old_path, ch.path) for ch in renamed] == [("old_name.py", "new_name.py")]
    assert commits[-1].files() == ["docs/naïve name.md", "util.py"]
    assert read_history(repo.path, max_commits=2)[-1].sha == commits[-1].sha
    assert unquote_path('"a\\tb\\303\\251"') == "a\tbé"


def test_graph_ranks_by_size_discounted_cochange(store, repo):
    svc = CoAccessService(store.db)
    boot = svc.bootstrap_git(repo.path)
    assert boot["commits"] == 12
    preds = svc.predict("app.py", k=12, fill=False)
    files = [p.file for p in preds]
    assert files[0] == "util.py"  # 2 two-file commits (score 2.0) beat 3 ten-file commits (3 x 1/9)
    assert preds[0].raw_count == 2 and preds[0].weight == pytest.approx(2 / 8)  # app.py is in 8 commits
    assert "new_name.py" in files and "old_name.py" not in files  # the history followed the rename
    assert "gone.py" not in files  # deleted files leave the graph
    assert not any(f.startswith("wide/") for f in files)  # a 52-file commit adds no pairs
    assert svc.predict("wide/f0.py", k=5, fill=False) == []


def test_fill_from_directory_then_project(store, repo):
    svc = CoAccessService(store.db)
    svc.bootstrap_git(repo.path)
    preds = svc.predict("pkg/brand_new.py", k=10)  # never seen: its directory's most changed first
    assert [p.reason for p in preds[:8]] == ["directory"] * 8 and preds[0].file == "pkg/m0.py"
    assert preds[8].reason == "popular" and preds[8].file == "app.py"
    assert [p.file for p in svc.predict("app.py", k=3, suffix=".md")] == ["docs/naïve name.md"]


def test_incremental_updates_and_session_counts(store, repo):
    svc = CoAccessService(store.db)
    svc.bootstrap_git(repo.path)
    before = svc.predict("util.py", k=1, fill=False)[0]
    for _ in range(5):
        svc.record_files(["util.py", "helpers.py", "util.py"])
    after = svc.predict("util.py", k=1, fill=False)[0]
    assert after.file == "helpers.py" and after.raw_count == 5 and before.file != "helpers.py"
    with pytest.raises(ValidationError):
        svc.predict("", k=3)
    with pytest.raises(ValidationError):
        svc.predict("app.py", k=0)


def test_bad_repositories_are_clear_errors(store, tmp_path):
    svc = CoAccessService(store.db)
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValidationError, match="git log failed"):
        svc.bootstrap_git(tmp_path / "plain")
    with pytest.raises(ValidationError, match="not a directory"):
        svc.bootstrap_git(tmp_path / "missing")
    with pytest.raises(ValidationError, match="rev"):
        svc.bootstrap_git(tmp_path / "plain", rev="--output=/tmp/x")


def test_coaccess_routes(store, repo, tmp_path):
    client = api_client(store)
    r = client.post("/api/v3/coaccess/bootstrap", json={"repo": str(repo.path), "project": "demo"})
    assert r.status_code == 200, r.text
    assert r.json()["commits"] == 12
    p = client.get("/api/v3/coaccess/predict", params={"file": "app.py", "project": "demo", "k": 3})
    assert p.status_code == 200 and p.json()["predictions"][0]["file"] == "util.py"
    other = client.get("/api/v3/coaccess/predict", params={"file": "app.py", "k": 3}).json()
    assert other["predictions"] == []  # graphs are per project
    assert client.get("/api/v3/coaccess/stats", params={"project": "demo"}).json()["files"] > 10
    bad = client.post("/api/v3/coaccess/bootstrap", json={"repo": str(tmp_path)})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"
    assert client.get("/api/v3/coaccess/predict", params={"file": "a", "k": 0}).status_code == 422


@pytest.mark.skipif(not (COCHANGE / "httpx-commits.jsonl").is_file(), reason="needs ../shared/bench-data/cochange")
def test_prefetch_bench_on_httpx_history_meets_the_count_baseline():
    from benchmarks.prefetch import run

    report = run(COCHANGE.resolve())
    assert report["bootstrap"]["commits"] == 1109 and report["bootstrap"]["differs_from_record"] == 0
    assert report["later_commits"] == 372
    for label, n in (("all files", 148), (".py files", 98)):
        s = report["sets"][label]
        assert s["commits"] == n
        graph, count = s["methods"]["graph"], s["methods"]["cochange-count"]
        for metric in ("recall@5", "recall@10", "mrr"):
            assert graph[metric] >= count[metric], (label, metric, graph, count)
        assert s["methods"]["imports"]["recall@10"] > 0


def test_background_bootstrap_at_a_projects_first_session(store, repo, tmp_path):
    from memlane.coaccess.graph import BootstrapWorker

    (repo.path / "sub").mkdir()
    (tmp_path / "plain").mkdir()
    store.db.write(
        lambda c: c.executemany(
            "INSERT INTO sessions (session_key, project, cwd, started_at) VALUES (?, ?, ?, '2026-01-01T00:00:00Z')",
            [
                ("s1", "demo", str(repo.path / "sub")),
                ("s2", "plain", str(tmp_path / "plain")),
                ("s3", "gone", str(tmp_path / "missing")),
            ],
        )
    )
    svc = CoAccessService(store.db)
    w = BootstrapWorker(svc)
    assert w.run_once() is True
    assert w.tried == {"demo": "bootstrapped: 12 commits", "plain": "no repository", "gone": "no directory"}
    assert svc.predict("app.py", project="demo", k=1)[0].file == "util.py"  # paths from the repository root
    repo.commit("app.py", "late.py")
    assert w.run_once() is False  # tried once per run: no rebuild
    assert store.workers.get("v3-coaccess-bootstrap").name == "v3-coaccess-bootstrap"
