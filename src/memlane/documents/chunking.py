"""Overlapping chunks of a document's text (memory-pipeline-v2.md "Document Ingest").

``chunk_size`` (``documents.chunkSize``, default 2,000 chars) is the window size and
``chunk_overlap`` (``documents.chunkOverlap``, default 200 chars) how many characters a window
shares with the previous one. A text no longer than one window is not split.

Boundaries: a window ends at the last paragraph break in its final quarter, else the last line
break there, else the last sentence end (``. ! ?`` followed by a space), else the last space;
only a text with no break at all is cut mid-word. The next window starts ``chunk_overlap``
characters before that end, moved forward to the start of a word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One window: ``text`` is ``source[start:end]`` stripped; ``index`` counts from 0."""

    index: int
    text: str
    start: int
    end: int


def _break_at(text: str, start: int, end: int) -> int:
    """The best end of a window ``text[start:end]``: a break in its last quarter, else ``end``."""
    floor = start + (end - start) * 3 // 4
    for sep in ("\n\n", "\n"):
        i = text.rfind(sep, floor, end)
        if i > start:
            return i + len(sep)
    best = -1
    for m in _SENTENCE_END.finditer(text, floor, end):
        best = m.end()
    if best > start:
        return best
    i = text.rfind(" ", floor, end)
    return i + 1 if i > start else end


def chunk_text(text: str, *, chunk_size: int = 2000, chunk_overlap: int = 200) -> list[Chunk]:
    """Split ``text`` into overlapping windows of at most ``chunk_size`` characters.

    Args:
        text: the document's text.
        chunk_size: window size, chars (> 0).
        chunk_overlap: characters shared with the previous window, chars (0 <= overlap < size).

    Returns:
        the non-empty chunks in order (none for a blank text).

    Raises:
        ValueError: ``chunk_size <= 0`` or an overlap outside ``[0, chunk_size)``.
    """
    if chunk_size <= 0:
        raise ValueError("chunk_size must be > 0")
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError("chunk_overlap must be in [0, chunk_size)")
    n = len(text)
    if not text.strip():
        return []
    if n <= chunk_size:
        return [Chunk(0, text.strip(), 0, n)]
    out: list[Chunk] = []
    start = 0
    while start < n:
        end = min(start + chunk_size, n)
        if end < n:
            end = _break_at(text, start, end)
        piece = text[start:end].strip()
        if piece:
            out.append(Chunk(len(out), piece, start, end))
        if end >= n:
            break
        nxt = max(end - chunk_overlap, start + 1)
        # start the next window at a word: skip forward past the word cut by the overlap
        if nxt < end and nxt > 0 and not text[nxt - 1].isspace():
            space = text.find(" ", nxt, end)
            newline = text.find("\n", nxt, end)
            cands = [i for i in (space, newline) if i != -1]
            if cands:
                nxt = min(cands) + 1
        start = nxt
    return out
