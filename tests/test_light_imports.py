"""No heavy import on a light path (issue 43, item 2).

Each light entry point is imported (or, for the CLI's light commands, run against a real
daemon) in a fresh interpreter, which then reports which heavy modules ended up in
``sys.modules``. A module that only a heavy path needs (PyTorch for the predictor model,
onnxruntime and tokenizers for the local embedder, numpy for the index, FastAPI and uvicorn
for the daemon) must not be among them: each costs from ~0.2 s (numpy) to ~2 s (PyTorch) of
start-up and tens to hundreds of MiB, paid by every hook, every CLI call and, through
``memlane.config``, by every process of the product.

The checks are in a subprocess because this test process has imported everything already.
A control import of the modules that do need PyTorch shows the probe sees what it should.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: What no light path may import: PyTorch, the local embedder's runtime and tokenizer, numpy,
#: the web stack.
HEAVY = ("torch", "onnxruntime", "tokenizers", "numpy", "fastapi", "starlette", "uvicorn")

#: Printed by the probe before its JSON report (the command's own output comes first).
MARKER = "LIGHT-IMPORTS:"

PROBE = f"""
import json, sys
heavy = {HEAVY!r}
def report(extra=None):
    print({MARKER!r} + json.dumps({{"present": sorted(m for m in heavy if m in sys.modules), **(extra or {{}})}}))
"""


def _env(home: Path | None = None, url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env["MEMLANE_CONFIG"] = os.environ["MEMLANE_CONFIG"]  # conftest: a file that does not exist
    if home is not None:
        env["MEMLANE_HOME"] = str(home)
    if url is not None:
        env["MEMLANE_DAEMON_URL"] = url
    return env


def _probe(code: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``PROBE + code`` in a fresh interpreter; its report as a dict (plus ``out``)."""
    proc = subprocess.run([sys.executable, "-c", PROBE + code], env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    assert proc.returncode == 0 and lines, f"probe failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    out = json.loads(lines[-1][len(MARKER) :])
    out["out"] = proc.stdout
    return out


LIGHT_MODULES = [
    "memlane",
    "memlane.config",
    "memlane.errors",
    "memlane.auth",
    "memlane.predictor",
    "memlane.config.predictor",
    "memlane.predictor.policy",
    "memlane.sessions",
    "memlane.sessions.checkpoints",
    "memlane.cli.client",
    "memlane.cli.main",
]


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_light_module_imports_nothing_heavy(module: str) -> None:
    report = _probe(f"import {module}\nreport()", _env())
    assert report["present"] == [], f"import {module} loaded {report['present']}"


def test_settings_load_without_heavy_modules(tmp_path: Path) -> None:
    """Loading the settings (what every hook and CLI call does first) stays light too."""
    report = _probe(
        "from memlane.config import load_settings, public_settings\npublic_settings(load_settings())\nreport()",
        _env(home=tmp_path / "home"),
    )
    assert report["present"] == []


def test_probe_sees_pytorch_where_it_is_needed() -> None:
    """Control: the model modules do load PyTorch (the probe is not blind), and the predictor
    package still exports its names, resolved on first use."""
    report = _probe(
        "import memlane.predictor as p\n"
        "before = 'torch' in sys.modules\n"
        "from memlane.predictor import MemoryScorer, fit, CURRENT_SCHEMA\n"
        "missing = [n for n in p.__all__ if getattr(p, n, None) is None]\n"
        "report({'before': before, 'missing': missing, 'scorer': MemoryScorer.__module__,\n"
        "        'fit': fit.__module__, 'in_dir': sorted(set(p.__all__) - set(dir(p)))})",
        _env(),
    )
    assert report["before"] is False
    assert "torch" in report["present"] and "numpy" in report["present"]
    assert report["missing"] == [] and report["in_dir"] == []
    assert report["scorer"] == "memlane.predictor.model" and report["fit"] == "memlane.predictor.train"


def test_predictor_package_refuses_unknown_names() -> None:
    import memlane.predictor as p

    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        p.not_a_name  # noqa: B018


RUN_COMMAND = """
from memlane.cli.main import app
code = 0
try:
    app({argv!r}, standalone_mode=False)
except SystemExit as exc:
    code = exc.code or 0
report({{"code": code}})
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One real daemon (BM25 only: the test is about the CLI process, not recall)."""
    from conftest import Daemon

    home = tmp_path_factory.mktemp("light") / "home"
    home.mkdir()
    d = Daemon(
        home,
        home.parent / "daemon.log",
        provider="none",
        extra_env={"MEMLANE_CONFIG": str(home / "no-such-config.yaml"), "MEMLANE_PREDICTOR__ENABLED": "false"},
    )
    try:
        d.wait_ready()
        yield d
    finally:
        d.kill()


@pytest.mark.parametrize(
    "argv",
    [
        ["remember", "The deploy script lives in ops/deploy.sh", "--project", "infra"],
        ["recall", "where is the deploy script", "--json"],
        ["status"],
        ["config"],
        ["token", "show"],
        ["version"],
    ],
)
def test_light_cli_command_runs_without_heavy_modules(daemon: Any, argv: list[str]) -> None:
    """The command really runs against a real daemon (exit 0), and loads nothing heavy."""
    report = _probe(RUN_COMMAND.format(argv=argv), _env(home=daemon.home, url=daemon.url))
    assert report["code"] == 0, report["out"]
    assert report["present"] == [], f"memlane {' '.join(argv)} loaded {report['present']}"
    if argv[0] == "recall":
        assert "ops/deploy.sh" in report["out"]
