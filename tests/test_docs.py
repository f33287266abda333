"""The docs name what the code has (in the style of sqlite-utils' tests/test_docs.py).

* every CLI command (the typer app walked, the lazy ``bench``/``replay`` groups included) is
  written as ``memlane GROUP COMMAND`` in README.md or docs/*.md; the README's alternation
  form ``memlane GROUP a\\|b\\|c`` names each of ``a``, ``b`` and ``c``;
* every setting (the pydantic Settings model walked) is named by its dotted path (field names
  or aliases, e.g. ``memory.pipelineV2.worker.pollMs``) in README.md or docs/*.md;
* every module under src/memlane is named in docs/architecture.md: as ``pkg/module.py``, or as
  ``module.py`` in the entry of its package in the layer tree; a package by ``pkg/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from pydantic import BaseModel

from memlane.cli.main import app
from memlane.config import Settings

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "memlane"
#: Migrations are named by their pattern (docs/architecture.md, "Storage"), not one by one.
MIGRATION_PATTERN = "storage/schema/mNNNN_name.py"


def _docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in DOC_FILES)


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every visible command path of a click/typer group, depth first."""
    if not hasattr(command, "list_commands"):
        return
    ctx = typer.Context(command)
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        yield (*path, name)
        yield from _commands(sub, (*path, name))


def _documented_commands(text: str) -> set[tuple[str, ...]]:
    """Command paths written in the docs: ``memlane a b`` gives (a,) and (a, b); the alternation
    ``memlane a b\\|c [--opt]\\|d`` gives (a, b), (a, c) and (a, d)."""
    named: set[tuple[str, ...]] = set()
    for m in re.finditer(r"memlane ([a-z][a-z0-9-]*)((?: [^`\n]*)?)", text):
        group, rest = m.group(1), m.group(2)
        named.add((group,))
        for alt in re.split(r"\\?\|", rest):
            word = re.match(r"\s*([a-z][a-z0-9-]*)", alt)
            if word:
                named.add((group, word.group(1)))
    return named


COMMANDS = sorted(_commands(typer.main.get_command(app)))


def test_the_cli_has_commands() -> None:
    assert ("serve",) in COMMANDS and ("bench", "retrieval") in COMMANDS  # the walk reaches lazy groups


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_cli_command_is_documented(command: tuple[str, ...]) -> None:
    assert command in _documented_commands(_docs_text()), (
        f"`memlane {' '.join(command)}` is in no doc: add it to README.md's CLI table or a docs/*.md page"
    )


def _settings(model: type[BaseModel], path: tuple[tuple[str, str], ...] = ()) -> Iterator[tuple[tuple[str, str], ...]]:
    """Every field of the settings model as ((name, alias), ...) from the root, nested models too."""
    for name, field in model.model_fields.items():
        here = (*path, (name, field.alias or name))
        yield here
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _settings(field.annotation, here)


def _spellings(path: tuple[tuple[str, str], ...]) -> set[str]:
    """The dotted path with each part as its field name or its alias."""
    out = {""}
    for name, alias in path:
        out = {f"{prefix}.{part}" if prefix else part for prefix in out for part in {name, alias}}
    return out


SETTINGS = list(_settings(Settings))


@pytest.mark.parametrize("path", SETTINGS, ids=lambda p: ".".join(alias for _, alias in p))
def test_setting_is_documented(path: tuple[tuple[str, str], ...]) -> None:
    text = _docs_text()
    assert any(re.search(re.escape(s) + r"(?![A-Za-z0-9_])", text) for s in _spellings(path)), (
        f"setting {'.'.join(a for _, a in path)} is in no doc: add it to docs/settings.md"
    )


def _architecture_entries() -> dict[str, str]:
    """The layer tree of docs/architecture.md: package path (``recall``, ``config``) -> the text
    of its entries (the package's own line, its continuation lines and its nested entries)."""
    block = ARCHITECTURE.read_text(encoding="utf-8").split("```")[1]
    entries: dict[str, str] = {}
    package = ""
    for line in block.splitlines():
        m = re.match(r"^  (\S+)", line)  # a top-level entry: "  recall/", "  redact.py", "  recall/stages.py ..."
        if m:
            name = m.group(1)
            package = name.split("/")[0] if "/" in name else ""
        if package:
            entries[package] = entries.get(package, "") + "\n" + line
    return entries


def _modules() -> list[Path]:
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("module", _modules(), ids=str)
def test_module_is_in_the_architecture(module: Path) -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    parts = module.parts
    if parts[:2] == ("storage", "schema"):
        assert MIGRATION_PATTERN in text
        return
    dotted = "memlane." + ".".join(module.with_suffix("").parts)
    if module.name == "__init__.py":
        package = "/".join(parts[:-1])
        assert not package or f"{package}/" in text, f"package {package}/ is not in docs/architecture.md"
        return
    if str(module) in text or dotted in text:
        return
    entry = _architecture_entries().get(parts[0], "") if len(parts) > 1 else text
    named = re.search(
        r"(?<![\w/])" + re.escape("/".join(parts[1:]) if len(parts) > 1 else module.name) + r"(?!\w)", entry
    )
    assert named, f"{module} is not named in docs/architecture.md (the layer tree lists every module)"
