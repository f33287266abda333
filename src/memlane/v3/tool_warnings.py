"""Proactive warnings before a tool call touches a file (seed memory-system-v3-design.md section 7,
"Proactive Gotcha Injection", and section 8, "per file access: proactive injection"; docs/v3.md,
"The PreToolUse hook").

Claude Code's PreToolUse hook runs before every tool call. When the call is about to read or change
a file (:data:`FILE_TOOLS`) and memlane holds a memory of a warning type (:data:`WARNING_TYPES`:
gotcha, error_pattern, dead_end, e2e_observation) whose ``related_files`` name that file, with
confidence >= :data:`MIN_CONFIDENCE` (0.65) that was user-verified or accessed at least
:data:`MIN_ACCESS_COUNT` (2) times (the seed's filter: "only inject memories that have been seen
before or user-verified"), the hook answers a short framed block (at most :data:`MAX_WARNINGS` (4)
memories, :data:`BUDGET_CHARS` characters) that Claude Code adds to the agent's context. A memory is
shown at most once per session. In the common case (no such memory) the answer is empty and the
hook prints nothing.

The seed injects into the tool's result; a Claude Code hook cannot rewrite a result, and the
PreToolUse hook's ``additionalContext`` reaches the agent with the call, before it reads the result.
"""

from __future__ import annotations

import os
from typing import Any

from memlane.lru import LRUCache
from memlane.sessions.inject import render_file_warnings
from memlane.storage import active as act_sql
from memlane.storage.db import Database
from memlane.v3.model import check_str
from memlane.v3.observer import accessed_file, file_of

#: The tools whose file a warning is about (seed: Read and Edit; the other file-changing tools too).
FILE_TOOLS = frozenset({"Read", "Edit", "Write", "MultiEdit", "NotebookEdit"})
#: Memory types shown (seed "Proactive Gotcha Injection").
WARNING_TYPES = ("gotcha", "error_pattern", "dead_end", "e2e_observation")
#: Seed: ``minConfidence: 0.65``.
MIN_CONFIDENCE = 0.65
#: Seed: ``m.userVerified === true || m.accessCount >= 2``.
MIN_ACCESS_COUNT = 2
#: Seed: ``limit: 4``.
MAX_WARNINGS = 4
#: Characters of the block (a few short memories; the prompt hook's budget is separate).
BUDGET_CHARS = 2000
#: Characters of one memory shown (longer texts are cut, so MAX_WARNINGS fit the budget).
MAX_MEMORY_CHARS = 400
#: (session, memory id) pairs already shown, remembered in memory.
MAX_SHOWN = 16384


class ToolWarnings:
    """Finds and renders the warnings for one tool call about to run.

    Args:
        db: the store (memories).
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._shown: LRUCache[tuple[str, str], bool] = LRUCache(MAX_SHOWN)

    def for_call(
        self,
        session_key: str,
        tool_name: str,
        tool_input: Any,
        *,
        cwd: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """The warnings for a call of ``tool_name`` with ``tool_input`` (Claude Code's PreToolUse).

        The file is matched relative to the root of ``cwd``'s work tree (the form the observer
        records and its promoted memories name), relative to ``cwd``, as given (absolute) and
        relative to ``project`` (the root the hook sends).

        Returns:
            ``{"file": str | None, "memory_ids": [str], "inject": str}``; ``inject`` is "" when
            there is nothing to say (not a file tool, no matching memory, all shown already).

        Raises:
            ValidationError: an empty session or tool name, a bad file path.
        """
        check_str(session_key, "session_id", max_chars=200)
        check_str(tool_name, "tool_name", max_chars=100)
        if tool_name not in FILE_TOOLS:
            return {"file": None, "memory_ids": [], "inject": ""}
        raw = file_of(tool_input)
        if raw is None:
            return {"file": None, "memory_ids": [], "inject": ""}
        # the observer's own form first (relative to the work tree's root: what promoted memories
        # name), then relative to cwd, as given, and relative to the project root
        observed = accessed_file(tool_name, tool_input, cwd) if cwd else None
        rel = observed or file_of(tool_input, cwd) or raw
        paths = list(dict.fromkeys([rel, file_of(tool_input, cwd) or raw, raw, *_relative_to(raw, project)]))
        found = self.db.read(
            lambda c: act_sql.file_warnings(
                c,
                project,
                paths,
                WARNING_TYPES,
                min_confidence=MIN_CONFIDENCE,
                min_access_count=MIN_ACCESS_COUNT,
                limit=MAX_WARNINGS * 4,
            )
        )
        fresh = [w for w in found if (session_key, w.id) not in self._shown][:MAX_WARNINGS]
        text = render_file_warnings(rel, [(w.id, w.type, _cut(w.content)) for w in fresh], BUDGET_CHARS)
        if not text:
            return {"file": rel, "memory_ids": [], "inject": ""}
        for w in fresh:
            self._shown.put((session_key, w.id), True)
        return {"file": rel, "memory_ids": [w.id for w in fresh], "inject": text}


def _relative_to(path: str, root: str | None) -> list[str]:
    """``path`` relative to ``root`` (POSIX separators) when it is an absolute path inside it."""
    if not root or not os.path.isabs(path) or not os.path.isabs(root):
        return []
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return []
    return [] if rel.startswith("..") else [rel.replace(os.sep, "/")]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MEMORY_CHARS else text[: MAX_MEMORY_CHARS - 3].rstrip() + "..."
