"""Extraction: the first LLM pass, raw memory -> facts + entity triples
(memory-pipeline-v2.md "Extraction Stage").

* :func:`truncate_input` -- input longer than 12,000 chars is cut before the prompt is built.
* :func:`parse_extraction` -- model reply -> :class:`ExtractionResult`: ``<think>`` blocks and
  code fences stripped (``memlane.providers.base``), JSON parsed, then validated: at most 20
  facts; a fact under 10 chars rejected, over 2,000 truncated; unknown ``type`` coerced to
  ``fact``; at most 50 entities, each with non-empty source, relationship and target;
  confidences coerced into [0, 1]. Every problem is a warning; it never raises.
* :func:`extract` -- prompt, one ``generate`` call, parse.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from memlane.pipeline.prompts import EXTRACTION_SCHEMA, extraction_prompt
from memlane.providers.base import LlmProvider, extract_json_object, strip_fences, strip_think

MAX_INPUT_CHARS = 12_000
MAX_FACTS = 20
MIN_FACT_CHARS = 10
MAX_FACT_CHARS = 2_000
MAX_ENTITIES = 50
FACT_TYPES = ("fact", "preference", "decision", "procedural", "semantic")
#: Confidence given to a fact or triple whose confidence is missing or not a number.
DEFAULT_CONFIDENCE = 0.5


@dataclass(frozen=True, slots=True)
class Fact:
    """One extracted fact: content (10-2,000 chars), type (one of :data:`FACT_TYPES`), confidence in [0, 1]."""

    content: str
    type: str
    confidence: float


@dataclass(frozen=True, slots=True)
class EntityTriple:
    """One relationship triple between named entities; confidence in [0, 1]."""

    source: str
    relationship: str
    target: str
    confidence: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "relationship": self.relationship,
            "target": self.target,
            "confidence": self.confidence,
        }


@dataclass(slots=True)
class ExtractionResult:
    """What one extraction produced; ``warnings`` lists every validation problem (never raised)."""

    facts: list[Fact] = field(default_factory=list)
    entities: list[EntityTriple] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    input_truncated: bool = False

    def entity_names(self) -> list[str]:
        """The distinct entity names of the triples (sources and targets), in first-seen order."""
        seen: dict[str, None] = {}
        for e in self.entities:
            seen.setdefault(e.source, None)
            seen.setdefault(e.target, None)
        return list(seen)


def truncate_input(content: str, limit: int = MAX_INPUT_CHARS) -> tuple[str, bool]:
    """``(content[:limit], was_truncated)``; ``limit`` in chars (seed: 12,000)."""
    return (content[:limit], True) if len(content) > limit else (content, False)


def _confidence(value: Any, where: str, warnings: list[str]) -> float:
    # Trigger: a model wrote "0.9", 95, null or "high" instead of a number in [0, 1].
    # Why: the write gate compares confidences; a bad value must not crash nor pass silently.
    # Outcome: numeric strings parse; out-of-range clamps; anything else becomes 0.5; warned.
    if isinstance(value, bool) or value is None:
        warnings.append(f"{where}: confidence {value!r} is not a number; using {DEFAULT_CONFIDENCE}")
        return DEFAULT_CONFIDENCE
    try:
        v = float(value)
    except (TypeError, ValueError):
        warnings.append(f"{where}: confidence {value!r} is not a number; using {DEFAULT_CONFIDENCE}")
        return DEFAULT_CONFIDENCE
    if not math.isfinite(v):
        warnings.append(f"{where}: confidence {value!r} is not finite; using {DEFAULT_CONFIDENCE}")
        return DEFAULT_CONFIDENCE
    if not 0.0 <= v <= 1.0:
        clamped = min(1.0, max(0.0, v / 100.0 if 1.0 < v <= 100.0 else v))
        warnings.append(f"{where}: confidence {value!r} outside [0, 1]; using {clamped}")
        return clamped
    return v


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _capped_list(obj: dict[str, Any], key: str, cap: int, warnings: list[str]) -> list[Any]:
    """``obj[key]`` as a list of at most ``cap`` items; a non-list or an overflow is a warning."""
    items = obj.get(key, [])
    if not isinstance(items, list):
        warnings.append(f"{key}: expected a list, got {type(items).__name__}")
        return []
    if len(items) > cap:
        warnings.append(f"{key}: {len(items)} returned, capped at {cap}")
        return items[:cap]
    return items


def parse_json_reply(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON object of a model reply, or ``(None, warning)``. Think blocks and fences are
    stripped first; if the remaining text is not one JSON object, the first balanced object in
    it is used (prose around it is tolerated)."""
    cleaned = strip_fences(strip_think(raw or ""))
    if not cleaned:
        return None, "empty reply"
    try:
        value = json.loads(cleaned, strict=False)
    except (ValueError, RecursionError):
        value = extract_json_object(cleaned)
        if value is None:
            return None, f"reply is not JSON: {cleaned[:120]!r}"
    if not isinstance(value, dict):
        return None, f"reply is JSON but not an object ({type(value).__name__})"
    return value, None


def parse_extraction(raw: str) -> ExtractionResult:
    """Validate a model reply into facts and triples (seed "Extraction Stage"). Never raises.

    Args:
        raw: the model's raw reply text.
    Returns:
        ExtractionResult with at most 20 facts and 50 triples; problems listed in ``warnings``.
    """
    out = ExtractionResult()
    obj, problem = parse_json_reply(raw)
    if obj is None:
        out.warnings.append(f"extraction: {problem}")
        return out
    for i, f in enumerate(_capped_list(obj, "facts", MAX_FACTS, out.warnings)):
        where = f"facts[{i}]"
        if isinstance(f, str):  # a bare string: content only
            f = {"content": f}
        if not isinstance(f, dict):
            out.warnings.append(f"{where}: not an object; dropped")
            continue
        content = _text(f.get("content"))
        if len(content) < MIN_FACT_CHARS:
            out.warnings.append(f"{where}: content shorter than {MIN_FACT_CHARS} chars; dropped")
            continue
        if len(content) > MAX_FACT_CHARS:
            out.warnings.append(f"{where}: content longer than {MAX_FACT_CHARS} chars; truncated")
            content = content[:MAX_FACT_CHARS]
        ftype = _text(f.get("type")).lower()
        if ftype not in FACT_TYPES:
            out.warnings.append(f"{where}: unknown type {f.get('type')!r}; coerced to fact")
            ftype = "fact"
        out.facts.append(Fact(content, ftype, _confidence(f.get("confidence"), where, out.warnings)))
    for i, e in enumerate(_capped_list(obj, "entities", MAX_ENTITIES, out.warnings)):
        where = f"entities[{i}]"
        if not isinstance(e, dict):
            out.warnings.append(f"{where}: not an object; dropped")
            continue
        src, rel, tgt = _text(e.get("source")), _text(e.get("relationship")), _text(e.get("target"))
        if not (src and rel and tgt):
            out.warnings.append(f"{where}: source, relationship and target must be non-empty; dropped")
            continue
        out.entities.append(
            EntityTriple(
                src[:MAX_FACT_CHARS],
                rel[:MAX_FACT_CHARS],
                tgt[:MAX_FACT_CHARS],
                _confidence(e.get("confidence"), where, out.warnings),
            )
        )
    return out


def extract(llm: LlmProvider, content: str, *, timeout_s: float | None = None) -> ExtractionResult:
    """Run the extraction pass on one memory's content.

    Args:
        llm: the provider (one ``generate`` call).
        content: the raw memory; cut to 12,000 chars first (a warning records it).
        timeout_s: seconds for the call (``extraction.timeout`` / 1000); None = the provider's.

    Raises:
        LlmTimeout / LlmError: the provider failed (the job is retried). Reply problems never raise.
    """
    text, truncated = truncate_input(content)
    raw = llm.generate(extraction_prompt(text), timeout_s=timeout_s, schema=EXTRACTION_SCHEMA)
    result = parse_extraction(raw)
    if truncated:
        result.input_truncated = True
        result.warnings.insert(0, f"input: {len(content)} chars truncated to {MAX_INPUT_CHARS}")
    return result
