"""The ``bmad`` methodology: epics split into stories and tasks, worked by the analyst, PM,
architect, developer, QA and scrum-master agents (seed memory-system-v3-design.md section 3
"Built-in Plugin Implementations", bmadPlugin)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlane.errors import ValidationError
from memlane.v3.methodology.plugin import MethodologyPlugin, RelayFilter, RelayTransition, state_list, state_str


class BmadPlugin(MethodologyPlugin):
    """Epic / story / task work units; phases as the seed's ``bmadPlugin.mapPhase``."""

    id = "bmad"
    display_name = "BMAD (Epic/Story)"
    phase_map = {
        "analyst": "define",
        "pm": "define",
        "architect": "define",
        "story_creation": "define",
        "dev": "implement",
        "story_development": "implement",
        "qa": "validate",
        "story_acceptance": "validate",
        "sm": "reflect",
        "retrospective": "reflect",
    }
    work_unit_keys = ("epic", "story", "task")
    label_keys = {"epic": "epic_label", "story": "story_label"}
    relays = (
        RelayTransition("analyst", "architect"),
        RelayTransition("architect", "dev"),
        RelayTransition("dev", "qa"),
        RelayTransition("qa", "sm", RelayFilter(types=("decision", "module_insight"))),
    )
    #: Claude Code sub-agents named after the BMAD agents.
    hook_agents = {"analyst": "analyst", "pm": "pm", "architect": "architect", "dev": "dev", "qa": "qa", "sm": "sm"}
    plan_mode_phase = "story_creation"

    def format_work_state(self, methodology_state: Mapping[str, Any]) -> str:
        """``{"stories_completed": [str], "current_story": str, "acceptance_criteria_status":
        {criterion: status}}`` (the seed's BMAD work state) as lines; "" when all are empty.

        Raises:
            ValidationError: a key holding a value of the wrong shape.
        """
        done = state_list(methodology_state, "stories_completed")
        current = state_str(methodology_state, "current_story")
        criteria = methodology_state.get("acceptance_criteria_status") or {}
        if not isinstance(criteria, Mapping) or not all(isinstance(v, str) for v in criteria.values()):
            raise ValidationError(
                "methodology_state.acceptance_criteria_status: expected {criterion: status}",
                details={"field": "methodology_state.acceptance_criteria_status"},
            )
        lines = []
        if done:
            lines.append("Stories completed: " + ", ".join(done))
        if current:
            lines.append(f"Current story: {current}")
        lines += [f"Acceptance criterion {c}: {s}" for c, s in criteria.items()]
        return "\n".join(lines)
