"""How much the predictor may influence a ranking: RRF fusion, the success-rate EMA, alpha.

Pure functions and one state record, no I/O (predictive-memory-scorer.md "Ranking Fusion",
"Success Rate Tracking", "Cold Start", "Exploration Sampling", "Phase 5b: Concept Drift
Detection"). The daemon keeps a :class:`PolicyState` in ``predictor_state`` and updates it
once per session-end comparison with :func:`record_comparison`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memlane.config import predictor as C
from memlane.ndcg import ndcg_at_k

__all__ = [
    "ComparisonOutcome",
    "PolicyState",
    "alpha_for",
    "evaluation_ndcg",
    "exploration_target",
    "margin_guard_reason",
    "ndcg_of_ranking",
    "phase_of",
    "pick_exploration",
    "record_comparison",
    "rrf_fuse",
    "status_line",
]


@dataclass
class PolicyState:
    """The daemon's view of the predictor's track record (persisted as JSON).

    Attributes:
        success_rate: EMA (factor 0.1) of session wins over the decisive comparisons (a tie
            leaves it unchanged, see :func:`record_comparison`), [0, 1]; starts at 0 (no record).
        comparisons: EMA-eligible comparisons seen.
        recent_wins: wins (1/0) of the last ``COLD_START_WINDOW`` decisive comparisons (eligible
            ones whose two NDCG@10 differ; a tie decides nothing, see :func:`record_comparison`).
        trained: a training run has been accepted at least once.
        model_version: version of the model serving (0 = untrained).
        cold_start_exited: all three exit conditions were met once (reset by drift).
        sessions_since_exit: eligible sessions since cold start exited (drives the floors).
        low_streak: consecutive eligible sessions with success_rate < 0.3.
        drift_resets: drift resets so far.
        drifting: a drift reset happened and its retrain has not completed yet.
        training_sessions: training-grade sessions seen (confidence >= 0.6).
        sessions_since_train: training-grade sessions since the last training run.
        project_rates: per-project ``{project: [ema, count]}`` slices (at most 5, newest kept).
        last_trained: ISO time of the last accepted training run.
        margin_ema: EMA (factor 0.1) of ``predictor_ndcg - baseline_ndcg`` over every
            EMA-eligible comparison, ties included at 0 (memlane's margin guard, see
            :func:`alpha_for`).
        recent_margins: ``predictor_ndcg - baseline_ndcg`` (NDCG@10 points, in [-1, 1]) of the
            last :data:`~memlane.config.predictor.MARGIN_WINDOW` EMA-eligible comparisons,
            oldest first (the margin window, see :func:`alpha_for`). A state saved before this
            field existed loads with an empty window (no window check until it holds 20).
        canary_seen: canary members the live model's lineage has trained on, as the last
            ``train_from_db`` reply listed them (its ``canary_seen``).
        trained_through: start time (ISO) of the newest training-grade session when the last
            run read its sessions; sessions that started later are unseen by the live model.
    """

    success_rate: float = 0.0
    comparisons: int = 0
    recent_wins: list[int] = field(default_factory=list)
    trained: bool = False
    model_version: int = 0
    cold_start_exited: bool = False
    sessions_since_exit: int = 0
    low_streak: int = 0
    drift_resets: int = 0
    drifting: bool = False
    training_sessions: int = 0
    sessions_since_train: int = 0
    project_rates: dict[str, list[float]] = field(default_factory=dict)
    last_trained: str | None = None
    margin_ema: float = 0.0
    recent_margins: list[float] = field(default_factory=list)
    canary_seen: list[str] = field(default_factory=list)
    trained_through: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> PolicyState:
        if not raw:
            return cls()
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def status_line(state: PolicyState, phase: str, *, crashes_last_hour: int = 0, min_training_sessions: int = 10) -> str:
    """The one-line status of the session-start block (seed "4.x Agent-facing status").

    Args:
        phase: :func:`phase_of` the state (collecting, warming, active, disabled, retraining).
        crashes_last_hour: sidecar crashes in the last hour (shown when disabled).
    """
    s = state
    if phase == "disabled":
        return f"[predictor: disabled | crashes={crashes_last_hour}/hr | baseline fallback]"
    if phase == "retraining":
        return "[predictor: retraining | drift detected | baseline fallback]"
    if phase == "collecting":
        need = min_training_sessions
        return f"[predictor: collecting | {min(s.training_sessions, need)}/{need} sessions | baseline only]"
    if phase == "warming":
        return f"[predictor: warming | success_rate={s.success_rate:.2f} | model_v{s.model_version} | baseline only]"
    return (
        f"[predictor: active | success_rate={s.success_rate:.2f} | \u03b1={alpha_for(s):.2f} | "
        f"model_v{s.model_version} | {s.training_sessions} sessions]"
    )


def phase_of(state: PolicyState, *, disabled: bool = False, min_training_sessions: int = 10) -> str:
    """The status-line phase: disabled, retraining, collecting, warming or active (seed 4.x)."""
    if disabled:
        return "disabled"
    if state.drifting:
        return "retraining"
    if not state.trained or state.training_sessions < min_training_sessions:
        return "collecting"
    return "active" if state.cold_start_exited else "warming"


def alpha_for(state: PolicyState) -> float:
    """The baseline's weight alpha in [0, 1] (seed "Success Rate Tracking" and "Cold Start").

    ``alpha = 1 - success_rate`` once cold start has exited, never below the early-active
    floors (0.8 for the first 10 sessions after exit, 0.6 for sessions 11-20); 1.0 before
    exit and while a drift retrain is pending.

    memlane adds a margin guard, in two forms that never apply together:

    * **Before the margin window is full** (fewer than
      :data:`~memlane.config.predictor.MARGIN_WINDOW` (20) eligible comparisons), alpha is
      1.0 while the EMA of the NDCG margin is below
      :data:`~memlane.config.predictor.MARGIN_GUARD_MIN` (0.05). The seed's success rate
      counts wins, not their size: a predictor that wins often by small margins and loses the
      rest by large ones would earn influence and cost the user NDCG. The guard asks for a gain
      of 0.05 rather than of 0 because a model that gains a little on the sessions it learns
      from can still lose on the sessions that follow (docs/predictor.md, "Margin guard").
    * **Once the window is full**, the window alone decides: alpha is 1.0 while the mean margin
      of the last 20 is below :data:`~memlane.config.predictor.MARGIN_WINDOW_MIN` (0: a
      model that loses on average has no influence; a window of ties keeps what the success
      rate earned). The EMA (factor 0.1) weighs the last ~10 sessions: per-session margins
      vary so much that it crosses 0.05 every few sessions, and asking both statistics to pass
      would take the influence away on each dip of either (docs/predictor.md, "Margin guard"
      and "The margin window asks for a gain above 0").

    Influence does not wait for a full window: until it is full the EMA guard decides
    (docs/predictor.md, "Margin window", has why).
    """
    if not state.cold_start_exited or state.drifting or margin_guard_reason(state) is not None:
        return 1.0
    alpha = 1.0 - state.success_rate
    n = state.sessions_since_exit
    step = C.EARLY_ACTIVE_RAMP_SESSIONS // len(C.EARLY_ACTIVE_ALPHA_FLOORS)
    for i, floor in enumerate(C.EARLY_ACTIVE_ALPHA_FLOORS):
        if n < step * (i + 1):
            return max(alpha, floor)
    return min(max(alpha, 0.0), 1.0)


def margin_guard_reason(state: PolicyState) -> str | None:
    """Why the margin guard of :func:`alpha_for` holds alpha at 1 for ``state``, or None.

    Until :data:`~memlane.config.predictor.MARGIN_WINDOW` (20) eligible comparisons exist
    the margin EMA decides (below :data:`~memlane.config.predictor.MARGIN_GUARD_MIN`,
    0.05); from then on the mean margin (predictor minus baseline NDCG@10) of the last 20
    (below :data:`~memlane.config.predictor.MARGIN_WINDOW_MIN`, 0). Cold start and drift,
    which also hold alpha at 1, are not the guard's and give None here.

    Returns:
        one sentence for a person (``memlane predictor status``), or None when the guard
        lets the success rate decide.
    """
    window = state.recent_margins[-C.MARGIN_WINDOW :]
    if len(window) >= C.MARGIN_WINDOW:
        mean = sum(window) / len(window)
        if mean < C.MARGIN_WINDOW_MIN:
            return (
                f"the last {len(window)} comparisons average a margin of {mean:+.3f} NDCG@10 "
                f"(below {C.MARGIN_WINDOW_MIN:g}: the model loses on average)"
            )
        return None
    if state.margin_ema < C.MARGIN_GUARD_MIN:
        return (
            f"the margin EMA is {state.margin_ema:+.3f} NDCG@10 (below {C.MARGIN_GUARD_MIN:g}) "
            f"and the window holds {len(window)} of {C.MARGIN_WINDOW} comparisons"
        )
    return None


def rrf_fuse(baseline: Sequence[str], predictor: Sequence[str], alpha: float, k: float = 12.0) -> dict[str, float]:
    """Reciprocal Rank Fusion of two rankings (seed "Ranking Fusion"; Cormack et al. 2009).

    ``score = alpha / (k + rank_baseline) + (1 - alpha) / (k + rank_predictor)`` with 1-based
    ranks; a memory missing from one ranking takes rank ``N + 1`` there (N = number of
    distinct candidates).

    Args:
        baseline: memory ids, best first.
        predictor: memory ids, best first.
        alpha: the baseline's weight in [0, 1].
        k: the RRF constant (> 0).

    Returns:
        ``{memory_id: fused score}`` over the union of both rankings.

    Raises:
        ValueError: alpha outside [0, 1] or k <= 0.
    """
    if not 0.0 <= alpha <= 1.0 or k <= 0:
        raise ValueError(f"alpha must be in [0, 1] and k > 0, got alpha={alpha}, k={k}")
    ids = list(dict.fromkeys([*baseline, *predictor]))
    missing = len(ids) + 1
    rb = {m: i + 1 for i, m in enumerate(baseline)}
    rp = {m: i + 1 for i, m in enumerate(predictor)}
    return {m: alpha / (k + rb.get(m, missing)) + (1.0 - alpha) / (k + rp.get(m, missing)) for m in ids}


def ndcg_of_ranking(ranking: Sequence[str], relevance: Mapping[str, float], k: int = C.NDCG_K) -> float | None:
    """NDCG@k of a ranking against graded relevance (seed "NDCG"): :func:`memlane.ndcg.ndcg_at_k`
    with its defaults (negative labels count as 0 gain, memories missing from ``relevance``
    have gain 0, the ideal over every value of ``relevance``).

    Returns:
        NDCG in [0, 1], or ``None`` when no memory has positive relevance (undefined).

    Raises:
        ValueError: ``k < 1``.
    """
    return ndcg_at_k(ranking, relevance, k)


def evaluation_ndcg(
    baseline: Sequence[str],
    predictor: Sequence[str],
    injected: Sequence[str],
    labels: Mapping[str, float],
    k: int = C.NDCG_K,
) -> tuple[float | None, float | None, dict[str, float]]:
    """NDCG@k of both rankings over one evaluation pool (seed "Success Rate Tracking").

    ``pool = top-k(baseline) U top-k(predictor) U injected``; each memory's relevance is its
    label (0.0 when it has none). Each ranking is restricted to the pool.

    Returns:
        ``(predictor_ndcg, baseline_ndcg, relevance)``; both NDCGs are None when nothing in
        the pool has positive relevance.
    """
    pool = list(dict.fromkeys([*baseline[:k], *predictor[:k], *injected]))
    relevance = {m: float(labels.get(m, 0.0) or 0.0) for m in pool}
    members = set(pool)
    p = ndcg_of_ranking([m for m in predictor if m in members], relevance, k)
    b = ndcg_of_ranking([m for m in baseline if m in members], relevance, k)
    return p, b, relevance


@dataclass(frozen=True)
class ComparisonOutcome:
    """What :func:`record_comparison` decided for one session."""

    ema_updated: bool
    won: bool | None
    exited_cold_start: bool = False
    drift_reset: bool = False
    retrain_due: bool = False


def _ema(old: float, x: float) -> float:
    return (1.0 - C.EMA_ALPHA) * old + C.EMA_ALPHA * x


def record_comparison(
    state: PolicyState,
    *,
    predictor_ndcg: float | None,
    baseline_ndcg: float | None,
    confidence: float,
    predictor_scored: bool,
    project: str | None,
    min_training_sessions: int,
    train_interval_sessions: int,
    drift_reset_window: int,
) -> ComparisonOutcome:
    """Update ``state`` in place after a session-end comparison.

    The EMA moves only when the session is confident (>= 0.6), the predictor scored the
    session, and the pool held a relevant memory; a win is ``predictor_ndcg > baseline_ndcg``
    (seed "Success Rate Tracking"); its margin ``predictor_ndcg - baseline_ndcg`` moves the
    margin EMA and enters the margin window (the last ``MARGIN_WINDOW``, see :func:`alpha_for`).
    Cold start exits when trained, at least ``min_training_sessions`` training-grade sessions
    were seen and more than 40 % of the last 10 *decisive* comparisons were wins.

    A tie (``predictor_ndcg == baseline_ndcg``) moves neither the success rate, nor its
    project's slice, nor the cold-start window; it enters the margin EMA and the margin window
    as a margin of 0. Both rankings put the labelled memories at the same places (or both
    missed them), so it says nothing about which one is better. The seed counts it as a loss
    (``session_win = predictor_ndcg > baseline_ndcg``). Most ties come before the first
    training, when the untrained model's ranking is the baseline's own. Once the session-end
    relevance stopped paying the served ranking for memories the agent rated 0
    (:func:`memlane.sessions.labels.evaluation_relevance`), ties are also most of LoCoMo's
    comparisons, and as losses they would hold a predictor that wins most decisive comparisons
    at alpha 1 and set off drift resets (docs/predictor.md, "Ties move no success rate"). The
    margin guard of :func:`alpha_for` still holds alpha at 1 for a model that does not gain.

    A drift reset (success rate < 0.3 for ``drift_reset_window`` consecutive sessions after
    exit) sets alpha back to 1.0, the EMA to 0.5 and asks for a retrain (seed "Phase 5b").
    Every training-grade session counts toward the retrain interval.
    """
    confident = confidence >= C.MIN_SCORER_CONFIDENCE
    if confident:
        state.training_sessions += 1
        state.sessions_since_train += 1
    eligible = confident and predictor_scored and predictor_ndcg is not None and baseline_ndcg is not None
    won: bool | None = None
    exited = drift = False
    if eligible:
        won = bool(predictor_ndcg > baseline_ndcg)  # type: ignore[operator]
        decisive = predictor_ndcg != baseline_ndcg
        if decisive:
            state.success_rate = _ema(state.success_rate, 1.0 if won else 0.0)
        margin = float(predictor_ndcg) - float(baseline_ndcg)  # type: ignore[arg-type]
        state.margin_ema = _ema(state.margin_ema, margin)
        state.recent_margins = [*state.recent_margins, margin][-C.MARGIN_WINDOW :]
        state.comparisons += 1
        if decisive:
            state.recent_wins = [*state.recent_wins, int(won)][-C.COLD_START_WINDOW :]
        if project and decisive:
            ema, n = state.project_rates.pop(project, [0.0, 0])
            state.project_rates[project] = [_ema(ema, 1.0 if won else 0.0), n + 1]
            while len(state.project_rates) > C.MAX_PROJECT_SLICES:
                state.project_rates.pop(next(iter(state.project_rates)))
        if state.cold_start_exited:
            state.sessions_since_exit += 1
            state.low_streak = state.low_streak + 1 if state.success_rate < C.DRIFT_RESET_THRESHOLD else 0
            if state.low_streak >= drift_reset_window:
                drift = True
                state.drift_resets += 1
                state.drifting = True
                state.cold_start_exited = False
                state.sessions_since_exit = 0
                state.low_streak = 0
                state.success_rate = C.DRIFT_RESET_EMA
                state.recent_wins = []
        elif (
            state.trained
            and not state.drifting
            and state.training_sessions >= min_training_sessions
            and state.margin_ema >= 0
            and len(state.recent_wins) >= C.COLD_START_WINDOW
            and sum(state.recent_wins) / len(state.recent_wins) > C.COLD_START_MIN_SUCCESS
        ):
            state.cold_start_exited = True
            state.sessions_since_exit = 0
            exited = True
    due = drift or (confident and state.sessions_since_train >= train_interval_sessions)
    return ComparisonOutcome(
        ema_updated=eligible, won=won, exited_cold_start=exited, drift_reset=drift, retrain_due=due
    )


def pick_exploration(
    injected: Sequence[str],
    candidates: Sequence[str],
    baseline_rank: Mapping[str, int],
    predictor_rank: Mapping[str, int],
    rate: float,
    rng: random.Random,
) -> tuple[str, str] | None:
    """Epsilon-greedy exploration (seed "Exploration Sampling").

    With probability ``rate``, the lowest injected memory is replaced by the non-injected
    candidate with the largest ``|baseline_rank - predictor_rank|`` (:func:`exploration_target`).

    Returns:
        ``(replaced_id, explored_id)`` or None (no draw, nothing injected, or no candidate
        ranked by both).
    """
    if not injected or rate <= 0 or rng.random() >= rate:
        return None
    return exploration_target(injected, candidates, baseline_rank, predictor_rank)


def exploration_target(
    injected: Sequence[str],
    candidates: Sequence[str],
    baseline_rank: Mapping[str, int],
    predictor_rank: Mapping[str, int],
) -> tuple[str, str] | None:
    """The exploration swap once the draw said explore: ``(lowest injected id, the non-injected
    candidate with the largest |baseline_rank - predictor_rank|)`` (first in ``candidates`` order
    on a tie), or None when nothing is injected or no candidate is ranked by both."""
    if not injected:
        return None
    shown = set(injected)
    best, best_delta = None, -1
    for m in candidates:
        if m in shown or m not in baseline_rank or m not in predictor_rank:
            continue
        delta = abs(baseline_rank[m] - predictor_rank[m])
        if delta > best_delta:
            best, best_delta = m, delta
    return (injected[-1], best) if best is not None else None
