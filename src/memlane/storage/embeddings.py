"""SQL for the ``embeddings`` table: float32 vectors keyed by (content_hash, model)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

import numpy as np


def get_vectors(conn: sqlite3.Connection, hashes: Sequence[str], model: str) -> dict[str, np.ndarray]:
    """Vectors by hash for ``model``; each float32 of shape [dimensions]."""
    out: dict[str, np.ndarray] = {}
    uniq = list(dict.fromkeys(hashes))
    for start in range(0, len(uniq), 500):
        chunk = uniq[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for h, blob in conn.execute(
            f"SELECT content_hash, vector FROM embeddings WHERE model = ? AND content_hash IN ({marks})",
            (model, *chunk),
        ):
            out[h] = np.frombuffer(blob, dtype="<f4")
    return out


def upsert(conn: sqlite3.Connection, items: Iterable[tuple[str, np.ndarray]], model: str, at: str) -> None:
    """Insert or replace vectors; each vector float32 of shape [dimensions]."""
    conn.executemany(
        """INSERT INTO embeddings (content_hash, model, dimensions, vector, created_at)
           VALUES (?,?,?,?,?)
           ON CONFLICT(content_hash, model) DO UPDATE SET
               dimensions = excluded.dimensions, vector = excluded.vector, created_at = excluded.created_at""",
        [(h, model, int(v.shape[0]), np.asarray(v, dtype="<f4").tobytes(), at) for h, v in items],
    )


def count(conn: sqlite3.Connection) -> dict[str, int]:
    """Number of vectors per model."""
    return dict(conn.execute("SELECT model, count(*) FROM embeddings GROUP BY model").fetchall())
