"""``memlane bench predictor --dataset simulated --seeds``: the seed list, the per-target
aggregate, and the whole command on two short real runs (daemon session path and sidecar)."""

from __future__ import annotations

import json
import statistics

import pytest
from rich.console import Console
from typer.testing import CliRunner

from benchmarks.predictor_simulated import summarize
from benchmarks.predictor_simulated_seeds import MAX_SEEDS, parse_seeds, render_seeds, summarize_seeds
from memlane.cli.main import app


@pytest.mark.parametrize(
    "text, seeds",
    [
        ("0-7", [0, 1, 2, 3, 4, 5, 6, 7]),
        ("0,1,4", [0, 1, 4]),
        ("0-3, 6", [0, 1, 2, 3, 6]),
        ("5", [5]),
        ("2,0-3", [2, 0, 1, 3]),  # order as given, repeats dropped
    ],
)
def test_parse_seeds_reads_lists_and_ranges(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not a seed"),
        ("3-1", "backwards"),
        ("a", "not a seed"),
        ("-1", "not a seed"),
        ("0,,1", "not a seed"),
        (f"0-{MAX_SEEDS}", f"at most {MAX_SEEDS}"),
        ("1.5", "not a seed"),
    ],
)
def test_parse_seeds_refuses_what_is_not_a_seed_list(text, message):
    with pytest.raises(ValueError, match=message):
        parse_seeds(text)


def rows_for(n: int, fused_gain: float, *, exit_at: int | None, alpha_from: int | None) -> list[dict]:
    """``n`` session rows as run_simulated writes them: baseline 0.4, fused 0.4 + gain from
    session 60 on, the predictor 0.05 above fused; active from ``exit_at`` (1-based), alpha
    0.4 from ``alpha_from``."""
    rows = []
    for i in range(n):
        s = i + 1
        fused = 0.4 + (fused_gain if i >= 60 else 0.0)
        rows.append(
            {
                "session": i,
                "phase": "active" if exit_at is not None and s >= exit_at else "warming",
                "alpha": 0.4 if alpha_from is not None and s >= alpha_from else 1.0,
                "drift_resets": 0,
                "ndcg10_baseline": 0.4,
                "ndcg10_fused": fused,
                "ndcg10_predictor": fused + 0.05,
            }
        )
    return rows


def report_for(seed: int, rows: list[dict]) -> dict:
    return {"seed": seed, "rows": rows, **summarize(rows, 100, seed=seed)}


def test_summarize_seeds_counts_each_target_and_averages_over_the_seeds_that_reach_it():
    reports = [
        report_for(0, rows_for(200, 0.12, exit_at=20, alpha_from=45)),
        report_for(1, rows_for(200, 0.08, exit_at=40, alpha_from=90)),
        report_for(2, rows_for(200, 0.20, exit_at=None, alpha_from=None)),
    ]
    agg = summarize_seeds(reports)
    assert agg["n_seeds"] == 3
    assert agg["targets_met"] == {
        "cold_start_exit_by_30": 1,
        "alpha_le_0_5_by_80": 1,
        "last50_fused_ge_baseline_plus_0.10": 2,
        "recovery_within_20": 3,
    }
    assert agg["mean"]["last50_fused_vs_baseline"] == pytest.approx((0.12 + 0.08 + 0.20) / 3)
    assert agg["mean"]["last50_predictor_vs_baseline"] == pytest.approx((0.17 + 0.13 + 0.25) / 3)
    assert agg["mean"]["cold_start_exit_session"] == pytest.approx(30.0)  # seed 2 never exits: left out
    assert agg["mean"]["alpha_le_0_5_session"] == pytest.approx((45 + 90) / 2)
    assert agg["missing"] == {"cold_start_exit_session": [2], "alpha_le_0_5_session": [2]}
    pooled = agg["last50_fused_vs_baseline_pooled"]
    assert pooled["n"] == 150
    assert pooled["diff"] == pytest.approx(agg["mean"]["last50_fused_vs_baseline"])
    assert pooled["lo"] <= pooled["diff"] <= pooled["hi"]
    with pytest.raises(ValueError):
        summarize_seeds([])


def test_the_table_names_each_missed_target_with_the_digits_that_miss_it():
    reports = [
        report_for(0, rows_for(200, 0.0996, exit_at=20, alpha_from=45)),
        report_for(1, rows_for(200, 0.12, exit_at=31, alpha_from=None)),
    ]
    combined = {
        "sessions": 200,
        "aggregate": summarize_seeds(reports),
        "per_seed": [{k: v for k, v in r.items() if k != "rows"} for r in reports],
    }
    console = Console(record=True, width=220)
    render_seeds(console, combined)
    text = console.export_text()
    seed0 = next(line for line in text.splitlines() if line.startswith("│ 0 "))
    assert "+0.100 [" in seed0 and "last-50 (+0.0996)" in seed0  # rounded in the table, missed all the same
    seed1 = next(line for line in text.splitlines() if line.startswith("│ 1 "))
    assert "exit (31)" in seed1 and "alpha (never)" in seed1 and "last-50" not in seed1
    assert "cold start exit by 30 on 1/2 seeds" in text and "last-50 fused >= baseline + 0.10 on 1/2" in text
    assert "not reached (left out of the means): {'alpha_le_0_5_session': [1]}" in text


def test_the_command_runs_each_seed_and_saves_each_report_beside_the_aggregate(tmp_path):
    out = tmp_path / "seeds.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor",
            "--dataset",
            "simulated",
            "--seeds",
            "0,1",
            "--sessions",
            "14",
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    combined = json.loads(out.read_text())
    assert combined["seeds"] == [0, 1]
    per_seed = [json.loads((tmp_path / f"seeds-seed{s}.json").read_text()) for s in (0, 1)]
    for s, report in zip((0, 1), per_seed):
        assert report["seed"] == s and len(report["rows"]) == 14
        assert (tmp_path / "work" / f"simulated-{s}" / "memories.db").is_file()
    assert [r["seed"] for r in combined["per_seed"]] == [0, 1]
    assert "rows" not in combined["per_seed"][0]
    # the pooled comparison is over both users' sessions, as their own reports give them
    diffs = [r["ndcg10_fused"] - r["ndcg10_baseline"] for report in per_seed for r in report["rows"]]
    pooled = combined["aggregate"]["last50_fused_vs_baseline_pooled"]
    assert pooled["n"] == 28 and pooled["diff"] == pytest.approx(statistics.fmean(diffs))
    assert "targets met:" in result.output and "pooled (28 sessions)" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "simulated", "--seeds", "3-1"], "runs backwards"),
        (["--dataset", "locomo", "--seeds", "0-1"], "use it with --dataset simulated"),
    ],
)
def test_the_command_refuses_a_bad_seed_list_before_any_work(tmp_path, args, message):
    result = CliRunner().invoke(app, ["bench", "predictor", *args, "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "w").exists()
