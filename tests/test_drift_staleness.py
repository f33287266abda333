"""File staleness (issue 41; memory-system-v3-design.md "File Staleness Detection"): the sweep
over every file reference with renames and deletions from a real git repository made in the
test, the same sweep without git, and the sweep a project's first session starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from memlane.services.inputs import RecallQuery, RememberInput
from memlane.sessions.inputs import StartInput


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "rounding.py").write_text("def round_half_even(x):\n    return round(x)\n" * 5)
    (root / "src" / "legacy.py").write_text("LEGACY_FLAG = True\n" * 5)
    (root / "docs" / "guide.md").write_text("# Guide\n\nHow to deploy.\n" * 5)
    git(root, "init", "-q")
    git(root, "-c", "user.email=t@example.org", "-c", "user.name=t", "add", ".")
    git(root, "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-q", "-m", "initial")
    return root


def _mems(c, root: Path) -> tuple[str, str, str]:
    p = str(root)
    a = c.memories.remember(RememberInput(content="Rounding is in src/rounding.py (half even).", project=p)).id
    b = c.memories.remember(RememberInput(content="The legacy switch lives in src/legacy.py.", project=p)).id
    g = c.memories.remember(RememberInput(content="Deploy steps: docs/guide.md.", project=p)).id
    return a, b, g


def _commit(root: Path, msg: str) -> None:
    git(root, "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-q", "-am", msg)


def test_git_rename_rewrites_the_reference_and_delete_marks_it_stale(store, repo: Path):
    c = store
    a, b, g = _mems(c, repo)
    (repo / "src" / "core").mkdir()
    git(repo, "mv", "src/rounding.py", "src/core/rounding.py")
    _commit(repo, "move")
    git(repo, "rm", "-q", "src/legacy.py")
    _commit(repo, "drop legacy")
    out = c.drift.sweep(str(repo))
    assert out["git"] == 1 and out["checked"] == 3
    assert out["renames"] == [[a, "src/rounding.py", "src/core/rounding.py"]]
    assert out["stale_files"] == [[b, "src/legacy.py", "was deleted (git)"]]
    assert [r.target for r in c.drift.references_of(a)] == ["src/core/rounding.py"]
    assert c.drift.flags_of(a) == () and c.drift.flags_of(g) == ()
    rows = c.drift.list(memory_id=b)
    assert [(r["error_type"], r["target"], r["context"]["reason"]) for r in rows] == [
        ("memory_stale_file", "src/legacy.py", "was deleted (git)")
    ]
    hits = {
        h.memory.id: h for h in c.recall.recall(RecallQuery(query="legacy switch", project=str(repo), touch=False)).hits
    }
    assert hits[b].memory.content.startswith("[STALE: file src/legacy.py was deleted (git)]")
    # a second sweep changes nothing (debounced, nothing new)
    again = c.drift.sweep(str(repo))
    assert again["renamed"] == 0 and again["stale"] == 1 and len(c.drift.list(resolved=None)) == 1


def test_a_rename_after_the_file_was_flagged_missing_resolves_the_flag(store, repo: Path):
    c = store
    a, _, _ = _mems(c, repo)
    (repo / "src" / "rounding.py").rename(repo / "src" / "round2.py")  # not in git yet: only missing
    c.settings.drift.git = False
    assert c.drift.sweep(str(repo))["stale_files"] == [[a, "src/rounding.py", "is missing"]]
    assert c.drift.flags_of(a)
    c.settings.drift.git = True
    git(repo, "add", "-A")
    _commit(repo, "rename")
    out = c.drift.sweep(str(repo))
    assert out["renames"] == [[a, "src/rounding.py", "src/round2.py"]]
    assert c.drift.flags_of(a) == ()
    assert c.drift.list(memory_id=a) == [] and len(c.drift.list(memory_id=a, resolved=True)) == 1


def test_without_git_a_missing_file_is_stale(store, tmp_path: Path):
    c = store
    root = tmp_path / "plain"
    (root / "src").mkdir(parents=True)
    (root / "src" / "x.py").write_text("x = 1\n")
    mid = c.memories.remember(RememberInput(content="X is set in src/x.py.", project=str(root))).id
    (root / "src" / "x.py").unlink()
    out = c.drift.sweep()
    assert out["git"] == 0 and out["stale_files"] == [[mid, "src/x.py", "is missing"]]


def test_first_session_of_a_project_sweeps_it(store, repo: Path):
    c = store
    _, b, _ = _mems(c, repo)
    (repo / "src" / "legacy.py").unlink()
    c.sessions.start(StartInput("first", project=str(repo), context="legacy"))
    c.drift.drain()
    assert [r["target"] for r in c.drift.list(memory_id=b)] == ["src/legacy.py"]


def test_v3_related_files_are_file_references(store, repo: Path):
    c = store
    mid = c.memories.remember(
        RememberInput(content="Half-even rounding for invoices.", project=str(repo), related_files=("src/rounding.py",))
    ).id
    assert [(r.kind, r.target) for r in c.drift.references_of(mid)] == [("file", "src/rounding.py")]
    git(repo, "rm", "-q", "src/rounding.py")
    _commit(repo, "drop rounding")
    assert c.drift.sweep(str(repo))["stale_files"] == [[mid, "src/rounding.py", "was deleted (git)"]]
