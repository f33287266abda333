"""What real Claude Code sessions showed the observer got wrong (issue 42; docs/v3.md, "Which tool
calls are file accesses", "Project identity", "Promotion"): one test per rule. A search's scope and
a file outside the project are no file accesses; every git worktree of one repository is one
project (a real repository and a worktree made with the git binary); an observation repeated by
another session reinforces the observer memory about that file instead of writing a near copy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import api_client
from memlane.connectors.events import from_claude_code
from memlane.hookclient import tool_use_body
from memlane.projectroot import project_root, work_tree_root
from memlane.v3.observer import Observer, accessed_file
from memlane.v3.promotion import INITIAL_CONFIDENCE, PROVENANCE_KEY, REINFORCED_CONFIDENCE, Promoter

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(repo),
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real repository with ``lib/app.ex`` and ``assets/js/app.js``, committed, and a linked
    worktree of it at ``tmp_path / "wt-feature"``."""
    if shutil.which("git") is None:
        pytest.skip("needs the git binary")
    r = tmp_path / "main"
    (r / "lib").mkdir(parents=True)
    (r / "assets" / "js").mkdir(parents=True)
    (r / "lib" / "app.ex").write_text("defmodule App do\nend\n")
    (r / "assets" / "js" / "app.js").write_text("export {}\n")
    git(r, "init", "-q", "-b", "main")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "first")
    git(r, "worktree", "add", "-q", str(tmp_path / "wt-feature"), "-b", "feature")
    return r


# -- which tool calls are file accesses -------------------------------------------------------
def test_a_search_scope_is_no_file_access_but_a_search_in_one_file_is(repo: Path) -> None:
    cwd = str(repo)
    assert accessed_file("Grep", {"pattern": "x", "path": "lib"}, cwd) is None
    assert accessed_file("Grep", {"pattern": "x", "path": "."}, cwd) is None
    assert accessed_file("Grep", {"pattern": "x", "path": cwd}, cwd) is None
    assert accessed_file("Glob", {"pattern": "**/*.js", "path": "assets/js"}, cwd) is None
    assert accessed_file("Glob", {"pattern": "mix.exs"}, cwd) is None  # a pattern is no path
    assert accessed_file("Grep", {"pattern": "x", "path": "assets/js/app.js"}, cwd) == "assets/js/app.js"
    # a scope that does not exist here (a session recorded elsewhere) cannot be told from a file
    assert accessed_file("Grep", {"pattern": "x", "path": "deps/ash/lib"}, cwd) is None


def test_a_file_outside_the_project_is_no_file_access(repo: Path, tmp_path: Path) -> None:
    cwd = str(repo)
    outside = tmp_path / "claude-1000" / "tasks" / "b1.output"
    assert accessed_file("Read", {"file_path": str(outside)}, cwd) is None
    assert accessed_file("Read", {"file_path": "../wt-feature/lib/app.ex"}, cwd) is None
    assert accessed_file("Read", {"file_path": str(repo / "lib" / "app.ex")}, cwd) == "lib/app.ex"
    assert accessed_file("Read", {"file_path": "/etc/hosts"}, None) is None  # no cwd: no root to be under


def test_file_tools_name_files_relative_to_the_work_tree_root(repo: Path) -> None:
    sub = str(repo / "assets")
    # a session working in a subdirectory names the file as a session at the top does
    assert accessed_file("Edit", {"file_path": "js/app.js", "old_string": "a"}, sub) == "assets/js/app.js"
    assert accessed_file("Write", {"file_path": str(repo / "lib" / "new.ex")}, sub) == "lib/new.ex"
    assert accessed_file("NotebookEdit", {"notebook_path": "nb.ipynb"}, str(repo)) == "nb.ipynb"
    assert accessed_file("MultiEdit", {"file_path": "lib/app.ex", "edits": []}, str(repo)) == "lib/app.ex"
    # Bash is not parsed for files; a Read's ``path`` is no key it uses
    assert accessed_file("Bash", {"command": "cat lib/app.ex"}, str(repo)) is None
    assert accessed_file("Read", {"path": "lib/app.ex"}, str(repo)) is None


def test_the_observer_records_only_project_files(store, repo: Path, tmp_path: Path) -> None:
    obs = Observer(store.db)
    cwd = str(repo)
    seq = [
        ("Grep", {"pattern": "x", "path": "lib"}),
        ("Read", {"file_path": str(repo / "lib" / "app.ex")}),
        ("Read", {"file_path": str(tmp_path / "claude-1000" / "t.output")}),
        ("Grep", {"pattern": "x", "path": "."}),
        ("Edit", {"file_path": "assets/js/app.js"}),
    ]
    for i, (tool, inp) in enumerate(seq):
        obs.record("s1", tool, inp, cwd=cwd, project=cwd, ts_ms=1000 + i)
    sig = obs.signals("s1")
    assert [s["file_path"] for s in sig if s["type"] == "file_access"] == ["lib/app.ex", "assets/js/app.js"]
    assert [(s["file_a"], s["file_b"]) for s in sig if s["type"] == "co_access"] == [("lib/app.ex", "assets/js/app.js")]
    assert obs.session_files("s1") == ["lib/app.ex", "assets/js/app.js"]


# -- project identity ---------------------------------------------------------------------------
@needs_git
def test_worktrees_of_one_repository_are_one_project(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt-feature"
    common = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert project_root(wt / "lib") == project_root(repo) == str(common.parent.resolve()) == str(repo.resolve())
    assert work_tree_root(wt / "lib") == str(wt.resolve())  # files are named within each work tree
    # what the hooks send: the same project from either checkout
    ev = from_claude_code("post-tool-use", {"session_id": "a", "cwd": str(wt / "lib"), "tool_name": "Read"})
    assert ev.project == str(repo.resolve())
    # not a repository, and a submodule-like ``.git`` file without git's commondir: their own projects
    plain = tmp_path / "plain"
    plain.mkdir()
    assert project_root(plain) == str(plain.resolve())
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / ".git").write_text(f"gitdir: {repo / '.git' / 'modules' / 'sub'}\n")
    assert project_root(sub) == str(sub.resolve())


@needs_git
def test_sessions_in_two_worktrees_share_the_co_access_graph(store, repo: Path, tmp_path: Path) -> None:
    client = api_client(store)
    wt = tmp_path / "wt-feature"
    for session, cwd in (("in-main", repo), ("in-worktree", wt)):
        for i, f in enumerate(("lib/app.ex", "assets/js/app.js")):
            ev = from_claude_code(
                "post-tool-use",
                {
                    "session_id": session,
                    "cwd": str(cwd),
                    "tool_name": "Read",
                    "tool_input": {"file_path": str(cwd / f)},
                    "tool_use_id": f"{session}-{i}",
                },
            )
            assert client.post("/api/v3/observer/tool-use", json=tool_use_body(ev)).status_code == 200
        end = client.post(
            "/api/v3/observer/session-end",
            json={"session_id": session, "project": str(repo.resolve()), "finalize": False},
        )
        assert end.status_code == 200, end.text
    pred = client.get(
        "/api/v3/coaccess/predict", params={"file": "lib/app.ex", "project": str(repo.resolve()), "k": 3}
    ).json()
    [edge] = [p for p in pred["predictions"] if p["file"] == "assets/js/app.js"]
    assert edge["raw_count"] == 2  # both sessions, one graph


# -- promotion: the same observation again is no new memory --------------------------------------
def re_edit(obs: Observer, session: str, file: str, gap: int, project: str = "p") -> None:
    """Edit ``file``, ``gap - 1`` other reads, edit it again: a backtrack ``gap`` steps apart."""
    seq = [("Edit", file), *[("Read", f"{session}/other{i}.py") for i in range(gap - 1)], ("Edit", file)]
    for i, (tool, f) in enumerate(seq):
        obs.record(session, tool, {"file_path": f}, project=project, ts_ms=1000 + i * 1000)


def gotchas(entries: list[dict]) -> list[dict]:
    return [e for e in entries if e["type"] == "gotcha"]


def test_another_sessions_observation_reinforces_the_memory_instead_of_a_near_copy(store) -> None:
    obs = Observer(store.db)
    promoter = Promoter(store.db, store.memories, lambda: None)
    re_edit(obs, "s1", "src/a.py", 2)
    re_edit(obs, "s2", "src/a.py", 4)  # the same kind of observation, another step count
    first = promoter.finalize("s2")
    [made] = gotchas(first.promoted)
    m = store.memories.get(made["id"])
    assert (m.type, m.confidence, list(m.related_files)) == ("gotcha", INITIAL_CONFIDENCE, ["src/a.py"])
    assert "4" not in m.content and "2" not in m.content  # the step count is no part of the text
    re_edit(obs, "s3", "src/a.py", 3)
    re_edit(obs, "s3", "src/a.py", 1)  # twice in one session: still one candidate
    again = promoter.finalize("s3")
    assert gotchas(again.promoted) == []  # (src/a.py in 3 sessions of src/ is a prefetch pattern, new)
    assert [(r["id"], r["action"], r["sessions"]) for r in gotchas(again.reinforced)] == [(m.id, "reinforced", 2)]
    after = store.memories.get(m.id)
    assert after.confidence == REINFORCED_CONFIDENCE and after.metadata[PROVENANCE_KEY] == ["s2", "s3"]
    assert after.content == m.content
    live, total = store.memories.list(limit=50, type_="gotcha")
    assert [x.id for x in live] == [m.id] and total == 1


def test_a_different_file_is_still_novel(store) -> None:
    obs = Observer(store.db)
    promoter = Promoter(store.db, store.memories, lambda: None)
    for s in ("s1", "s2"):
        re_edit(obs, s, "src/a.py", 2)
    promoter.finalize("s2")
    for s in ("s3", "s4"):
        re_edit(obs, s, "src/b.py", 2)
    rep = promoter.finalize("s4")
    assert [p["related_files"] for p in gotchas(rep.promoted)] == [["src/b.py"]] and gotchas(rep.reinforced) == []


def test_a_prefetch_pattern_is_one_memory_per_module_with_the_newest_file_list(store) -> None:
    obs = Observer(store.db)
    promoter = Promoter(store.db, store.memories, lambda: None)
    for s, files in (("s1", "ab"), ("s2", "ab"), ("s3", "ab"), ("s4", "a")):
        for i, f in enumerate(files):
            obs.record(s, "Read", {"file_path": f"src/{f}.py"}, project="p", ts_ms=1000 + i)
        rep = promoter.finalize(s)
    [made] = [p for p in promoter.finalize("s3").reinforced if p["type"] == "prefetch_pattern"]
    assert made["action"] == "seen"  # s3 promoted it; s4 (a in 4 of 4 sessions, b in 3: 75 %) observed it again
    [again] = [p for p in rep.reinforced if p["type"] == "prefetch_pattern"]
    m = store.memories.get(again["id"])
    assert (again["id"], again["action"]) == (made["id"], "reinforced")
    assert list(m.related_files) == ["src/a.py"] and m.type_fields["module_trigger"] == "src"
    assert m.confidence == REINFORCED_CONFIDENCE
    live, total = store.memories.list(limit=50, type_="prefetch_pattern")
    assert total == 1
