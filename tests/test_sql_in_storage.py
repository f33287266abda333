"""SQL only under storage/ (docs/architecture.md): no module of the package outside
``memlane.storage`` runs a statement or opens a SQLite connection itself; it calls a named
storage function. Read from the source with ``ast``, so a new call anywhere fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import memlane

PACKAGE = Path(memlane.__file__).parent
#: Methods that run SQL on a sqlite3 connection or cursor.
SQL_METHODS = {"execute", "executemany", "executescript"}


def _sql_calls(path: Path) -> list[str]:
    """``file:line name`` of every SQL-running call in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        connect = f.attr == "connect" and isinstance(f.value, ast.Name) and f.value.id == "sqlite3"
        if f.attr in SQL_METHODS or connect:
            out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {f.attr}")
    return out


def test_the_scan_finds_sql_calls():
    found = _sql_calls(PACKAGE / "storage" / "memories.py")
    assert found and all(c.split()[-1] in SQL_METHODS for c in found)
    assert any(c.endswith(" connect") for c in _sql_calls(PACKAGE / "storage" / "db.py"))


def test_no_sql_outside_storage():
    outside = [
        c
        for p in sorted(PACKAGE.rglob("*.py"))
        if "storage" not in p.relative_to(PACKAGE).parts[:1]
        for c in _sql_calls(p)
    ]
    assert outside == []
