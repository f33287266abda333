"""Continuity scoring by an LLM judge (memory-pipeline-v2.md "Continuity Scoring";
predictive-memory-scorer.md "Improved Continuity Scoring").

The judge sees the injected memories (8-character id prefixes and previews, no hint of which
ranker proposed them: blind evaluation, Phase 0 verification item 7) and the last 4,000
characters of the transcript, and returns a JSON object with ``score``, ``confidence``,
``memories_used``, ``novel_context_count``, ``reasoning`` and ``per_memory``. Parsing strips
``<think>`` blocks and code fences, clamps every number, defaults missing optional fields to
zero or empty, resolves id prefixes to full ids and ignores ids it cannot resolve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memlane.providers.base import extract_json_object
from memlane.sessions.inject import short_id

#: Transcript characters the judge reads (the tail).
TRANSCRIPT_TAIL_CHARS = 4000
#: Shorter transcripts are not judged (too little to judge); behaviour alone scores them.
MIN_TRANSCRIPT_CHARS = 500
#: Characters of each memory shown to the judge.
PREVIEW_CHARS = 200

PROMPT = """You are evaluating how well pre-loaded memories served an AI agent during one session.

These memories were pre-loaded for this session:
{memories}

Session transcript (the last {tail} characters):
<transcript>
{transcript}
</transcript>

For each memory, rate its relevance to what was actually discussed, from 0.0 (irrelevant) to
1.0 (essential). Count the topics where the user had to re-explain something that memory
should have covered but did not (novel_context_count).

Return ONLY a JSON object, no prose:
{{"score": <0.0-1.0 overall: how well the memories served the session>,
  "confidence": <0.0-1.0 how sure you are>,
  "memories_used": <number of memories that were actually relevant>,
  "novel_context_count": <number of re-explained topics>,
  "reasoning": "<one or two sentences>",
  "per_memory": [{{"id": "<8-char id>", "relevance": <0.0-1.0>}}]}}"""


#: The judge's reply as a JSON schema (structured output, ``LlmProvider.generate(schema=...)``);
#: :func:`parse_reply` also accepts the seed's other shape, from providers without it.
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "memories_used": {"type": "integer", "minimum": 0},
        "novel_context_count": {"type": "integer", "minimum": 0},
        "reasoning": {"type": "string"},
        "per_memory": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "relevance": {"type": "number", "minimum": 0, "maximum": 1}},
                "required": ["id", "relevance"],
            },
        },
    },
    "required": ["score", "confidence", "memories_used", "novel_context_count", "reasoning", "per_memory"],
}


@dataclass(frozen=True, slots=True)
class JudgedMemory:
    """A memory shown to the judge."""

    id: str
    content: str


@dataclass(frozen=True, slots=True)
class ContinuityResult:
    """The judge's verdict, clamped. ``per_memory`` maps full memory ids to relevance in [0, 1]."""

    score: float
    confidence: float
    memories_used: int
    novel_context_count: int
    reasoning: str
    per_memory: dict[str, float] = field(default_factory=dict)
    unresolved_ids: int = 0


def build_prompt(memories: Sequence[JudgedMemory], transcript: str) -> str:
    """The judge prompt: numbered memories with 8-char ids, then the transcript tail."""
    lines = [f'{i}. [{short_id(m.id)}]: "{_preview(m.content)}"' for i, m in enumerate(memories, start=1)]
    return PROMPT.format(
        memories="\n".join(lines) or "(none)",
        tail=TRANSCRIPT_TAIL_CHARS,
        transcript=transcript[-TRANSCRIPT_TAIL_CHARS:],
    )


def _preview(text: str) -> str:
    text = " ".join(text.split()).replace('"', "'")
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


def _unit(value: Any) -> float:
    try:
        x = float(value)
    except OverflowError:  # an int too large for a float: out of range
        x = math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(x) else max(0.0, min(1.0, x))


def _count(value: Any) -> int:
    try:
        x = float(value)
    except OverflowError:  # an int too large for a float
        x = math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        return 0
    return 0 if math.isnan(x) or x < 0 else int(min(x, 10_000))


def parse_reply(reply: str, memories: Sequence[JudgedMemory]) -> ContinuityResult | None:
    """Parse the judge's reply; None when it holds no JSON object at all.

    Accepts the seed's two shapes: ``score``/``per_memory: [{id, relevance}]`` and
    ``overall_score``/``per_memory_scores: {id: score}``.
    """
    data = extract_json_object(reply)
    if data is None:
        return None
    by_prefix: dict[str, str] = {}
    for m in memories:
        by_prefix.setdefault(short_id(m.id), m.id)
        by_prefix.setdefault(m.id, m.id)
    pairs: list[tuple[Any, Any]] = []
    per = data.get("per_memory")
    if isinstance(per, list):
        pairs += [(e.get("id"), e.get("relevance", e.get("score"))) for e in per if isinstance(e, dict)]
    elif isinstance(per, dict):
        pairs += list(per.items())
    if isinstance(data.get("per_memory_scores"), dict):
        pairs += list(data["per_memory_scores"].items())
    relevance: dict[str, float] = {}
    unresolved = 0
    for raw_id, value in pairs:
        full = by_prefix.get(str(raw_id).strip().strip("[]")[:36]) or by_prefix.get(str(raw_id).strip()[:8])
        if full is None:
            unresolved += 1
            continue
        relevance[full] = _unit(value)
    reasoning = data.get("reasoning")
    return ContinuityResult(
        score=_unit(data.get("score", data.get("overall_score"))),
        confidence=_unit(data.get("confidence")),
        memories_used=_count(data.get("memories_used")),
        novel_context_count=_count(data.get("novel_context_count")),
        reasoning=reasoning if isinstance(reasoning, str) else "",
        per_memory=relevance,
        unresolved_ids=unresolved,
    )
