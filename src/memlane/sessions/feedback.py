"""Agent relevance feedback: resolving the agent's ``{memory id or 8-char prefix: score}`` onto a
session's memories (agent-relevance-feedback.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from memlane.sessions.inject import short_id


def resolve_feedback(ids: Sequence[str], raw: Any) -> tuple[dict[str, float], int]:
    """Map agent feedback ``{id or 8-char prefix: score}`` (or its JSON text, or an object with a
    ``memory_feedback`` key) onto the session's memory ids ``ids``.

    Returns:
        (full id -> score clamped to [-1, 1], number of entries ignored). Ambiguous prefixes,
        unknown ids, non-numbers and malformed input are ignored and counted, never raised
        (agent-relevance-feedback.md: fail open); at most 1,000 entries are read.
    """
    data = raw
    if isinstance(raw, str):
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return {}, 1
    if isinstance(data, dict) and isinstance(data.get("memory_feedback"), dict):
        data = data["memory_feedback"]
    if not isinstance(data, dict):
        return {}, 1
    by_prefix: dict[str, str | None] = {}
    for mid in ids:
        p = short_id(mid)
        by_prefix[p] = None if p in by_prefix and by_prefix[p] != mid else mid  # ambiguous -> None
        by_prefix[mid] = mid
    scores: dict[str, float] = {}
    ignored = 0
    for k, v in list(data.items())[:1000]:
        hit = by_prefix.get(str(k).strip().strip("[]")) if isinstance(k, str) else None
        if (
            hit is None
            or isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (isinstance(v, float) and not math.isfinite(v))
        ):
            ignored += 1
            continue
        scores[hit] = float(max(-1.0, min(1.0, v)))  # clamp before float(): a huge int would overflow
    return scores, ignored
