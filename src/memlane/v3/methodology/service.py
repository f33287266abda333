"""Where the phase comes from at runtime: the project's methodology plugin maps what memlane
sees (an explicit ``phase`` in a request, a Claude Code hook payload, the session's work-unit
identifiers) to a universal phase and a ``work_unit_ref``, remembered per session.

The per-session state lives in the daemon's memory (at most :data:`MAX_SESSIONS` sessions, least
recently used dropped first): it is what the harness last said, re-sent with each request that
knows it; a restarted daemon knows a session's phase again at its next request naming one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from memlane.config.clock import now_iso
from memlane.config.methodology import MethodologySettings
from memlane.errors import ValidationError
from memlane.lru import LRUCache
from memlane.v3.methodology.plugin import ExecutionContext, MethodologyPlugin
from memlane.v3.methodology.registry import get_plugin

#: Sessions whose phase is remembered.
MAX_SESSIONS = 4096


@dataclass(frozen=True, slots=True)
class PhaseState:
    """A session's work as its methodology names it.

    Attributes:
        methodology: the plugin id (``native``, ``bmad``).
        methodology_phase: the phase name as given (``coding``, ``story_acceptance``), or None.
        phase: the universal phase it maps to (:data:`memlane.v3.methodology.phases.UNIVERSAL_PHASES`),
            or None: retrieval then ranks as without phases.
        work_unit_ref: ``{"methodology", "hierarchy", "label"}`` or None.
        source: where the phase came from: ``request`` (an explicit phase), ``hook`` (a hook
            payload) or None (no phase).
        updated_at: ISO time of the last change.
    """

    methodology: str
    methodology_phase: str | None = None
    phase: str | None = None
    work_unit_ref: dict[str, Any] | None = None
    source: str | None = None
    updated_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON shape of the API."""
        return {
            "methodology": self.methodology,
            "methodology_phase": self.methodology_phase,
            "phase": self.phase,
            "work_unit_ref": self.work_unit_ref,
            "source": self.source,
            "updated_at": self.updated_at,
        }


class PhaseService:
    """Resolves and remembers each session's phase and work unit.

    Args:
        settings: returns the current methodology settings (read at each call: a change over
            ``POST /api/config`` applies to the next request).
    """

    def __init__(self, settings: Callable[[], MethodologySettings]) -> None:
        self._settings = settings
        self._sessions: LRUCache[str, PhaseState] = LRUCache(MAX_SESSIONS)
        self._lock = threading.Lock()

    def plugin_for(self, project: str | None) -> MethodologyPlugin:
        """The plugin the settings choose for ``project`` (default ``native``)."""
        return get_plugin(self._settings().for_project(project))

    def resolve(
        self,
        session_key: str | None,
        project: str | None,
        *,
        phase: str | None = None,
        work_unit: Any = None,
        hook: Mapping[str, Any] | None = None,
    ) -> PhaseState:
        """Map what this request says to the session's state, remember it, and return it.

        An explicit ``phase`` wins over the hook payload's; either replaces the session's
        remembered phase, and a request saying nothing keeps it. ``work_unit`` (the
        methodology's identifiers, ``{"spec": "042", "subtask": "3"}``) replaces the remembered
        work unit. A session whose project changed methodology forgets what the old plugin
        resolved. Without ``session_key`` nothing is remembered.

        Raises:
            ValidationError: ``work_unit`` is not an object of this methodology's identifiers,
                or ``phase`` is not a short non-empty string.
        """
        plugin = self.plugin_for(project)
        name, source = phase, "request" if phase is not None else None
        if name is None and hook:
            name = plugin.phase_from_hook(hook)
            source = "hook" if name is not None else None
        universal = plugin.map_phase(name) if name is not None else None
        ref = None
        if work_unit is not None:
            if not isinstance(work_unit, Mapping):
                raise ValidationError(
                    'work_unit: expected an object of identifiers, e.g. {"spec": "042"}', details={"field": "work_unit"}
                )
            ref = plugin.resolve_work_unit_ref(ExecutionContext(dict(work_unit)))
        with self._lock:
            prev = self._sessions.get(session_key) if session_key is not None else None
            if prev is None or prev.methodology != plugin.id:
                prev = PhaseState(plugin.id)
            state = prev
            if universal is not None:
                state = replace(state, methodology_phase=name, phase=universal, source=source)
            if ref is not None:
                state = replace(state, work_unit_ref=ref)
            if state is not prev:
                state = replace(state, updated_at=now_iso())
            if session_key is not None and (state.phase is not None or state.work_unit_ref is not None):
                self._sessions.put(session_key, state)
        return state

    def universal(self, project: str | None, phase: str | None, session_key: str | None = None) -> str | None:
        """The universal phase of a request: ``phase`` (a methodology phase name or a universal
        phase) mapped by ``project``'s plugin; without it, the session's remembered phase;
        else None.

        Raises:
            ValidationError: ``phase`` is not a short non-empty string.
        """
        if phase is not None:
            return self.plugin_for(project).map_phase(phase)
        if session_key is not None:
            return self.current(session_key, project).phase
        return None

    def current(self, session_key: str, project: str | None = None) -> PhaseState:
        """The session's remembered state (no phase, no work unit when none is known)."""
        with self._lock:
            state = self._sessions.get(session_key)
        return state if state is not None else PhaseState(self.plugin_for(project).id)

    def forget(self, session_key: str) -> None:
        """Drop a session's state (its session ended)."""
        with self._lock:
            self._sessions.pop(session_key)
