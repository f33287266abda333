"""HashTrick tokenizer: lowercase word tokens hashed into a fixed bucket table.

Seed "Model: Cross-Attention Memory Scorer" -> "Text path": word-level tokens, 16,384
buckets, no vocabulary, no out-of-vocabulary words. The hash is 64-bit FNV-1a over the
token's UTF-8 bytes (Fowler, Noll, Vo), stable across processes, machines and Python
versions (unlike the salted built-in ``hash()``), so a base model's embeddings transfer
(seed "Phase 6: Pre-Trained Model Path"). Id 0 is :data:`PAD_TOKEN_ID`; buckets map to
ids ``1 .. NUM_BUCKETS``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import torch

__all__ = [
    "MAX_TOKENS",
    "NUM_BUCKETS",
    "PAD_TOKEN_ID",
    "PROJECT_SLOTS",
    "encode_batch",
    "fnv1a_64",
    "project_slot",
    "token_ids",
]

NUM_BUCKETS = 16_384
#: Id of a padded token slot; the embedding table has ``NUM_BUCKETS + 1`` rows, row 0 unused.
PAD_TOKEN_ID = 0
#: Most tokens kept per text (the first ones); longer texts are truncated.
MAX_TOKENS = 128
#: Rows of the project embedding table (seed: "32 entries x d dims").
PROJECT_SLOTS = 32

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1
# Word tokens: runs of letters, digits and underscores (keeps snake_case identifiers whole).
_WORD = re.compile(r"\w+", re.UNICODE)


def fnv1a_64(data: bytes) -> int:
    """64-bit FNV-1a hash of ``data`` (an unsigned int in ``[0, 2**64)``)."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


@lru_cache(maxsize=131_072)
def _bucket_id(token: str) -> int:
    return fnv1a_64(token.encode("utf-8")) % NUM_BUCKETS + 1


def token_ids(text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
    """Token ids of one text: lowercase word tokens -> ``1 + fnv1a_64(token) % NUM_BUCKETS``.

    Args:
        text: any string (may be empty).
        max_tokens: keep at most this many tokens (the first ones), >= 1.

    Returns:
        list of ints in ``[1, NUM_BUCKETS]``, length <= ``max_tokens``; empty for a text
        without word characters.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    return [_bucket_id(word) for word in _WORD.findall(text.lower())[:max_tokens]]


def encode_batch(texts: Sequence[str], max_tokens: int = MAX_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of many texts, padded to the longest one.

    Args:
        texts: ``batch`` strings.
        max_tokens: per-text token cap, >= 1.

    Returns:
        ``(ids, mask)``: int64 ``[batch, tokens]`` padded with :data:`PAD_TOKEN_ID`, and bool
        ``[batch, tokens]`` True at real tokens; ``tokens = max(1, longest text)`` capped at
        ``max_tokens`` (a text without tokens is one PAD slot).
    """
    rows = [token_ids(t, max_tokens) for t in texts]
    width = max([1, *(len(r) for r in rows)])
    ids = torch.full((len(rows), width), PAD_TOKEN_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids, ids != PAD_TOKEN_ID


def project_slot(project: str | None) -> int:
    """Row of the project embedding table: ``fnv1a_64(project) % PROJECT_SLOTS``; 0 for none.

    Distinct projects can share a slot (32 rows); the seed accepts the collisions.
    """
    if not project:
        return 0
    return fnv1a_64(project.encode("utf-8")) % PROJECT_SLOTS
