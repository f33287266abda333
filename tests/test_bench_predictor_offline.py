"""``memlane bench predictor-offline``: the listwise linear model, and the whole command on the
stores of a real (tiny) LoCoMo first pass run through the daemon's session path and sidecar."""

from __future__ import annotations

import json
import math
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks.predictor_locomo import PredictorBenchConfig, ndcg_binary, ordered_questions
from benchmarks.predictor_locomo import run as run_first_pass
from benchmarks.predictor_offline import (
    VARIANTS,
    OfflineSession,
    fit_listwise_linear,
    load_conversation,
    load_first_pass,
    run,
)
from benchmarks.recency_grid import HALF_LIVES_DAYS, WEIGHTS, boosted_ndcg, grid
from memlane.cli.main import app
from memlane.predictor.features import FEATURE_INDEX, NUM_FEATURES
from memlane.ranker.locomo import load_locomo

TOPICS = ["pottery class", "camping trip", "job interview", "adoption agency", "marathon training", "guitar lessons"]


def slates(n: int, *, seed: int = 0, planted: str = "importance"):
    """``n`` slates of 12 candidates; the 3 relevant ones have a high ``planted`` feature and
    the baseline columns carry no signal."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.normal(size=(12, NUM_FEATURES))
        x[:, FEATURE_INDEX["baseline_score"]] = rng.uniform(0, 1, 12)
        x[:, FEATURE_INDEX["baseline_rank_inv"]] = 1.0 / (1.0 + rng.permutation(12))
        y = np.zeros(12)
        y[rng.choice(12, 3, replace=False)] = 1.0
        x[:, FEATURE_INDEX[planted]] += 2.0 * y
        out.append((x, y))
    return out


def ndcg(scores: np.ndarray, labels: np.ndarray, k: int = 10) -> float:
    order = np.argsort(-scores, kind="stable")
    dcg = sum(labels[j] / math.log2(i + 2) for i, j in enumerate(order[:k]))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(labels, reverse=True)[:k]))
    return dcg / ideal


def test_the_linear_model_finds_a_planted_feature():
    ranker = fit_listwise_linear(slates(60))
    weights = ranker.named_weights()
    assert max(weights, key=lambda n: abs(weights[n])) == "importance" and weights["importance"] > 0.5
    held = slates(40, seed=1)
    prior_only = fit_listwise_linear([])  # nothing to learn from: the engine's baseline prior
    learned = np.mean([ndcg(ranker.score(x), y) for x, y in held])
    untrained = np.mean([ndcg(prior_only.score(x), y) for x, y in held])
    assert learned > untrained + 0.3


def test_a_left_out_feature_is_never_read():
    ranker = fit_listwise_linear(slates(60, planted="log_age_days"), leave_out=["log_age_days"])
    assert "log_age_days" not in ranker.named_weights()
    x, _ = slates(1)[0]
    moved = x.copy()
    moved[:, FEATURE_INDEX["log_age_days"]] = np.arange(12) * 10.0
    np.testing.assert_array_equal(ranker.score(x), ranker.score(moved))
    with pytest.raises(KeyError):
        fit_listwise_linear(slates(2), leave_out=["no_such_feature"])


def test_sessions_without_varying_labels_teach_nothing():
    flat = [(x, np.zeros(12)) for x, _ in slates(5)]
    ranker = fit_listwise_linear(flat)
    assert not ranker.weights.any()


def tiny_locomo(path: Path) -> Path:
    """Two conversations of two sessions, six turns each, and questions on single turns."""
    data = []
    for c in range(2):
        conv = {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2_date_time": "3:10 pm on 20 May, 2023",
        }
        qa = []
        for s in (1, 2):
            turns = []
            for t in range(1, 7):
                topic = TOPICS[(t - 1 + 3 * (s - 1) + c) % len(TOPICS)]
                who = "Ana" if t % 2 else "Ben"
                turns.append(
                    {
                        "speaker": who,
                        "dia_id": f"D{s}:{t}",
                        "text": f"I told you about my {topic} in session {s}, part {t} of the story.",
                    }
                )
                qa.append(
                    {
                        "question": f"What did {who} say about the {topic} in session {s}?",
                        "answer": topic,
                        "evidence": [f"D{s}:{t}"],
                        "category": 4,
                    }
                )
            conv[f"session_{s}"] = turns
        data.append({"sample_id": f"conv-t{c}", "conversation": conv, "qa": qa})
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def first_pass(tmp_path_factory, shared_embedder):
    root = tmp_path_factory.mktemp("offline")
    data = tiny_locomo(root / "locomo.json")
    workdir = root / "work"
    report = run_first_pass(
        data,
        embedder=shared_embedder,
        workdir=workdir,
        cfg=PredictorBenchConfig(base=False, pool_size=10, inject_limit=3),
    )
    return data, workdir, report


def test_loads_what_the_first_pass_logged(first_pass):
    data, workdir, report = first_pass
    conv = load_locomo(data)[0]
    rows = {r["question"]: r for r in report["rows"] if r["conversation"] == conv.id}
    sessions = load_conversation(conv, workdir / "user" / conv.id)
    questions = ordered_questions(conv)
    assert [s.key for s in sessions] == [f"{conv.id}-q{q.index}" for q in questions]
    n_train = math.ceil(0.6 * len(questions))
    assert [s.held_out for s in sessions] == [i >= n_train for i in range(len(questions))]
    for s, q in zip(sessions, questions):
        assert s.features.shape == (len(s.ids), NUM_FEATURES) and np.isfinite(s.features).all()
        assert len(s.evidence) == len(q.evidence) == 1
        assert (s.labels is None) == s.held_out
        if s.labels is not None and s.evidence & set(s.ids):
            # the bench rated the evidence it found in the pool 1.0: its stored label (that
            # rating blended with the session's other signals) is the session's highest
            label = s.labels[s.ids.index(next(iter(s.evidence)))]
            assert label > 0 and label == s.labels.max()
        # the loaded pool in baseline order scores what the bench reported for its baseline
        assert ndcg_binary(s.ids, s.evidence, 1) == pytest.approx(rows[q.index]["ndcg10_baseline"])


def test_the_command_reports_every_variant(first_pass, tmp_path):
    data, workdir, report = first_pass
    held = sum(r["held_out"] for r in report["rows"])
    out = tmp_path / "offline.json"
    result = CliRunner().invoke(
        app, ["bench", "predictor-offline", "--workdir", str(workdir), "--data", str(data), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    got = json.loads(out.read_text())
    assert got["held_out_questions"] == held and set(got["variants"]) == set(VARIANTS)
    for name, v in got["variants"].items():
        assert v["overall"]["n"] == held and set(v["per_conversation"]) == {"conv-t0", "conv-t1"}
        assert ("log_age_days" in v["mean_weights"]) == (name in ("own", "others"))
        base = np.mean([r["ndcg10_baseline"] for r in report["rows"] if r["held_out"]])
        assert v["overall"]["mean_b"] == pytest.approx(base)
        fused = v["fused_minus_baseline_by_alpha"]
        assert set(fused) == {"0.8", "0.6", "0.5", "0.4", "0.3"}
        assert all(-1.0 <= d <= 1.0 for d in fused.values())
    assert "others_without_age" in result.output


def test_without_a_first_pass_the_command_says_what_to_run(tmp_path):
    data = tiny_locomo(tmp_path / "locomo.json")
    with pytest.raises(FileNotFoundError, match="first-pass.json"):
        run(tmp_path / "empty", data)
    result = CliRunner().invoke(
        app, ["bench", "predictor-offline", "--workdir", str(tmp_path / "empty"), "--data", str(data)]
    )
    assert result.exit_code == 2
    assert "bench predictor --dataset locomo" in result.output


def test_answerable_dating_cuts_pools_and_recomputes_ages(first_pass):
    data, workdir, _ = first_pass
    conv = load_locomo(data)[0]
    home = workdir / "user" / conv.id
    asked = {s.key: s for s in load_conversation(conv, home)}
    dated = load_conversation(conv, home, dating="answerable")
    assert dated and {s.key for s in dated} <= set(asked)
    conn = sqlite3.connect(f"file:{home / 'memories.db'}?mode=ro", uri=True)
    created = {
        m: datetime.fromisoformat(t.replace("Z", "+00:00"))
        for m, t in conn.execute("SELECT id, created_at FROM memories")
    }
    conn.close()
    age = FEATURE_INDEX["log_age_days"]
    shorter = 0
    for s in dated:
        when = max(created[m] + timedelta(days=float(np.expm1(a))) for m, a in zip(s.ids, s.features[:, age]))
        last_evidence = max(created[m] for m in s.evidence)
        assert all(created[m] <= when for m in s.ids) and when > last_evidence
        assert set(s.ids) <= set(asked[s.key].ids)
        # every age is measured from the new date: younger than when the bench asked
        assert (
            s.features[:, age] <= asked[s.key].features[[asked[s.key].ids.index(m) for m in s.ids], age] + 1e-9
        ).all()
        shorter += len(s.ids) < len(asked[s.key].ids)
    assert shorter > 0  # the first session's questions cannot see the second session's turns
    with pytest.raises(ValueError, match="dating"):
        load_conversation(conv, home, dating="tomorrow")


def test_recency_boosted_baseline_orders_the_pool_by_the_boosted_score(first_pass):
    data, workdir, _ = first_pass
    conv = load_locomo(data)[0]
    home = workdir / "user" / conv.id
    plain = {s.key: s for s in load_conversation(conv, home)}
    bs, br, age = (FEATURE_INDEX[n] for n in ("baseline_score", "baseline_rank_inv", "log_age_days"))
    for s in load_conversation(conv, home, recency=(0.5, 14.0)):
        p = plain[s.key]
        assert sorted(s.ids) == sorted(p.ids)
        expected = {
            m: p.features[j, bs] * (1 + 0.5 * 0.5 ** (np.expm1(p.features[j, age]) / 14.0)) for j, m in enumerate(p.ids)
        }
        np.testing.assert_allclose(s.features[:, bs], [expected[m] for m in s.ids])
        assert list(s.features[:, bs]) == sorted(s.features[:, bs], reverse=True)
        np.testing.assert_allclose(s.features[:, br], 1.0 / (1.0 + np.arange(len(s.ids))))
        if s.labels is not None:
            assert dict(zip(s.ids, s.labels)) == dict(zip(p.ids, p.labels))
    with pytest.raises(ValueError, match="half-life"):
        load_conversation(conv, home, recency=(0.5, 0.0))


def test_the_command_takes_dating_and_recency(first_pass, tmp_path):
    data, workdir, _ = first_pass
    out = tmp_path / "dated.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor-offline",
            "--workdir",
            str(workdir),
            "--data",
            str(data),
            "--out",
            str(out),
            "--dating",
            "answerable",
            "--recency-weight",
            "0.5",
        ],
    )
    assert result.exit_code == 0, result.output
    got = json.loads(out.read_text())
    assert got["dating"] == "answerable" and got["recency"] == [0.5, 14.0]
    bad = CliRunner().invoke(
        app, ["bench", "predictor-offline", "--workdir", str(workdir), "--data", str(data), "--dating", "tomorrow"]
    )
    assert bad.exit_code == 2 and "unknown --dating" in bad.output


def test_stores_without_held_out_questions_are_refused(first_pass, tmp_path):
    data, workdir, _ = first_pass
    saved = json.loads((workdir / "first-pass.json").read_text())
    saved["key"]["config"]["train_share"] = 1.0  # every question learned from: nothing to score
    (tmp_path / "first-pass.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="no held-out"):
        run(tmp_path, data)
    result = CliRunner().invoke(app, ["bench", "predictor-offline", "--workdir", str(tmp_path), "--data", str(data)])
    assert result.exit_code == 2 and "no held-out" in result.output


def test_the_recency_boost_lifts_the_newer_of_two_equal_candidates():
    x = np.zeros((2, NUM_FEATURES))
    x[:, FEATURE_INDEX["baseline_score"]] = 0.5
    x[:, FEATURE_INDEX["log_age_days"]] = np.log1p([100.0, 1.0])  # "old" ranks first in the baseline
    s = OfflineSession("k", False, ["old", "new"], x, np.array([1.0, 0.0]), {"old"})
    assert boosted_ndcg(s, 0.0, 14.0) == 1.0
    assert boosted_ndcg(s, 0.5, 14.0) == pytest.approx(1 / math.log2(3))  # "new" now first
    with pytest.raises(ValueError, match="learning and held-out"):
        grid([s], weights=(0.5,), half_lives=(14.0,))
    with pytest.raises(ValueError, match="> 0"):
        grid([s], weights=(0.0,), half_lives=(14.0,))


def test_recency_grid_picks_on_the_learning_questions_and_reports_the_held_out_ones(first_pass):
    data, workdir, _ = first_pass
    sessions = [s for v in load_first_pass(workdir, data, dating="answerable")[0].values() for s in v]
    bs, age = FEATURE_INDEX["baseline_score"], FEATURE_INDEX["log_age_days"]

    def by_hand(s, w, h):  # the recall's boost on the logged baseline score, then the bench's metric
        boosted = s.features[:, bs] * (1 + w * 0.5 ** (np.expm1(s.features[:, age]) / h))
        return ndcg_binary([s.ids[j] for j in np.argsort(-boosted, kind="stable")], s.evidence, len(s.evidence))

    rep = grid(sessions, weights=(0.5, 2.0), half_lives=(1.0, 30.0))
    learn, held = [s for s in sessions if not s.held_out], [s for s in sessions if s.held_out]
    assert len(rep["points"]) == 4
    for p in rep["points"]:
        assert p["learning"] == pytest.approx(np.mean([by_hand(s, p["weight"], p["half_life_days"]) for s in learn]))
        assert p["held_out"] == pytest.approx(np.mean([by_hand(s, p["weight"], p["half_life_days"]) for s in held]))
    assert rep["baseline"]["held_out"] == pytest.approx(
        np.mean([ndcg_binary(s.ids, s.evidence, len(s.evidence)) for s in held])
    )
    assert rep["picked"]["learning"] == max(p["learning"] for p in rep["points"])
    assert rep["oracle"]["held_out"] == max(p["held_out"] for p in rep["points"])
    assert rep["picked_held_out"]["mean_a"] == pytest.approx(rep["picked"]["held_out"])
    assert rep["picked_held_out"]["mean_b"] == pytest.approx(rep["baseline"]["held_out"])
    assert rep["picked_held_out"]["n"] == len(held)


def test_the_command_runs_the_recency_grid(first_pass, tmp_path):
    data, workdir, _ = first_pass
    out = tmp_path / "grid.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor-offline",
            "--workdir",
            str(workdir),
            "--data",
            str(data),
            "--out",
            str(out),
            "--dating",
            "answerable",
            "--recency-grid",
        ],
    )
    assert result.exit_code == 0, result.output
    got = json.loads(out.read_text())
    assert got["dating"] == "answerable" and len(got["points"]) == len(WEIGHTS) * len(HALF_LIVES_DAYS)
    assert "picked on the learning questions" in result.output
    both = CliRunner().invoke(
        app,
        [
            "bench",
            "predictor-offline",
            "--workdir",
            str(workdir),
            "--data",
            str(data),
            "--recency-grid",
            "--recency-weight",
            "0.5",
        ],
    )
    assert both.exit_code == 2 and "drop --recency-weight" in both.output
