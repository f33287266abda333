"""memlane.cli.lazy: command groups of the benchmarks package, imported only when used."""

from __future__ import annotations

import subprocess
import sys

import typer
from typer.testing import CliRunner

from memlane.cli.lazy import INSTALL_HINT, lazy_typer
from memlane.cli.main import app

runner = CliRunner()


def _app_with(module: str, attr: str) -> typer.Typer:
    top = typer.Typer()
    top.add_typer(lazy_typer(module, attr, help="lazy group"), name="group")

    @top.command()
    def other() -> None:
        """A command outside the group."""

    return top


def test_a_missing_package_says_how_to_install_it_for_every_command() -> None:
    top = _app_with("no_such_benchmarks_package.cli", "bench_app")
    for args in (
        ["group", "retrieval"],
        ["group", "retrieval", "--max-conversations", "1"],
        ["group", "anything", "--help"],
    ):
        r = runner.invoke(top, args)
        assert r.exit_code == 2, r.output
        assert INSTALL_HINT in " ".join(r.output.split())
    r = runner.invoke(top, ["group", "--help"])
    assert r.exit_code == 0 and INSTALL_HINT in " ".join(r.output.split())
    assert runner.invoke(top, ["other"]).exit_code == 0


def test_a_broken_import_inside_the_package_is_not_reported_as_missing() -> None:
    # the package exists (typer), the module does not: a real error, not the install hint
    r = runner.invoke(_app_with("typer.no_such_module", "app"), ["group", "x"])
    assert isinstance(r.exception, ModuleNotFoundError)


def test_bench_and_replay_list_the_benchmarks_commands() -> None:
    from benchmarks.cli import bench_app, replay_app

    for name, sub in (("bench", bench_app), ("replay", replay_app)):
        expected = set(typer.main.get_group(sub).list_commands(None))  # type: ignore[arg-type]
        r = runner.invoke(app, [name, "--help"])
        assert r.exit_code == 0
        assert expected and all(cmd in r.output for cmd in expected)
        for cmd in expected:
            assert runner.invoke(app, [name, cmd, "--help"]).exit_code == 0, (name, cmd)


def test_the_command_line_does_not_import_the_benchmarks_until_used() -> None:
    code = (
        "import sys; from memlane.cli.main import app; "
        "print(sorted(m for m in sys.modules if m == 'benchmarks' or m.startswith('benchmarks.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
