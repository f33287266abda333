"""The embedding tracker: finds live memories whose vectors are missing or stale and embeds
them in small batches (memory-pipeline-v2.md "Embedding Tracker").

Each cycle (one :meth:`EmbeddingTracker.tick`, every ``embedding_tracker.poll_ms`` ms when idle,
at once again after a productive cycle):

1. a read-only query finds up to ``embedding_tracker.batch_size`` live memories, most
   recently updated first, with no vector of the current model for their content (never
   embedded, or content changed: a new content hash) or for their context, or whose
   ``embedding_model`` names another model (model switch);
2. each text is embedded one at a time, outside any transaction; a failure counts in
   ``failed`` and that memory is left out of the next cycles (see :data:`RETRY_AFTER_CYCLES`);
   a cycle whose every embedding failed counts as skipped (the provider is down);
3. one write transaction upserts every new vector and sets ``embedding_model``;
4. the in-memory :class:`MemoryIndex` is updated from the committed rows.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from memlane.config.clock import now_iso
from memlane.embedding.base import Embedder
from memlane.errors import EmbeddingError
from memlane.recall.memory_index import IndexEntry, MemoryIndex
from memlane.services.memory_service import context_text
from memlane.storage import embeddings as emb_sql
from memlane.storage import maintenance as mnt_sql
from memlane.storage.db import Database
from memlane.workers.runtime import PollingWorker

log = logging.getLogger(__name__)

#: Cycles a memory whose embedding failed is left out before it is tried again.
RETRY_AFTER_CYCLES = 20


def _value(v: int | Callable[[], int]) -> int:
    return int(v() if callable(v) else v)


class EmbeddingTracker(PollingWorker):
    """Background refresher of missing and stale vectors.

    Args:
        db: the database.
        embedder: the embedding provider (None: every tick is idle).
        index: the in-memory index to keep in step (vectors of ``index.model_id``).
        batch_size: memories per cycle (``embedding_tracker.batchSize``, 1-20); callable = hot.
        poll_ms: idle interval, ms (``embedding_tracker.pollMs``); callable = hot.
        enabled: read every tick (``embedding_tracker.enabled``).
        now: the clock, ISO-8601 UTC.
    """

    def __init__(
        self,
        db: Database,
        embedder: Embedder | None,
        index: MemoryIndex,
        *,
        batch_size: int | Callable[[], int] = 8,
        poll_ms: float | Callable[[], float] = 5_000,
        enabled: Callable[[], bool] | None = None,
        now: Callable[[], str] = now_iso,
        name: str = "embedding-tracker",
    ) -> None:
        super().__init__(name, poll_ms=poll_ms, enabled=enabled)
        self.db = db
        self.embedder = embedder
        self.index = index
        self._batch = batch_size
        self._now = now
        self.embedded = 0
        self.failed = 0
        self.skipped_cycles = 0
        self.last_cycle_at: str | None = None
        self.queue_depth: int | None = None
        self._failed_at: dict[str, int] = {}  # memory id -> cycle of its last failure
        self._cycle = 0
        self._refresh_lock = threading.Lock()  # tick thread vs. on-demand repairs

    def tick(self) -> bool:
        """One cycle; True when any memory got its vectors."""
        return self.refresh()["embedded"] > 0

    def refresh(self, limit: int | None = None) -> dict[str, Any]:
        """Embed up to ``limit`` (default the batch size) stale memories now.

        Returns:
            ``{"embedded": n, "failed": n, "remaining": n}`` (remaining: memories still needing
            vectors after this cycle).
        """
        with self._refresh_lock:
            return self._refresh(limit)

    def _refresh(self, limit: int | None) -> dict[str, Any]:
        self._cycle += 1
        self.last_cycle_at = self._now()
        if self.embedder is None:
            return {"embedded": 0, "failed": 0, "remaining": 0}
        model = self.embedder.model_id
        self._failed_at = {k: c for k, c in self._failed_at.items() if self._cycle - c <= RETRY_AFTER_CYCLES}
        n = _value(self._batch) if limit is None else int(limit)
        rows = self.db.read(lambda c: mnt_sql.stale_memories(c, model, limit=n, exclude=list(self._failed_at)))
        vectors: dict[str, np.ndarray] = {}
        done: list[str] = []
        failed = 0
        if rows:
            have = self.db.read(
                lambda c: emb_sql.get_vectors(
                    c, [h for r in rows for h in (r.content_hash, r.context_hash) if h], model
                )
            )
            for r in rows:
                texts = {r.content_hash: r.content}
                if r.context_hash and r.context:
                    texts[r.context_hash] = context_text(r.content, r.context)
                try:
                    for h, text in texts.items():
                        if h not in have and h not in vectors:
                            vectors[h] = np.asarray(self.embedder.embed([text])[0], dtype=np.float32)
                except (EmbeddingError, ValueError) as exc:
                    failed += 1
                    self._failed_at[r.id] = self._cycle
                    log.warning("embedding tracker: memory %s not embedded: %s", r.id, exc)
                    continue
                done.append(r.id)
        if rows and not done:
            self.skipped_cycles += 1
        if done:
            at = self._now()

            def store(c: sqlite3.Connection) -> None:
                emb_sql.upsert(c, vectors.items(), model, at)
                mnt_sql.set_embedding_model(c, done, model)

            self.db.write(store)
            self._reindex(done, model)
        self.embedded += len(done)
        self.failed += failed
        self.queue_depth = self.db.read(lambda c: mnt_sql.count_stale(c, model))
        return {"embedded": len(done), "failed": failed, "remaining": self.queue_depth}

    def _reindex(self, ids: list[str], model: str) -> None:
        if self.index.model_id != model:
            return  # the index holds another model's vectors; the next restart loads these
        for r in self.db.read(lambda c: mnt_sql.index_rows_for(c, ids, model)):
            try:
                self.index.upsert(IndexEntry.from_row(r))
            except ValueError as exc:  # a vector of another size than the index's
                log.error("embedding tracker: seq %d not indexed: %s", r.seq, exc)

    def telemetry(self) -> dict[str, Any]:
        """:meth:`PollingWorker.telemetry` plus embedded, failed, skipped_cycles, last_cycle_at,
        queue_depth (memories still needing vectors, as of the last cycle)."""
        return {
            **super().telemetry(),
            "embedded": self.embedded,
            "embed_failures": self.failed,
            "skipped_cycles": self.skipped_cycles,
            "last_cycle_at": self.last_cycle_at,
            "queue_depth": self.queue_depth,
        }
