"""Hand-computed checks for benchmarks.metrics (and a smoke test of report)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from rich.console import Console

from benchmarks import metrics as M
from benchmarks.report import REFERENCE, reference_table, render_table, write_json

L3, L4 = math.log2(3), math.log2(4)


# ------------------------------------------------------------------ recall


@pytest.mark.parametrize(
    ("ranked", "relevant", "k", "expected"),
    [
        (["a", "b", "c", "d"], {"b", "d", "x"}, 1, 0.0),
        (["a", "b", "c", "d"], {"b", "d", "x"}, 2, 1 / 3),
        (["a", "b", "c", "d"], {"b", "d", "x"}, 4, 2 / 3),
        (["a", "b", "c", "d"], {"b", "d", "x"}, 100, 2 / 3),  # k > len(ranked)
        (["a", "b"], {"a", "b"}, 2, 1.0),
        (["p", "q", "r"], {"a", "b"}, 3, 0.0),  # no relevant in list
        ([], {"a"}, 5, 0.0),  # empty ranking
        (["a", "a", "b"], {"a", "b"}, 2, 0.5),  # duplicate takes a slot, counts once
        (["a", "a", "b"], {"a", "b"}, 3, 1.0),
        (["a", "a", "a"], {"a", "b"}, 3, 0.5),
    ],
)
def test_recall_at_k(ranked, relevant, k, expected):
    assert M.recall_at_k(ranked, relevant, k) == pytest.approx(expected)


def test_recall_any_and_all():
    ranked = ["x", "a", "y", "b"]
    rel = {"a", "b"}
    assert M.recall_any_at_k(ranked, rel, 1) == 0.0
    assert M.recall_any_at_k(ranked, rel, 2) == 1.0
    assert M.recall_all_at_k(ranked, rel, 2) == 0.0
    assert M.recall_all_at_k(ranked, rel, 4) == 1.0
    assert M.recall_all_at_k(ranked, rel, 50) == 1.0  # k > len
    assert M.recall_any_at_k(["p", "q"], rel, 10) == 0.0  # none relevant
    assert M.recall_all_at_k(["p", "q"], rel, 10) == 0.0
    # duplicates never complete the set
    assert M.recall_all_at_k(["a", "a", "a"], rel, 3) == 0.0
    assert M.recall_any_at_k(["a", "a", "a"], rel, 3) == 1.0


@pytest.mark.parametrize("fn", [M.recall_at_k, M.recall_any_at_k, M.recall_all_at_k, M.ndcg_at_k])
def test_empty_relevant_and_bad_k_rejected(fn):
    with pytest.raises(ValueError, match="empty"):
        fn(["a"], set(), 5)
    with pytest.raises(ValueError, match="k must be"):
        fn(["a"], {"a"}, 0)


# -------------------------------------------------------------------- ndcg


def test_ndcg_hand_computed():
    # hits at ranks 2 and 3; ideal has both at ranks 1 and 2
    expected = (1 / L3 + 1 / L4) / (1 + 1 / L3)
    assert M.ndcg_at_k(["a", "b", "c"], {"b", "c"}, 3) == pytest.approx(expected)
    assert expected == pytest.approx(0.693426, abs=1e-6)
    # perfect ranking
    assert M.ndcg_at_k(["b", "c", "a"], {"b", "c"}, 3) == pytest.approx(1.0)
    # IDCG uses min(|relevant|, k): one slot, filled with a relevant id -> 1.0
    assert M.ndcg_at_k(["a", "z"], {"a", "b", "c"}, 1) == pytest.approx(1.0)
    # no relevant in the list
    assert M.ndcg_at_k(["x", "y"], {"a"}, 10) == 0.0
    # k larger than list: single relevant at rank 2
    assert M.ndcg_at_k(["x", "a"], {"a"}, 100) == pytest.approx(1 / L3)
    # duplicate of a relevant id earns no second gain
    assert M.ndcg_at_k(["a", "a"], {"a", "b"}, 2) == pytest.approx(1 / (1 + 1 / L3))


def _ndcg_numpy(ranked, relevant, k):
    """Direct numpy reference: first-occurrence binary gains, log2 discount."""
    top = list(ranked)[:k]
    first = np.array([top.index(x) == i for i, x in enumerate(top)], dtype=bool)
    gains = np.array([x in relevant for x in top], dtype=float) * first
    disc = 1.0 / np.log2(np.arange(2, len(top) + 2))
    ideal = 1.0 / np.log2(np.arange(2, min(len(relevant), k) + 2))
    return float((gains * disc).sum() / ideal.sum())


def test_ndcg_matches_numpy_reference():
    rng = np.random.default_rng(1234)
    universe = [f"D{s}:{t}" for s in range(1, 6) for t in range(1, 11)]
    for _ in range(300):
        n = int(rng.integers(0, 40))
        ranked = list(rng.choice(universe, size=n, replace=bool(rng.integers(0, 2))))
        relevant = set(rng.choice(universe, size=int(rng.integers(1, 8)), replace=False))
        k = int(rng.integers(1, 60))
        assert M.ndcg_at_k(ranked, relevant, k) == pytest.approx(_ndcg_numpy(ranked, relevant, k))
        val = M.recall_at_k(ranked, relevant, k)
        assert val == pytest.approx(len(set(ranked[:k]) & relevant) / len(relevant))


# --------------------------------------------------------------- sessions


def test_session_mapping():
    assert M.session_of("D3:7") == "D3"
    assert M.session_of("D12:1") == "D12"
    assert M.session_ranking(["D3:7", "D1:2", "D3:1", "D2:5", "D1:9"]) == ["D3", "D1", "D2"]
    assert M.session_relevant(["D3:7", "D3:8", "D10:1"]) == {"D3", "D10"}


def test_session_level_metrics():
    ranked = ["D3:7", "D3:1", "D1:2", "D2:5", "D4:4"]
    evidence = {"D2:1", "D2:9", "D4:4"}  # sessions D2, D4
    # session ranking D3, D1, D2, D4
    assert M.session_recall_at_k(ranked, evidence, 2) == 0.0
    assert M.session_recall_at_k(ranked, evidence, 3) == 0.5
    assert M.session_recall_at_k(ranked, evidence, 4) == 1.0
    assert M.session_recall_any_at_k(ranked, evidence, 3) == 1.0
    assert M.session_recall_all_at_k(ranked, evidence, 3) == 0.0
    assert M.session_recall_all_at_k(ranked, evidence, 10) == 1.0
    expected = (1 / math.log2(4) + 1 / math.log2(5)) / (1 + 1 / L3)
    assert M.session_ndcg_at_k(ranked, evidence, 10) == pytest.approx(expected)
    # turn level on the same input, for contrast: only D4:4 at rank 5
    assert M.recall_at_k(ranked, evidence, 10) == pytest.approx(1 / 3)


# -------------------------------------------------------------- aggregate


def test_score_question_and_aggregate():
    r1 = M.score_question(["D1:1", "D1:2"], ["D1:1"], 1, qid="a")  # perfect
    r2 = M.score_question(["D9:9"] * 3, ["D1:1", "D2:2"], 1)  # nothing
    r3 = M.score_question(["D2:2", "D1:1"], ["D1:1", "D2:2"], 4)  # both found
    r4 = M.score_question(["D1:1"], [], 3)  # excluded
    assert r1["qid"] == "a" and r1["turn"]["R@5"] == 1.0 and r1["session"]["NDCG@10"] == 1.0
    assert r2["turn"]["R@50"] == 0.0 and r2["session"]["any@10"] == 0.0
    assert r4["excluded"] and r4["turn"] == {}
    agg = M.aggregate([r1, r2, r3, r4])
    assert agg["units"] == "percent"
    ov = agg["overall"]
    assert (ov["n"], ov["excluded"]) == (3, 1)
    assert ov["turn"]["R@5"] == pytest.approx(200 / 3)
    assert ov["turn"]["all@10"] == pytest.approx(200 / 3)
    assert set(ov["turn"]) == set(ov["session"]) == set(M.METRICS)
    assert list(agg["by_category"]) == [1, 3, 4]
    c1 = agg["by_category"][1]
    assert c1["name"] == "multi-hop" and c1["n"] == 2 and c1["turn"]["R@10"] == pytest.approx(50.0)
    c3 = agg["by_category"][3]
    assert c3["n"] == 0 and c3["excluded"] == 1 and c3["turn"]["R@5"] is None
    assert agg["by_category"][4]["session"]["NDCG@10"] == pytest.approx(100.0)
    assert M.category_counts([r1, r2, r3, r4]) == {1: 2, 3: 1, 4: 1}


def test_metric_names():
    assert list(M.METRICS) == ["R@5", "R@10", "R@25", "R@50", "any@5", "any@10", "all@5", "all@10", "NDCG@10"]


# ------------------------------------------------------------- percentile


def test_percentile_hand_and_numpy():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert M.percentile(xs, 50) == 2.5
    assert M.percentile(xs, 95) == pytest.approx(3.85)
    assert M.percentile(xs, 0) == 1.0 and M.percentile(xs, 100) == 4.0
    assert M.percentile([7.0], 99) == 7.0
    rng = np.random.default_rng(7)
    for _ in range(50):
        vals = rng.exponential(10.0, size=int(rng.integers(1, 200)))
        for p in (50, 95, 99, 12.5):
            assert M.percentile(vals, p) == pytest.approx(float(np.percentile(vals, p)))
    with pytest.raises(ValueError):
        M.percentile([], 50)
    with pytest.raises(ValueError):
        M.percentile([1.0], 101)
    s = M.latency_summary([1.0, 2.0, 3.0, 4.0])
    assert s["n"] == 4 and s["p50"] == 2.5 and s["max"] == 4.0 and s["mean"] == 2.5


# ----------------------------------------------------------------- report


def test_render_table_and_json(tmp_path):
    rows = [
        M.score_question(["D1:1", "D2:2"], ["D2:2"], 2),
        M.score_question(["D1:1"], ["D1:1"], 5),
        M.score_question([], [], 3),
    ]
    agg = M.aggregate(rows)
    console = Console(record=True, width=250)
    console.print(render_table(agg))
    console.print(reference_table())
    out = console.export_text()
    for needle in (
        "overall",
        "2 temporal",
        "5 adversarial",
        "session",
        "63.1",
        "81.5",
        "100.0",
        "56.7",
        "82.7",
        "45.4",
        "69.4",
        "LoCoMo paper, Table 3",
        "excl.",
    ):
        assert needle in out, needle
    assert "56.7" not in _text(render_table(agg, reference=False))
    assert [r["R@5"] for r in REFERENCE] == [56.7, 45.4]

    path = write_json(tmp_path / "sub" / "result.json", {"agg": agg, "rows": rows, "x": np.float64(1 / 3)})
    data = json.loads(path.read_text())
    assert data["x"] == 1 / 3  # full float precision
    assert data["agg"]["overall"]["turn"]["R@5"] == agg["overall"]["turn"]["R@5"]
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temp left behind


def _text(table) -> str:
    console = Console(record=True, width=250)
    console.print(table)
    return console.export_text()
