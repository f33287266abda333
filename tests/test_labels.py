"""Training-label rules (``memlane.sessions.labels``) against hand-computed values.

Every expected number below is worked out by hand from the seeds
(predictive-memory-scorer.md "Behavioral Training Signals", "Negative Memory Signals";
agent-relevance-feedback.md "Label Construction (modified)"), not from the code under test.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlane.sessions.labels import (
    CandidateSignals,
    Label,
    SessionOutcome,
    behavioral_outcome,
    build_label,
    evaluation_relevance,
    fts_adjustment,
    is_missing,
)

approx = pytest.approx


def lab(s: SessionOutcome = SessionOutcome(0.6, 0.9), **kw) -> Label:
    kw.setdefault("was_injected", True)
    return build_label(CandidateSignals(**kw), s)


# ------------------------------------------------------------------ small helpers


@pytest.mark.parametrize("hits, expected", [(0, 0.0), (1, 0.5), (2, 1.0), (7, 1.0), (-3, 0.0)])
def test_fts_adjustment(hits: int, expected: float) -> None:
    assert fts_adjustment(hits) == expected


def test_is_missing_only_for_matched_non_injected() -> None:
    assert is_missing(CandidateSignals(was_injected=False, fts_hit_count=1))
    assert not is_missing(CandidateSignals(was_injected=False, fts_hit_count=0))
    assert not is_missing(CandidateSignals(was_injected=True, fts_hit_count=3))


# ------------------------------------------------------------------ agent feedback path


def test_agent_formula_weights_07_02_01() -> None:
    # 0.7 * 0.8 + 0.2 * 0.5 (one FTS hit) + 0.1 * 0.6 = 0.56 + 0.10 + 0.06 = 0.72
    out = lab(SessionOutcome(0.6, 0.9), agent_score=0.8, fts_hit_count=1)
    assert out.value == approx(0.72)
    assert out.raw == approx(0.8)  # raw = the agent's own score
    assert out.reasons == ("agent:0.7*agent+0.2*fts+0.1*continuity",)


def test_agent_formula_two_hits_and_no_hits() -> None:
    # 0.7 * 0.5 + 0.2 * 1.0 + 0.1 * 0.2 = 0.35 + 0.2 + 0.02 = 0.57
    assert lab(SessionOutcome(0.2, 0.9), agent_score=0.5, fts_hit_count=4).value == approx(0.57)
    # "scored 0.8 by agent but never FTS-matched": the formula gives 0.56 + 0.1 * 0.6 = 0.62
    assert lab(SessionOutcome(0.6, 0.9), agent_score=0.8, fts_hit_count=0).value == approx(0.62)


def test_agent_path_ignores_continuity_adjustments() -> None:
    # unused penalty, edited boost and relevance do not apply once the agent rated the memory
    out = lab(SessionOutcome(0.1, 0.9), agent_score=0.5, relevance=1.0, edited_since_start=True)
    assert out.value == approx(0.7 * 0.5 + 0.1 * 0.1)


@pytest.mark.parametrize("score", [0.0, 0.4, 1.0])
def test_agent_zero_with_two_fts_hits_is_at_least_03(score: float) -> None:
    out = lab(SessionOutcome(score, 0.9), agent_score=0.0, fts_hit_count=2)
    # formula: 0 + 0.2 * 1 + 0.1 * score = 0.2 .. 0.3, bumped to 0.3
    assert out.value == approx(0.3)
    assert "agent:zero_but_fts_2x>=0.3" in out.reasons
    assert out.raw == 0.0


def test_agent_zero_with_one_fts_hit_is_not_bumped() -> None:
    out = lab(SessionOutcome(0.4, 0.9), agent_score=0.0, fts_hit_count=1)
    assert out.value == approx(0.2 * 0.5 + 0.1 * 0.4)  # 0.14
    assert "agent:zero_but_fts_2x>=0.3" not in out.reasons


def test_agent_nonzero_is_not_bumped_to_03() -> None:
    out = lab(SessionOutcome(0.0, 0.9), agent_score=-0.2, fts_hit_count=2)
    assert out.value == approx(0.7 * -0.2 + 0.2)  # 0.06


def test_agent_negative_is_clamped_at_minus_05() -> None:
    out = lab(SessionOutcome(0.0, 0.9), agent_score=-1.0)
    assert out.value == -0.5  # -0.7 clamped
    assert out.raw == -0.5  # -1.0 clamped


# ------------------------------------------------------------------ continuity path


def test_injected_high_scoring_session_takes_the_score() -> None:
    out = lab(SessionOutcome(0.7, 0.9))
    assert (out.raw, out.value) == (approx(0.7), approx(0.7))
    assert out.reasons == ("injected:high_scoring_session",)


def test_injected_session_at_exactly_05_is_high() -> None:
    assert lab(SessionOutcome(0.5, 0.9)).value == approx(0.5)


def test_injected_low_scoring_session_is_halved() -> None:
    out = lab(SessionOutcome(0.4, 0.9))
    assert (out.raw, out.value) == (approx(0.2), approx(0.2))
    assert out.reasons == ("injected:low_scoring_session_x0.5",)


def test_injected_with_per_memory_relevance_uses_it() -> None:
    out = lab(SessionOutcome(0.9, 0.9), relevance=0.35)
    assert (out.raw, out.value) == (approx(0.35), approx(0.35))
    assert out.reasons == ("injected:per_memory_relevance",)


def test_injected_and_matched_gets_plus_01_capped_at_1() -> None:
    out = lab(SessionOutcome(0.9, 0.9), relevance=0.6, fts_hit_count=1)
    assert (out.raw, out.value) == (approx(0.6), approx(0.7))
    assert "fts:injected_and_matched+0.1" in out.reasons
    assert lab(SessionOutcome(0.9, 0.9), relevance=0.95, fts_hit_count=3).value == 1.0


def test_unused_penalty_below_03_continuity() -> None:
    # injected, never matched, continuity 0.2 < 0.3: raw 0.2 * 0.5 = 0.1, minus 0.1 = 0.0
    out = lab(SessionOutcome(0.2, 0.9))
    assert out.raw == approx(0.1)
    assert out.value == approx(0.0)
    assert "fts:unused_low_continuity-0.1" in out.reasons
    # at exactly 0.3 there is no penalty: 0.3 * 0.5 = 0.15
    assert lab(SessionOutcome(0.3, 0.9)).value == approx(0.15)
    # a matched memory is not "unused": 0.1 + 0.1
    assert lab(SessionOutcome(0.2, 0.9), fts_hit_count=1).value == approx(0.2)


def test_unused_penalty_can_go_negative_and_is_clamped() -> None:
    # relevance 0 from the judge, continuity 0.1: 0 - 0.1 = -0.1 (within range)
    assert lab(SessionOutcome(0.1, 0.9), relevance=0.0).value == approx(-0.1)


def test_not_injected_true_negative() -> None:
    out = lab(was_injected=False, similarity=0.3)
    assert (out.raw, out.value) == (0.0, 0.0)
    assert out.reasons == ("not_injected:true_negative",)


@pytest.mark.parametrize("sim, expected", [(0.61, 0.25), (0.95, 0.25), (0.6, 0.0), (None, 0.0)])
def test_soft_negative_over_06_similarity(sim: float | None, expected: float) -> None:
    out = lab(was_injected=False, similarity=sim)
    assert out.raw == expected and out.value == expected


@pytest.mark.parametrize(
    "kw, expected, label",
    [
        (dict(was_injected=False, similarity=0.9), 0.0, 0.25),  # soft negative: no evidence of use
        (dict(was_injected=False, similarity=0.3), 0.0, 0.0),
        (dict(was_injected=False, similarity=0.9, fts_hit_count=2), 0.6, 0.6),  # the FTS floor still counts
        (dict(was_injected=False, similarity=0.9, agent_score=1.0), 0.7, 0.76),  # 0.7 * 1 (+ 0.1 * 0.6 trained)
        # rated 0: the session's continuity (0.1 * 0.6) is no evidence this memory was used
        (dict(was_injected=True, similarity=0.9, agent_score=0.0), 0.0, 0.06),
        (dict(was_injected=True, agent_score=0.5, fts_hit_count=1), 0.45, 0.51),  # 0.35 + 0.2 * 0.5
        (dict(was_injected=True, agent_score=0.0, fts_hit_count=2), 0.3, 0.3),  # the FTS bump still counts
        (dict(was_injected=True, similarity=0.9, relevance=0.8), 0.8, 0.8),
        (dict(was_injected=False, similarity=0.9, superseded=True), -0.3, -0.3),
    ],
)
def test_evaluation_relevance_is_the_label_without_the_soft_negative_and_the_rated_continuity(
    kw: dict, expected: float, label: float
) -> None:
    s = SessionOutcome(0.6, 0.9)
    assert evaluation_relevance(CandidateSignals(**kw), s) == approx(expected)
    assert build_label(CandidateSignals(**kw), s).value == approx(label)


def test_not_injected_matched_twice_is_at_least_06() -> None:
    out = lab(was_injected=False, fts_hit_count=2, similarity=0.7)
    assert out.raw == approx(0.25)
    assert out.value == approx(0.6)
    assert "fts:missed_matched_2x>=0.6" in out.reasons
    assert lab(was_injected=False, fts_hit_count=1).value == 0.0  # once is not enough


def test_missing_memory_with_novel_context() -> None:
    s = SessionOutcome(0.5, 0.9, novel_context_count=2)
    # missing (not injected, matched once) + re-explanations: 0.7, +0.1 novel boost = 0.8
    out = lab(s, was_injected=False, fts_hit_count=1)
    assert (out.raw, out.value) == (approx(0.7), approx(0.8))
    assert out.reasons == ("missing:novel_context", "missing:novel_context+0.1")
    # matched twice: max(0.6, 0.7) = 0.7, + 0.1 = 0.8
    assert lab(s, was_injected=False, fts_hit_count=2).value == approx(0.8)
    # never matched: not "missing", the novel boost does not apply
    assert lab(s, was_injected=False, fts_hit_count=0).value == 0.0
    # injected memories never get the missing label
    assert lab(s, fts_hit_count=1).raw == approx(0.5)


def test_access_boost_only_for_non_injected_with_high_count() -> None:
    assert lab(was_injected=False, access_count=10).value == approx(0.05)
    assert lab(was_injected=False, access_count=9).value == 0.0
    assert lab(SessionOutcome(0.6, 0.9), access_count=50).value == approx(0.6)


def test_edited_boost() -> None:
    assert lab(was_injected=False, edited_since_start=True).value == approx(0.05)
    out = lab(SessionOutcome(0.6, 0.9), edited_since_start=True)
    assert out.value == approx(0.65)
    assert "edited:recently+0.05" in out.reasons


def test_clamped_to_one() -> None:
    # relevance 1.0, +0.1 capped at 1.0, +0.05 edited = 1.05, clamped to 1.0
    out = lab(SessionOutcome(1.0, 1.0), relevance=1.0, fts_hit_count=1, edited_since_start=True)
    assert out.value == 1.0
    # access and edited together on a missing memory: 0.7 + 0.05 + 0.05 + 0.1 = 0.9
    s = SessionOutcome(0.5, 0.9, novel_context_count=1)
    assert lab(s, was_injected=False, fts_hit_count=1, access_count=20, edited_since_start=True).value == approx(0.9)


# ------------------------------------------------------------------ negative overrides


def test_superseded_is_minus_03_whatever_else() -> None:
    out = lab(SessionOutcome(1.0, 1.0), relevance=1.0, fts_hit_count=5, superseded=True)
    assert out.value == approx(-0.3)
    assert out.raw == approx(1.0)  # raw keeps the base label
    assert out.reasons[-1] == "negative:superseded"
    assert lab(agent_score=1.0, superseded=True).value == approx(-0.3)


def test_deleted_within_window_is_minus_05_and_beats_superseded() -> None:
    out = lab(SessionOutcome(1.0, 1.0), agent_score=1.0, fts_hit_count=3, superseded=True, deleted_within_window=True)
    assert out.value == -0.5
    assert out.reasons[-1] == "negative:deleted_within_24h"
    assert "negative:superseded" not in out.reasons
    assert out.raw == 1.0


def test_negative_overrides_apply_to_non_injected_too() -> None:
    assert lab(was_injected=False, fts_hit_count=2, superseded=True).value == approx(-0.3)


@given(
    injected=st.booleans(),
    hits=st.integers(0, 20),
    sim=st.none() | st.floats(-1, 1),
    rel=st.none() | st.floats(0, 1),
    agent=st.none() | st.floats(-1, 1),
    sup=st.booleans(),
    dele=st.booleans(),
    access=st.integers(0, 100),
    edited=st.booleans(),
    score=st.floats(0, 1),
    novel=st.integers(0, 5),
)
def test_every_label_is_within_bounds(injected, hits, sim, rel, agent, sup, dele, access, edited, score, novel) -> None:
    c = CandidateSignals(
        was_injected=injected,
        fts_hit_count=hits,
        similarity=sim,
        relevance=rel,
        agent_score=agent,
        superseded=sup,
        deleted_within_window=dele,
        access_count=access,
        edited_since_start=edited,
    )
    out = build_label(c, SessionOutcome(score, 0.8, novel))
    assert -0.5 <= out.value <= 1.0
    assert -0.5 <= out.raw <= 1.0
    if dele:
        assert out.value == -0.5
    elif sup:
        assert out.value == -0.3


# ------------------------------------------------------------------ behavioural outcome


def test_behavioral_outcome_empty() -> None:
    out = behavioral_outcome([])
    assert (out.score, out.confidence, out.novel_context_count) == (0.0, 0.3, 0)


def test_behavioral_outcome_mixed() -> None:
    injected = [
        CandidateSignals(True, agent_score=0.8),  # use 0.8
        CandidateSignals(True, agent_score=-0.5),  # clipped to 0
        CandidateSignals(True, fts_hit_count=1),  # 0.5
        CandidateSignals(True),  # 0
    ]
    out = behavioral_outcome(injected)
    assert out.score == approx((0.8 + 0 + 0.5 + 0) / 4)
    assert out.confidence == approx(0.5 + 0.5 * 2 / 4)


def test_behavioral_outcome_agent_rating_wins_over_hits() -> None:
    out = behavioral_outcome([CandidateSignals(True, agent_score=0.2, fts_hit_count=5)])
    assert out.score == approx(0.2)
    assert out.confidence == approx(1.0)


def test_behavioral_outcome_nothing_observed_is_below_training_gate() -> None:
    out = behavioral_outcome([CandidateSignals(True), CandidateSignals(True)])
    assert out.score == 0.0
    assert out.confidence == approx(0.3) and out.confidence < 0.6


def test_behavioral_outcome_hits_only() -> None:
    out = behavioral_outcome([CandidateSignals(True, fts_hit_count=3), CandidateSignals(True)])
    assert out.score == approx(0.5)  # (1.0 + 0) / 2
    assert out.confidence == approx(0.5)  # observed, but nothing rated
