"""Slots of a statement: the tokens whose change makes a sentence say something else while its
embedding barely moves (docs/drift.md "Slot changes").

A slot is a number, version or date (``1.0``, ``0.18.0`` or ``v0.18.0``, ``2020``, ``2020-05-01``, ``5``) or a
code identifier (a dotted name ``httpx.Limits``, a snake_case name ``max_keepalive``, a
camelCase name ``followRedirects``, a call ``close()`` as ``close``). Markdown code and emphasis
marks are dropped first (:func:`memlane.drift.sentences.plain`), as they are from a document's
sentences, so ``\\`allow_redirects\\``` and ``allow_redirects`` are the same slot.
"""

from __future__ import annotations

import re

from memlane.drift.sentences import plain

_NUMBER = re.compile(r"(?<![\w.])[vV]?(\d+(?:[.\-/:]\d+)*)(?!\w)")  # a version's leading v dropped
_IDENT = re.compile(
    r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"  # dotted: httpx.Client, response.status_code
    r"|\b[A-Za-z]\w*_\w+\b"  # snake_case: max_keepalive
    r"|\b[a-z]+[A-Z]\w*\b"  # camelCase: followRedirects
    r"|\b[A-Z][a-z]+[A-Z]\w*\b"  # PascalCase with an inner capital: PoolLimits
    r"|\b\w+(?=\(\))"  # a call: close()
)
#: Most slots kept per statement (a pasted listing is not a statement).
MAX_SLOTS = 64


def slots(text: str) -> frozenset[str]:
    """The slots of ``text`` (numbers, versions, dates, code identifiers), case kept, at most
    :data:`MAX_SLOTS`."""
    t = plain(text)
    out: dict[str, None] = {}
    for m in _NUMBER.finditer(t):
        out.setdefault(m.group(1), None)
    for m in _IDENT.finditer(t):
        out.setdefault(m.group(0), None)
    return frozenset(list(out)[:MAX_SLOTS])
