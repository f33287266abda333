"""Migration discovery: built-in 0001/0002, then memlane.storage.schema.mNNNN_* modules in order."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from memlane.errors import StorageError
from memlane.storage import migrations
from memlane.storage.db import Database
from memlane.storage.migrations import BUILTIN, MIGRATIONS, discover, migrate


def _pkg(root: Path, name: str, modules: dict[str, str]) -> str:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, text in modules.items():
        (pkg / f"{mod}.py").write_text(text)
    return name


@pytest.fixture
def pkg_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "pkgs"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for mod in [m for m in sys.modules if m.startswith("fakemig")]:
        del sys.modules[mod]


def test_builtin_first_then_discovered_in_number_order():
    names = [n for n, _ in MIGRATIONS]
    assert names[:2] == [n for n, _ in BUILTIN]
    assert "0004_pipeline_jobs" in names
    numbers = [int(n[:4]) for n in names]
    assert numbers == sorted(numbers) and len(set(names)) == len(names)


def test_discover_sorts_by_module_name_and_ignores_helpers(pkg_root):
    name = _pkg(
        pkg_root,
        "fakemig_ok",
        {
            "m0010_b": 'NAME = "0010_b"\nSQL = "CREATE TABLE b (x);"\n',
            "m0009_a": 'NAME = "0009_a"\nSQL = "CREATE TABLE a (x);"\n',
            "helpers": "X = 1\n",
        },
    )
    assert discover(name) == [("0009_a", "CREATE TABLE a (x);"), ("0010_b", "CREATE TABLE b (x);")]


@pytest.mark.parametrize(
    "text, needle",
    [
        ('SQL = "SELECT 1;"\n', "must define NAME"),
        ('NAME = "0011_x"\n', "must define NAME"),
        ('NAME = "0012_x"\nSQL = "SELECT 1;"\n', "must start with 0011_"),
    ],
)
def test_bad_module_is_a_clear_error(pkg_root, text, needle):
    name = _pkg(pkg_root, f"fakemig_bad{abs(hash(text)) % 10_000}", {"m0011_x": text})
    with pytest.raises(StorageError) as exc:
        discover(name)
    assert needle in exc.value.message


def test_duplicate_names_are_refused(pkg_root):
    name = _pkg(pkg_root, "fakemig_dup", {"m0001_again": 'NAME = "0001_memories_embeddings_fts_history"\nSQL = ""\n'})
    with pytest.raises(StorageError, match="duplicate"):
        discover(name)


def _columns(db: Database, table: str) -> set[str]:
    return db.read(lambda c: {r[1] for r in c.execute(f"PRAGMA table_info({table})")})


def test_fresh_database_gets_every_migration_once(tmp_path):
    db = Database(tmp_path / "m.db", read_pool_size=1)
    try:
        assert migrate(db) == [n for n, _ in MIGRATIONS]
        assert migrate(db) == []
        assert "leased_at" in _columns(db, "memory_jobs")
        applied = db.read(migrations.applied)
        assert applied == [n for n, _ in MIGRATIONS]
    finally:
        db.close()


def test_upgrade_from_0002_keeps_existing_jobs(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    db = Database(path, read_pool_size=1)
    monkeypatch.setattr(migrations, "MIGRATIONS", list(BUILTIN))
    migrate(db)
    db.write(
        lambda c: c.execute(
            "INSERT INTO memory_jobs (job_type, status, created_at, updated_at) VALUES ('extract', 'pending', 't', 't')"
        )
    )
    db.close()
    monkeypatch.setattr(migrations, "MIGRATIONS", list(MIGRATIONS))
    db = Database(path, read_pool_size=1)
    try:
        ran = migrate(db)
        assert "0004_pipeline_jobs" in ran and not set(ran) & {n for n, _ in BUILTIN}
        row = db.read(lambda c: c.execute("SELECT job_type, leased_at FROM memory_jobs").fetchone())
        assert tuple(row) == ("extract", None)
    finally:
        db.close()


def test_schema_package_modules_follow_the_naming_rule():
    import pkgutil

    import memlane.storage.schema as schema

    for info in pkgutil.iter_modules(schema.__path__):
        assert info.name.startswith("m") and info.name[1:5].isdigit(), info.name
    assert sqlite3.complete_statement(dict(MIGRATIONS)["0004_pipeline_jobs"].strip())
