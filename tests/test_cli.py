"""The CLI: in process through typer's runner where no daemon is needed, and against a real
daemon process for the commands that talk HTTP. Benchmarks run on tiny real inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memlane.cli.main import app
from memlane.config import load_settings
from memlane.container import open_container
from memlane.services.inputs import RecallQuery

LOCOMO = Path(__file__).resolve().parents[1] / ".." / "shared" / "bench-data" / "locomo" / "locomo10.json"
needs_locomo = pytest.mark.skipif(not LOCOMO.is_file(), reason=f"LoCoMo not found at {LOCOMO}")

runner = CliRunner()


def test_every_command_has_help():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for cmd in ("serve", "remember", "recall", "status", "config", "import", "bench"):
        assert cmd in result.output
        sub = runner.invoke(app, [cmd, "--help"])
        assert sub.exit_code == 0, cmd
    for cmd in ("retrieval", "latency"):
        assert runner.invoke(app, ["bench", cmd, "--help"]).exit_code == 0


def test_config_prints_effective_settings(tmp_path):
    result = runner.invoke(app, ["config", "--home", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["home"] == str(tmp_path) and data["recall"]["alpha"] == 0.7


def _write_jsonl(path: Path) -> None:
    lines = [
        json.dumps({"content": "The staging database is called orion.", "type": "fact", "project": "infra"}),
        json.dumps("A bare string line is a memory too."),
        "{not json",
        json.dumps({"content": 42}),
        json.dumps({"content": "   "}),
        "",
        json.dumps({"content": "The staging database is called orion"}),  # duplicate after normalization
        json.dumps({"content": "Importance out of range", "importance": 3}),
        json.dumps([1, 2]),
    ]
    path.write_text("\n".join(lines) + "\n")


def test_import_into_a_data_directory(tmp_path):
    src = tmp_path / "m.jsonl"
    _write_jsonl(src)
    home = tmp_path / "home"
    result = runner.invoke(app, ["import", str(src), "--data-dir", str(home)])
    assert result.exit_code == 1  # bad lines were reported
    assert "imported 2 new, 1 duplicates, 5 bad lines" in result.output
    for line_no in (3, 4, 5, 8, 9):
        assert f"line {line_no}:" in result.output
    c = open_container(load_settings(home=home, embedding={"provider": "none"}))
    try:
        hits = c.recall.recall(RecallQuery("staging database", touch=False)).hits
        assert [h.memory.content for h in hits][0] == "The staging database is called orion."
        assert c.memories.list()[1] == 2
    finally:
        c.close()


def test_commands_against_a_real_daemon(start_daemon, tmp_path, monkeypatch):
    d = start_daemon(provider="none")
    url = ["--url", d.url]
    r = runner.invoke(app, ["status", *url])
    assert r.exit_code == 1 and "unauthorized" in r.output  # another home's CLI has no token for it
    monkeypatch.setenv("MEMLANE_HOME", str(d.home))  # the CLI reads the token from its home
    r = runner.invoke(
        app, ["remember", "Release trains leave every Tuesday.", "--type", "process", "--tag", "release", *url]
    )
    assert r.exit_code == 0 and r.output.startswith("created ")
    r = runner.invoke(app, ["remember", "release trains leave every tuesday", *url])
    assert r.exit_code == 0 and r.output.startswith("deduplicated ")
    r = runner.invoke(app, ["recall", "when do release trains leave?", "--json", *url])
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["results"][0]["content"] == "Release trains leave every Tuesday."
    assert data["results"][0]["tags"] == ["release"]
    r = runner.invoke(app, ["recall", 'NEAR("x" AND) OR *', *url])
    assert r.exit_code == 0
    src = tmp_path / "m.jsonl"
    _write_jsonl(src)
    r = runner.invoke(app, ["import", str(src), *url])
    assert r.exit_code == 1 and "imported 2 new, 1 duplicates, 5 bad lines" in r.output
    r = runner.invoke(app, ["status", *url])
    assert r.exit_code == 0 and "3 live" in r.output


def test_a_missing_daemon_is_a_clear_error(tmp_path):
    from conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"
    for args in (["status"], ["recall", "x"], ["remember", "x"]):
        r = runner.invoke(app, [*args, "--url", url])
        assert r.exit_code == 1
        assert "no memlane daemon" in r.output


def test_remember_rejected_input_is_reported(start_daemon, monkeypatch):
    d = start_daemon(provider="none")
    monkeypatch.setenv("MEMLANE_HOME", str(d.home))
    r = runner.invoke(app, ["remember", "x", "--importance", "7", "--url", d.url])
    assert r.exit_code == 1 and "importance" in r.output


@needs_locomo
def test_bench_retrieval_on_one_conversation(tmp_path):
    out = tmp_path / "r.json"
    r = runner.invoke(
        app,
        [
            "bench",
            "retrieval",
            "--data",
            str(LOCOMO),
            "--max-conversations",
            "1",
            "--context-turns",
            "1",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    overall = report["metrics"]["overall"]
    assert report["summary"]["conversations"] == 1 and overall["n"] > 100
    for level in ("turn", "session"):
        for metric in ("R@5", "R@10", "R@25", "R@50", "any@5", "any@10", "all@5", "all@10", "NDCG@10"):
            assert 0.0 <= overall[level][metric] <= 100.0
    # the hybrid store must do clearly better than chance on real questions
    assert overall["turn"]["R@50"] > 50.0
    assert set(report["metrics"]["by_category"]) == {"1", "2", "3", "4", "5"}
    assert report["ingest"]["memories"] == report["summary"]["turns"]
    assert "R@5" in r.output and "DRAGON" in r.output


@needs_locomo
def test_bench_retrieval_bm25_only_and_bad_paths(tmp_path):
    r = runner.invoke(
        app,
        [
            "bench",
            "retrieval",
            "--data",
            str(LOCOMO),
            "--max-conversations",
            "1",
            "--bm25-only",
            "--out",
            str(tmp_path / "b.json"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "b.json").read_text())["config"]["use_vectors"] is False
    r = runner.invoke(app, ["bench", "retrieval", "--data", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "not found" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "locomo"}')
    r = runner.invoke(app, ["bench", "retrieval", "--data", str(bad), "--bm25-only"])
    assert r.exit_code == 2
    r = runner.invoke(app, ["bench", "retrieval", "--dataset", "msmarco", "--data", str(LOCOMO)])
    assert r.exit_code == 2 and "unknown dataset" in r.output


@needs_locomo
def test_bench_latency_through_a_real_daemon(tmp_path, monkeypatch):
    out = tmp_path / "lat.json"
    r = runner.invoke(
        app,
        [
            "bench",
            "latency",
            "--memories",
            "300",
            "--queries",
            "20",
            "--remembers",
            "10",
            "--data",
            str(LOCOMO),
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert report["store_size"] == 310
    assert report["recall"]["n"] == 20 and report["remember"]["n"] == 10
    assert report["recall"]["p50"] > 0 and report["fill"]["memories_per_s"] > 0
    assert report["job_backlog"]["left"] == 0 and "job queue drained" in r.output
    assert report["job_backlog"]["predictor_wait_s"] >= 0 and "sidecar ready after" in r.output


@needs_locomo
def test_bench_latency_pipeline_stages(tmp_path):
    out = tmp_path / "lat.json"
    r = runner.invoke(
        app,
        [
            "bench",
            "latency",
            "--memories",
            "200",
            "--queries",
            "10",
            "--remembers",
            "2",
            "--pipeline-stages",
            "--data",
            str(LOCOMO),
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    stages = json.loads(out.read_text())["pipeline_stages"]
    assert stages["enabled"] is True and stages["reranker"] is False and stages["hints_written"] == 600
    ip = stages["in_process"]
    assert set(ip["median_ms"]) == {"off", "hints", "graph", "dampening", "rerank", "hints+graph+dampening", "all"}
    assert ip["queries"] == 10 and all(v > 0 for v in ip["median_ms"].values())
    assert "reranker off, its default" in r.output


@needs_locomo
def test_bench_sessions_with_an_earned_alpha_waits_for_the_predictor(tmp_path):
    out = tmp_path / "sessions.json"
    r = runner.invoke(
        app,
        [
            "bench",
            "sessions",
            "--memories",
            "120",
            "--sessions",
            "3",
            "--prompts",
            "1",
            "--gap",
            "0",
            "--alpha",
            "0.5",
            "--data",
            str(LOCOMO),
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    p = report["predictor"]
    assert p["enabled"] and p["alpha"] == pytest.approx(0.5) and p["phase"] == "active"
    assert p["deferred_sessions"] == 0  # alpha < 1: every start waited for the scores
    # ... and the sidecar answered them. A reply later than the 120 ms deadline is the daemon's
    # fail-open path (baseline served, counted in score_errors), which a loaded shared host
    # can trigger for any request: it is not what this test checks.
    assert p["score_latency_ms"]["n"] >= 1 and p["score_latency_ms"]["n"] + p["score_errors"] >= 3
    assert report["session_start"]["n"] == 3 and "alpha 0.5" in r.output


def test_bench_predictor_pool_is_checked_before_any_work(tmp_path: Path) -> None:
    """``bench predictor --pool`` takes 10-200 candidates; a bad value fails fast, naming the option."""
    for bad in ("5", "500", "many"):
        r = runner.invoke(app, ["bench", "predictor", "--pool", bad, "--workdir", str(tmp_path / "w")])
        assert r.exit_code == 2 and "--pool" in r.output
    assert not (tmp_path / "w").exists()
    assert "--pool" in runner.invoke(app, ["bench", "predictor", "--help"]).output


def test_predictor_status_reads_as_a_table_and_as_json(start_daemon, monkeypatch):
    d = start_daemon()
    monkeypatch.setenv("MEMLANE_HOME", str(d.home))
    r = runner.invoke(app, ["predictor", "status", "--url", d.url])
    assert r.exit_code == 0, r.output
    assert "[predictor: collecting | 0/10 sessions | baseline only]" in r.output  # the status line, not markup
    assert "collecting (alpha 1.00" in r.output and "model v0, not trained yet" in r.output
    r = runner.invoke(app, ["predictor", "status", "--json", "--url", d.url])
    assert r.exit_code == 0
    st = json.loads(r.output)
    assert st["phase"] == "collecting" and st["alpha"] == 1.0


def test_predictor_status_table_shows_trouble_and_project_slices():
    from rich.console import Console

    from memlane.cli.predictor_cmd import status_table

    st = {
        "enabled": True,
        "phase": "disabled",
        "alpha": 1.0,
        "status_line": "[predictor: disabled | crashes=3/hr]",
        "scored_sessions": 40,
        "score_errors": 7,
        "training": False,
        "score_latency_ms": {"n": 40, "p50": 3.25, "p95": 9.5, "p99": 12.0},
        "state": {
            "success_rate": 0.62,
            "margin_ema": 0.071,
            "training_sessions": 35,
            "comparisons": 33,
            "model_version": 4,
            "last_trained": "2026-11-22T10:00:00Z",
            "drift_resets": 1,
            "drifting": False,
            "project_rates": {"acme": [0.7, 12], "ledger": [0.25, 5]},
        },
        "sidecar": {
            "alive": False,
            "ready": False,
            "disabled": True,
            "pid": None,
            "restarts": 3,
            "crashes_last_hour": 3,
            "error_counts": {"crash": 3, "timeout": 4},
        },
    }
    console = Console(width=200, record=True)
    console.print(status_table(st))
    text = console.export_text()
    for want in (
        "[predictor: disabled | crashes=3/hr]",
        "success rate",
        "0.62",
        "+0.071",
        "40 scored, 7 score errors",
        "model v4, trained 2026-11-22T10:00:00Z",
        "p50 3.2 / p95 9.5 ms over 40",
        "disabled, pid -, 3 restarts, 3 crashes in the last hour",
        "crash 3, timeout 4",
        "acme: 0.70 over 12, ledger: 0.25 over 5",
        "no margins yet; lets the success rate decide alpha",
    ):
        assert want in text, want


def test_predictor_status_table_says_why_the_margin_guard_holds_alpha_at_one():
    """A person asking why alpha is 1 while the success rate is high reads the margin guard's
    reason: the last 20 comparisons average a loss, or the EMA is under 0.05 before the
    window is full."""
    from rich.console import Console

    from memlane.cli.predictor_cmd import status_table

    base = {
        "enabled": True,
        "phase": "active",
        "alpha": 1.0,
        "status_line": "[predictor: active]",
        "scored_sessions": 60,
        "score_errors": 0,
        "training": False,
    }
    losing = {
        **base,
        "state": {
            "success_rate": 0.7,
            "margin_ema": 0.02,
            "cold_start_exited": True,
            "recent_margins": [0.1] * 8 + [-0.1] * 12,
        },
    }
    console = Console(width=240, record=True)
    console.print(status_table(losing))
    text = console.export_text()
    assert "last 20 margins average -0.020" in text
    assert "holds alpha at 1: the last 20 comparisons average a margin of -0.020 NDCG@10" in text
    early = {
        **base,
        "state": {"success_rate": 0.7, "margin_ema": 0.03, "cold_start_exited": True, "recent_margins": [0.03] * 12},
    }
    console = Console(width=240, record=True)
    console.print(status_table(early))
    text = console.export_text()
    assert "the margin EMA is +0.030 NDCG@10 (below 0.05) and the window holds 12 of 20 comparisons" in text
    gaining = {
        **base,
        "state": {"success_rate": 0.7, "margin_ema": 0.0, "cold_start_exited": True, "recent_margins": [0.01] * 20},
    }
    console = Console(width=240, record=True)
    console.print(status_table(gaining))
    assert "last 20 margins average +0.010; lets the success rate decide alpha" in console.export_text()


def test_an_error_a_command_lets_through_is_one_line_not_a_traceback(tmp_path):
    """A real ``python -m memlane`` process: a store path that cannot be opened (its
    memories.db is a directory) ends with one ``error:`` line and exit status 1."""
    import os
    import subprocess
    import sys

    bad = tmp_path / "store"
    (bad / "memories.db").mkdir(parents=True)
    data = tmp_path / "unused.json"  # the store fails to open before the data is read
    data.write_text("[]")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "memlane",
            "bench",
            "sessions",
            "--memories",
            "5",
            "--sessions",
            "1",
            "--no-predictor",
            "--store",
            str(bad),
            "--data",
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(  # the benchmarks package of this checkout
                [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
            ),
        },
    )
    assert proc.returncode == 1, proc.stderr
    assert "error:" in proc.stderr and "cannot open database" in proc.stderr
    assert "Traceback" not in proc.stderr
