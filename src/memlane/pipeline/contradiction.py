"""Contradiction detection for UPDATE and DELETE proposals
(memory-pipeline-v2.md "Controlled Writes", "Semantic Contradiction Detection").

* :func:`syntactic_contradiction` -- the fast path: lexical overlap of at least 2 tokens, then
  a negation-polarity difference or an antonym pair conflict.
* :func:`semantic_contradiction` -- the slow path: an LLM judgement, called only for
  proposals with overlap >= 3 tokens where the syntactic check said no, behind
  ``semanticContradictionEnabled``, with ``semanticContradictionTimeoutMs``. On timeout or a
  bad reply it answers "no contradiction": advisory, it never blocks a proposal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memlane.pipeline.extraction import parse_json_reply
from memlane.pipeline.prompts import CONTRADICTION_SCHEMA, contradiction_prompt
from memlane.providers.base import LlmError, LlmProvider

_TOKEN = re.compile(r"[a-z0-9][a-z0-9'_-]*")
NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "none",
        "nobody",
        "nothing",
        "neither",
        "nor",
        "without",
        "cannot",
        "can't",
        "don't",
        "doesn't",
        "didn't",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "won't",
        "wouldn't",
        "shouldn't",
        "hasn't",
        "haven't",
        "hadn't",
        "stopped",
    }
)
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("enabled", "disabled"),
    ("enable", "disable"),
    ("allow", "deny"),
    ("allowed", "denied"),
    ("allow", "block"),
    ("true", "false"),
    ("always", "never"),
    ("like", "dislike"),
    ("likes", "dislikes"),
    ("love", "hate"),
    ("loves", "hates"),
    ("include", "exclude"),
    ("accept", "reject"),
    ("accepted", "rejected"),
    ("start", "stop"),
    ("open", "closed"),
    ("add", "remove"),
    ("added", "removed"),
    ("increase", "decrease"),
    ("success", "failure"),
    ("pass", "fail"),
    ("valid", "invalid"),
    ("active", "inactive"),
    ("public", "private"),
    ("sync", "async"),
    ("prefer", "avoid"),
    ("required", "optional"),
    ("supported", "unsupported"),
    ("installed", "uninstalled"),
)
#: Words ignored when measuring lexical overlap.
STOP_WORDS = frozenset(
    {
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "to",
        "of",
        "in",
        "on",
        "for",
        "and",
        "or",
        "it",
        "this",
        "that",
        "with",
        "as",
        "at",
        "by",
        "from",
        "has",
        "have",
        "had",
        "uses",
        "use",
        "user",
        "i",
        "we",
        "you",
        "he",
        "she",
        "they",
    }
)
MIN_SYNTACTIC_OVERLAP = 2
MIN_SEMANTIC_OVERLAP = 3


def tokens(text: str) -> set[str]:
    """Lowercased word tokens of ``text`` (apostrophes and hyphens kept inside words)."""
    return set(_TOKEN.findall(text.lower()))


def overlap(a: str, b: str) -> int:
    """Number of shared content tokens (stop words and negations excluded)."""
    skip = STOP_WORDS | NEGATIONS
    return len((tokens(a) - skip) & (tokens(b) - skip))


def _negated(toks: set[str]) -> bool:
    return bool(toks & NEGATIONS) or any(t.endswith("n't") for t in toks)


def syntactic_contradiction(fact: str, target: str) -> str | None:
    """The reason ``fact`` looks like it contradicts ``target``, or None (seed "Controlled Writes").

    Requires >= 2 shared content tokens, then either a negation-polarity difference (one has a
    negation token, the other not) or an antonym pair split across the two texts.
    """
    if overlap(fact, target) < MIN_SYNTACTIC_OVERLAP:
        return None
    ta, tb = tokens(fact), tokens(target)
    if _negated(ta) != _negated(tb):
        return "negation_polarity"
    for x, y in ANTONYMS:
        if (x in ta and y in tb and y not in ta) or (y in ta and x in tb and x not in ta):
            return f"antonym:{x}/{y}"
    return None


@dataclass(frozen=True, slots=True)
class SemanticVerdict:
    """The LLM's verdict; ``status`` is ``checked``, ``timeout`` or ``unparsable`` (then contradicts is False)."""

    contradicts: bool
    confidence: float
    reasoning: str
    status: str

    def as_dict(self) -> dict[str, object]:
        return {
            "contradicts": self.contradicts,
            "confidence": self.confidence,
            "reasoning": self.reasoning,
            "status": self.status,
        }


def semantic_contradiction(llm: LlmProvider, fact: str, target: str, *, timeout_ms: int) -> SemanticVerdict:
    """Ask the LLM whether ``fact`` and ``target`` contradict each other. Never raises.

    Args:
        timeout_ms: the call's budget, ms (``semanticContradictionTimeoutMs``, 5,000-300,000).
    Returns:
        the verdict; a timeout, provider error or unusable reply gives ``contradicts=False``.
    """
    try:
        raw = llm.generate(
            contradiction_prompt(fact, target), timeout_s=timeout_ms / 1000.0, schema=CONTRADICTION_SCHEMA
        )
    except LlmError as exc:
        return SemanticVerdict(False, 0.0, str(exc)[:200], "timeout" if exc.code == "llm_timeout" else "error")
    obj, problem = parse_json_reply(raw)
    if obj is None or not isinstance(obj.get("contradicts"), bool):
        return SemanticVerdict(False, 0.0, problem or "no boolean 'contradicts'", "unparsable")
    try:
        conf = min(1.0, max(0.0, float(obj.get("confidence", 0.0))))
    except (TypeError, ValueError):
        conf = 0.0
    return SemanticVerdict(obj["contradicts"], conf, str(obj.get("reasoning", ""))[:500], "checked")
