"""Reading a harness transcript safely, and making sense of Claude Code's JSONL transcripts.

The transcript path arrives in the hook input, i.e. from outside: :func:`read_transcript`
reads it only when, after resolving symlinks, it is a regular file under one of the allowed
roots (default ``~/.claude/projects``, plus ``$CLAUDE_CONFIG_DIR/projects`` when set) and no
larger than ``max_bytes``. Anything else (a symlink escaping the roots, a directory, a FIFO, a
device, an oversize file) is refused: ``None`` is returned and the reason is logged.

Claude Code transcripts are JSON lines; user and assistant turns look like
``{"type": "user"|"assistant", "message": {"role": ..., "content": str | [blocks]}}`` with text
blocks ``{"type": "text", "text": ...}``. Other line shapes are skipped, never an error.

The light hook client (:mod:`memlane.hookclient`) imports this module for the prompt and
session-end hooks, so it keeps ``pathlib``, ``json`` and ``re`` (with ``enum`` and
``functools``) out of that start-up: paths go through ``os.path``, JSON through
:mod:`memlane.connectors.cjson`, and the two regular expressions are compiled only for a bare
``{id: score}`` feedback object (:func:`_feedback_in_text`).
"""

from __future__ import annotations

import math
import os
import stat

from memlane.connectors import cjson
from memlane.connectors.hooklog import LazyLogger

# TYPE_CHECKING = False is the idiom type checkers read as typing.TYPE_CHECKING.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Iterator, Sequence
    from typing import Any

# logging is imported on the first record only (memlane.connectors.hooklog)
log = LazyLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
FEEDBACK_TAIL_BYTES = 2 * 1024 * 1024

#: A mention of the feedback request (``_marker()``), case-insensitive, and its spellings in
#: lower case for the cheap pre-check of :func:`_mentions_feedback`.
_MARKER_PATTERN = r"(?i)memory[-_ ]feedback"
_MARKER_SPELLINGS = ("memory-feedback", "memory_feedback", "memory feedback")
#: A key that looks like a memory id or id prefix (``_id_like()``).
_ID_LIKE_PATTERN = r"^[0-9a-fA-F]{8}[0-9a-fA-F-]{0,28}$"
_compiled: dict[str, re.Pattern[str]] = {}
_OPEN_TAG = "<memory-feedback>"
_CLOSE_TAG = "</memory-feedback>"


def _regex(pattern: str) -> re.Pattern[str]:
    """``re.compile(pattern)``, importing ``re`` on first use (module docstring)."""
    if pattern not in _compiled:
        import re

        _compiled[pattern] = re.compile(pattern)
    return _compiled[pattern]


def default_roots() -> list[str]:
    """``~/.claude/projects`` and, when ``CLAUDE_CONFIG_DIR`` is set, ``$CLAUDE_CONFIG_DIR/projects``."""
    roots = [os.path.join(os.path.expanduser("~"), ".claude", "projects")]
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    if env:
        roots.append(os.path.join(os.path.expanduser(env), "projects"))
    return roots


def read_transcript(
    path: str | os.PathLike[str] | None,
    allowed_roots: Sequence[str | os.PathLike[str]] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    tail_bytes: int | None = None,
) -> str | None:
    """The transcript's text (UTF-8, undecodable bytes replaced), or ``None`` when refused.

    Args:
        path: the transcript path from the hook input (``None``/empty: nothing to read).
        allowed_roots: directories the resolved file must lie under (default :func:`default_roots`).
        max_bytes: largest file read whole, bytes (default 20 MB); a larger file is refused.
        tail_bytes: when given, read only the last ``tail_bytes`` bytes (from the first full
            line) and do not refuse large files; for looking at the latest turns cheaply.

    Never raises: every refusal or I/O error is logged and gives ``None``.
    """
    if not path:
        return None
    roots = list(allowed_roots) if allowed_roots is not None else default_roots()
    try:
        resolved = os.path.realpath(os.path.expanduser(os.fspath(path)), strict=True)
    except (OSError, RuntimeError, ValueError) as exc:
        log.warning("transcript refused: %s does not resolve (%s)", path, exc.__class__.__name__)
        return None
    if not any(_is_under(resolved, r) for r in roots):
        log.warning("transcript refused: %s resolves to %s, outside the allowed roots", path, resolved)
        return None
    try:
        st = os.stat(resolved)
    except OSError as exc:
        log.warning("transcript refused: cannot stat %s (%s)", resolved, exc)
        return None
    if not stat.S_ISREG(st.st_mode):
        log.warning("transcript refused: %s is not a regular file", resolved)
        return None
    if tail_bytes is None and st.st_size > max_bytes:
        log.warning("transcript refused: %s is %d bytes, over the %d-byte cap", resolved, st.st_size, max_bytes)
        return None
    # O_NOFOLLOW: the last component was swapped for a symlink after resolving -> refuse;
    # O_NONBLOCK: a FIFO swapped in never blocks the open; fstat then rejects it.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(resolved, flags)
    except OSError as exc:
        log.warning("transcript refused: cannot open %s (%s)", resolved, exc)
        return None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            log.warning("transcript refused: %s is not a regular file", resolved)
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            if tail_bytes is not None:
                start = max(0, fst.st_size - tail_bytes)
                f.seek(start)
                data = f.read(tail_bytes)
                if start > 0:  # drop the partial first line
                    nl = data.find(b"\n")
                    data = data[nl + 1 :] if nl >= 0 else b""
            else:
                data = f.read(max_bytes + 1)
                if len(data) > max_bytes:
                    log.warning("transcript refused: %s grew over the %d-byte cap", resolved, max_bytes)
                    return None
    except OSError as exc:
        log.warning("transcript refused: cannot read %s (%s)", resolved, exc)
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def _is_under(path: str, root: str | os.PathLike[str]) -> bool:
    """``path`` (resolved) lies strictly inside ``root`` once ``root`` is resolved too."""
    try:
        root_resolved = os.path.realpath(os.path.expanduser(os.fspath(root)))
    except (OSError, ValueError):
        return False
    return path != root_resolved and path.startswith(root_resolved.rstrip(os.sep) + os.sep)


# --- JSONL ------------------------------------------------------------------------------------


def _entries(jsonl: str) -> Iterator[dict[str, Any]]:
    for line in jsonl.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = cjson.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield obj


def _turn(entry: dict[str, Any]) -> tuple[str, str, bool] | None:
    """``(role, text, is_human_text)`` of one line, or ``None`` when it is no user/assistant turn."""
    if entry.get("isMeta") or entry.get("isSidechain"):
        return None
    message = entry.get("message")
    msg: dict[str, Any] = message if isinstance(message, dict) else entry
    role = msg.get("role") or entry.get("type")
    if role not in ("user", "assistant"):
        return None
    content = msg.get("content")
    if isinstance(content, str):
        return role, content.strip(), bool(content.strip())
    if not isinstance(content, list):
        return None
    texts = [
        b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    text = "\n".join(t.strip() for t in texts if t.strip())
    return role, text, bool(text)


def transcript_text(jsonl: str) -> str:
    """User and assistant text turns as ``"user: ...\\nassistant: ..."``.

    Tool calls, tool results, thinking blocks, meta lines and unknown line shapes are
    skipped; consecutive text from the same role (an assistant turn split by tool calls) is
    joined into one turn."""
    turns: list[list[str]] = []
    for entry in _entries(jsonl):
        turn = _turn(entry)
        if turn is None or not turn[1]:
            continue
        role, text, _ = turn
        if turns and turns[-1][0] == role:
            turns[-1][1] += "\n" + text
        else:
            turns.append([role, text])
    return "\n".join(f"{role}: {text}" for role, text in turns)


def _entries_from_the_end(jsonl: str) -> Iterator[dict[str, Any]]:
    """:func:`_entries` in reverse order, each line parsed only when reached."""
    for line in reversed(jsonl.splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            obj = cjson.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield obj


#: The ``message.usage`` fields whose sum is the context an assistant message saw and wrote.
CONTEXT_USAGE_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
#: Bytes of the transcript's end the Stop hook reads for the latest usage.
USAGE_TAIL_BYTES = 256 * 1024


def last_context_tokens(jsonl: str) -> int | None:
    """The context size at the latest assistant message that reports usage: the sum of its
    ``message.usage`` input, cache-creation, cache-read and output tokens (Claude Code's
    transcript lines carry the Messages API usage object); ``None`` when no line has usage."""
    for entry in _entries_from_the_end(jsonl):
        if entry.get("type") != "assistant":
            continue
        message = entry.get("message")
        usage = message.get("usage") if isinstance(message, dict) else None
        if not isinstance(usage, dict):
            continue
        counts = [v for k in CONTEXT_USAGE_KEYS if isinstance(v := usage.get(k), int) and not isinstance(v, bool)]
        if counts:
            return sum(max(0, v) for v in counts)
    return None


def last_assistant_texts(jsonl: str) -> list[str]:
    """The text blocks of the latest assistant turn (everything after the last human user
    message that precedes the last assistant line), latest first.

    Lines are parsed from the end and only until that user message: a prompt hook reads up to
    2 MB of transcript tail and needs just its last turn."""
    out: list[str] = []
    seen_assistant = False
    for entry in _entries_from_the_end(jsonl):
        turn = _turn(entry)
        if turn is None:
            continue
        role, text, human = turn
        if role == "assistant":
            seen_assistant = True
            if text:
                out.append(text)
        elif human and seen_assistant:
            break
    return out


def _clean(obj: dict[str, Any], *, id_like_only: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not key.strip() or len(key) > 64:
            continue
        if id_like_only and not _regex(_ID_LIKE_PATTERN).match(key.strip()):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        score = float(value)
        if math.isnan(score):
            continue
        out[key.strip()] = max(-1.0, min(1.0, score))
    return out


def _objects(text: str, start: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every JSON object found in ``text`` from ``start`` on, with its start offset."""
    i = text.find("{", start)
    while i >= 0:
        try:
            obj, end = cjson.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            yield i, obj
        i = text.find("{", end)


def _mentions_feedback(text: str) -> bool:
    """``re.search(r"memory[-_ ]feedback", text, re.IGNORECASE)`` without ``re``: the pattern's
    characters have no case-insensitive match other than the one ``str.lower`` gives (the Kelvin
    sign lowers to ``k``; no other character of the pattern has a special case fold)."""
    low = text.lower()
    return any(s in low for s in _MARKER_SPELLINGS)


def _feedback_in_text(text: str) -> dict[str, float] | None:
    if not _mentions_feedback(text):  # cheap pre-check: no mention of memory feedback, no feedback
        return None
    explicit = (
        []
        if '"memory_feedback"' not in text
        else [o["memory_feedback"] for _, o in _objects(text) if isinstance(o.get("memory_feedback"), dict)]
    )
    if explicit:
        return _clean(explicit[-1], id_like_only=False) or None
    # A bare {id: score} object: inside <memory-feedback>...</memory-feedback>, right after the
    # closing tag, or (e.g. in a ```json fence) after a mention of the memory feedback request.
    starts = [
        text.rfind(_OPEN_TAG) + len(_OPEN_TAG) if _OPEN_TAG in text else -1,
        text.rfind(_CLOSE_TAG) + len(_CLOSE_TAG) if _CLOSE_TAG in text else -1,
    ]
    mentions = [m.end() for m in _regex(_MARKER_PATTERN).finditer(text)]
    if mentions:
        starts.append(mentions[-1])
    for start in sorted({s for s in starts if s >= 0}):
        for _, obj in _objects(text, start):
            cleaned = _clean(obj, id_like_only=True)
            if cleaned:
                return cleaned
            break  # only the first object after a marker counts
    return None


def last_memory_feedback(jsonl: str) -> dict[str, float] | None:
    """The memory feedback in the latest assistant message: ``{memory_id_or_prefix: score}``.

    Looks for a JSON object with a ``"memory_feedback"`` key (its value is the map), else for
    a bare ``{id: score}`` object inside/after ``<memory-feedback>`` tags or after a mention of
    memory feedback (as in a ```json fence answering the request); bare objects keep only keys
    that look like memory ids (8+ hex characters). Scores are clamped to [-1, 1]; non-numeric
    entries are dropped. ``None`` when there is no feedback (or none survives cleaning)."""
    for text in last_assistant_texts(jsonl):
        found = _feedback_in_text(text)
        if found:
            return found
    return None
