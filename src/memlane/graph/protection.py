"""Decision auto-protection (memory-pipeline-v2.md "Decision Auto-Protection").

A 14-pattern regex battery runs on a memory's content at write time (inside the remember
transaction, with the inline linker: no I/O). When any pattern matches, the attributes the
linker extracts from that memory are promoted from ``kind='attribute'`` (importance 0.5) to
``kind='constraint'`` with importance 0.85, so they get the resolution boost and always
surface in recall. The memory row itself is not changed (the seed promotes the attributes).
"""

from __future__ import annotations

import re
from typing import NamedTuple

ATTRIBUTE = "attribute"
CONSTRAINT = "constraint"
#: Importance of an attribute from decision content (seed: 0.85).
DECISION_IMPORTANCE = 0.85
#: Importance of any other attribute (seed: 0.5).
DEFAULT_IMPORTANCE = 0.5

# A bounded "X" between two keywords: up to 80 characters within one sentence.
_X = r"[^.!?\n]{1,80}?"

#: (name, pattern), the seed's list in order; all case-insensitive.
DECISION_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(p, re.IGNORECASE))
    for name, p in (
        ("chose_over", rf"\b(?:chose|chosen)\s+(?:to\s+)?(?:use\s+)?{_X}\s(?:over|instead)\b"),
        ("decided", r"\bdecided\s+(?:to|on|against)\b"),
        ("switched", r"\bswitched\s+(?:[\w.+#-]+\s+){0,3}?(?:from|to)\b"),
        ("migrated", r"\bmigrated?\s+(?:[\w.+#-]+\s+){0,3}?(?:from|to|away)\b"),
        ("picked_over", rf"\bpicked\s+{_X}\sover\b"),
        ("went_with", r"\bwent\s+with\b"),
        ("sticking_with", r"\bsticking\s+with\b"),
        ("committed_to", r"\bcommitted\s+to\b"),
        ("settled_on", r"\bsettled\s+on\b"),
        ("will_use", r"(?:\bwill|'ll)\s+(?:use|go\s+with|stick\s+with)\b"),
        ("prefers_over", rf"\bprefer(?:s|red)?\s+{_X}\s(?:over|instead|rather)\b"),
        ("adopted", r"\badopted\b"),
        ("architecture_decision", r"\barchitect(?:ure|ural)\s+decision\b"),
        ("design_decision", r"\bdesign\s+decision\b"),
    )
)


class Protection(NamedTuple):
    """The kind and importance given to a memory's attributes."""

    kind: str
    importance: float


#: The battery as one alternation: one scan decides "any match" (the write-path check).
_ANY = re.compile("|".join(f"(?:{rx.pattern})" for _, rx in DECISION_PATTERNS), re.IGNORECASE)


def decision_patterns(content: str) -> list[str]:
    """Names of the :data:`DECISION_PATTERNS` that match ``content``, in battery order."""
    return [name for name, rx in DECISION_PATTERNS if rx.search(content)]


def is_decision_content(content: str) -> bool:
    """True when any of the 14 decision patterns matches (seed: isDecisionContent)."""
    return _ANY.search(content) is not None


def protection_for(content: str) -> Protection:
    """``(constraint, 0.85)`` for decision content, else ``(attribute, 0.5)``."""
    if is_decision_content(content):
        return Protection(CONSTRAINT, DECISION_IMPORTANCE)
    return Protection(ATTRIBUTE, DEFAULT_IMPORTANCE)
