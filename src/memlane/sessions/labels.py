"""Training labels for session candidates: pure rules, no I/O.

Sources (quoted rule by rule below):

* predictive-memory-scorer.md "Training Signals" (label construction), "Behavioral Training
  Signals" (FTS overlap adjustments and the supplementary table), "Negative Memory Signals".
* agent-relevance-feedback.md "Label Construction (modified)": when the agent rated a memory,
  ``label = agent * 0.7 + fts_adjustment * 0.2 + continuity_modifier * 0.1``.

Where the seeds leave a term open, the choice is stated in a constant below and in
docs/sessions.md. Every label is clamped to [-0.5, 1.0]; ``raw_label`` is the base label
before behavioural adjustments and negative overrides, so both can be inspected.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

#: A session whose continuity score is at least this is "high-scoring" (injected label = score).
HIGH_SCORING_SESSION = 0.5
#: Soft-negative threshold: a non-injected candidate this similar to the session context is a
#: possible baseline miss (predictive-memory-scorer.md: negativeSimilarityThreshold, 0.6).
NEGATIVE_SIMILARITY_THRESHOLD = 0.6
SOFT_NEGATIVE_LABEL = 0.25
#: "Memories that existed but weren't injected, where novel_context_count > 0: label = 0.7".
#: Read narrowly: a *missing* memory is a non-injected candidate the session's prompts matched.
MISSING_MEMORY_LABEL = 0.7
FTS_CONFIRM_BOOST = 0.1  # injected and FTS-matched
FTS_MISSED_FLOOR = 0.6  # not injected, FTS-matched >= 2 times
UNUSED_PENALTY = 0.1  # injected, never matched, continuity < 0.3
UNUSED_CONTINUITY = 0.3
HIGH_ACCESS_COUNT = 10  # "access_count high + not injected": +0.05
ACCESS_BOOST = 0.05
EDITED_BOOST = 0.05  # "Memory edited/updated recently": +0.05
NOVEL_CONTEXT_BOOST = 0.1  # "novel_context_count > 0: +0.1 to missing memory labels"
SUPERSEDED_LABEL = -0.3
DELETED_AFTER_INJECTION_LABEL = -0.5
DELETED_WINDOW_HOURS = 24.0
AGENT_WEIGHT, FTS_WEIGHT, CONTINUITY_WEIGHT = 0.7, 0.2, 0.1
#: "Memory scored 0 by agent but matched by FTS 2x: bump to 0.3".
AGENT_ZERO_FTS_BUMP = 0.3
LABEL_MIN, LABEL_MAX = -0.5, 1.0


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    """Session-level inputs: continuity score and confidence in [0, 1], re-explanations."""

    score: float
    confidence: float
    novel_context_count: int = 0


@dataclass(frozen=True, slots=True)
class CandidateSignals:
    """Everything the rules read about one candidate of one session.

    ``similarity`` is the cosine to the session context (None when either side has no
    vector); ``agent_score`` the running mean of agent feedback in [-1, 1] (None if never
    rated); ``relevance`` the continuity scorer's per-memory relevance (None if not rated).
    """

    was_injected: bool
    fts_hit_count: int = 0
    similarity: float | None = None
    relevance: float | None = None
    agent_score: float | None = None
    superseded: bool = False
    deleted_within_window: bool = False
    access_count: int = 0
    edited_since_start: bool = False


@dataclass(frozen=True, slots=True)
class Label:
    """A built label: ``raw`` before adjustments, ``value`` final, ``reasons`` the rules applied."""

    raw: float
    value: float
    reasons: tuple[str, ...] = field(default=())


def _clamp(x: float) -> float:
    return max(LABEL_MIN, min(LABEL_MAX, x))


def is_missing(c: CandidateSignals) -> bool:
    """A non-injected candidate that the session's prompts matched at least once."""
    return not c.was_injected and c.fts_hit_count >= 1


def fts_adjustment(fts_hit_count: int) -> float:
    """FTS term of the agent-feedback formula, in [0, 1]: 0, 0.5 for one hit, 1 for two or more."""
    return min(1.0, max(0, fts_hit_count) / 2.0)


def continuity_label(c: CandidateSignals, s: SessionOutcome) -> tuple[float, list[str]]:
    """The base label from the continuity path (predictive-memory-scorer.md "Training Signals")."""
    if c.was_injected:
        if c.relevance is not None:
            return c.relevance, ["injected:per_memory_relevance"]
        if s.score >= HIGH_SCORING_SESSION:
            return s.score, ["injected:high_scoring_session"]
        return s.score * 0.5, ["injected:low_scoring_session_x0.5"]
    if s.novel_context_count > 0 and is_missing(c):
        return MISSING_MEMORY_LABEL, ["missing:novel_context"]
    if c.similarity is not None and c.similarity > NEGATIVE_SIMILARITY_THRESHOLD:
        return SOFT_NEGATIVE_LABEL, ["not_injected:soft_negative"]
    return 0.0, ["not_injected:true_negative"]


def behavioral_adjust(label: float, c: CandidateSignals, s: SessionOutcome) -> tuple[float, list[str]]:
    """FTS-overlap and supplementary adjustments ("Behavioral Training Signals")."""
    reasons: list[str] = []
    if c.was_injected and c.fts_hit_count >= 1:
        label = min(1.0, label + FTS_CONFIRM_BOOST)
        reasons.append("fts:injected_and_matched+0.1")
    if not c.was_injected and c.fts_hit_count >= 2:
        label = max(FTS_MISSED_FLOOR, label)
        reasons.append("fts:missed_matched_2x>=0.6")
    if c.was_injected and c.fts_hit_count == 0 and s.score < UNUSED_CONTINUITY:
        label -= UNUSED_PENALTY
        reasons.append("fts:unused_low_continuity-0.1")
    if not c.was_injected and c.access_count >= HIGH_ACCESS_COUNT:
        label += ACCESS_BOOST
        reasons.append("access:high_not_injected+0.05")
    if c.edited_since_start:
        label += EDITED_BOOST
        reasons.append("edited:recently+0.05")
    if s.novel_context_count > 0 and is_missing(c):
        label += NOVEL_CONTEXT_BOOST
        reasons.append("missing:novel_context+0.1")
    return label, reasons


def build_label(c: CandidateSignals, s: SessionOutcome) -> Label:
    """The final training label of one candidate.

    Agent feedback present (agent-relevance-feedback.md)::

        label = agent * 0.7 + fts_adjustment * 0.2 + continuity * 0.1
        (agent ~ 0 and FTS-matched >= 2 times: at least 0.3)

    otherwise the continuity label plus the behavioural adjustments. Then the negative
    overrides ("Negative Memory Signals"): deleted within 24 h of injection = -0.5,
    superseded = -0.3. Clamped to [-0.5, 1].
    """
    if c.agent_score is not None:
        raw = c.agent_score
        value = (
            AGENT_WEIGHT * c.agent_score + FTS_WEIGHT * fts_adjustment(c.fts_hit_count) + CONTINUITY_WEIGHT * s.score
        )
        reasons = ["agent:0.7*agent+0.2*fts+0.1*continuity"]
        if abs(c.agent_score) < 1e-9 and c.fts_hit_count >= 2:
            value = max(value, AGENT_ZERO_FTS_BUMP)
            reasons.append("agent:zero_but_fts_2x>=0.3")
    else:
        raw, reasons = continuity_label(c, s)
        value, more = behavioral_adjust(raw, c, s)
        reasons += more
    if c.deleted_within_window:
        value = DELETED_AFTER_INJECTION_LABEL
        reasons.append("negative:deleted_within_24h")
    elif c.superseded:
        value = SUPERSEDED_LABEL
        reasons.append("negative:superseded")
    return Label(raw=_clamp(raw), value=_clamp(value), reasons=tuple(reasons))


def evaluation_relevance(c: CandidateSignals, s: SessionOutcome) -> float:
    """The candidate's relevance for the session-end comparison of the two rankings.

    This is the training label without two terms that are no evidence of use:

    * the soft negative. Seed "Success Rate Tracking" takes the relevance of a non-injected
      memory from "a second lightweight pass, or defaulted to 0.0 if confidently irrelevant".
      The soft negative ("Training Signals": 0.25 when the cosine to the context passes 0.6)
      is a training device. Read as relevance, it pays a ranking for agreeing with the
      baseline's own similarity signal (docs/predictor.md, "The comparison's relevance", has
      how often it decided a comparison).
    * the continuity term of an agent-rated memory (``0.1 * continuity``, one number for the
      whole session). Only shown memories can be rated, so a memory the agent rated 0 would
      still count a little, which pays whichever ranking was served and turns ties into
      baseline "wins" (docs/predictor.md, "Ties move no success rate").

    Agent ratings with their FTS term, judged relevance, FTS evidence and the negative
    overrides count as in :func:`build_label`.

    Returns:
        a relevance in [-0.5, 1].
    """
    if c.agent_score is not None:
        s = replace(s, score=0.0)  # the agent's rating path reads the score only for the continuity term
    return build_label(replace(c, similarity=None), s).value


def behavioral_outcome(injected: list[CandidateSignals]) -> SessionOutcome:
    """A session outcome from behaviour alone, when no LLM judge is configured.

    Score: the mean over injected memories of their evidence of use, each in [0, 1]: the agent's
    rating clipped to [0, 1] when it rated the memory, else ``fts_adjustment``. Confidence:
    0.5 + 0.5 x the share of injected memories the agent rated (0.3 when there is neither
    feedback nor any FTS hit, i.e. nothing was observed; below the 0.6 training gate).
    """
    if not injected:
        return SessionOutcome(score=0.0, confidence=0.3, novel_context_count=0)
    uses = [
        max(0.0, min(1.0, c.agent_score)) if c.agent_score is not None else fts_adjustment(c.fts_hit_count)
        for c in injected
    ]
    rated = sum(c.agent_score is not None for c in injected)
    observed = rated + sum(c.fts_hit_count > 0 for c in injected)
    confidence = 0.5 + 0.5 * rated / len(injected) if observed else 0.3
    return SessionOutcome(score=sum(uses) / len(uses), confidence=confidence)
