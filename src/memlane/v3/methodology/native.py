"""The ``native`` methodology: specs split into subtasks, worked by planner, coder and QA
agents (seed memory-system-v3-design.md section 3 "Built-in Plugin Implementations", nativePlugin)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlane.v3.methodology.plugin import MethodologyPlugin, RelayFilter, RelayTransition, state_list, state_str


class NativePlugin(MethodologyPlugin):
    """Spec / subtask work units; phases as the seed's ``nativePlugin.mapPhase``."""

    id = "native"
    display_name = "Auto Claude (Subtasks)"
    phase_map = {
        "planning": "define",
        "spec": "define",
        "coding": "implement",
        "qa_review": "validate",
        "qa_fix": "refine",
        "debugging": "refine",
        "insights": "explore",
    }
    work_unit_keys = ("spec", "subtask")
    relays = (
        RelayTransition("planner", "coder"),
        RelayTransition("coder", "qa_reviewer"),
        RelayTransition("qa_reviewer", "qa_fixer", RelayFilter(types=("error_pattern", "requirement"))),
    )
    #: Claude Code sub-agents named after the native stages.
    hook_agents = {"planner": "planning", "coder": "coding", "qa_reviewer": "qa_review", "qa_fixer": "qa_fix"}
    plan_mode_phase = "planning"

    def format_work_state(self, methodology_state: Mapping[str, Any]) -> str:
        """``{"completed_subtasks": [str], "in_progress_subtask": str, "key_decisions": [str]}``
        (the seed's native work state) as lines; "" when all are empty.

        Raises:
            ValidationError: a key holding a value of the wrong shape.
        """
        done = state_list(methodology_state, "completed_subtasks")
        current = state_str(methodology_state, "in_progress_subtask")
        decisions = state_list(methodology_state, "key_decisions")
        lines = []
        if done:
            lines.append("Completed subtasks: " + ", ".join(done))
        if current:
            lines.append(f"In progress: {current}")
        lines += [f"Decision: {d}" for d in decisions]
        return "\n".join(lines)
