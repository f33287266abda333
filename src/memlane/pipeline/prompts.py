"""The pipeline's LLM prompts (memory-pipeline-v2.md "Extraction Stage", "Decision Stage",
"Semantic Contradiction Detection").

Each prompt asks for one JSON object and nothing else; the ``*_SCHEMA`` beside it is that
object's JSON schema, sent for structured output to the providers that offer it
(``LlmProvider.generate(schema=...)``). Replies are cleaned with ``memlane.providers.base``
(think blocks, code fences) and parsed tolerantly either way. Builders only format text:
truncation and validation belong to the stages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: A marker the extraction prompt starts with (the benchmark's scripted LLM routes on it).
EXTRACTION_MARKER = "You extract durable facts"
#: A marker the decision prompt starts with.
DECISION_MARKER = "You maintain a memory store"
#: A marker the contradiction prompt starts with.
CONTRADICTION_MARKER = "You compare two statements"

EXTRACTION_PROMPT = (
    EXTRACTION_MARKER
    + """ from a memory written by or about a user of an AI agent.

Decompose the input into discrete, reusable facts and entity relationship triples.

Rules:
- Each fact is one self-contained statement (10 to 2000 characters) that still makes sense
  without the input: name the subject instead of writing "he", "it" or "this".
- type is one of: fact, preference, decision, procedural, semantic.
  fact = something true about the world or the project; preference = what someone likes or
  wants; decision = a choice that was made and why; procedural = how to do something;
  semantic = a definition or a general concept.
- confidence is a number in [0, 1]: how sure you are the input states this fact.
- entities are triples {"source", "relationship", "target", "confidence"} between named things
  (people, projects, tools, places, organisations).
- Skip ephemeral details: greetings, moods, what is happening right now, one-off chatter.
- Return at most 20 facts and 50 entities. Return ONLY the JSON object, no surrounding text.

Example 1
Input: I switched the billing service from MySQL to PostgreSQL 16 last week because we needed
JSONB. Alice owns the migration scripts. Lunch was great today.
Output:
{"facts": [
  {"content": "The billing service uses PostgreSQL 16 (migrated from MySQL).", "type": "fact", "confidence": 0.95},
  {"content": "The billing service moved to PostgreSQL because JSONB support was needed.", "type": "decision", "confidence": 0.9},
  {"content": "Alice owns the billing service's database migration scripts.", "type": "fact", "confidence": 0.85}],
 "entities": [
  {"source": "billing service", "relationship": "uses", "target": "PostgreSQL 16", "confidence": 0.95},
  {"source": "Alice", "relationship": "owns", "target": "migration scripts", "confidence": 0.85}]}

Example 2
Input: Please always run `make lint` before committing; I prefer tabs over spaces in Go files.
Output:
{"facts": [
  {"content": "Run `make lint` before every commit.", "type": "procedural", "confidence": 0.9},
  {"content": "The user prefers tabs over spaces in Go files.", "type": "preference", "confidence": 0.9}],
 "entities": []}

Example 3
Input: ok thanks, brb
Output:
{"facts": [], "entities": []}

Input: {content}
Output:
"""
)

DECISION_PROMPT = (
    DECISION_MARKER
    + """ for an AI agent. A new fact was extracted. Decide
what to do with it given the most similar existing memories.

Actions:
- ADD: the fact is new information; store it.
- UPDATE: the fact refines or replaces one existing memory (give its id as targetId).
- DELETE: the fact shows one existing memory is now false or obsolete (give its id as targetId).
- NONE: the fact is already stored (same meaning); do nothing.

New fact ({fact_type}, confidence {confidence:.2f}):
{fact}

Existing memories:
{candidates}

Return ONLY a JSON object: {{"action": "ADD|UPDATE|DELETE|NONE", "targetId": "<id, required for
UPDATE and DELETE>", "confidence": <0..1>, "reason": "<one short sentence>"}}
"""
)

CONTRADICTION_PROMPT = (
    CONTRADICTION_MARKER
    + """ about the same subject and decide whether
they contradict each other (both cannot be true at the same time; e.g. "uses PostgreSQL" vs
"migrated to MongoDB").

Statement A: {a}
Statement B: {b}

Return ONLY a JSON object: {{"contradicts": true|false, "confidence": <0..1>, "reasoning": "<one sentence>"}}
"""
)


def _object(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


_CONFIDENCE = {"type": "number", "minimum": 0, "maximum": 1}

#: The extraction reply: ``{"facts": [{content, type, confidence}], "entities": [{source,
#: relationship, target, confidence}]}`` (the stage still caps and validates every item).
EXTRACTION_SCHEMA: dict[str, Any] = _object(
    {
        "facts": {
            "type": "array",
            "items": _object(
                {
                    "content": {"type": "string"},
                    "type": {"type": "string", "enum": ["fact", "preference", "decision", "procedural", "semantic"]},
                    "confidence": _CONFIDENCE,
                },
                ("content", "type", "confidence"),
            ),
        },
        "entities": {
            "type": "array",
            "items": _object(
                {
                    "source": {"type": "string"},
                    "relationship": {"type": "string"},
                    "target": {"type": "string"},
                    "confidence": _CONFIDENCE,
                },
                ("source", "relationship", "target", "confidence"),
            ),
        },
    },
    ("facts", "entities"),
)

#: The decision reply: ``{"action", "targetId", "confidence", "reason"}``.
DECISION_SCHEMA: dict[str, Any] = _object(
    {
        "action": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NONE"]},
        "targetId": {"type": "string"},
        "confidence": _CONFIDENCE,
        "reason": {"type": "string"},
    },
    ("action", "confidence", "reason"),
)

#: The contradiction reply: ``{"contradicts", "confidence", "reasoning"}``.
CONTRADICTION_SCHEMA: dict[str, Any] = _object(
    {
        "contradicts": {"type": "boolean"},
        "confidence": _CONFIDENCE,
        "reasoning": {"type": "string"},
    },
    ("contradicts", "confidence", "reasoning"),
)


def extraction_prompt(content: str) -> str:
    """The extraction prompt for ``content`` (already truncated to 12,000 chars by the caller)."""
    return EXTRACTION_PROMPT.replace("{content}", content)


def decision_prompt(fact: str, fact_type: str, confidence: float, candidates: Sequence[tuple[str, str, str]]) -> str:
    """The decision prompt: the fact and the numbered candidates ``(id, type, content)``."""
    lines = "\n".join(
        f"{i}. id={cid} type={ctype}: {content}" for i, (cid, ctype, content) in enumerate(candidates, start=1)
    )
    return DECISION_PROMPT.format(fact=fact, fact_type=fact_type, confidence=confidence, candidates=lines)


def contradiction_prompt(a: str, b: str) -> str:
    """The semantic contradiction prompt for statements ``a`` (new fact) and ``b`` (target memory)."""
    return CONTRADICTION_PROMPT.format(a=a, b=b)
