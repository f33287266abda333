"""The in-memory index: its vector count follows every upsert (with, without and replaced vectors)."""

from __future__ import annotations

import numpy as np

from memlane.recall.memory_index import IndexEntry, MemoryIndex
from memlane.storage.fts import Filters


def _entry(seq: int, vec: np.ndarray | None) -> IndexEntry:
    return IndexEntry(
        seq=seq,
        id=f"m{seq}",
        project=None,
        type="fact",
        created_at="2026-01-01T00:00:00Z",
        is_deleted=False,
        content_vector=vec,
    )


def test_len_counts_memories_with_a_content_vector_through_upserts_and_growth():
    rng = np.random.default_rng(0)
    idx = MemoryIndex("model", 8)
    expected = set()
    for seq in range(3000):  # past several doublings of the 1,024-row start
        vec = rng.normal(size=8).astype(np.float32) if seq % 3 else None
        idx.upsert(_entry(seq, vec))
        if vec is not None:
            expected.add(seq)
        assert len(idx) == len(expected)
    for seq in (0, 1, 2, 3):  # replace: vector gained, lost, kept, gained
        vec = None if seq == 1 else rng.normal(size=8).astype(np.float32)
        idx.upsert(_entry(seq, vec))
        (expected.add if vec is not None else expected.discard)(seq)
        assert len(idx) == len(expected) == int(idx._has_content[: idx.size].sum())
    q = rng.normal(size=8).astype(np.float32)
    seqs, _ = idx.scores(q / np.linalg.norm(q), Filters())
    assert set(seqs.tolist()) == expected
