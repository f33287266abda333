"""Context cost per module (seed memory-system-v3-design.md: the ``context_cost`` type of section 4,
the inference rule "Session context tokens tracked via finish event -> module cost profile" of
section 5, ``updateContextCost(accessedFiles, totalTokens)`` at session end in section 12, and the
rolling window of section 13; docs/v3.md, "Context cost").

At the end of an observed session (:meth:`ContextCosts.record_session`, called by the observer's
session end) each module the session touched (the directory of each file it accessed, ``.`` for
the project root; at most :data:`MAX_MODULES`) gets one sample: the session's context tokens,

* ``transcript``: the largest context size its Stop hooks read from the transcript (the latest
  assistant message's input + cache-creation + cache-read + output tokens, Claude Code's
  ``message.usage``), when any Stop hook reported one;
* ``tool_io``: else its hook inputs' characters (tool inputs and outputs) / :data:`CHARS_PER_TOKEN`,
  the usual rough ratio of English and code text to tokens (about 4 characters per token,
  Anthropic's and OpenAI's tokenizer documentation), when the client reported sizes.

As in the seed, the whole session's tokens count for every module it touched: a module's cost is
what a session that works in it costs. A failed session is sampled too: what it cost is as real.
Each module keeps its newest :data:`WINDOW_SESSIONS` (30) samples (the seed's rolling window; the
lifecycle job trims older ones). Once a module has :data:`MIN_SESSIONS` samples, its
``context_cost`` memory (scope module, ``observer_inferred``, under review) is written or, when
it exists, updated in place: ``average_tokens_per_session`` (the mean), ``p90_tokens_per_session``
(nearest-rank 90th percentile) and ``sample_count`` over the window.
"""

from __future__ import annotations

import logging
import math
import posixpath
from typing import Any

from memlane.config.clock import now_iso
from memlane.errors import MemlaneError
from memlane.services.inputs import RememberInput
from memlane.services.memory_service import MemoryService
from memlane.storage import active as act_sql
from memlane.storage import observer as obs_sql
from memlane.storage.db import Database
from memlane.v3.model import check_str

log = logging.getLogger(__name__)

#: Characters per token for the ``tool_io`` estimate.
CHARS_PER_TOKEN = 4
#: Samples kept per module (seed section 13: "retain the last 30 sessions of data per module").
WINDOW_SESSIONS = 30
#: Samples a module needs before its context_cost memory is written (the observer's cross-session
#: rules ask 3 sessions: co-access, prefetch).
MIN_SESSIONS = 3
#: Modules sampled per session (the first touched).
MAX_MODULES = 20
#: Confidence of a context_cost memory: a measurement, not an inference.
CONFIDENCE = 0.8


def p90(values: list[int]) -> int:
    """The nearest-rank 90th percentile of ``values`` (non-empty): the ceil(0.9 n)-th smallest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def modules_of(files: list[str]) -> list[str]:
    """The directories of ``files`` (``.`` for a file at the root), first-touch order, at most
    :data:`MAX_MODULES`; absolute paths (outside the session's directory) are left out."""
    out: dict[str, None] = {}
    for f in files:
        if f.startswith("/") or f.startswith(".."):
            continue
        out.setdefault(posixpath.dirname(f) or ".", None)
        if len(out) >= MAX_MODULES:
            break
    return list(out)


class ContextCosts:
    """Samples sessions' context tokens per module and keeps each module's context_cost memory.

    Args:
        db: the store (observer tables, samples).
        memories: the one create / update path of memories.
    """

    def __init__(self, db: Database, memories: MemoryService) -> None:
        self.db = db
        self.memories = memories

    def record_session(self, session_key: str, project: str | None = None) -> dict[str, Any]:
        """Sample the session for each module it touched and refresh those modules' memories.

        Returns:
            ``{"tokens": int | None, "basis": "transcript" | "tool_io" | None, "modules": [str],
            "memories": [{"module", "id", "action": "created" | "updated", "sample_count",
            "average_tokens_per_session", "p90_tokens_per_session"}], "errors"?: [{"module",
            "error"}]}``; nothing is recorded when the session has no token measure or touched no
            file. A memory that cannot be written (e.g. its text is another live memory's) is
            reported in ``errors`` and logged; the samples stay and the session end goes on.

        Raises:
            ValidationError: a bad session id or project.
        """
        check_str(session_key, "session_id", max_chars=200)
        if project is not None:
            check_str(project, "project", max_chars=200)
        ctx, chars = self.db.read(lambda c: obs_sql.session_tokens(c, session_key))
        if ctx is not None:
            tokens, basis = ctx, "transcript"
        elif chars:
            tokens, basis = round(chars / CHARS_PER_TOKEN), "tool_io"
        else:
            return {"tokens": None, "basis": None, "modules": [], "memories": []}
        modules = modules_of(self.db.read(lambda c: obs_sql.session_files(c, session_key)))
        out: dict[str, Any] = {"tokens": tokens, "basis": basis, "modules": modules, "memories": []}
        if not modules:
            return out
        key = project or ""
        self.db.write(lambda c: obs_sql.add_cost_samples(c, key, session_key, modules, tokens, basis, now_iso()))
        for module in modules:
            try:
                written = self._refresh(key, module, session_key)
            except MemlaneError as exc:  # the samples are kept; the next session end retries the memory
                log.warning("context cost of %s: memory not written: %s", module, exc)
                out.setdefault("errors", []).append({"module": module, "error": exc.message})
                continue
            if written is not None:
                out["memories"].append(written)
        return out

    def _refresh(self, project: str, module: str, session_key: str) -> dict[str, Any] | None:
        """Write or update ``module``'s context_cost memory from its window; None below MIN_SESSIONS."""
        samples = self.db.read(lambda c: obs_sql.cost_samples(c, project, module, WINDOW_SESSIONS))
        if len(samples) < MIN_SESSIONS:
            return None
        avg = round(sum(samples) / len(samples))
        high = p90(samples)
        fields = {
            "module": module,
            "average_tokens_per_session": avg,
            "p90_tokens_per_session": high,
            "sample_count": len(samples),
        }
        where = "the project root" if module == "." else module
        # the project is named: memories are unique by content, and two projects' modules can cost the same
        of = f" of {project}" if project else ""
        content = (
            f"A session working in {where}{of} uses about {avg:,} context tokens (90th percentile {high:,}, "
            f"last {len(samples)} sessions): plan the work to fit."
        )
        existing = self.db.read(lambda c: obs_sql.context_cost_memory(c, project, module))
        why = f"context cost of {module} after session {session_key[:80]} ({len(samples)} samples)"
        if existing is not None:
            current = self.memories.get(existing)
            if current.content != content or current.type_fields != fields:
                self.memories.update(existing, {"content": content, "type_fields": fields}, who="observer", why=why)
            action, memory_id = "updated", existing
        else:
            [result] = self.memories.remember_many(
                [
                    RememberInput(
                        content=content,
                        type="context_cost",
                        project=project or None,
                        source="observer_inferred",
                        needs_review=True,
                        related_modules=(module,),
                        type_fields=fields,
                        confidence=CONFIDENCE,
                        who="observer",
                        why=why,
                        source_type=act_sql.SESSION_SOURCE_TYPE,
                        source_id=session_key,
                    )
                ]
            )
            action, memory_id = "created", result.id
        return {"module": module, "id": memory_id, "action": action, **fields}

    def trim(self, *, dry_run: bool = False) -> int:
        """The rolling window: delete every module's samples beyond its newest WINDOW_SESSIONS;
        returns how many (would be) deleted."""
        return self.db.write(lambda c: obs_sql.trim_cost_samples(c, WINDOW_SESSIONS, dry_run=dry_run))
