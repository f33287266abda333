"""Builds and wires every object from Settings; nothing else reads the configuration.

``open_container(settings)`` opens (and migrates) the database, builds the embedder, loads
the vector index for the embedder's model from the stored vectors, and returns a
:class:`Container` holding the services. ``close()`` releases all of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from memlane.config import Settings
from memlane.embedding import build_embedder
from memlane.embedding.base import Embedder
from memlane.fileperms import private_dir
from memlane.graph.wiring import wire as wire_graph
from memlane.key_binding import enforce_key_bindings
from memlane.config.pipeline import extraction_llm_settings
from memlane.pipeline import extract_job
from memlane.pipeline.jobs import extraction_hook
from memlane.pipeline import wiring_docs
from memlane.drift import wiring as drift_wiring
from memlane.workers.runtime import JobWorker, StaleLeaseReaper, WorkerRegistry
from memlane.recall.memory_index import IndexEntry, MemoryIndex
from memlane.recall import stages as recall_stages
from memlane.services.memory_service import MemoryService
from memlane.providers import LlmProvider, build_provider
from memlane.services.predictor_scoring import sidecar_for, sidecar_lifecycle
from memlane.services.predictor_service import PredictorService
from memlane.services.recall_service import RecallService
from memlane.sessions.checkpoints import SessionCheckpointService
from memlane.sessions.service import SessionService
from memlane.storage import memories as mem_sql
from memlane.storage.db import Database
from memlane.storage.migrations import migrate

log = logging.getLogger(__name__)

#: Seconds the workers get to finish their tick at close before LLM calls in flight are aborted.
WORKER_GRACE_S = 3.0
#: Seconds the workers then get once those calls are aborted.
WORKER_ABORTED_WAIT_S = 5.0


@dataclass
class Container:
    """Every long-lived object of one daemon (or one CLI run on a data directory)."""

    settings: Settings
    db: Database
    embedder: Embedder | None
    memories: MemoryService
    recall: RecallService
    sessions: SessionService
    checkpoints: SessionCheckpointService
    llm: LlmProvider | None = None
    #: Background workers (memlane.workers.runtime); started only by open_container(start_workers=True).
    workers: WorkerRegistry = field(default_factory=WorkerRegistry)
    #: The LLM extraction uses (settings.llm unless memory.pipelineV2.extraction overrides it).
    extraction_llm: LlmProvider | None = None
    #: The predictor (memlane.services.predictor_service), or None when it does not run here.
    predictor: PredictorService | None = None
    #: Drift and staleness (memlane.drift.service.DriftService), wired by memlane.drift.wiring.
    drift: Any = None

    def close(self) -> None:
        """Stop the workers; finish background judging, pending checkpoints and queued writes;
        close the database, the embedder and the LLM providers.

        A shutdown never waits on an LLM: the continuity judge is stopped first (its backlog is
        scored from behaviour, its call in flight aborted), and when workers are still busy after
        :data:`WORKER_GRACE_S` (an extraction waiting on a hung model) the LLM providers are
        closed, which aborts their calls in flight, before the workers are waited for again."""
        self.sessions.stop_judge()
        if self.workers.stop_all(timeout=WORKER_GRACE_S):
            self._close_llms()
            self.workers.stop_all(timeout=WORKER_ABORTED_WAIT_S)
        self.sessions.close()
        if self.predictor is not None:
            self.predictor.close()
        self.checkpoints.close()
        if self.drift is not None:
            self.drift.close()
        self.db.close()
        if self.embedder is not None:
            self.embedder.close()
        self._close_llms()

    def _close_llms(self) -> None:
        """Close the LLM providers (idempotent); calls in flight are aborted."""
        if self.llm is not None:
            self.llm.close()
        if self.extraction_llm is not None and self.extraction_llm is not self.llm:
            self.extraction_llm.close()


def load_index(db: Database, model_id: str | None, dimensions: int = 0) -> MemoryIndex:
    """The in-memory index of every memory, with the vectors of ``model_id`` where stored."""
    index = MemoryIndex(model_id, dimensions)
    for r in db.read(lambda c: list(mem_sql.index_rows(c, model_id))):
        entry = IndexEntry.from_row(r)
        try:
            index.upsert(entry)
        except ValueError as exc:  # a stored vector of another size: keep the memory, drop the vector
            log.warning("memory %s: %s; indexed without vectors", r.id, exc)
            index.upsert(entry.without_vectors())
    return index


def open_container(settings: Settings, *, embedder: Embedder | None = None, warmup: bool = False,
                   start_workers: bool = False, predictor: bool | None = None) -> Container:
    """Open the data directory of ``settings`` and wire the services.

    Args:
        settings: the effective settings.
        embedder: use this embedder instead of building one from settings (shared by benchmarks
            that open many stores).
        warmup: load the local embedding model now rather than on the first call.
        start_workers: start the background workers (the daemon does; CLI one-shots and tests
            do not unless they ask). Workers are registered either way.
        predictor: run the predictor sidecar (default: with ``start_workers``, i.e. in the daemon)
            when ``settings.predictor.enabled``.

    Raises:
        StorageError: the database cannot be opened or migrated.
        ConfigError: ``{home}/key-bindings.json`` is unreadable (memlane.key_binding).
    """
    private_dir(settings.home)  # created 0700 (memlane.fileperms)
    enforce_key_bindings(settings)  # an API key goes only to the base URL it was first used with
    db = Database(settings.db_path, read_pool_size=settings.read_pool_size,
                  busy_timeout_ms=settings.busy_timeout_ms, synchronous=settings.sqlite_synchronous)
    migrate(db)
    emb = embedder if embedder is not None else build_embedder(settings.embedding)
    if warmup and emb is not None and hasattr(emb, "warmup"):
        emb.warmup()
    index = load_index(db, emb.model_id if emb is not None else None,
                       getattr(emb, "dimensions", 0) if emb is not None else 0)
    memories = MemoryService(db, emb, index, max_content_chars=settings.max_content_chars,
                             embed_batch=settings.embedding.batch_size,
                             redact_memories=lambda: settings.redact.memories)
    recall = RecallService(memories, settings.recall)
    llm = build_provider(settings.llm)
    checkpoints = SessionCheckpointService(db, settings.continuity)
    pred = None
    if (start_workers if predictor is None else predictor) and settings.predictor.enabled:
        backend = sidecar_for(settings.predictor, db_path=settings.db_path, home=settings.home,
                              embedding_model_id=emb.model_id if emb is not None else "none",
                              native_dim=getattr(emb, "dimensions", 0) or 1 if emb is not None else 1)
        # The sidecar (PyTorch, ~300 MiB) runs only with a model to serve or a training run;
        # until then the daemon scores with the untrained model's formula (issue 43).
        pred = PredictorService(db, index, backend, settings.predictor,
                                lifecycle=sidecar_lifecycle(backend, settings.predictor, home=settings.home))
        pred.start()
    sessions = SessionService(memories, recall, settings.sessions, llm=llm, checkpoints=checkpoints, predictor=pred)
    container = Container(settings, db, emb, memories, recall, sessions, checkpoints, llm)
    container.predictor = pred
    _wire_pipeline(container)
    if start_workers:
        container.workers.start_all()
    return container


def _wire_pipeline(c: Container) -> None:
    """memory-pipeline-v2: the extraction LLM, the enqueue hook on remember, the extraction job
    worker (handlers are registered on it by the pipeline modules: ``c.workers.get("extraction")
    .register(EXTRACT, handler)``) and the stale-lease reaper. Settings are read at use time
    (``c.settings.memory.pipeline_v2``), so hot flags (enabled...) take effect without a restart."""
    pipeline = lambda: c.settings.memory.pipeline_v2  # noqa: E731
    ex = extraction_llm_settings(pipeline(), c.settings.llm)
    c.extraction_llm = c.llm if ex == c.settings.llm else build_provider(ex)
    c.memories.created_hooks.append(extraction_hook(pipeline))
    c.workers.add(JobWorker(c.db, "extraction", poll_ms=lambda: pipeline().worker.poll_ms,
                            lease_timeout_ms=lambda: pipeline().worker.lease_timeout_ms,
                            enabled=lambda: pipeline().enabled))
    c.workers.add(StaleLeaseReaper(c.db))
    wire_graph(c)  # knowledge graph: inline linker, graph boost, classify + aspect-feedback workers
    recall_stages.wire(c)  # hints worker + hook; hints merge, dampening, reranker in recall
    extract_job.wire(c)  # the "extract" handler: extraction, decisions, controlled writes
    extract_job.add_workers(c, pipeline().worker.concurrency)  # extraction-2 ... (worker.concurrency)
    wiring_docs.wire(c)  # documents, embedding tracker, retention, maintenance workers
    from memlane.v3 import lifecycle as v3_lifecycle; v3_lifecycle.wire(c)  # noqa: E702  pruning worker (docs/v3.md)
    drift_wiring.wire(c)  # issue 41: references, drift check, retrieval rules, staleness sweep
