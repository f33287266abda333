"""Predictor policy: RRF fusion, success-rate EMA, cold start, alpha floors, drift, exploration, NDCG."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane.config import predictor as C
from memlane.predictor.policy import (
    PolicyState,
    alpha_for,
    evaluation_ndcg,
    exploration_target,
    ndcg_of_ranking,
    phase_of,
    pick_exploration,
    record_comparison,
    rrf_fuse,
    status_line,
)

WIN = {"predictor_ndcg": 0.9, "baseline_ndcg": 0.5}
LOSS = {"predictor_ndcg": 0.4, "baseline_ndcg": 0.5}
TIE = {"predictor_ndcg": 0.5, "baseline_ndcg": 0.5}


def record(
    state: PolicyState,
    outcome: dict,
    *,
    confidence: float = 0.9,
    project: str | None = None,
    predictor_scored: bool = True,
    min_training_sessions: int = 10,
    train_interval_sessions: int = 1000,
    drift_reset_window: int = 10,
):
    return record_comparison(
        state,
        **outcome,
        confidence=confidence,
        predictor_scored=predictor_scored,
        project=project,
        min_training_sessions=min_training_sessions,
        train_interval_sessions=train_interval_sessions,
        drift_reset_window=drift_reset_window,
    )


def exited_state(success_rate: float, sessions_since_exit: int = 0) -> PolicyState:
    return PolicyState(
        success_rate=success_rate,
        trained=True,
        model_version=1,
        cold_start_exited=True,
        sessions_since_exit=sessions_since_exit,
        training_sessions=50,
        comparisons=50,
        margin_ema=0.1,
        recent_margins=[0.1] * 20,
    )  # above the margin guard's 0.05 and window's 0


# -- RRF ---------------------------------------------------------------------------------------


def test_rrf_matches_hand_computation_with_missing_rank_n_plus_1():
    fused = rrf_fuse(["a", "b", "c"], ["c", "a", "d"], alpha=0.7, k=12)
    # 4 distinct candidates -> a memory missing from one ranking takes rank 5 there.
    expected = {
        "a": 0.7 / 13 + 0.3 / 14,
        "b": 0.7 / 14 + 0.3 / 17,
        "c": 0.7 / 15 + 0.3 / 13,
        "d": 0.7 / 17 + 0.3 / 15,
    }
    assert list(fused) == ["a", "b", "c", "d"]
    assert fused == pytest.approx(expected, rel=1e-12)


def test_rrf_alpha_one_is_pure_baseline_and_alpha_zero_pure_predictor():
    baseline, predictor = ["a", "b", "c"], ["c", "d", "a"]
    only_baseline = rrf_fuse(baseline, predictor, alpha=1.0, k=12)
    assert only_baseline == pytest.approx({"a": 1 / 13, "b": 1 / 14, "c": 1 / 15, "d": 1 / 17}, rel=1e-12)
    only_predictor = rrf_fuse(baseline, predictor, alpha=0.0, k=12)
    assert only_predictor == pytest.approx({"a": 1 / 15, "b": 1 / 17, "c": 1 / 13, "d": 1 / 14}, rel=1e-12)
    assert sorted(only_predictor, key=only_predictor.__getitem__, reverse=True) == ["c", "d", "a", "b"]


def test_rrf_k_changes_the_spread():
    fused = rrf_fuse(["a", "b"], ["a", "b"], alpha=0.5, k=60)
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62}, rel=1e-12)


@pytest.mark.parametrize("alpha,k", [(-0.01, 12), (1.01, 12), (0.5, 0), (0.5, -1)])
def test_rrf_rejects_bad_alpha_or_k(alpha, k):
    with pytest.raises(ValueError):
        rrf_fuse(["a"], ["a"], alpha=alpha, k=k)


def test_rrf_of_empty_rankings_is_empty():
    assert rrf_fuse([], [], alpha=0.5) == {}


ids_strategy = st.lists(st.sampled_from([f"m{i}" for i in range(12)]), unique=True, max_size=12)


@settings(max_examples=200, deadline=None)
@given(baseline=ids_strategy, predictor=ids_strategy, alpha=st.floats(0.0, 1.0), k=st.floats(0.5, 100.0))
def test_rrf_is_monotone_in_both_ranks(baseline, predictor, alpha, k):
    fused = rrf_fuse(baseline, predictor, alpha=alpha, k=k)
    assert set(fused) == set(baseline) | set(predictor)
    n = len(fused)
    rb = {m: baseline.index(m) + 1 if m in baseline else n + 1 for m in fused}
    rp = {m: predictor.index(m) + 1 if m in predictor else n + 1 for m in fused}
    for a in fused:
        for b in fused:
            if rb[a] <= rb[b] and rp[a] <= rp[b]:
                assert fused[a] >= fused[b] - 1e-15
            if alpha >= 1e-6 and rb[a] < rb[b] and rp[a] <= rp[b]:  # strict (no underflow)
                assert fused[a] > fused[b]
    for v in fused.values():
        assert 0 < v <= 1 / (k + 1) + 1e-15


# -- EMA and confidence gate ------------------------------------------------------------------


def test_ema_arithmetic_win_win_loss():
    s = PolicyState()
    out = record(s, WIN)
    assert out.ema_updated and out.won is True
    assert s.success_rate == pytest.approx(0.1)
    record(s, WIN)
    assert s.success_rate == pytest.approx(0.19)
    out = record(s, LOSS)
    assert out.won is False
    assert s.success_rate == pytest.approx(0.171)
    assert s.comparisons == 3 and s.recent_wins == [1, 1, 0]


def test_tie_is_not_a_win_and_moves_no_success_rate():
    s = PolicyState(success_rate=0.5, margin_ema=0.1)
    out = record(s, TIE)
    assert out.won is False and s.success_rate == pytest.approx(0.5)
    # it is a comparison with a margin of 0: the margin EMA and window take it
    assert out.ema_updated and s.comparisons == 1 and s.recent_margins == [0.0]
    assert s.margin_ema == pytest.approx(0.09)
    assert s.recent_wins == []  # a tie decides nothing: it stays out of the cold-start window


def test_a_tie_moves_no_project_slice():
    s = PolicyState()
    record(s, WIN, project="/p/a")
    record(s, TIE, project="/p/a")
    record(s, TIE, project="/p/b")
    assert s.project_rates == {"/p/a": [pytest.approx(0.1), 1]}
    record(s, LOSS, project="/p/b")
    assert s.project_rates["/p/b"] == [0.0, 1]


def test_confidence_gate_059_skipped_06_counted():
    s = PolicyState(success_rate=0.3)
    out = record(s, WIN, confidence=0.59)
    assert not out.ema_updated and out.won is None
    assert s.success_rate == 0.3 and s.comparisons == 0 and s.recent_wins == []
    assert s.training_sessions == 0 and s.sessions_since_train == 0
    out = record(s, WIN, confidence=0.6)
    assert out.ema_updated and out.won is True
    assert s.success_rate == pytest.approx(0.37)
    assert s.comparisons == 1 and s.training_sessions == 1


def test_unscored_or_undefined_ndcg_counts_for_training_but_not_the_ema():
    s = PolicyState()
    assert not record(s, WIN, predictor_scored=False).ema_updated
    assert not record(s, {"predictor_ndcg": None, "baseline_ndcg": None}).ema_updated
    assert not record(s, {"predictor_ndcg": 0.5, "baseline_ndcg": None}).ema_updated
    assert s.comparisons == 0 and s.success_rate == 0.0
    assert s.training_sessions == 3 and s.sessions_since_train == 3


def test_retrain_due_after_train_interval_confident_sessions():
    s = PolicyState()
    assert not record(s, WIN, train_interval_sessions=3).retrain_due
    assert not record(s, WIN, confidence=0.2, train_interval_sessions=3).retrain_due
    assert not record(s, WIN, train_interval_sessions=3).retrain_due
    assert record(s, WIN, train_interval_sessions=3).retrain_due
    assert s.sessions_since_train == 3


# -- cold start --------------------------------------------------------------------------------


def run_comparisons(s: PolicyState, wins: int, total: int, **kw):
    outs = []
    for i in range(total):
        outs.append(record(s, WIN if i < wins else LOSS, **kw))
    return outs


def test_cold_start_exits_when_all_three_conditions_hold():
    s = PolicyState(trained=True, model_version=1)
    outs = run_comparisons(s, wins=5, total=10)
    assert [o.exited_cold_start for o in outs] == [False] * 9 + [True]
    assert s.cold_start_exited and s.sessions_since_exit == 0
    assert alpha_for(s) == pytest.approx(0.8)  # the early-active floor, not 1 - success_rate
    assert phase_of(s) == "active"


def test_cold_start_needs_a_completed_training():
    s = PolicyState(trained=False)
    outs = run_comparisons(s, wins=10, total=10)
    assert not any(o.exited_cold_start for o in outs) and not s.cold_start_exited
    assert alpha_for(s) == 1.0 and phase_of(s) == "collecting"


def test_cold_start_needs_min_training_sessions():
    s = PolicyState(trained=True, model_version=1)
    outs = run_comparisons(s, wins=10, total=10, min_training_sessions=11)
    assert not any(o.exited_cold_start for o in outs) and not s.cold_start_exited
    assert phase_of(s, min_training_sessions=11) == "collecting"
    assert record(s, WIN, min_training_sessions=11).exited_cold_start  # the 11th session


def test_cold_start_needs_more_than_40_percent_wins_over_last_10():
    s = PolicyState(trained=True, model_version=1)
    outs = [record(s, LOSS) for _ in range(6)] + [record(s, WIN) for _ in range(4)]
    assert s.recent_wins == [0] * 6 + [1] * 4  # exactly 40 %: not more than 40 %
    assert not any(o.exited_cold_start for o in outs) and not s.cold_start_exited
    assert alpha_for(s) == 1.0 and phase_of(s) == "warming"
    assert record(s, WIN).exited_cold_start  # the window slides to 5/10
    assert s.recent_wins == [0] * 5 + [1] * 5


def test_cold_start_needs_ten_comparisons_in_the_window():
    s = PolicyState(trained=True, model_version=1, training_sessions=100)
    outs = run_comparisons(s, wins=9, total=9)
    assert not any(o.exited_cold_start for o in outs)
    assert record(s, WIN).exited_cold_start


def test_ties_stay_out_of_the_cold_start_window():
    # The untrained model ranks like the baseline: its sessions tie and must not count as losses.
    s = PolicyState(trained=True, model_version=1)
    outs = [record(s, TIE) for _ in range(9)]
    assert s.recent_wins == [] and not any(o.exited_cold_start for o in outs)
    outs = [record(s, w) for w in (WIN, LOSS, TIE, WIN, LOSS, LOSS, TIE, WIN, LOSS, WIN)]
    assert s.recent_wins == [1, 0, 1, 0, 0, 1, 0, 1] and not s.cold_start_exited  # 8 decisive: not full
    outs = [record(s, LOSS), record(s, TIE), record(s, LOSS)]
    assert s.recent_wins == [1, 0, 1, 0, 0, 1, 0, 1, 0, 0]  # 4 of 10: not more than 40 %
    assert not any(o.exited_cold_start for o in outs)
    assert not record(s, WIN).exited_cold_start  # the oldest win slides out: still 4 of 10
    assert s.recent_wins == [0, 1, 0, 0, 1, 0, 1, 0, 0, 1]
    assert not record(s, TIE).exited_cold_start
    assert record(s, WIN).exited_cold_start  # 5 of 10
    assert s.recent_wins == [1, 0, 0, 1, 0, 1, 0, 0, 1, 1] and alpha_for(s) == pytest.approx(0.8)


def test_a_tie_does_not_push_a_win_out_of_the_window():
    # Counted as a loss, the tie would slide the window to 4/10 and block the exit.
    s = PolicyState(trained=True, model_version=1, training_sessions=100)
    for w in (LOSS, WIN, WIN, LOSS, LOSS, WIN, LOSS, LOSS, WIN):
        assert not record(s, w).exited_cold_start
    assert not record(s, TIE).exited_cold_start  # still 9 decisive comparisons
    assert not record(s, LOSS).exited_cold_start  # 4 wins of 10
    assert record(s, WIN).exited_cold_start  # the window slides to W W L L W L L W L W: 5 of 10
    assert s.recent_wins == [1, 1, 0, 0, 1, 0, 0, 1, 0, 1]


def test_low_confidence_sessions_do_not_count_toward_cold_start():
    s = PolicyState(trained=True, model_version=1)
    run_comparisons(s, wins=10, total=10, confidence=0.5)
    assert s.training_sessions == 0 and s.recent_wins == [] and not s.cold_start_exited


def test_alpha_is_one_before_exit_whatever_the_success_rate():
    s = PolicyState(success_rate=0.95, trained=True, training_sessions=100)
    assert alpha_for(s) == 1.0


# -- alpha floors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sessions_since_exit,expected", [(0, 0.8), (9, 0.8), (10, 0.6), (19, 0.6), (20, 0.1), (100, 0.1)]
)
def test_alpha_floors_after_exit(sessions_since_exit, expected):
    assert alpha_for(exited_state(0.9, sessions_since_exit)) == pytest.approx(expected)


@pytest.mark.parametrize("sessions_since_exit", [0, 9, 10, 19, 20])
def test_floor_never_lowers_alpha(sessions_since_exit):
    assert alpha_for(exited_state(0.1, sessions_since_exit)) == pytest.approx(0.9)


def test_floors_follow_the_session_counter_through_record_comparison():
    s = exited_state(0.9, 0)
    alphas = []
    for _ in range(21):
        alphas.append(alpha_for(s))
        record(s, WIN)
    assert alphas[:10] == [pytest.approx(0.8)] * 10
    assert alphas[10:20] == [pytest.approx(0.6)] * 10
    assert alphas[20] < 0.1  # session 21 after exit: no floor, alpha = 1 - success_rate
    assert s.sessions_since_exit == 21
    assert alpha_for(s) == pytest.approx(1 - s.success_rate) and alpha_for(s) < 0.6


def test_alpha_is_one_while_drifting():
    s = exited_state(0.9, 50)
    s.drifting = True
    assert alpha_for(s) == 1.0 and phase_of(s) == "retraining"
    assert phase_of(s, disabled=True) == "disabled"


# -- drift -------------------------------------------------------------------------------------


def test_drift_reset_after_window_sessions_below_point_three():
    s = exited_state(0.35, 30)
    s.recent_wins = [1] * 10
    rates, outs = [], []
    for _ in range(4):
        outs.append(record(s, LOSS, drift_reset_window=3, project="p"))
        rates.append(s.success_rate)
    # 0.315 (not low), 0.2835 (1), 0.25515 (2), 0.229635 (3 -> reset)
    assert [o.drift_reset for o in outs] == [False, False, False, True]
    assert [o.retrain_due for o in outs] == [False, False, False, True]
    assert rates[:3] == pytest.approx([0.315, 0.2835, 0.25515])
    assert s.success_rate == 0.5 and rates[3] == 0.5
    assert s.drift_resets == 1 and s.drifting and not s.cold_start_exited
    assert s.sessions_since_exit == 0 and s.low_streak == 0 and s.recent_wins == []
    assert alpha_for(s) == 1.0 and phase_of(s) == "retraining"


def test_a_rate_back_above_threshold_restarts_the_low_streak():
    s = exited_state(0.3, 30)
    record(s, LOSS, drift_reset_window=3)  # 0.27 -> 1
    record(s, LOSS, drift_reset_window=3)  # 0.243 -> 2
    assert s.low_streak == 2
    record(s, WIN, drift_reset_window=3)  # 0.3187 -> reset to 0
    assert s.low_streak == 0
    outs = [record(s, LOSS, drift_reset_window=3) for _ in range(3)]  # 0.287, 0.258, 0.232
    assert [o.drift_reset for o in outs] == [False, False, True]


def test_no_cold_start_exit_while_a_drift_retrain_is_pending():
    s = PolicyState(trained=True, model_version=2, drifting=True, training_sessions=100)
    outs = run_comparisons(s, wins=10, total=10)
    assert not any(o.exited_cold_start for o in outs) and not s.cold_start_exited
    s.drifting = False  # the retrain completed
    assert record(s, WIN).exited_cold_start


def test_drift_is_not_counted_before_cold_start_exit():
    s = PolicyState(trained=True, model_version=1, success_rate=0.1)
    outs = run_comparisons(s, wins=0, total=15, drift_reset_window=3)
    assert not any(o.drift_reset for o in outs) and s.drift_resets == 0 and s.low_streak == 0


# -- per-project slices ------------------------------------------------------------------------


def test_project_slices_are_capped_at_five_newest_kept():
    s = PolicyState()
    for p in ["p0", "p1", "p2", "p3", "p4"]:
        record(s, WIN, project=p)
    assert list(s.project_rates) == ["p0", "p1", "p2", "p3", "p4"]
    assert s.project_rates["p0"] == [pytest.approx(0.1), 1]
    record(s, LOSS, project="p0")  # refreshes p0
    assert list(s.project_rates) == ["p1", "p2", "p3", "p4", "p0"]
    assert s.project_rates["p0"] == [pytest.approx(0.09), 2]
    record(s, WIN, project="p5")
    assert len(s.project_rates) == C.MAX_PROJECT_SLICES == 5
    assert list(s.project_rates) == ["p2", "p3", "p4", "p0", "p5"]


def test_project_slice_skipped_without_project_or_confidence():
    s = PolicyState()
    record(s, WIN, project=None)
    record(s, WIN, project="p", confidence=0.1)
    assert s.project_rates == {}


def test_state_round_trips_through_dict():
    s = exited_state(0.42, 7)
    record(s, WIN, project="x")
    again = PolicyState.from_dict({**s.to_dict(), "unknown_future_key": 1})
    assert again == s
    assert PolicyState.from_dict(None) == PolicyState()


# -- alpha property tests -------------------------------------------------------------------------


outcome_strategy = st.fixed_dictionaries(
    {
        "predictor_ndcg": st.one_of(st.none(), st.floats(0.0, 1.0)),
        "baseline_ndcg": st.one_of(st.none(), st.floats(0.0, 1.0)),
        "confidence": st.floats(0.0, 1.0),
        "predictor_scored": st.booleans(),
        "project": st.sampled_from([None, "a", "b", "c", "d", "e", "f", "g"]),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    outcomes=st.lists(outcome_strategy, max_size=80),
    trained=st.booleans(),
    window=st.integers(1, 12),
    min_sessions=st.integers(1, 15),
)
def test_alpha_and_success_rate_stay_in_unit_interval(outcomes, trained, window, min_sessions):
    s = PolicyState(trained=trained, model_version=int(trained))
    for o in outcomes:
        assert 0.0 <= alpha_for(s) <= 1.0
        record_comparison(
            s, min_training_sessions=min_sessions, train_interval_sessions=10, drift_reset_window=window, **o
        )
        assert 0.0 <= s.success_rate <= 1.0
        assert 0.0 <= alpha_for(s) <= 1.0
        assert len(s.project_rates) <= C.MAX_PROJECT_SLICES
        assert len(s.recent_wins) <= C.COLD_START_WINDOW
        if s.cold_start_exited and s.sessions_since_exit < 10 and not s.drifting:
            assert alpha_for(s) >= 0.8
        elif s.cold_start_exited and s.sessions_since_exit < 20 and not s.drifting:
            assert alpha_for(s) >= 0.6


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(0.0, 1.0), n=st.integers(0, 1000), exited=st.booleans(), drifting=st.booleans())
def test_alpha_for_in_unit_interval_for_any_valid_state(rate, n, exited, drifting):
    s = PolicyState(success_rate=rate, cold_start_exited=exited, sessions_since_exit=n, drifting=drifting)
    a = alpha_for(s)
    assert 0.0 <= a <= 1.0
    if not exited or drifting:
        assert a == 1.0


# -- exploration ----------------------------------------------------------------------------------


BASE_RANK = {"i1": 1, "i2": 2, "x": 3, "y": 4, "z": 5, "w": 6, "only_b": 7}
PRED_RANK = {"i1": 30, "i2": 1, "x": 4, "y": 11, "z": 12, "w": 5, "only_p": 40}


def test_exploration_picks_largest_rank_disagreement_and_replaces_lowest_injected():
    candidates = ["i1", "i2", "x", "y", "z", "w", "only_b", "only_p"]
    picked = pick_exploration(["i1", "i2"], candidates, BASE_RANK, PRED_RANK, rate=1.0, rng=random.Random(0))
    # i1 disagrees most (29) but is injected; y and z tie at 7 -> the first in candidate order;
    # only_b / only_p are not ranked by both systems.
    assert picked == ("i2", "y")
    picked = pick_exploration(["i1", "i2"], ["z", "y", "x"], BASE_RANK, PRED_RANK, rate=1.0, rng=random.Random(0))
    assert picked == ("i2", "z")


def test_exploration_rate_zero_never_and_rate_one_always():
    candidates = ["x", "y", "z"]
    for seed in range(200):
        rng = random.Random(seed)
        assert pick_exploration(["i1"], candidates, BASE_RANK, PRED_RANK, rate=0.0, rng=rng) is None
        assert pick_exploration(["i1"], candidates, BASE_RANK, PRED_RANK, rate=1.0, rng=rng) == ("i1", "y")


def test_exploration_none_without_injected_or_eligible_candidate():
    rng = random.Random(0)
    assert pick_exploration([], ["x"], BASE_RANK, PRED_RANK, rate=1.0, rng=rng) is None
    assert pick_exploration(["i1"], ["i1", "only_b", "only_p"], BASE_RANK, PRED_RANK, rate=1.0, rng=rng) is None


def test_exploration_target_is_the_pick_without_the_draw():
    """Deferred session-starts draw first and pick later: the pick is the same function."""
    candidates = ["i1", "i2", "x", "y", "z", "w", "only_b", "only_p"]
    assert (
        exploration_target(["i1", "i2"], candidates, BASE_RANK, PRED_RANK)
        == pick_exploration(["i1", "i2"], candidates, BASE_RANK, PRED_RANK, rate=1.0, rng=random.Random(0))
        == ("i2", "y")
    )
    assert exploration_target([], candidates, BASE_RANK, PRED_RANK) is None
    assert exploration_target(["i1"], ["i1", "only_b", "only_p"], BASE_RANK, PRED_RANK) is None


def test_exploration_is_deterministic_with_a_seeded_rng():
    def decisions(seed: int) -> list:
        rng = random.Random(seed)
        return [pick_exploration(["i1"], ["x", "y"], BASE_RANK, PRED_RANK, rate=0.3, rng=rng) for _ in range(300)]

    first, second = decisions(7), decisions(7)
    assert first == second
    draws = random.Random(7)
    assert [d is not None for d in first] == [draws.random() < 0.3 for _ in range(300)]
    assert any(first) and not all(first)
    assert decisions(8) != first


# -- NDCG ---------------------------------------------------------------------------------------


def test_ndcg_against_hand_computation():
    relevance = {"a": 1.0, "b": 0.5, "c": 0.0, "d": 0.8}
    # DCG = sum rel_i / log2(i + 2), i from 0.
    dcg = 0.0 / 1.0 + 1.0 / math.log2(3) + 0.8 / 2.0 + 0.5 / math.log2(5)
    idcg = 1.0 / 1.0 + 0.8 / math.log2(3) + 0.5 / 2.0 + 0.0 / math.log2(5)
    assert ndcg_of_ranking(["c", "a", "d", "b"], relevance) == pytest.approx(dcg / idcg, rel=1e-12)
    assert dcg / idcg == pytest.approx(0.71023, abs=1e-5)
    assert ndcg_of_ranking(["a", "d", "b", "c"], relevance) == pytest.approx(1.0)


def test_ndcg_truncates_at_10_and_clamps_negative_labels():
    ranking = [f"n{i}" for i in range(10)] + ["hit"]
    assert ndcg_of_ranking(ranking, {"hit": 1.0}) == 0.0  # 11th position does not count
    assert ndcg_of_ranking(ranking[1:], {"hit": 1.0}) == pytest.approx(1 / math.log2(11))
    relevance = {"good": 1.0, "bad": -0.5}
    assert ndcg_of_ranking(["bad", "good"], relevance) == pytest.approx(1 / math.log2(3))
    assert ndcg_of_ranking(["x"], {"x": 0.0, "y": -1.0}) is None
    assert ndcg_of_ranking(["x"], {}) is None
    assert ndcg_of_ranking(["unlabelled", "a"], {"a": 1.0}) == pytest.approx(1 / math.log2(3))


def test_evaluation_ndcg_uses_one_pool_for_both_rankings():
    baseline, predictor, injected = ["a", "b", "c", "d"], ["d", "c", "b", "a"], ["a", "e"]
    labels = {"a": 1.0, "b": 0.2, "d": 0.5, "x": 1.0}
    p, b, relevance = evaluation_ndcg(baseline, predictor, injected, labels, k=2)
    # pool = top2(baseline) U top2(predictor) U injected = {a, b, d, c, e}; x is outside it.
    assert relevance == {"a": 1.0, "b": 0.2, "d": 0.5, "c": 0.0, "e": 0.0}
    idcg = 1.0 + 0.5 / math.log2(3)
    assert p == pytest.approx((0.5 + 0.0 / math.log2(3)) / idcg)
    assert b == pytest.approx((1.0 + 0.2 / math.log2(3)) / idcg)


def test_evaluation_ndcg_none_without_relevant_memory_in_pool():
    p, b, relevance = evaluation_ndcg(["a"], ["b"], ["a"], {"z": 1.0})
    assert p is None and b is None and relevance == {"a": 0.0, "b": 0.0}
    s = PolicyState()
    assert not record(s, {"predictor_ndcg": p, "baseline_ndcg": b}).ema_updated


def test_margin_guard_keeps_alpha_at_one_while_the_predictor_loses_on_average():
    from memlane.config import predictor as C
    from memlane.predictor.policy import PolicyState, alpha_for, record_comparison

    s = PolicyState(
        trained=True,
        cold_start_exited=True,
        sessions_since_exit=30,
        success_rate=0.6,
        margin_ema=0.06,
        recent_margins=[0.02] * C.MARGIN_WINDOW,
    )
    assert alpha_for(s) == pytest.approx(0.4)
    # one small win and one large loss: the window's mean margin turns negative,
    # (18 * 0.02 + 0.05 - 0.5) / 20 = -0.0045 -> no influence
    kw = dict(
        confidence=1.0,
        predictor_scored=True,
        project=None,
        min_training_sessions=10,
        train_interval_sessions=10,
        drift_reset_window=10,
    )
    record_comparison(s, predictor_ndcg=0.55, baseline_ndcg=0.50, **kw)
    record_comparison(s, predictor_ndcg=0.10, baseline_ndcg=0.60, **kw)
    assert sum(s.recent_margins) / C.MARGIN_WINDOW == pytest.approx(-0.0045)
    assert alpha_for(s) == 1.0
    # cold start cannot be exited with a negative margin either
    fresh = PolicyState(trained=True, training_sessions=20, recent_wins=[1] * 10, margin_ema=-0.01)
    record_comparison(fresh, predictor_ndcg=0.7, baseline_ndcg=0.6, **kw)
    assert fresh.margin_ema < 0 or fresh.cold_start_exited
    assert not (fresh.cold_start_exited and fresh.margin_ema < 0)


def test_margin_guard_asks_for_a_gain_of_at_least_0_05_until_the_window_is_full():
    """Before MARGIN_WINDOW comparisons exist, a predictor ahead by less than MARGIN_GUARD_MIN
    on average (margin EMA) has no influence yet."""
    from memlane.config import predictor as C

    s = exited_state(0.9, 30)
    s.recent_margins = [0.1] * (C.MARGIN_WINDOW - 1)
    s.margin_ema = C.MARGIN_GUARD_MIN - 0.001
    assert alpha_for(s) == 1.0
    s.margin_ema = C.MARGIN_GUARD_MIN
    assert alpha_for(s) == pytest.approx(0.1)


def test_a_full_margin_window_decides_alone_and_an_ema_dip_keeps_the_influence():
    """Once the window is full the EMA is not consulted: a run of losses pulls the EMA under
    0.05 while the last 20 margins still average a gain (the simulated user, seed 0, sessions
    112-120), and the predictor keeps its influence; when the window's mean turns into a loss
    it loses it."""
    from memlane.config import predictor as C

    kw = dict(
        confidence=1.0,
        predictor_scored=True,
        project=None,
        min_training_sessions=10,
        train_interval_sessions=10,
        drift_reset_window=1000,
    )  # no drift reset in this test
    s = PolicyState(trained=True, cold_start_exited=True, sessions_since_exit=30, success_rate=0.6)
    for _ in range(15):  # a sustained gain of 0.10
        record_comparison(s, predictor_ndcg=0.60, baseline_ndcg=0.50, **kw)
    for _ in range(5):  # then five losses by 0.05
        record_comparison(s, predictor_ndcg=0.45, baseline_ndcg=0.50, **kw)
    assert len(s.recent_margins) == C.MARGIN_WINDOW
    assert s.margin_ema < C.MARGIN_GUARD_MIN  # the EMA alone would take the influence away
    assert sum(s.recent_margins) / C.MARGIN_WINDOW == pytest.approx(0.0625)
    assert alpha_for(s) == pytest.approx(1.0 - s.success_rate)
    assert alpha_for(s) < 1.0
    for _ in range(9):  # nine more losses: (6 * 0.10 - 14 * 0.05) / 20 = -0.005 < 0
        record_comparison(s, predictor_ndcg=0.45, baseline_ndcg=0.50, **kw)
    assert sum(s.recent_margins) / C.MARGIN_WINDOW == pytest.approx(-0.005)
    assert alpha_for(s) == 1.0


def test_margin_window_keeps_alpha_at_one_when_the_model_loses_on_average():
    """A streak of wins lifts the margin EMA over 0.05 and the success rate stays high, but the
    last 20 margins average a loss: no influence. The window's mean, not the EMA of the last
    ~10 sessions nor the count of wins, says whether the model gains."""
    from memlane.config import predictor as C

    kw = dict(
        confidence=1.0,
        predictor_scored=True,
        project=None,
        min_training_sessions=10,
        train_interval_sessions=10,
        drift_reset_window=1000,
    )  # no drift reset in this test
    s = PolicyState(trained=True, cold_start_exited=True, sessions_since_exit=30, success_rate=0.6)
    # 12 losses by 0.15, then 8 wins by 0.2: mean of the 20 margins (-1.8 + 1.6) / 20 = -0.01
    for _ in range(12):
        record_comparison(s, predictor_ndcg=0.35, baseline_ndcg=0.50, **kw)
    for _ in range(8):
        record_comparison(s, predictor_ndcg=0.70, baseline_ndcg=0.50, **kw)
    assert len(s.recent_margins) == C.MARGIN_WINDOW
    assert s.margin_ema >= C.MARGIN_GUARD_MIN  # the EMA alone would grant influence
    assert sum(s.recent_margins) / C.MARGIN_WINDOW == pytest.approx(-0.01)
    assert alpha_for(s) == 1.0
    # two more wins push two of the losses out: mean (-1.5 + 2.0) / 20 = 0.025 -> influence
    for _ in range(2):
        record_comparison(s, predictor_ndcg=0.70, baseline_ndcg=0.50, **kw)
    assert sum(s.recent_margins) / C.MARGIN_WINDOW == pytest.approx(0.025)
    assert alpha_for(s) == pytest.approx(1.0 - s.success_rate)


def test_margin_window_applies_once_full_and_survives_a_save():
    from memlane.config import predictor as C

    s = exited_state(0.9, 30)
    s.recent_margins = [-0.01] * (C.MARGIN_WINDOW - 1)
    assert alpha_for(s) == pytest.approx(0.1)  # 19 comparisons: not a window yet, the EMA guard decides
    s.recent_margins.append(-0.01)
    assert alpha_for(s) == 1.0  # a full window with a mean loss of 0.01
    s.recent_margins = [0.0] * C.MARGIN_WINDOW
    assert alpha_for(s) == pytest.approx(0.1)  # a window of ties keeps what the success rate earned
    s.recent_margins = [0.2] * C.MARGIN_WINDOW
    assert alpha_for(s) == pytest.approx(0.1)
    back = PolicyState.from_dict(s.to_dict())
    assert back.recent_margins == s.recent_margins and alpha_for(back) == pytest.approx(0.1)
    # a state saved before the window existed loads with an empty one: alpha as before
    old = {k: v for k, v in s.to_dict().items() if k != "recent_margins"}
    loaded = PolicyState.from_dict(old)
    assert loaded.recent_margins == [] and alpha_for(loaded) == pytest.approx(0.1)


def test_margin_window_keeps_only_the_last_eligible_margins():
    from memlane.config import predictor as C

    kw = dict(
        predictor_scored=True, project=None, min_training_sessions=10, train_interval_sessions=10, drift_reset_window=10
    )
    s = PolicyState(trained=True)
    for i in range(C.MARGIN_WINDOW + 5):
        record_comparison(s, predictor_ndcg=0.5 + i / 100, baseline_ndcg=0.5, confidence=1.0, **kw)
    # a low-confidence session and one without a relevant memory do not enter the window
    record_comparison(s, predictor_ndcg=0.0, baseline_ndcg=0.9, confidence=0.3, **kw)
    record_comparison(s, predictor_ndcg=None, baseline_ndcg=None, confidence=1.0, **kw)
    assert s.recent_margins == pytest.approx([i / 100 for i in range(5, C.MARGIN_WINDOW + 5)])


# -- status line -------------------------------------------------------------------------------


def test_status_line_of_every_phase_follows_the_state():
    fresh = PolicyState(training_sessions=3)
    assert phase_of(fresh, min_training_sessions=10) == "collecting"
    assert (
        status_line(fresh, "collecting", min_training_sessions=10)
        == "[predictor: collecting | 3/10 sessions | baseline only]"
    )
    assert (
        status_line(PolicyState(training_sessions=40), "collecting", min_training_sessions=10)
        == "[predictor: collecting | 10/10 sessions | baseline only]"
    )  # never past the minimum
    warming = PolicyState(success_rate=0.375, trained=True, model_version=4, training_sessions=12)
    assert status_line(warming, "warming") == "[predictor: warming | success_rate=0.38 | model_v4 | baseline only]"
    active = exited_state(0.7, sessions_since_exit=30)
    assert phase_of(active) == "active"
    assert (
        status_line(active, "active")
        == f"[predictor: active | success_rate=0.70 | \u03b1={alpha_for(active):.2f} | model_v1 | 50 sessions]"
    )
    assert (
        status_line(active, "disabled", crashes_last_hour=3)
        == "[predictor: disabled | crashes=3/hr | baseline fallback]"
    )
    assert status_line(active, "retraining") == "[predictor: retraining | drift detected | baseline fallback]"


def test_the_margin_guard_reason_is_what_alpha_for_applies():
    """``margin_guard_reason`` names a reason exactly when the guard holds an exited,
    non-drifting predictor at alpha 1, for both forms of the guard."""
    from memlane.config import predictor as C
    from memlane.predictor.policy import margin_guard_reason

    cases = [
        ([0.1] * C.MARGIN_WINDOW, 0.0, None),  # full window with a gain: the EMA is not consulted
        ([-0.01] * C.MARGIN_WINDOW, 0.2, "average a margin of -0.010"),  # full window with a loss
        ([0.0] * C.MARGIN_WINDOW, -0.1, None),  # a window of ties keeps the earned alpha
        ([0.1] * 5, C.MARGIN_GUARD_MIN - 0.01, "holds 5 of 20"),  # early: the EMA decides
        ([0.1] * 5, C.MARGIN_GUARD_MIN, None),
    ]
    for margins, ema, why in cases:
        s = exited_state(0.7, 30)
        s.recent_margins, s.margin_ema = list(margins), ema
        reason = margin_guard_reason(s)
        if why is None:
            assert reason is None and alpha_for(s) == pytest.approx(0.3)
        else:
            assert reason is not None and why in reason and alpha_for(s) == 1.0
