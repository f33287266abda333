"""The retrieval bench runs the shipped settings and says which stages were on (issue 39)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.retrieval import RetrievalConfig, describe_stages, run, stages_of
from memlane.config import Settings


def test_stages_of_the_shipped_settings(tmp_path: Path) -> None:
    st = stages_of(Settings(home=tmp_path))
    assert st["graph_boost"] == {"on": False, "weight": 0.0, "max_share": 0.05}
    assert st["ranker"] == "learned" and st["hints"] is False and st["embedding_reranker"] is False
    assert st["dampening"] == {"gravity": True, "hub": False, "resolution": True}
    line = describe_stages(st)
    for part in (
        "graph boost off",
        "hints off",
        "gravity on",
        "hub off",
        "resolution on",
        "embedding reranker off",
        "ranker learned",
        "alpha 0.7",
    ):
        assert part in line
    on = stages_of(
        Settings(home=tmp_path, memory={"pipelineV2": {"graph": {"boostWeight": 0.15}}}, recall={"ranker": "heuristic"})
    )
    assert "graph boost on (+0.15" in describe_stages(on) and on["ranker"] == "heuristic"


def test_bad_ranker_or_cv_is_refused_before_any_work(tmp_path: Path) -> None:
    for cfg in (RetrievalConfig(ranker="magic"), RetrievalConfig(cv="question")):
        with pytest.raises(ValueError):
            run(tmp_path / "missing.json", embedder=None, config=cfg)


LOCOMO = Path(__file__).resolve().parents[1] / ".." / "shared" / "bench-data" / "locomo" / "locomo10.json"


@pytest.mark.skipif(not LOCOMO.is_file(), reason=f"LoCoMo not found at {LOCOMO}")
def test_latency_bench_times_both_rankers_on_one_daemon(tmp_path: Path) -> None:
    """``bench latency --ranker-paired``: the same queries with each ranker, alternating, and the
    daemon's answers say the ranker asked for answered (a store large enough for the learned one)."""
    import json

    from typer.testing import CliRunner

    from memlane.cli.main import app

    out = tmp_path / "lat.json"
    r = CliRunner().invoke(
        app,
        [
            "bench",
            "latency",
            "--memories",
            "120",
            "--queries",
            "4",
            "--remembers",
            "1",
            "--ranker-paired",
            "--data",
            str(LOCOMO),
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    pr = json.loads(out.read_text())["recall_by_ranker"]
    assert pr["answered"] == {"learned->learned": 4, "heuristic->heuristic": 4}
    assert pr["learned"]["n"] == pr["heuristic"]["n"] == 4 and "alternating" in r.output
