"""Sentences of a document's text, the finest unit drift is measured against (docs/drift.md)."""

from __future__ import annotations

import re

_BLOCK = re.compile(r"\n\s*\n")
_MARK = re.compile(r"^([*+-]|\d+\.|#+|>)\s+")
_SPLIT = re.compile(r"(?<=[.!?:])\s+(?=[^a-z])|\s+(?=#{1,6}\s)")
#: Most sentences kept per document (a 1 MB page is not embedded sentence by sentence whole).
MAX_SENTENCES = 2000


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: paragraphs (blank-line separated; list, heading and quote marks
    dropped, lines joined) cut after ``.``, ``!``, ``?`` or ``:`` followed by a space and no
    lower-case letter, and before an inline Markdown heading (``## ``: ingested text may have
    its line breaks collapsed); pieces of 4 characters or more, in order, deduplicated, at most
    :data:`MAX_SENTENCES`."""
    out: dict[str, None] = {}
    for block in _BLOCK.split(text):
        para = " ".join(_MARK.sub("", ln.strip()) for ln in block.splitlines() if ln.strip())
        for s in _SPLIT.split(para):
            s = _MARK.sub("", s.strip()).strip()
            if len(s) >= 4:
                out.setdefault(s, None)
                if len(out) >= MAX_SENTENCES:
                    return list(out)
    return list(out)
