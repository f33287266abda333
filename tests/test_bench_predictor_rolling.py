"""``memlane bench predictor-rolling``: its metric and blocks, and the whole command on the store
of a real (short) simulated-user run through the daemon's session path and sidecar."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks.predictor_rolling import graded_ndcg, rolling_blocks, training_window
from benchmarks.predictor_simulated import run_simulated
from memlane.cli.main import app
from memlane.config import predictor as C


def test_graded_ndcg_matches_a_hand_computation():
    labels = np.array([0.0, 1.0, -0.3, 0.5, 0.25])
    order = [0, 3, 1, 2, 4]
    dcg = 0.0 / math.log2(2) + 0.5 / math.log2(3) + 1.0 / math.log2(4) + 0.0 / math.log2(5) + 0.25 / math.log2(6)
    idcg = 1.0 / math.log2(2) + 0.5 / math.log2(3) + 0.25 / math.log2(4)
    assert graded_ndcg(order, labels) == pytest.approx(dcg / idcg)
    assert graded_ndcg([1, 3, 4, 0, 2], labels) == pytest.approx(1.0)
    assert graded_ndcg(order, labels, k=1) == 0.0  # the top slot holds a 0-gain candidate
    assert graded_ndcg([0, 1], np.array([0.0, -0.5])) is None  # no positive label: nothing to rank


def test_training_window_is_the_newest_sessions_first_as_the_sidecar_loads_them():
    sessions = list(range(C.MAX_TRAINING_SESSIONS + 50))  # stand-ins for Session objects, oldest first
    assert training_window(sessions, 3) == [2, 1, 0]
    window = training_window(sessions, len(sessions))
    assert len(window) == C.MAX_TRAINING_SESSIONS
    assert window[0] == len(sessions) - 1 and window[-1] == 50
    assert training_window(sessions, 0) == []


def test_rolling_blocks_test_every_session_after_the_first_training_set_once():
    assert rolling_blocks(65, min_train=20, block=20) == [(20, 40), (40, 60), (60, 65)]
    assert rolling_blocks(20, min_train=20, block=5) == []
    for n, m, b in [(7, 1, 1), (100, 13, 9), (41, 40, 40)]:
        blocks = rolling_blocks(n, min_train=m, block=b)
        covered = [i for s, e in blocks for i in range(s, e)]
        assert covered == list(range(m, n))
    with pytest.raises(ValueError):
        rolling_blocks(10, min_train=0, block=5)
    with pytest.raises(ValueError):
        rolling_blocks(10, min_train=5, block=0)


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory, shared_embedder) -> Path:
    workdir = tmp_path_factory.mktemp("rolling")
    run_simulated(embedder=shared_embedder, workdir=workdir, sessions=36, seed=0)
    return workdir / "simulated-0" / "memories.db"


def by_hand_baseline(db: Path) -> list[float]:
    """Per training-grade session, oldest first: NDCG@10 of the logged baseline order with the
    stored labels as gains, straight from SQL (no memlane code)."""
    conn = sqlite3.connect(db)
    keys = [
        r[0]
        for r in conn.execute(
            """SELECT s.session_key FROM sessions s JOIN session_scores ss ON ss.session_key = s.session_key
           WHERE ss.confidence >= ? AND s.signals IS NOT NULL ORDER BY s.started_at, s.rowid""",
            (C.MIN_SCORER_CONFIDENCE,),
        )
    ]
    out = []
    for key in keys:
        rows = conn.execute(
            """SELECT baseline_rank, COALESCE(label, 0) FROM session_memories
                               WHERE session_key = ? AND features IS NOT NULL ORDER BY rank, id""",
            (key,),
        ).fetchall()
        labels = [lab for _, lab in rows]
        if len(rows) < 2 or max(labels) - min(labels) <= 1e-6:
            continue  # no ranking signal: the engine never trains or tests on it
        gains = [max(lab, 0.0) for _, lab in sorted(rows, key=lambda r: r[0] if r[0] is not None else 10**9)]
        ideal = sorted(gains, reverse=True)
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:10]))
        out.append(sum(g / math.log2(i + 2) for i, g in enumerate(gains[:10])) / idcg if idcg > 0 else None)
    conn.close()
    return out


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_command_evaluates_a_real_store_read_only(sim_store, tmp_path):
    before = digest(sim_store)
    out = tmp_path / "rolling.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor-rolling",
            "--store",
            str(sim_store.parent),
            "--min-train",
            "10",
            "--block",
            "8",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert digest(sim_store) == before  # read only
    got = json.loads(out.read_text())
    hand = by_hand_baseline(sim_store)
    assert got["sessions"] == len(hand) > 10
    tested = [h for h in hand[10:] if h is not None]
    assert got["tested"] == len(tested) == sum(b["tested"] for b in got["blocks"])
    assert [b["trained"] for b in got["blocks"]] == [
        s for s, _ in rolling_blocks(len(hand), min_train=10, block=8) if any(h is not None for h in hand[s : s + 8])
    ]
    for b in got["blocks"]:
        block = [h for h in hand[b["trained"] : b["trained"] + 8] if h is not None]
        assert b["baseline"] == pytest.approx(float(np.mean(block)))
        assert b["stage"] == "linear" and isinstance(b["accepted"], bool)
        assert 0.0 <= b["engine"] <= 1.0 and 0.0 <= b["ceiling"] <= 1.0
    for name in ("engine_vs_baseline", "ceiling_vs_baseline", "engine_vs_ceiling"):
        assert got[name]["n"] == len(tested)
    assert got["engine_vs_baseline"]["mean_b"] == pytest.approx(float(np.mean(tested)))
    assert got["engine_vs_ceiling"]["mean_a"] == pytest.approx(got["engine_vs_baseline"]["mean_a"])
    assert "engine minus baseline" in result.output
    # the early summary: exactly the sessions of the blocks trained on fewer than 50 (all here)
    assert got["early"] == 50 and got["engine_vs_baseline_early"]["n"] == len(tested)
    assert got["engine_vs_baseline_early"]["diff"] == pytest.approx(got["engine_vs_baseline"]["diff"])
    assert "blocks trained on fewer than 50 sessions" in result.output
    assert got["fresh"] is False and got["accepted_trainings"] == sum(b["accepted"] for b in got["blocks"])
    # from scratch before every block: the same sessions, the same baseline and ceiling
    fresh = tmp_path / "fresh.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor-rolling",
            "--store",
            str(sim_store),
            "--min-train",
            "10",
            "--block",
            "8",
            "--fresh",
            "--out",
            str(fresh),
        ],
    )
    assert result.exit_code == 0, result.output
    again = json.loads(fresh.read_text())
    assert again["fresh"] is True and again["tested"] == got["tested"]
    # --early 18: only the blocks trained on 10 sessions (18 and 26 are not below it)
    early = tmp_path / "early.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor-rolling",
            "--store",
            str(sim_store),
            "--min-train",
            "10",
            "--block",
            "8",
            "--early",
            "18",
            "--out",
            str(early),
        ],
    )
    assert result.exit_code == 0, result.output
    part = json.loads(early.read_text())
    first = [b for b in part["blocks"] if b["trained"] < 18]
    assert part["engine_vs_baseline_early"]["n"] == sum(b["tested"] for b in first) < part["tested"]
    assert part["engine_vs_baseline_early"]["mean_b"] == pytest.approx(
        float(np.mean([h for h in hand[10:18] if h is not None]))
    )
    # --early at or below --min-train: no block qualifies, no summary
    none = tmp_path / "none.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor-rolling",
            "--store",
            str(sim_store),
            "--min-train",
            "10",
            "--block",
            "8",
            "--early",
            "10",
            "--out",
            str(none),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(none.read_text())["engine_vs_baseline_early"] is None
    assert "blocks trained on fewer than" not in result.output
    assert [b["ceiling"] for b in again["blocks"]] == pytest.approx([b["ceiling"] for b in got["blocks"]])


def test_the_command_explains_what_it_cannot_read(sim_store, tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["bench", "predictor-rolling", "--store", str(tmp_path / "nope.db")])
    assert missing.exit_code == 2 and "no memlane store" in missing.output
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    bad = runner.invoke(app, ["bench", "predictor-rolling", "--store", str(junk)])
    assert bad.exit_code == 2 and "not a readable memlane store" in bad.output
    few = runner.invoke(app, ["bench", "predictor-rolling", "--store", str(sim_store), "--min-train", "500"])
    assert few.exit_code == 2 and "need more than --min-train 500" in few.output
    no_dim = runner.invoke(
        app, ["bench", "predictor-rolling", "--store", str(sim_store), "--embedding-model", "some-model"]
    )
    assert no_dim.exit_code == 2 and "--native-dim" in no_dim.output
