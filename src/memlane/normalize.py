"""Content normalization and hashing (memory-pipeline-v2.md, "Content Normalization").

Deterministic; produces three values:

* ``storage_content``: trimmed, every whitespace run (``/\\s+/g``) collapsed to one space;
  original casing kept. This is what is written to the database.
* ``normalized_content``: ``storage_content`` lowercased with trailing punctuation
  (``[.,!?;:]+$``) stripped. Indexed by FTS and used as the hash basis when non-empty.
* ``content_hash``: SHA-256 hex (64 chars) of the hash basis: ``normalized_content`` if
  non-empty, otherwise the lowercased ``storage_content``. The deduplication key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# JavaScript's \s (the seed's regex), spelled out: Python's \s differs from it (it lacks the
# BOM U+FEFF and adds U+001C..U+001F and U+0085, which JavaScript does not treat as space).
# = TAB LF VT FF CR, every Zs character, LS, PS and U+FEFF.
_WS = re.compile("[\t\n\x0b\x0c\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+")
_TRAILING_PUNCT = re.compile(r"[.,!?;:]+$")


@dataclass(frozen=True, slots=True)
class NormalizedContent:
    """The three derived values of one content string."""

    storage_content: str
    normalized_content: str
    content_hash: str


def normalize_and_hash(content: str) -> NormalizedContent:
    """Normalize ``content`` and compute its dedup hash (seed: normalizeAndHashContent).

    Args:
        content: any string (may be empty).

    Returns:
        NormalizedContent with ``content_hash`` a 64-char lowercase hex SHA-256.
    """
    storage = _WS.sub(" ", content).strip(" ")
    normalized = _TRAILING_PUNCT.sub("", storage.lower())
    basis = normalized if normalized else storage.lower()
    digest = hashlib.sha256(basis.encode("utf-8", "surrogatepass")).hexdigest()
    return NormalizedContent(storage, normalized, digest)


def content_hash(text: str) -> str:
    """The dedup hash of ``text`` (the ``content_hash`` of :func:`normalize_and_hash`)."""
    return normalize_and_hash(text).content_hash
