"""What the agent sees: the status line, the memory block and the feedback request.

Formats (predictive-memory-scorer.md "4.7 Agent-Facing"; agent-relevance-feedback.md
"Hook Integration"). Memories are shown with 8-character id prefixes (the ids the agent's
feedback and the continuity scorer use) and their creation dates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Characters of an id shown to agents and judges.
SHORT_ID = 8

FEEDBACK_REQUEST = """<memory-feedback>
Rate how useful each injected memory was for your last response.
Respond with ONLY a JSON object mapping memory IDs to scores.
Scale: -1 (actively harmful/misleading) to 1 (directly shaped response).
0 = present but not used. Omit memories you can't evaluate.
Example: {"memory_feedback": {"%s": 0.8}}
</memory-feedback>"""


@dataclass(frozen=True, slots=True)
class Shown:
    """One memory to show: its id, date (ISO) and content."""

    id: str
    created_at: str
    content: str


def short_id(memory_id: str) -> str:
    """The 8-character prefix shown to agents."""
    return memory_id[:SHORT_ID]


def status_line(state: str, scored_sessions: int, min_training_sessions: int) -> str:
    """``[memlane: collecting | N/10 sessions | baseline only]`` while the predictor is collecting."""
    if state == "collecting":
        return f"[memlane: collecting | {min(scored_sessions, min_training_sessions)}/{min_training_sessions} " \
               f"sessions | baseline only]"
    return f"[memlane: {state}]"


def select_within_budget(items: Sequence[Shown], budget_chars: int, limit: int) -> list[Shown]:
    """Take items in order while their rendered lines fit ``budget_chars`` (chars), at most ``limit``.

    An item that does not fit is skipped and smaller later items may still fit (the seed's
    selectWithBudget keeps scanning).
    """
    out, used = [], 0
    for it in items:
        if len(out) >= limit:
            break
        cost = len(render_line(it))
        if used + cost > budget_chars:
            continue
        out.append(it)
        used += cost
    return out


def render_line(it: Shown) -> str:
    return f"- [{short_id(it.id)}] ({it.created_at[:10]}) {it.content}\n"


def render_block(header: str, items: Sequence[Shown], *, with_feedback: bool) -> str:
    """A titled memory block plus, if asked, the feedback request naming the first id."""
    if not items:
        return ""
    text = f"{header}\n" + "".join(render_line(i) for i in items)
    if with_feedback:
        text += FEEDBACK_REQUEST % short_id(items[0].id) + "\n"
    return text


def select_in_rank_order(ids: Sequence[str], budget_chars: int, limit: int,
                         read: Callable[[list[str]], dict[str, tuple[str, str]]]) -> list[Shown]:
    """Budgeted selection over ``ids`` in rank order (:func:`select_within_budget`), reading
    contents a window of ``3 x limit`` (at least 10) ids at a time, so a long pool is not read
    whole. ``read(ids)`` returns ``id -> (content, created_at)``; missing ids are skipped."""
    chosen: list[Shown] = []
    window = max(limit * 3, 10)
    for start in range(0, len(ids), window):
        if len(chosen) >= limit:
            break
        part = list(ids[start:start + window])
        rows = read(part)
        shown = [Shown(i, rows[i][1], rows[i][0]) for i in part if i in rows]
        used = sum(len(render_line(x)) for x in chosen)
        chosen += select_within_budget(shown, budget_chars - used, limit - len(chosen))
    return chosen
