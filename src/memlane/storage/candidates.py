"""Light candidate rows for the recall stages (dampening, reranking): seq, id, type and content
only, without the JSON columns, so dozens of candidates cost one cheap query."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CandidateRow:
    """What the recall stages read of a candidate memory."""

    seq: int
    id: str
    type: str
    content: str


def by_seqs(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, CandidateRow]:
    """``seq -> CandidateRow`` for the given seqs (unknown seqs absent)."""
    out: dict[int, CandidateRow] = {}
    for start in range(0, len(seqs), 500):
        chunk = [int(s) for s in seqs[start : start + 500]]
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(f"SELECT seq, id, type, content FROM memories WHERE seq IN ({marks})", chunk):
            out[int(r[0])] = CandidateRow(int(r[0]), r[1], r[2], r[3])
    return out
