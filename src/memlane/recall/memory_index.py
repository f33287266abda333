"""An in-memory index of every memory: ranking fields for all, vectors where they exist.

SQLite holds the truth; this is a dense copy loaded at start and kept in step by the memory
service after each committed write. It serves two hot paths with numpy instead of SQL:

* the vector leg of recall: exact (brute-force) cosine KNN over the vectors of one embedding
  model, about 1 ms per 10,000 memories at d = 384. Each memory may carry two vectors, its
  content's and its context's; the vector score is ``(1 - w) * cos(q, content) +
  w * cos(q, context)`` when both exist, else ``cos(q, content)``; negatives count as 0.
* the session-start baseline: effectiveScore = importance x 0.95^days (pinned = 1.0) over a
  project's live memories (predictive-memory-scorer.md "Candidate Pre-Filtering").

Vectors of a model other than ``model_id`` are never added (they are never compared).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import overload

import numpy as np

from memlane.storage.fts import Filters
from memlane.storage.models import IndexRow, Memory, NewMemory

#: Decay base of effectiveScore per day (seed: importance x 0.95^days).
DECAY_PER_DAY = 0.95

_blas_limited = False


def single_threaded_blas() -> None:
    """Limit numpy's BLAS to one thread in this process (idempotent; logged and ignored when
    threadpoolctl cannot).

    Why: the vector leg is one matrix-vector product ([n, 384] x [384]), memory-bound. OpenBLAS
    splits it over every core and its threads spin-wait between calls: on a small machine that
    is slower than one thread, and the spinning takes the CPU from onnxruntime and SQLite
    (docs/decisions.md, "Threads"). The results are bit-identical.
    """
    global _blas_limited
    if _blas_limited:
        return
    _blas_limited = True
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")
    except Exception as exc:  # an exotic BLAS: keep its default
        logging.getLogger(__name__).warning("cannot limit BLAS threads: %s", exc)


_FIELDS = {
    "_has_content": bool,
    "_has_context": bool,
    "_seq": np.int64,
    "_project": np.int32,
    "_type": np.int32,
    "_created": np.float64,
    "_deleted": bool,
    "_superseded": bool,
    "_importance": np.float32,
    "_pinned": bool,
    "_access": np.int64,
}


def iso_to_epoch(ts: str) -> float:
    """Seconds since the epoch of an ISO-8601 timestamp (``Z`` or offset; naive = UTC)."""
    dt = datetime.fromisoformat(ts)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One memory as the index sees it; vectors float32 of shape [d] or None.

    Built by one of its constructors: :meth:`from_row` (a stored row with its vector blobs),
    :meth:`from_memory` (a memory read back after a change) or :meth:`created` (a memory just
    inserted); :meth:`without_vectors` is the same memory for BM25 only.
    """

    seq: int
    id: str
    project: str | None
    type: str
    created_at: str
    is_deleted: bool
    content_vector: np.ndarray | None = None
    context_vector: np.ndarray | None = None
    is_superseded: bool = False
    importance: float = 0.5
    pinned: bool = False
    access_count: int = 0

    @classmethod
    def from_row(cls, row: IndexRow) -> IndexEntry:
        """From a storage row (``storage.memories.index_rows``, ``storage.maintenance.index_rows_for``):
        its vector blobs decoded as little-endian float32 [d] (None stays None)."""
        return cls(
            row.seq,
            row.id,
            row.project,
            row.type,
            row.created_at,
            row.is_deleted,
            _vector(row.content_vector),
            _vector(row.context_vector),
            row.is_superseded,
            row.importance,
            row.pinned,
            row.access_count,
        )

    @classmethod
    def from_memory(cls, m: Memory, content_vector: np.ndarray | None, context_vector: np.ndarray | None) -> IndexEntry:
        """From a stored memory and its vectors (float32 [d] or None); superseded when
        ``superseded_by`` is set."""
        return cls(
            m.seq,
            m.id,
            m.project,
            m.type,
            m.created_at,
            m.is_deleted,
            content_vector,
            context_vector,
            m.superseded_by is not None,
            m.importance,
            m.pinned,
            m.access_count,
        )

    @classmethod
    def created(
        cls, seq: int, new: NewMemory, content_vector: np.ndarray | None, context_vector: np.ndarray | None
    ) -> IndexEntry:
        """A memory just inserted at ``seq``: live, not superseded, never accessed."""
        return cls(
            seq,
            new.id,
            new.project,
            new.type,
            new.created_at,
            False,
            content_vector,
            context_vector,
            False,
            new.importance,
            new.pinned,
            0,
        )

    def without_vectors(self) -> IndexEntry:
        """The same memory with neither vector (indexed for BM25 and ranking only)."""
        return replace(self, content_vector=None, context_vector=None)


def _vector(blob: bytes | None) -> np.ndarray | None:
    return np.frombuffer(blob, dtype="<f4") if blob is not None else None


class MemoryIndex:
    """Every memory's ranking fields, plus its vectors from one embedding model.

    Args:
        model_id: the embedding model of every vector here (None: no vectors at all).
        dimensions: vector size d; 0 = learn it from the first vector.

    Raises (from :meth:`upsert`):
        ValueError: a vector whose shape is not [d].
    """

    # One column per memory row (allocated from _FIELDS in __init__, doubled by _grow).
    _has_content: np.ndarray
    _has_context: np.ndarray
    _seq: np.ndarray
    _project: np.ndarray
    _type: np.ndarray
    _created: np.ndarray
    _deleted: np.ndarray
    _superseded: np.ndarray
    _importance: np.ndarray
    _pinned: np.ndarray
    _access: np.ndarray

    def __init__(self, model_id: str | None, dimensions: int = 0) -> None:
        self.model_id = model_id
        self.dimensions = dimensions
        self._lock = threading.RLock()
        self._n = 0
        self._cap = 1024
        self._content = np.zeros((self._cap, dimensions), dtype=np.float32)
        self._context = np.zeros((self._cap, dimensions), dtype=np.float32)
        for name, dtype in _FIELDS.items():
            setattr(self, name, np.zeros(self._cap, dtype=dtype))
        self._ids: list[str] = []
        self._row_of: dict[int, int] = {}
        self._codes: dict[str | None, int] = {None: 0}
        self._vectors = 0  # rows with a content vector, kept by upsert

    def __len__(self) -> int:
        """Memories with a content vector (those the vector leg can return).

        A counter, not a numpy sum: recall asks while its BM25 worker runs, and a numpy reduction
        over many rows releases the GIL, which the worker then keeps for up to the interpreter's
        switch interval (docs/decisions.md, "Threads").
        """
        return self._vectors

    @property
    def size(self) -> int:
        """Every memory in the index, with or without vectors."""
        return self._n

    def _code(self, value: str | None) -> int:
        code = self._codes.get(value)
        if code is None:
            code = len(self._codes)
            self._codes[value] = code
        return code

    def _grow(self) -> None:
        cap = self._cap * 2
        for name in ("_content", "_context"):
            arr = getattr(self, name)
            new = np.zeros((cap, self.dimensions), dtype=np.float32)
            new[: arr.shape[0]] = arr
            setattr(self, name, new)
        for name in _FIELDS:
            arr = getattr(self, name)
            new = np.zeros(cap, dtype=arr.dtype)
            new[: arr.shape[0]] = arr
            setattr(self, name, new)
        self._cap = cap

    @overload
    def _check(self, v: np.ndarray) -> np.ndarray: ...
    @overload
    def _check(self, v: np.ndarray | None) -> np.ndarray | None: ...

    def _check(self, v: np.ndarray | None) -> np.ndarray | None:
        if v is None:
            return None
        v = np.asarray(v, dtype=np.float32)
        if self.dimensions == 0 and v.ndim == 1 and v.shape[0] > 0 and self.model_id is not None:
            with self._lock:  # first vector: fix d
                if self.dimensions == 0:
                    self.dimensions = int(v.shape[0])
                    self._content = np.zeros((self._cap, self.dimensions), dtype=np.float32)
                    self._context = np.zeros((self._cap, self.dimensions), dtype=np.float32)
        if v.shape != (self.dimensions,):
            raise ValueError(f"vector shape {v.shape} != ({self.dimensions},) for model {self.model_id}")
        return v

    def upsert(self, e: IndexEntry) -> None:
        """Add or replace one memory's fields and vectors."""
        cv, xv = self._check(e.content_vector), self._check(e.context_vector)
        with self._lock:
            row = self._row_of.get(e.seq)
            if row is None:
                if self._n == self._cap:
                    self._grow()
                row = self._n
                self._n += 1
                self._row_of[e.seq] = row
                self._seq[row] = e.seq
                self._ids.append(e.id)
            self._vectors += (cv is not None) - bool(self._has_content[row])
            self._has_content[row] = cv is not None
            self._has_context[row] = xv is not None
            if self.dimensions:
                self._content[row] = cv if cv is not None else 0.0
                self._context[row] = xv if xv is not None else 0.0
            self._project[row] = self._code(e.project)
            self._type[row] = self._code("type:" + e.type)
            self._created[row] = iso_to_epoch(e.created_at)
            self._deleted[row] = e.is_deleted
            self._superseded[row] = e.is_superseded
            self._importance[row] = e.importance
            self._pinned[row] = e.pinned
            self._access[row] = e.access_count

    def _set(self, seq: int, name: str, value: object) -> None:
        with self._lock:
            row = self._row_of.get(seq)
            if row is not None:
                getattr(self, name)[row] = value

    def set_deleted(self, seq: int, deleted: bool) -> None:
        """Mark a memory deleted (excluded unless a search includes deleted) or recovered."""
        self._set(seq, "_deleted", deleted)

    def set_superseded(self, seq: int, superseded: bool) -> None:
        """Mark a memory superseded (excluded where a search excludes superseded memories)."""
        self._set(seq, "_superseded", superseded)

    def add_access(self, seqs: list[int]) -> None:
        """Count one more access (recall rehearsal) for each memory, after the write committed."""
        with self._lock:
            for s in seqs:
                row = self._row_of.get(s)
                if row is not None:
                    self._access[row] += 1

    def ranking_fields(self, seqs: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(known bool [m], access_count int64 [m], created epoch s float64 [m]) of the memories."""
        with self._lock:
            rows = np.array([self._row_of.get(s, -1) for s in seqs], dtype=np.int64)
            known = rows >= 0
            safe = np.where(known, rows, 0)
            return known, self._access[safe].copy(), self._created[safe].copy()

    def type_weights(self, seqs: list[int], weights: dict[str, float]) -> np.ndarray:
        """float64 [m]: ``weights[type]`` of each memory's type, 1.0 for a type ``weights`` does
        not name and for an unknown seq (the phase weights, memlane.v3.methodology.phases)."""
        with self._lock:
            lut = np.ones(len(self._codes) + 1, dtype=np.float64)
            for t, w in weights.items():
                code = self._codes.get("type:" + t)
                if code is not None:
                    lut[code] = w
            rows = np.array([self._row_of.get(s, -1) for s in seqs], dtype=np.int64)
            known = rows >= 0
            return np.where(known, lut[self._type[np.where(known, rows, 0)]], 1.0)

    def candidate_fields(self, seqs: list[int]) -> list[dict[str, float | bool] | None]:
        """Per memory (None if unknown): created (epoch s), importance, access_count, superseded,
        pinned - the stored signals the predictor scores with."""
        with self._lock:
            out: list[dict[str, float | bool] | None] = []
            for s in seqs:
                row = self._row_of.get(s, -1)
                out.append(
                    None
                    if row < 0
                    else {
                        "created": float(self._created[row]),
                        "importance": float(self._importance[row]),
                        "access_count": int(self._access[row]),
                        "superseded": bool(self._superseded[row]),
                        "pinned": bool(self._pinned[row]),
                    }
                )
            return out

    def vectors_of(self, seqs: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Content vectors of the given memories, float32 [len(seqs), d], and a bool [len(seqs)]
        mask of which have one (rows without a vector are zero)."""
        with self._lock:
            rows = np.array([self._row_of.get(s, -1) for s in seqs], dtype=np.int64)
            ok = rows >= 0
            has = np.zeros(len(seqs), dtype=bool)
            has[ok] = self._has_content[rows[ok]]
            out = np.zeros((len(seqs), self.dimensions), dtype=np.float32)
            if self.dimensions and has.any():
                out[has] = self._content[rows[has]]
        return out, has

    def _mask(self, f: Filters) -> np.ndarray:
        n = self._n
        mask = np.ones(n, dtype=bool)
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

    def allowed(self, seqs: list[int], filters: Filters) -> np.ndarray:
        """bool [len(seqs)]: which of these memories pass ``filters`` (unknown seqs do not)."""
        with self._lock:
            rows = np.array([self._row_of.get(s, -1) for s in seqs], dtype=np.int64)
            ok = rows >= 0
            if ok.any():
                ok[ok] = self._mask(filters)[rows[ok]]
        return ok

    def count(self, filters: Filters) -> int:
        """Memories passing ``filters`` (the dashboard's page totals, without a table scan)."""
        with self._lock:
            return int(self._mask(filters).sum())

    def state_counts(self) -> dict[str, object]:
        """``{"total", "live", "deleted", "superseded", "pinned" (live), "by_type" (live, most
        first)}``: the store's counts from memory (the dashboard's Health page)."""
        with self._lock:
            n = self._n
            deleted, live = self._deleted[:n], ~self._deleted[:n]
            counts = np.bincount(self._type[:n][live], minlength=len(self._codes)) if n else np.zeros(0, int)
            names = {
                code: key[5:] for key, code in self._codes.items() if isinstance(key, str) and key.startswith("type:")
            }
            by_type = {names[c]: int(v) for c, v in enumerate(counts) if v and c in names}
            return {
                "total": n,
                "live": int(live.sum()),
                "deleted": int(deleted.sum()),
                "superseded": int(self._superseded[:n].sum()),
                "pinned": int((self._pinned[:n] & live).sum()),
                "by_type": dict(sorted(by_type.items(), key=lambda kv: -kv[1])),
            }

    # -- the vector leg --------------------------------------------------------------------
    def scores(self, query: np.ndarray, filters: Filters, context_weight: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
        """Vector scores of every memory with a vector passing ``filters``.

        Args:
            query: L2-normalised float32, shape [d].
        Returns:
            (seqs int64 [m], scores float32 [m]) in index order, scores in [0, 1].
        """
        q = self._check(query)
        with self._lock:
            n = self._n
            idx = np.flatnonzero(self._mask(filters) & self._has_content[:n])
            if idx.size == 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            c = self._content[:n] @ q if idx.size == n else self._content[idx] @ q
            has_x = self._has_context[idx]
            if has_x.any():  # context vectors only where they exist
                c[has_x] = (1.0 - context_weight) * c[has_x] + context_weight * (self._context[idx[has_x]] @ q)
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

    def leg_cosines(self, query: np.ndarray, seqs: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Content-only and context-only cosines of the given memories with ``query`` (float32
        [d]), float64 [len(seqs)] each, NaN where the memory is unknown or has no such vector
        (the learned ranker's ``vector_content`` / ``vector_context``)."""
        q = self._check(query)
        content = np.full(len(seqs), np.nan)
        context = np.full(len(seqs), np.nan)
        with self._lock:
            rows = np.array([self._row_of.get(s, -1) for s in seqs], dtype=np.int64)
            ok = rows >= 0
            if not ok.any():
                return content, context
            has_c = np.zeros(len(seqs), dtype=bool)
            has_x = np.zeros(len(seqs), dtype=bool)
            has_c[ok] = self._has_content[rows[ok]]
            has_x[ok] = self._has_context[rows[ok]]
            if has_c.any():
                content[has_c] = self._content[rows[has_c]] @ q
            if has_x.any():
                context[has_x] = self._context[rows[has_x]] @ q
        return content, context

    def search(
        self, query: np.ndarray, k: int, filters: Filters, context_weight: float = 0.5
    ) -> list[tuple[int, float]]:
        """Top-k ``(seq, score)`` by vector score, best first; query float32 [d]."""
        seqs, s = self.scores(query, filters, context_weight)
        if s.size == 0 or k <= 0:
            return []
        k = min(k, s.size)
        top = np.argpartition(-s, k - 1)[:k]
        top = top[np.argsort(-s[top], kind="stable")]
        return [(int(seqs[i]), float(s[i])) for i in top]

    # -- the session-start baseline ---------------------------------------------------------
    def top_effective(
        self, *, project: str | None, now_epoch: float, limit: int, min_effective: float
    ) -> list[tuple[int, str, float]]:
        """Top ``limit`` live, not superseded memories of ``project`` (and global ones; all memories
        when ``project`` is None) by effectiveScore, best first, skipping those below
        ``min_effective`` (pinned exempt, scoring 1.0). Ages below 0 count as 0 days.

        Returns:
            ``[(seq, memory id, effective score)]``; ties broken by newer seq first.
        """
        f = Filters(project=project, include_global=True, exclude_superseded=True)
        with self._lock:
            idx = np.flatnonzero(self._mask(f))
            if idx.size == 0 or limit <= 0:
                return []
            days = np.maximum(0.0, (now_epoch - self._created[idx]) / 86400.0)
            eff = np.where(self._pinned[idx], 1.0, self._importance[idx] * DECAY_PER_DAY**days)
            keep = eff >= min_effective
            idx, eff = idx[keep], eff[keep]
            if idx.size == 0:
                return []
            k = min(limit, idx.size)
            part = np.argpartition(-eff, k - 1)[:k] if k < idx.size else np.arange(idx.size)
            seqs = self._seq[idx[part]]
            order = np.lexsort((-seqs, -eff[part]))
            part = part[order]
            return [(int(self._seq[idx[i]]), self._ids[idx[i]], float(eff[i])) for i in part]
