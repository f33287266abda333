"""Exploration at session-start: when to swap one injected slot for the candidate both rankings
disagree on most (predictive-memory-scorer.md "Exploration Sampling").

The draw and the swap themselves are :func:`memlane.predictor.policy.pick_exploration` and
:func:`memlane.predictor.policy.exploration_target`; this module decides when they apply (not
during cold start, not when the predictor did not score) and lets a deferred start draw before
the predictor's ranking is known. :class:`memlane.services.predictor_service.PredictorService`
calls these with its ``exploration_rate`` setting and its ``rng``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from memlane.predictor import policy
from memlane.services.predictor_types import RankDecision

__all__ = ["explore", "exploration_drawn"]


def explore(
    injected: Sequence[str], decision: RankDecision, *, rate: float, rng: random.Random, drawn: bool | None = None
) -> tuple[str, str] | None:
    """Maybe swap the lowest injected memory for the largest-disagreement candidate.

    Disabled during cold start and whenever the predictor did not score (seed
    "Exploration Sampling"). ``drawn``: the outcome of :func:`exploration_drawn` when the
    draw was made before the predictor's ranking was known (deferred starts); None draws now
    (probability ``rate``, from ``rng``).
    Returns ``(replaced_id, explored_id)`` or None.
    """
    if not decision.predictor_rank or decision.phase in ("collecting", "disabled"):
        return None
    # the baseline's ranks: the pool's order (the features may carry the shipped base's instead)
    order = decision.request["candidate_ids"] if decision.request is not None else list(decision.features)
    baseline_rank = {m: r for r, m in enumerate(order, 1)}
    if drawn is None:
        return policy.pick_exploration(injected, decision.order, baseline_rank, decision.predictor_rank, rate, rng)
    if not drawn:
        return None
    return policy.exploration_target(injected, decision.order, baseline_rank, decision.predictor_rank)


def exploration_drawn(injected: Sequence[str], decision: RankDecision, *, rate: float, rng: random.Random) -> bool:
    """The epsilon draw of exploration, made before the predictor's ranking is known.

    True with probability ``rate`` (the ``exploration_rate`` setting) when the phase allows
    exploration (not 'collecting' or 'disabled') and something is injected; a start that draws
    True needs the predictor's ranking now (:func:`explore` with ``drawn=True``), the others
    may record it later. The draw consumes the same ``rng`` as :func:`explore`.
    """
    if not injected or rate <= 0 or decision.phase in ("collecting", "disabled"):
        return False
    return rng.random() < rate
