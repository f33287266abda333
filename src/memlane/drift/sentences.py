"""Sentences of a document's text, the finest unit drift is measured against (docs/drift.md)."""

from __future__ import annotations

import re

_BLOCK = re.compile(r"\n\s*\n")
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_HTML = re.compile(r"</?[A-Za-z][^>\n]*>")
_EMPHASIS = re.compile(r"`|\*\*|__")
_ITALIC = re.compile(r"(?<![\w*])[*_](?=[^\s*_])([^*_\n]*?[^\s*_])[*_](?![\w*])")
_ITEM = re.compile(r"^\s*(?:[*+-]|\d+\.|!!!)\s+")
_MARK = re.compile(r"^([*+-]|\d+\.|#+|>)\s+")
_SPLIT = re.compile(r"(?<=[.!?:])\s+(?=[^a-z])|\s+(?=#{1,6}\s)")
#: Most sentences kept per document (a 1 MB page is not embedded sentence by sentence whole).
MAX_SENTENCES = 2000


def plain(text: str) -> str:
    """``text`` with its Markdown markup dropped: fenced code blocks, HTML tags, inline code and
    bold marks removed, links and images reduced to their text. What a sentence says, not how
    it is marked up: the memory it is compared with states the same words without the markup."""
    text = _FENCE.sub("\n\n", text)
    text = _HTML.sub(" ", text)
    text = _IMAGE_OR_LINK.sub(r"\1", text)
    return _ITALIC.sub(r"\1", _EMPHASIS.sub("", text))


def _paragraphs(block: str) -> list[str]:
    """A block's paragraphs: its lines joined, a new one at each list item or admonition
    (``- ``, ``1. ``, ``!!! ``), whose text stands on its own even when the line before it has
    no full stop."""
    paras: list[list[str]] = []
    for ln in block.splitlines():
        if not ln.strip():
            continue
        if not paras or _ITEM.match(ln):
            paras.append([])
        paras[-1].append(_MARK.sub("", ln.strip()))
    return [" ".join(p) for p in paras]


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (its Markdown markup dropped, :func:`plain`): paragraphs
    (blank-line separated, each list item its own; list, heading and quote marks dropped, lines
    joined) cut after ``.``, ``!``, ``?`` or ``:`` followed by a space and no
    lower-case letter, and before an inline Markdown heading (``## ``: ingested text may have
    its line breaks collapsed); pieces of 4 characters or more, in order, deduplicated, at most
    :data:`MAX_SENTENCES`."""
    out: dict[str, None] = {}
    for block in _BLOCK.split(plain(text)):
        for s in (s for para in _paragraphs(block) for s in _SPLIT.split(para)):
            s = " ".join(_MARK.sub("", s.strip()).split())
            if len(s) >= 4:
                out.setdefault(s, None)
                if len(out) >= MAX_SENTENCES:
                    return list(out)
    return list(out)
