"""The methodology plugin interface (seed memory-system-v3-design.md section 3 "Methodology
Plugin Interface") and the table-driven base both built-in plugins share.

A plugin translates one agent workflow (auto-claude subtasks, BMAD epics and stories...) into
what the memory core understands: its phase names into a universal phase
(:mod:`.phases`), its work-unit identifiers into a ``work_unit_ref``, its stage relays and its
work-state summaries into text. Plugins are built in: settings name one by its id
(:mod:`.registry`); no setting loads code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memlane.errors import ValidationError
from memlane.storage.models import Memory
from memlane.v3.methodology.phases import UNIVERSAL_PHASES
from memlane.v3.model import check_str, check_work_unit_ref

#: Longest methodology phase name accepted, characters.
MAX_PHASE_CHARS = 100
#: Characters of one memory's text in a relay block.
RELAY_ITEM_CHARS = 400


@dataclass(frozen=True, slots=True)
class RelayFilter:
    """Which memories a relay passes on (seed ``RelayTransition.filter``); empty = all."""

    types: tuple[str, ...] = ()
    min_confidence: float | None = None
    tags: tuple[str, ...] = ()

    def accepts(self, m: Memory) -> bool:
        """True when ``m`` has one of ``types`` (if any), confidence >= ``min_confidence`` (if
        set) and one of ``tags`` (if any)."""
        return (
            (not self.types or m.type in self.types)
            and (self.min_confidence is None or m.confidence >= self.min_confidence)
            and (not self.tags or any(t in m.tags for t in self.tags))
        )


@dataclass(frozen=True, slots=True)
class RelayTransition:
    """Memories written at stage ``source`` are passed to stage ``target`` (seed ``from``/``to``)."""

    source: str
    target: str
    filter: RelayFilter = field(default_factory=RelayFilter)

    def to_dict(self) -> dict[str, Any]:
        """JSON shape: ``{"from", "to", "filter": {"types", "min_confidence", "tags"}}``."""
        return {
            "from": self.source,
            "to": self.target,
            "filter": {
                "types": list(self.filter.types),
                "min_confidence": self.filter.min_confidence,
                "tags": list(self.filter.tags),
            },
        }


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """What memlane knows of the work in progress: the methodology's identifiers by name
    (``{"spec": "042", "subtask": "3"}``, ``{"epic": "3", "story": "3.2"}``) and, for plugins
    with display labels, ``*_label`` entries."""

    values: Mapping[str, str]


class MethodologyPlugin(ABC):
    """One workflow methodology. Subclasses set the class attributes and implement
    :meth:`format_work_state`; the table-driven methods below serve both built-in plugins.

    Class attributes:
        id: the name settings use (``native``, ``bmad``).
        display_name: for people.
        phase_map: methodology phase name -> universal phase.
        work_unit_keys: the identifiers of a work unit, outermost first (``spec``, ``subtask``).
        label_keys: identifier -> the context key holding its display label, if any.
        relays: the stage relays.
        hook_agents: Claude Code sub-agent type (``tool_input.subagent_type`` of a ``Task`` call)
            -> this methodology's phase name.
        plan_mode_phase: the phase name of Claude Code's plan mode (``permission_mode: plan``).
    """

    id: ClassVar[str]
    display_name: ClassVar[str]
    phase_map: ClassVar[Mapping[str, str]]
    work_unit_keys: ClassVar[tuple[str, ...]]
    label_keys: ClassVar[Mapping[str, str]] = {}
    relays: ClassVar[tuple[RelayTransition, ...]]
    hook_agents: ClassVar[Mapping[str, str]] = {}
    plan_mode_phase: ClassVar[str | None] = None

    # -- phase resolution ---------------------------------------------------------------------
    def map_phase(self, methodology_phase: str) -> str:
        """The universal phase of one of this methodology's phase names; a name the table does
        not know is ``explore`` (seed: open-ended work), and a universal phase name maps to itself.

        Raises:
            ValidationError: not a non-empty string of at most :data:`MAX_PHASE_CHARS` characters.
        """
        name = check_str(methodology_phase, "phase", max_chars=MAX_PHASE_CHARS).strip()
        if name in self.phase_map:
            return self.phase_map[name]
        return name if name in UNIVERSAL_PHASES else "explore"

    def phase_from_hook(self, payload: Mapping[str, Any]) -> str | None:
        """This methodology's phase name read from a Claude Code hook payload, or None.

        A ``Task`` tool call (PreToolUse/PostToolUse) starting a sub-agent whose
        ``subagent_type`` is in :attr:`hook_agents` names that agent's phase; otherwise
        ``permission_mode: "plan"`` (plan mode) is :attr:`plan_mode_phase`. Anything else,
        including malformed values, says nothing (None).
        """
        if payload.get("tool_name") == "Task":
            tool_input = payload.get("tool_input")
            agent = tool_input.get("subagent_type") if isinstance(tool_input, Mapping) else None
            if isinstance(agent, str) and agent in self.hook_agents:
                return self.hook_agents[agent]
        if payload.get("permission_mode") == "plan":
            return self.plan_mode_phase
        return None

    # -- work-unit resolution -------------------------------------------------------------------
    def resolve_work_unit_ref(self, ctx: ExecutionContext) -> dict[str, Any]:
        """The ``work_unit_ref`` of the work in ``ctx``: ``{"methodology": id, "hierarchy": [the
        identifiers given, outermost first], "label": ...}`` (checked by
        :func:`memlane.v3.model.check_work_unit_ref`).

        Raises:
            ValidationError: a key that is neither an identifier nor a label of this
                methodology, a non-string or empty value, or no identifier at all.
        """
        allowed = set(self.work_unit_keys) | set(self.label_keys.values())
        unknown = sorted(set(ctx.values) - allowed)
        if unknown:
            raise ValidationError(
                f"work_unit: unknown keys {unknown} for methodology {self.id!r}; allowed: {', '.join(sorted(allowed))}",
                details={"field": "work_unit"},
            )
        values = {k: check_str(v, f"work_unit.{k}", max_chars=200) for k, v in ctx.values.items()}
        hierarchy = [f"{k}_{values[k]}" for k in self.work_unit_keys if k in values]
        if not hierarchy:
            raise ValidationError(
                f"work_unit: name at least one of {', '.join(self.work_unit_keys)}", details={"field": "work_unit"}
            )
        ref = {"methodology": self.id, "hierarchy": hierarchy, "label": self.work_unit_label(values)}
        return check_work_unit_ref(ref, "work_unit")

    def work_unit_label(self, values: Mapping[str, str]) -> str:
        """The display label of a work unit: each given identifier's label (or its
        capitalised name and value), outermost first, joined by " / "."""
        parts = []
        for k in self.work_unit_keys:
            label = values.get(self.label_keys.get(k, ""))
            if label:
                parts.append(label)
            elif k in values:
                parts.append(f"{k.capitalize()} {values[k]}")
        return " / ".join(parts)

    # -- stage relay ------------------------------------------------------------------------------
    def relay_transitions(self) -> tuple[RelayTransition, ...]:
        """Which stages pass memories to which (seed ``getRelayTransitions``)."""
        return self.relays

    def format_relay_context(self, memories: Sequence[Memory], to_stage: str) -> str:
        """The block injected into stage ``to_stage``: for each relay into it, the memories its
        filter passes, as ``- [type] text`` lines (at most :data:`RELAY_ITEM_CHARS` characters
        each) under ``From <stage>:``; "" when no relay leads to ``to_stage`` or nothing passes.
        Memory text is quoted as data, never as instructions."""
        blocks = []
        for t in self.relays:
            if t.target != to_stage:
                continue
            lines = [f"- [{m.type}] {_one_line(m.content)}" for m in memories if t.filter.accepts(m)]
            if lines:
                blocks.append(f"From {t.source}:\n" + "\n".join(lines))
        if not blocks:
            return ""
        return f"Memories relayed to {to_stage} ({self.display_name}):\n" + "\n\n".join(blocks)

    # -- work state ---------------------------------------------------------------------------------
    @abstractmethod
    def format_work_state(self, methodology_state: Mapping[str, Any]) -> str:
        """A stored ``work_state`` memory's ``methodology_state`` as text for the next session;
        keys this methodology does not define are left out.

        Raises:
            ValidationError: a known key holding a value of the wrong shape.
        """

    def describe(self) -> dict[str, Any]:
        """JSON description for the API: id, display name, phase map, work-unit keys, relays."""
        return {
            "id": self.id,
            "display_name": self.display_name,
            "phases": dict(self.phase_map),
            "work_unit_keys": list(self.work_unit_keys),
            "label_keys": dict(self.label_keys),
            "relay_transitions": [t.to_dict() for t in self.relays],
        }


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= RELAY_ITEM_CHARS else flat[: RELAY_ITEM_CHARS - 1] + "…"


def state_list(state: Mapping[str, Any], key: str) -> list[str]:
    """``state[key]`` as a list of strings ([] when absent).

    Raises:
        ValidationError: present but not a list of strings.
    """
    v = state.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValidationError(
            f"methodology_state.{key}: expected a list of strings", details={"field": f"methodology_state.{key}"}
        )
    return v


def state_str(state: Mapping[str, Any], key: str) -> str | None:
    """``state[key]`` as a string (None when absent).

    Raises:
        ValidationError: present but not a string.
    """
    v = state.get(key)
    if v is not None and not isinstance(v, str):
        raise ValidationError(
            f"methodology_state.{key}: expected a string", details={"field": f"methodology_state.{key}"}
        )
    return v
