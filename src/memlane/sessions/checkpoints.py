"""Session checkpoints: buffered, merged, redacted snapshots for continuity recovery.

Seed: memory-pipeline-v2.md "Session Checkpoints" (queueCheckpointWrite, the digest formatters,
pruneCheckpoints, config ``continuity``). Units: clock values and ``now`` arguments are seconds
since the epoch; ``time_interval_ms`` is ms; budgets are characters.

Writes are buffered per session and flushed by one background thread every
``flush_interval_s`` (2.5 s): everything pending at a tick is written, so two triggers for a
session within one window become one checkpoint (queries/remembers unioned, newest kept, caps
20/10; prompt deltas summed; the most significant trigger kept). A ``pre_compaction`` trigger
is flushed at once. Every text is redacted (:func:`memlane.redact.redact`) at queue
time, and the built digest once more, before it reaches the database.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memlane.config.clock import to_iso
from memlane.config.continuity import SessionCheckpointSettings
from memlane.errors import ValidationError
from memlane.redact import redact
from memlane.storage import session_checkpoints as store
from memlane.storage.db import Database

log = logging.getLogger(__name__)

#: Least to most significant; a merged checkpoint keeps the most significant trigger.
TRIGGERS = ("periodic", "agent", "explicit", "pre_compaction", "session_end")
_RANK = {t: i for i, t in enumerate(TRIGGERS)}
MAX_QUERIES, MAX_REMEMBERS = 20, 10
MAX_ITEM_CHARS = 1000  # one stored query / remember, chars (cut after redaction)
MAX_CONTEXT_CHARS = 4000  # session context kept for the pre-compaction digest, chars
DIGEST_ITEM_CHARS = 300  # one bullet of the digest, chars
FLUSH_INTERVAL_S = 2.5
MAX_FLUSH_ATTEMPTS = 3  # a pending checkpoint whose write failed this often is dropped
TRUNCATED = "[truncated]"


def normalize_project(project: str | None) -> str | None:
    """Lower-case, ``\\`` to ``/``, whitespace collapsed, trailing slashes stripped; None if empty."""
    if project is None:
        return None
    p = re.sub(r"\s+", " ", str(project).replace("\\", "/")).strip().lower()
    if not p:
        return None
    stripped = p.rstrip("/")
    return stripped or "/"


# -- digest formatters (pure) ---------------------------------------------------------------
def _one_line(text: str) -> str:
    s = re.sub(r"\s+", " ", text).strip()
    return s if len(s) <= DIGEST_ITEM_CHARS else s[: DIGEST_ITEM_CHARS - 1] + "…"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    s = int(max(0, seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}h {m:02d}m" if h else (f"{m}m {s % 60:02d}s" if m else f"{s}s")


def _digest(
    title: str,
    prompts: str,
    project: str | None,
    duration_s: float | None,
    queries: Iterable[str],
    remembers: Iterable[str],
    context: str | None,
) -> str:
    lines = [
        f"## {title}",
        f"- Project: {project or 'unknown'}",
        f"- {prompts}",
        f"- Duration: {_duration(duration_s)}",
        "",
        "### Recent prompts",
    ]
    lines += [f"{i}. {_one_line(q)}" for i, q in enumerate(queries, 1)] or ["- none"]
    lines += ["", "### Memory activity"]
    lines += [f"- remembered: {_one_line(r)}" for r in remembers] or ["- none"]
    if context and context.strip():
        lines += ["", "### Session context", context.strip()]
    return "\n".join(lines)


def _prompts(prompt_count: int, total_prompts: int | None) -> str:
    tail = f", {total_prompts} in session" if total_prompts is not None else ""
    return f"Prompts: {prompt_count} since last checkpoint{tail}"


def format_periodic_digest(
    *,
    project: str | None,
    prompt_count: int,
    duration_s: float | None,
    queries: Iterable[str] = (),
    remembers: Iterable[str] = (),
    total_prompts: int | None = None,
    trigger: str = "periodic",
    context: str | None = None,
) -> str:
    """Markdown: project, prompt count (and session total), duration (seconds in, ``14m 05s`` out),
    recent prompts (queries), memory activity (remembers). Also used for the ``agent`` and
    ``explicit`` triggers, whose ``context`` (e.g. the agent's compaction summary) is appended."""
    return _digest(
        f"Session checkpoint ({trigger})",
        _prompts(prompt_count, total_prompts),
        project,
        duration_s,
        queries,
        remembers,
        context,
    )


def format_pre_compaction_digest(
    *,
    project: str | None,
    prompt_count: int,
    duration_s: float | None,
    queries: Iterable[str] = (),
    remembers: Iterable[str] = (),
    total_prompts: int | None = None,
    context: str | None = None,
) -> str:
    """The periodic digest titled for pre-compaction, plus the optional session context."""
    return _digest(
        "Pre-compaction checkpoint",
        _prompts(prompt_count, total_prompts),
        project,
        duration_s,
        queries,
        remembers,
        context,
    )


def format_session_end_digest(
    *,
    project: str | None,
    total_prompts: int,
    duration_s: float | None,
    queries: Iterable[str] = (),
    remembers: Iterable[str] = (),
) -> str:
    """The periodic digest titled for session end, with the total prompt count of the session."""
    return _digest("Session end", f"Total prompts: {total_prompts}", project, duration_s, queries, remembers, None)


def truncate_lines(text: str, budget_chars: int) -> str:
    """``text`` cut on a line boundary to at most ``budget_chars`` chars, ending in ``[truncated]``."""
    if len(text) <= budget_chars:
        return text
    room = budget_chars - len(TRUNCATED) - 1
    if room <= 0:
        return TRUNCATED[: max(0, budget_chars)]
    out = ""
    for line in text.splitlines(keepends=True):
        if len(out) + len(line) > room:
            break
        out += line
    if not out:
        out = text[:room]
    return out.rstrip("\n") + "\n" + TRUNCATED


# -- the service -----------------------------------------------------------------------------
def _merge_items(old: list[str], new: list[str], cap: int) -> list[str]:
    """Union in order, a repeated item moving to its latest position; the newest ``cap`` kept."""
    seen: set[str] = set()
    out: list[str] = []
    for item in reversed([*old, *new]):
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out[:cap][::-1]


def _clean(items: Iterable[str] | None, cap: int) -> list[str]:
    texts = (redact(str(x)).strip()[:MAX_ITEM_CHARS] for x in (items or ()) if x is not None)
    return _merge_items([], [t for t in texts if t], cap)


@dataclass
class _Pending:
    session_key: str
    trigger: str
    harness: str | None
    project: str | None
    context: str | None
    prompt_count: int
    queries: list[str]
    remembers: list[str]
    last_at: float
    attempts: int = field(default=0)

    def absorb(self, newer: _Pending) -> None:
        """Merge a newer pending checkpoint of the same session into this one."""
        self.queries = _merge_items(self.queries, newer.queries, MAX_QUERIES)
        self.remembers = _merge_items(self.remembers, newer.remembers, MAX_REMEMBERS)
        self.prompt_count += newer.prompt_count
        if _RANK[newer.trigger] > _RANK[self.trigger]:
            self.trigger = newer.trigger
        self.harness = newer.harness or self.harness
        self.project = newer.project or self.project
        self.context = newer.context or self.context
        self.last_at = max(self.last_at, newer.last_at)


def _epoch(iso: str | None) -> float | None:
    """Seconds since the epoch of an ISO timestamp (naive = UTC); None if absent or unreadable."""
    try:
        dt = datetime.fromisoformat(iso) if iso else None
    except ValueError:
        return None
    return None if dt is None else (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


class SessionCheckpointService:
    """Queue, merge, flush, recover and prune session checkpoints.

    Args:
        db: the database (writes go through ``db.write``).
        settings: the ``continuity`` settings.
        clock: current time in seconds (``time.time``); tests inject a fake one.
        flush_interval_s: the background flush period, seconds (2.5 s in the seed).

    Call :meth:`close` before closing ``db``: it stops the thread and flushes what is pending.
    """

    def __init__(
        self,
        db: Database,
        settings: SessionCheckpointSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._db = db
        self.settings = settings or SessionCheckpointSettings()
        self._clock = clock
        self._interval = flush_interval_s
        self._lock = threading.Lock()  # pending, marks, thread state
        self._flush_lock = threading.Lock()  # one flush at a time: rows keep queue order
        self._pending: dict[str, _Pending] = {}
        self._marks: dict[str, list[float]] = {}  # session -> [last checkpoint s, prompt count at last periodic]
        self._first_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    normalize_project = staticmethod(normalize_project)

    def queue(
        self,
        session_key: str,
        trigger: str,
        *,
        harness: str | None = None,
        project: str | None = None,
        prompt_count_delta: int = 0,
        queries: Iterable[str] | None = (),
        remembers: Iterable[str] | None = (),
        context: str | None = None,
    ) -> bool:
        """Buffer a checkpoint (seed: queueCheckpointWrite); False when continuity is disabled.

        Raises:
            ValidationError: empty session key, unknown trigger or a negative prompt delta.
        """
        if not self.settings.enabled:
            return False
        if not isinstance(session_key, str) or not session_key.strip():
            raise ValidationError("session_key: must be a non-empty string", details={"field": "session_key"})
        if trigger not in _RANK:
            raise ValidationError(f"trigger: must be one of {', '.join(TRIGGERS)}", details={"field": "trigger"})
        if int(prompt_count_delta) < 0:
            raise ValidationError("prompt_count_delta: must be >= 0", details={"field": "prompt_count_delta"})
        now = self._clock()
        ctx = redact(context).strip()[:MAX_CONTEXT_CHARS] if context else None
        item = _Pending(
            session_key,
            trigger,
            harness,
            project,
            ctx or None,
            int(prompt_count_delta),
            _clean(queries, MAX_QUERIES),
            _clean(remembers, MAX_REMEMBERS),
            now,
        )
        with self._lock:
            current = self._pending.get(session_key)
            if current is None:
                self._pending[session_key] = item
            else:
                current.absorb(item)
            self._first_seen.setdefault(session_key, now)
            self._marks.setdefault(session_key, [now, 0.0])[0] = now
            closed = self._closed
            if not closed and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memlane-checkpoints", daemon=True)
                self._thread.start()
        if closed or trigger == "pre_compaction":
            self.flush(session_key)
        return True

    def pending_sessions(self) -> list[str]:
        """Session keys with a checkpoint waiting for the next flush."""
        with self._lock:
            return list(self._pending)

    def flush(self, session_key: str | None = None) -> int:
        """Write the pending checkpoints now (of one session, or all); returns how many.

        Raises:
            StorageError: the write failed (the batch is put back, up to 3 attempts).
        """
        with self._flush_lock:
            with self._lock:
                if session_key is None:
                    batch, self._pending = list(self._pending.values()), {}
                else:
                    one = self._pending.pop(session_key, None)
                    batch = [one] if one else []
                first_seen = {p.session_key: self._first_seen.get(p.session_key) for p in batch}
            if not batch:
                return 0
            try:
                self._db.write(lambda conn: [self._write_one(conn, p, first_seen[p.session_key]) for p in batch])
            except Exception:
                self._requeue(batch)
                raise
            with self._lock:
                for p in batch:
                    if p.trigger == "session_end" and p.session_key not in self._pending:
                        self._marks.pop(p.session_key, None)
                        self._first_seen.pop(p.session_key, None)
            return len(batch)

    def _requeue(self, batch: list[_Pending]) -> None:
        with self._lock:
            for p in batch:
                p.attempts += 1
                if p.attempts >= MAX_FLUSH_ATTEMPTS:
                    log.error("dropping checkpoint of session %s after %d failed writes", p.session_key, p.attempts)
                    continue
                newer = self._pending.get(p.session_key)
                if newer is not None:
                    p.absorb(newer)
                self._pending[p.session_key] = p

    def _write_one(self, conn, p: _Pending, first_seen: float | None) -> int:
        facts = store.session_facts(conn, p.session_key)
        starts = [t for t in (first_seen, _epoch(facts.started_at)) if t is not None]
        duration = p.last_at - min(starts) if starts else None
        total = max(facts.session_prompt_count, facts.checkpoint_prompts + p.prompt_count)
        common: dict[str, Any] = dict(project=p.project, duration_s=duration, queries=p.queries, remembers=p.remembers)
        if p.trigger == "session_end":
            digest = format_session_end_digest(total_prompts=total, **common)
        elif p.trigger == "pre_compaction":
            digest = format_pre_compaction_digest(
                prompt_count=p.prompt_count, total_prompts=total, context=p.context, **common
            )
        else:
            digest = format_periodic_digest(
                prompt_count=p.prompt_count, total_prompts=total, trigger=p.trigger, context=p.context, **common
            )
        new_id = store.insert(
            conn,
            session_key=p.session_key,
            harness=p.harness,
            project=p.project,
            project_normalized=normalize_project(p.project),
            trigger=p.trigger,
            digest=redact(digest),
            prompt_count=p.prompt_count,
            memory_queries=p.queries,
            recent_remembers=p.remembers,
            created_at=to_iso(datetime.fromtimestamp(p.last_at, UTC)),
        )
        store.enforce_cap(conn, p.session_key, self.settings.max_checkpoints_per_session)
        return new_id

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.flush()
            except Exception:
                log.exception("checkpoint flush failed; pending checkpoints kept for the next tick")

    def close(self) -> None:
        """Stop the flush thread and write everything still pending. Idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._stop.set()
        if thread is not None:
            thread.join(timeout=max(5.0, 4 * self._interval))
        try:
            self.flush()
        except Exception:
            log.exception("final checkpoint flush failed")

    def should_checkpoint_periodic(self, session_key: str, prompt_count: int, now: float | None = None) -> bool:
        """True when ``prompt_interval`` prompts or ``time_interval_ms`` passed since the last one.

        ``prompt_count`` is the session's running total; ``now`` is seconds (default: the clock).
        A True answer starts the next interval, so ask once per prompt and queue when True. The
        time is measured from the session's last checkpoint (any trigger; the stored one after
        a restart), else from when the service first saw the session.
        """
        if not self.settings.enabled:
            return False
        now = self._clock() if now is None else now
        with self._lock:
            mark = self._marks.get(session_key)
        if mark is None:
            latest = self._db.read(lambda c: store.latest_for_session(c, session_key))
            at = _epoch(latest.created_at) if latest else None
            base = prompt_count - prompt_count % self.settings.prompt_interval if latest else 0
            with self._lock:
                self._first_seen.setdefault(session_key, now)
                mark = self._marks.setdefault(
                    session_key, [at if at is not None else self._first_seen[session_key], float(base)]
                )
        with self._lock:
            due = (
                prompt_count - mark[1] >= self.settings.prompt_interval
                or (now - mark[0]) * 1000.0 >= self.settings.time_interval_ms
            )
            if due:
                mark[0], mark[1] = now, float(prompt_count)
        return due

    def recovery_digest(
        self, session_key: str | None = None, project: str | None = None, budget_chars: int | None = None
    ) -> str:
        """The latest checkpoint digest of the session, else of the project; "" if none.

        Cut on a line boundary to ``budget_chars`` (default ``recovery_budget_chars``) with a
        ``[truncated]`` marker. Reads stored rows only (a pre_compaction flushes at once).
        """
        if not self.settings.enabled:
            return ""
        budget = self.settings.recovery_budget_chars if budget_chars is None else int(budget_chars)
        norm = normalize_project(project)

        def read(conn) -> store.SessionCheckpoint | None:
            cp = store.latest_for_session(conn, session_key) if session_key else None
            return cp if cp is not None or norm is None else store.latest_for_project(conn, norm)

        cp = self._db.read(read)
        return truncate_lines(cp.digest, budget) if cp else ""

    def summary_prompt(self, session_key: str, project: str | None, context: str | None = None) -> str:
        """The pre-compaction instruction asking the agent to summarise the session."""
        lines = [
            f"Context compaction is about to happen (session {session_key}, project {project or 'unknown'}).",
            "Before it does, write a compact summary of this session (at most 200 words) so work can continue:",
            "- Goal: what the user is trying to achieve.",
            "- Decisions: what was decided, and why.",
            "- Open tasks: what is unfinished; the next step first.",
            "- Files touched: paths created or changed.",
            "- Remember: facts worth keeping; save each with remember.",
            "Be concrete (names, paths, commands, numbers). Never include secrets.",
        ]
        if context and context.strip():
            lines += [
                "",
                "Session so far:",
                truncate_lines(redact(context).strip(), self.settings.recovery_budget_chars),
            ]
        return "\n".join(lines)

    def prune(self, now: float | None = None) -> int:
        """Hard-delete checkpoints older than ``retention_days`` (seed: pruneCheckpoints); returns how many."""
        now_dt = datetime.fromtimestamp(self._clock() if now is None else now, UTC)
        return self._db.write(lambda conn: store.prune_older_than(conn, self.settings.retention_days, now_dt))
