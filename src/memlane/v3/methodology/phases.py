"""The six universal phases and the type weights per phase (seed memory-system-v3-design.md
section 3 "Universal Phases", section 7 "Phase-Aware Re-Ranking").

Retrieval only ever sees a universal phase: a methodology's own phase names are mapped by its
plugin (:mod:`memlane.v3.methodology.plugin`) before they reach recall or session ranking.
"""

from __future__ import annotations

from typing import Final

from memlane.errors import ValidationError

#: The universal phases, in the seed's order.
UNIVERSAL_PHASES: Final[tuple[str, ...]] = ("define", "implement", "validate", "refine", "explore", "reflect")

#: ``PHASE_WEIGHTS[phase][type]``: the factor a memory's score is multiplied by in that phase
#: (seed section 7, the table as written). A type the table does not list for a phase (the
#: seed leaves some out, e.g. ``preference`` under ``refine``) and every non-V3 type (``fact``,
#: ``constraint``...) weigh 1.0: neither favoured nor held back.
PHASE_WEIGHTS: Final[dict[str, dict[str, float]]] = {
    "define": {
        "requirement": 1.5,
        "decision": 1.3,
        "workflow_recipe": 1.5,
        "task_calibration": 1.4,
        "pattern": 1.2,
        "work_state": 1.1,
        "preference": 1.0,
        "module_insight": 1.0,
        "gotcha": 0.8,
        "error_pattern": 0.7,
        "causal_dependency": 0.9,
        "dead_end": 1.2,
        "e2e_observation": 0.6,
        "prefetch_pattern": 0.5,
        "work_unit_outcome": 1.0,
        "context_cost": 1.3,
    },
    "implement": {
        "gotcha": 1.5,
        "error_pattern": 1.3,
        "causal_dependency": 1.3,
        "pattern": 1.2,
        "module_insight": 1.2,
        "prefetch_pattern": 1.1,
        "work_state": 1.0,
        "dead_end": 1.3,
        "workflow_recipe": 1.4,
        "work_unit_outcome": 0.9,
        "e2e_observation": 0.7,
        "requirement": 0.8,
        "decision": 0.7,
        "task_calibration": 0.5,
        "preference": 0.9,
        "context_cost": 0.4,
    },
    "validate": {
        "error_pattern": 1.5,
        "requirement": 1.4,
        "e2e_observation": 1.5,
        "gotcha": 1.2,
        "decision": 1.1,
        "module_insight": 0.9,
        "dead_end": 0.8,
        "work_state": 0.5,
        "prefetch_pattern": 0.3,
        "causal_dependency": 1.0,
        "task_calibration": 0.8,
        "workflow_recipe": 0.6,
        "work_unit_outcome": 1.1,
        "context_cost": 0.3,
    },
    "refine": {
        "pattern": 1.4,
        "error_pattern": 1.3,
        "gotcha": 1.2,
        "dead_end": 1.4,
        "decision": 1.0,
        "module_insight": 1.1,
        "work_state": 0.9,
        "requirement": 0.7,
        "e2e_observation": 0.8,
        "workflow_recipe": 1.0,
        "causal_dependency": 1.1,
        "work_unit_outcome": 0.8,
        "context_cost": 0.4,
    },
    "explore": {
        "decision": 1.4,
        "module_insight": 1.3,
        "pattern": 1.2,
        "workflow_recipe": 1.1,
        "requirement": 1.0,
        "preference": 1.0,
        "dead_end": 0.9,
        "work_unit_outcome": 1.0,
        "gotcha": 0.8,
        "error_pattern": 0.7,
        "e2e_observation": 0.9,
        "causal_dependency": 1.1,
        "task_calibration": 0.6,
        "context_cost": 0.5,
    },
    "reflect": {
        "work_unit_outcome": 1.5,
        "task_calibration": 1.4,
        "dead_end": 1.3,
        "error_pattern": 1.2,
        "decision": 1.2,
        "module_insight": 1.1,
        "e2e_observation": 1.0,
        "work_state": 0.7,
        "gotcha": 0.8,
        "context_cost": 1.3,
        "workflow_recipe": 0.6,
        "prefetch_pattern": 0.4,
    },
}


def check_phase(value: object, field: str = "phase") -> str:
    """``value`` if it is a universal phase.

    Raises:
        ValidationError: anything else, naming ``field`` and the six phases.
    """
    if not isinstance(value, str) or value not in UNIVERSAL_PHASES:
        raise ValidationError(f"{field}: must be one of {', '.join(UNIVERSAL_PHASES)}", details={"field": field})
    return value


def phase_weight(phase: str | None, memory_type: str) -> float:
    """The seed's weight of ``memory_type`` in ``phase`` (unitless, 0.3 to 1.5); 1.0 when
    ``phase`` is None or the table has no entry for the type.

    Raises:
        KeyError: ``phase`` is not a universal phase (callers check it with :func:`check_phase`).
    """
    if phase is None:
        return 1.0
    return PHASE_WEIGHTS[phase].get(memory_type, 1.0)
