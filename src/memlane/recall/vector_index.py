"""The vector leg: an in-memory, brute-force cosine KNN index over one embedding model.

Vectors live in SQLite (``embeddings``); this index is a dense float32 copy loaded at start
and kept in step by the memory service after each committed write. Brute force is exact and,
at d = 384, costs about 1 ms per 10,000 memories on one core (a matrix-vector product), which
is well inside the recall budget up to ~100k memories.

Each memory may carry two vectors: its content's and its context's (the content embedded
with its surrounding text). The vector score is
``(1 - w) * cos(q, content) + w * cos(q, context)`` when both exist, else ``cos(q, content)``
(``w`` = context weight); negative cosines count as 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from memlane.storage.fts import Filters


def iso_to_epoch(ts: str) -> float:
    """Seconds since the epoch of an ISO-8601 timestamp (``Z`` or offset; naive = UTC)."""
    dt = datetime.fromisoformat(ts)
    if dt.tzinfo is None:
        from datetime import timezone
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One memory as the index sees it; vectors float32 of shape [dimensions] or None."""

    seq: int
    project: str | None
    type: str
    created_at: str
    is_deleted: bool
    content_vector: np.ndarray | None
    context_vector: np.ndarray | None
    is_superseded: bool = False


class VectorIndex:
    """Exact cosine KNN over L2-normalised vectors of a single model.

    Args:
        model_id: the embedding model every vector here came from.
        dimensions: vector size d.

    Raises (from :meth:`upsert`):
        ValueError: a vector whose shape is not [d].
    """

    def __init__(self, model_id: str, dimensions: int) -> None:
        self.model_id = model_id
        self.dimensions = dimensions
        self._lock = threading.RLock()
        self._n = 0
        cap = 1024
        self._content = np.zeros((cap, dimensions), dtype=np.float32)
        self._context = np.zeros((cap, dimensions), dtype=np.float32)
        self._has_content = np.zeros(cap, dtype=bool)
        self._has_context = np.zeros(cap, dtype=bool)
        self._seq = np.zeros(cap, dtype=np.int64)
        self._project = np.zeros(cap, dtype=np.int32)
        self._type = np.zeros(cap, dtype=np.int32)
        self._created = np.zeros(cap, dtype=np.float64)
        self._deleted = np.zeros(cap, dtype=bool)
        self._superseded = np.zeros(cap, dtype=bool)
        self._row_of: dict[int, int] = {}
        self._codes: dict[str | None, int] = {None: 0}

    def __len__(self) -> int:
        return int(self._has_content[: self._n].sum())

    def _code(self, value: str | None) -> int:
        code = self._codes.get(value)
        if code is None:
            code = len(self._codes)
            self._codes[value] = code
        return code

    def _grow(self) -> None:
        cap = self._content.shape[0] * 2
        for name in ("_content", "_context"):
            arr = getattr(self, name)
            new = np.zeros((cap, self.dimensions), dtype=np.float32)
            new[: arr.shape[0]] = arr
            setattr(self, name, new)
        for name in ("_has_content", "_has_context", "_seq", "_project", "_type", "_created", "_deleted", "_superseded"):
            arr = getattr(self, name)
            new = np.zeros(cap, dtype=arr.dtype)
            new[: arr.shape[0]] = arr
            setattr(self, name, new)

    def _check(self, v: np.ndarray | None) -> np.ndarray | None:
        if v is None:
            return None
        v = np.asarray(v, dtype=np.float32)
        if v.shape != (self.dimensions,):
            raise ValueError(f"vector shape {v.shape} != ({self.dimensions},) for model {self.model_id}")
        return v

    def upsert(self, e: IndexEntry) -> None:
        """Add or replace one memory's vectors and metadata."""
        cv, xv = self._check(e.content_vector), self._check(e.context_vector)
        with self._lock:
            row = self._row_of.get(e.seq)
            if row is None:
                if self._n == self._content.shape[0]:
                    self._grow()
                row = self._n
                self._n += 1
                self._row_of[e.seq] = row
                self._seq[row] = e.seq
            self._has_content[row] = cv is not None
            self._content[row] = cv if cv is not None else 0.0
            self._has_context[row] = xv is not None
            self._context[row] = xv if xv is not None else 0.0
            self._project[row] = self._code(e.project)
            self._type[row] = self._code("type:" + e.type)
            self._created[row] = iso_to_epoch(e.created_at)
            self._deleted[row] = e.is_deleted
            self._superseded[row] = e.is_superseded

    def set_deleted(self, seq: int, deleted: bool) -> None:
        """Mark a memory deleted (excluded unless a search includes deleted) or recovered."""
        with self._lock:
            row = self._row_of.get(seq)
            if row is not None:
                self._deleted[row] = deleted

    def set_superseded(self, seq: int, superseded: bool) -> None:
        """Mark a memory superseded (excluded where a search excludes superseded memories)."""
        with self._lock:
            row = self._row_of.get(seq)
            if row is not None:
                self._superseded[row] = superseded

    def vectors_of(self, seqs: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Content vectors of the given memories, float32 [len(seqs), d], and a bool [len(seqs)]
        mask of which memories have one (rows without a vector are zero)."""
        out = np.zeros((len(seqs), self.dimensions), dtype=np.float32)
        has = np.zeros(len(seqs), dtype=bool)
        with self._lock:
            for i, s in enumerate(seqs):
                row = self._row_of.get(s)
                if row is not None and self._has_content[row]:
                    out[i] = self._content[row]
                    has[i] = True
        return out, has

    def set_meta(self, seq: int, *, project: str | None, type_: str) -> None:
        """Update the filterable fields of a memory after a PATCH."""
        with self._lock:
            row = self._row_of.get(seq)
            if row is not None:
                self._project[row] = self._code(project)
                self._type[row] = self._code("type:" + type_)

    def _mask(self, f: Filters) -> np.ndarray:
        n = self._n
        mask = self._has_content[:n].copy()
        if not f.include_deleted:
            mask &= ~self._deleted[:n]
        if f.project is not None:
            code = self._codes.get(f.project)
            in_project = self._project[:n] == code if code is not None else np.zeros(n, dtype=bool)
            if f.include_global:
                in_project |= self._project[:n] == self._codes[None]
            mask &= in_project
        if f.exclude_superseded:
            mask &= ~self._superseded[:n]
        if f.types:
            codes = [self._codes[c] for c in ("type:" + t for t in f.types) if c in self._codes]
            mask &= np.isin(self._type[:n], codes)
        if f.since is not None:
            mask &= self._created[:n] >= iso_to_epoch(f.since)
        if f.until is not None:
            mask &= self._created[:n] < iso_to_epoch(f.until)
        return mask

    def scores(self, query: np.ndarray, filters: Filters, context_weight: float = 0.5
               ) -> tuple[np.ndarray, np.ndarray]:
        """Vector scores of every memory passing ``filters``.

        Args:
            query: L2-normalised float32, shape [d].
        Returns:
            (seqs int64 [m], scores float32 [m]) in index order, scores in [0, 1].
        """
        q = self._check(query)
        with self._lock:
            n = self._n
            mask = self._mask(filters)
            idx = np.flatnonzero(mask)
            if idx.size == 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            c = self._content[:n] @ q if idx.size == n else self._content[idx] @ q
            has_x = self._has_context[idx]
            if has_x.any():
                # Context vectors only where they exist (most memories have none).
                xi = idx[has_x]
                c[has_x] = (1.0 - context_weight) * c[has_x] + context_weight * (self._context[xi] @ q)
            seqs = self._seq[idx].copy()
        return seqs, np.clip(c, 0.0, 1.0).astype(np.float32, copy=False)

    def score_of(self, query: np.ndarray, seqs: list[int], context_weight: float = 0.5) -> dict[int, float]:
        """Vector scores of the given memories (those without a content vector are absent)."""
        q = self._check(query)
        with self._lock:
            rows = [(s, self._row_of[s]) for s in seqs if s in self._row_of]
            rows = [(s, r) for s, r in rows if self._has_content[r]]
            if not rows:
                return {}
            idx = np.array([r for _, r in rows])
            c = self._content[idx] @ q
            x = self._context[idx] @ q
            has_x = self._has_context[idx]
        sc = np.clip(np.where(has_x, (1.0 - context_weight) * c + context_weight * x, c), 0.0, 1.0)
        return {s: float(v) for (s, _), v in zip(rows, sc)}

    def search(self, query: np.ndarray, k: int, filters: Filters, context_weight: float = 0.5
               ) -> list[tuple[int, float]]:
        """Top-k ``(seq, score)`` by vector score, best first; query float32 [d]."""
        seqs, s = self.scores(query, filters, context_weight)
        if s.size == 0 or k <= 0:
            return []
        k = min(k, s.size)
        top = np.argpartition(-s, k - 1)[:k]
        top = top[np.argsort(-s[top], kind="stable")]
        return [(int(seqs[i]), float(s[i])) for i in top]
