"""Entity and aspect names: canonical form, query tokens and the n-grams matched against
entity names (memory-pipeline-v2.md "Knowledge Graph", "Graph-Augmented Search")."""

from __future__ import annotations

import re

#: Entity types a classifier may assign (seed "Structural Classification"); ``extracted`` means
#: "not determined yet".
CANONICAL_TYPES: frozenset[str] = frozenset(
    {"person", "project", "system", "tool", "concept", "skill", "task", "unknown"}
)
UNTYPED = "extracted"

#: Shortest canonical entity name kept, characters.
MIN_NAME_CHARS = 2
#: Longest entity name kept, characters (longer strings are not names).
MAX_NAME_CHARS = 200

_WS = re.compile(r"\s+")
_TOKEN = re.compile(r"[0-9a-z]{2,}")
_EDGE_PUNCT = ".,;:!?()[]{}<>\"'`"


def canonical_name(name: str) -> str:
    """Lowercase, whitespace runs collapsed to one space, trimmed (seed: canonical_name)."""
    return _WS.sub(" ", name).strip().lower()


def clean_name(name: str) -> str:
    """The stored ``name``: original casing, whitespace collapsed, trimmed, at most
    :data:`MAX_NAME_CHARS` characters."""
    return _WS.sub(" ", name).strip()[:MAX_NAME_CHARS]


def entity_type(value: object) -> str:
    """A canonical type (lowercased) or :data:`UNTYPED` for anything else."""
    t = value.strip().lower() if isinstance(value, str) else ""
    return t if t in CANONICAL_TYPES else UNTYPED


def query_tokens(text: str) -> list[str]:
    """Query tokens: runs of 2+ lowercase ASCII letters/digits, in order (seed
    "Graph-Augmented Search": "2+ character alphanumeric runs, lowercased")."""
    return _TOKEN.findall(text.lower())


def query_ngrams(text: str, *, max_n: int = 3, max_grams: int = 300) -> list[str]:
    """Distinct 1..``max_n``-grams of :func:`query_tokens` joined by a space, in order, at most
    ``max_grams``, plus whitespace-separated words with inner punctuation: the strings compared (exactly, through the index) with canonical names, so
    "use react native here" finds the entity "React Native" as well as "react"."""
    toks = query_tokens(text)
    seen: dict[str, None] = {}
    for w in text.lower().split():  # names with punctuation inside: "node.js", "c++"
        w = w.strip(_EDGE_PUNCT)
        if len(w) >= MIN_NAME_CHARS and not _TOKEN.fullmatch(w):
            seen.setdefault(w, None)
    for n in range(1, max_n + 1):
        for i in range(len(toks) - n + 1):
            seen.setdefault(" ".join(toks[i : i + n]), None)
            if len(seen) >= max_grams:
                return list(seen)
    return list(seen)
