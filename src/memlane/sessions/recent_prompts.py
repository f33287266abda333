"""The recent prompts of each active session, for checkpoint digests.

A checkpoint (periodic, pre-compaction, session-end) lists the session's latest prompts and
how many prompts arrived since the previous checkpoint (checkpoint prompt counts are deltas).
Both live in memory only: a daemon restart loses at most the queries of the digests still to
come, never a stored memory or session row.
"""

from __future__ import annotations

import threading

#: Recent prompts kept per active session.
RECENT_PROMPTS = 20
#: Characters of each prompt kept.
PROMPT_CHARS = 500
#: Active sessions tracked; the oldest is dropped beyond this (sessions that never ended).
MAX_SESSIONS = 10_000


class RecentPrompts:
    """Per session key: the last :data:`RECENT_PROMPTS` prompts (each cut to
    :data:`PROMPT_CHARS` chars) and the count since the last checkpoint. Thread-safe."""

    def __init__(self) -> None:
        self._prompts: dict[str, list[str]] = {}
        self._unsaved: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, key: str, prompt: str) -> None:
        """Record one prompt of session ``key``."""
        with self._lock:
            recent = self._prompts.setdefault(key, [])
            recent.append(prompt[:PROMPT_CHARS])
            self._unsaved[key] = self._unsaved.get(key, 0) + 1
            del recent[:-RECENT_PROMPTS]
            if len(self._prompts) > MAX_SESSIONS:
                oldest = next(iter(self._prompts))
                self._prompts.pop(oldest)
                self._unsaved.pop(oldest, None)

    def take_unsaved(self, key: str) -> int:
        """Prompts of ``key`` since its last checkpoint; the count restarts at 0."""
        with self._lock:
            return self._unsaved.pop(key, 0)

    def recent(self, key: str) -> list[str]:
        """The last prompts of ``key``, oldest first (a copy)."""
        with self._lock:
            return list(self._prompts.get(key, []))

    def forget(self, key: str) -> None:
        """Drop ``key`` (its session ended)."""
        with self._lock:
            self._prompts.pop(key, None)
            self._unsaved.pop(key, None)
