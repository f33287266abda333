"""The composition root: builds every service of one data directory, each with its
dependencies passed to its constructor; nothing else reads the configuration.

``open_container(settings)`` opens (and migrates) the database, builds the embedder, loads the
vector index for the embedder's model from the stored vectors, builds the services in dependency
order (the extension points of the core services -- memory-created hooks, memory listeners,
recall stages, the drift guard -- are passed to their constructors, see
:mod:`memlane.services.extensions`) and the background workers, and returns a
:class:`Container` holding all of it. No object is changed after it is built. ``close()``
releases all of it.

Settings stay hot where they are read at use time: the closures below read ``settings`` (the one
:class:`~memlane.config.Settings` object, which ``POST /api/config`` changes in place) when they
are called, not when they are built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memlane.coaccess.graph import BootstrapWorker, CoAccessService
from memlane.config import Settings
from memlane.config.pipeline import PipelineV2Settings, extraction_llm_settings
from memlane.documents.service import DOCUMENT_INGEST, DocumentService
from memlane.drift.service import DriftService
from memlane.embedding import build_embedder
from memlane.embedding.base import Embedder
from memlane.fileperms import private_dir
from memlane.graph.aspects import AspectFeedbackWorker
from memlane.graph.classify import CLASSIFY_WORKER, ClassifyHandler
from memlane.graph.classify import JOB_TYPE as CLASSIFY_JOB
from memlane.graph.invalidation import GraphInvalidation
from memlane.graph.linker import linker_hook
from memlane.graph.search import GraphBooster
from memlane.key_binding import enforce_key_bindings
from memlane.observability.hub import Observability
from memlane.pipeline.embedding_tracker import EmbeddingTracker
from memlane.pipeline.extract_job import make_handler
from memlane.pipeline.jobs import EXTRACT, extraction_hook
from memlane.pipeline.maintenance import MaintenanceWorker
from memlane.pipeline.repairs import Repairs
from memlane.pipeline.retention import RetentionWorker
from memlane.providers import LlmProvider, build_provider
from memlane.ranker.stage import LearnedRanker
from memlane.recall.fts_cache import FtsCache
from memlane.recall.hints import PROSPECTIVE_INDEX, hint_handler, hints_hook
from memlane.recall.memory_index import IndexEntry, MemoryIndex
from memlane.recall.stages import RecallStages
from memlane.services.extensions import MemoryListener
from memlane.services.memory_service import MemoryService
from memlane.services.predictor_scoring import sidecar_for, sidecar_lifecycle
from memlane.services.predictor_service import PredictorService
from memlane.services.recall_service import RecallService
from memlane.sessions.checkpoints import SessionCheckpointService
from memlane.sessions.scoring import SessionScorer
from memlane.sessions.service import SessionService
from memlane.storage import memories as mem_sql
from memlane.storage.db import Database
from memlane.storage.migrations import migrate
from memlane.v3.active import ActiveLoop
from memlane.v3.context_cost import ContextCosts
from memlane.v3.lifecycle import LifecycleService, LifecycleWorker
from memlane.v3.methodology.service import PhaseService
from memlane.v3.observer import Observer
from memlane.v3.observer_service import ObserverSessions
from memlane.v3.promotion import Promoter
from memlane.v3.tool_warnings import ToolWarnings
from memlane.workers.runtime import JobWorker, PollingWorker, StaleLeaseReaper, WorkerRegistry

log = logging.getLogger(__name__)

#: Seconds the workers get to finish their tick at close before LLM calls in flight are aborted.
WORKER_GRACE_S = 3.0
#: Seconds the workers then get once those calls are aborted.
WORKER_ABORTED_WAIT_S = 5.0


@dataclass
class Container:
    """Every long-lived object of one daemon (or one CLI run on a data directory); the surfaces
    (HTTP API, MCP, dashboard, CLI) use these fields and nothing else."""

    settings: Settings
    db: Database
    #: The embedding provider, or None (BM25 only).
    embedder: Embedder | None
    memories: MemoryService
    recall: RecallService
    sessions: SessionService
    checkpoints: SessionCheckpointService
    #: Background workers (memlane.workers.runtime); started only by open_container(start_workers=True).
    workers: WorkerRegistry
    #: Latency histograms, the error ring and the log ring of this process (memlane.observability).
    observability: Observability
    #: Drift and staleness (docs/drift.md): references, drift checks, retrieval rules, staleness sweep.
    drift: DriftService
    #: Document ingest (the ``documents`` worker runs its jobs).
    documents: DocumentService
    #: Embeds memories that have no vector of the current model.
    embedding_tracker: EmbeddingTracker
    #: Deletes what has outlived its retention window.
    retention: RetentionWorker
    #: The repair actions (POST /api/repair/{action}).
    repairs: Repairs
    #: Scheduled maintenance: diagnose, recommend, repair.
    maintenance: MaintenanceWorker
    #: The LLM of settings.llm (continuity judge), or None.
    llm: LlmProvider | None = None
    #: The LLM extraction uses (settings.llm unless memory.pipelineV2.extraction overrides it).
    extraction_llm: LlmProvider | None = None
    #: The predictor (memlane.services.predictor_service), or None when it does not run here.
    predictor: PredictorService | None = None
    #: Each session's methodology phase and work unit (memlane.v3.methodology.service).
    phases: PhaseService | None = None
    #: The V3 active loop (memlane.v3.active): outcomes, reflexions, commit tagging, prefetch.
    active: ActiveLoop | None = None
    #: The end of observed sessions: co-access graph and promotion (memlane.v3.observer_service).
    observer: ObserverSessions | None = None
    #: Warnings about the file a tool call is about to touch (memlane.v3.tool_warnings; PreToolUse).
    tool_warnings: ToolWarnings | None = None
    #: Whether close() closes the embedder: False when the caller passed one in (shared by
    #: benchmarks and tests that open many stores; its owner closes it).
    owns_embedder: bool = True

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
        self.drift.close()
        self.db.close()
        if self.embedder is not None and self.owns_embedder:
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


def open_container(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    warmup: bool = False,
    start_workers: bool = False,
    predictor: bool | None = None,
    memory_listeners: Sequence[MemoryListener] = (),
) -> Container:
    """Open the data directory of ``settings`` and build the services.

    Args:
        settings: the effective settings.
        embedder: use this embedder instead of building one from settings (shared by benchmarks
            that open many stores; the caller closes it, not :meth:`Container.close`).
        warmup: load the local embedding model now rather than on the first call.
        start_workers: start the background workers (the daemon does; CLI one-shots and tests
            do not unless they ask). Workers are registered either way.
        predictor: run the predictor sidecar (default: with ``start_workers``, i.e. in the daemon)
            when ``settings.predictor.enabled``.
        memory_listeners: told of every committed memory change after the built-in listeners
            (session labels, drift); e.g. an embedding application's own index.

    Raises:
        StorageError: the database cannot be opened or migrated.
        ConfigError: ``{home}/key-bindings.json`` is unreadable (memlane.key_binding).
    """
    private_dir(settings.home)  # created 0700 (memlane.fileperms)
    enforce_key_bindings(settings)  # an API key goes only to the base URL it was first used with
    db = Database(
        settings.db_path,
        read_pool_size=settings.read_pool_size,
        busy_timeout_ms=settings.busy_timeout_ms,
        synchronous=settings.sqlite_synchronous,
    )
    migrate(db)
    emb = embedder if embedder is not None else build_embedder(settings.embedding)
    if warmup and emb is not None and hasattr(emb, "warmup"):
        emb.warmup()
    index = load_index(
        db, emb.model_id if emb is not None else None, getattr(emb, "dimensions", 0) if emb is not None else 0
    )
    pipeline: Callable[[], PipelineV2Settings] = lambda: settings.memory.pipeline_v2  # noqa: E731
    graph = lambda: pipeline().graph  # noqa: E731
    obs = Observability()
    llm = build_provider(settings.llm)
    ex = extraction_llm_settings(pipeline(), settings.llm)
    extraction_llm = llm if ex == settings.llm else build_provider(ex)
    checkpoints = SessionCheckpointService(db, settings.continuity)
    pred = (
        _predictor(settings, db, index, emb, obs)
        if (start_workers if predictor is None else predictor) and settings.predictor.enabled
        else None
    )
    scorer = SessionScorer(db, llm, pred)
    drift = DriftService(db, index, lambda: settings.drift, embedder=lambda: emb)
    drift.load()
    # The remember transaction: extraction job, inline entity linker, hints job, drift references.
    memories = MemoryService(
        db,
        emb,
        index,
        max_content_chars=settings.max_content_chars,
        embed_batch=settings.embedding.batch_size,
        redact_memories=lambda: settings.redact.memories,
        created_hooks=(extraction_hook(pipeline), linker_hook(graph), hints_hook(pipeline), drift.created_hook),
        # The graph's attributes follow their memory before drift reads them.
        listeners=(
            scorer.on_memory_event,
            GraphInvalidation(db).on_memory_event,
            drift.on_memory_event,
            *memory_listeners,
        ),
        # After the commit: drift takes the new references' baselines (write-behind).
        created_listeners=(drift.on_created,),
    )
    fts = FtsCache(db)
    # Hints merge, dampening, reranker; the hint leg uses the FTS statistics once the store is large.
    stages = RecallStages(db, index, pipeline, fts=lambda: recall.fts_cache())
    recall = RecallService(
        memories,
        settings.recall,
        fts=fts,
        stages=stages,
        graph_boost=GraphBooster(db, graph, memory_count=lambda: index.size),
        ranker=LearnedRanker(lambda: settings.recall),
        drift=drift,
    )
    phases = PhaseService(lambda: settings.methodology)  # read at each request: POST /api/config swaps it
    coaccess = CoAccessService(db)
    active = ActiveLoop(db, memories, coaccess, lambda: llm)
    observer = ObserverSessions(
        Observer(db), Promoter(db, memories, lambda: llm, active=active), coaccess, ContextCosts(db, memories)
    )
    sessions = SessionService(
        memories,
        recall,
        settings.sessions,
        llm=llm,
        checkpoints=checkpoints,
        predictor=pred,
        scorer=scorer,
        drift=drift,
        phases=phases,
        prefetch=active,
    )
    jobs = lambda name, **kw: JobWorker(db, name, listeners=(obs.on_job,), **kw)  # noqa: E731
    lease_ms = lambda: pipeline().worker.lease_timeout_ms  # noqa: E731

    # memory-pipeline-v2 "Worker Model": worker.concurrency extraction workers sharing one
    # handler (a lease is one atomic transaction: no two lease the same job), the reaper.
    extract = make_handler(memories, settings, lambda: extraction_llm)
    extraction = [
        jobs(
            "extraction" if i == 1 else f"extraction-{i}",
            handlers={EXTRACT: extract},
            poll_ms=lambda: pipeline().worker.poll_ms,
            lease_timeout_ms=lease_ms,
            enabled=lambda: pipeline().enabled,
        )
        for i in range(1, max(1, pipeline().worker.concurrency) + 1)
    ]
    # Knowledge graph: structural classification (with the extraction LLM), aspect feedback.
    classify = jobs(
        CLASSIFY_WORKER,
        handlers={CLASSIFY_JOB: ClassifyHandler(db, lambda: extraction_llm)},
        poll_ms=lambda: pipeline().worker.poll_ms,
        lease_timeout_ms=lease_ms,
        enabled=lambda: pipeline().enabled and graph().enabled,
    )
    hints = jobs(
        "hints",
        handlers={PROSPECTIVE_INDEX: hint_handler(db, lambda: extraction_llm, pipeline)},
        poll_ms=lambda: pipeline().hints.poll,
        lease_timeout_ms=lease_ms,
        enabled=lambda: pipeline().enabled and pipeline().hints.enabled,
    )
    # Documents (always run: each is an explicit request), embedding tracker, retention, maintenance.
    # A document ingested: drift takes the baselines of the links that waited for it.
    documents = DocumentService(db, memories, pipeline, on_enqueue=lambda: docs.wake(), on_done=drift.document_ingested)
    docs = jobs(
        "documents",
        handlers={DOCUMENT_INGEST: documents.process},
        poll_ms=lambda: pipeline().documents.worker_interval_ms,
        lease_timeout_ms=lease_ms,
    )
    tracker = EmbeddingTracker(
        db,
        emb,
        index,
        batch_size=lambda: pipeline().embedding_tracker.batch_size,
        poll_ms=lambda: pipeline().embedding_tracker.poll_ms,
        enabled=lambda: pipeline().embedding_tracker.enabled and emb is not None,
    )
    retention = RetentionWorker(db)
    repairs = Repairs(memories, pipeline, tracker=tracker)
    maintenance = MaintenanceWorker(repairs, pipeline, model=lambda: emb.model_id if emb else None)
    workers: list[PollingWorker] = [
        extraction[0],
        StaleLeaseReaper(db),
        classify,
        AspectFeedbackWorker(db, enabled=lambda: graph().enabled),
        hints,
        *extraction[1:],
        docs,
        tracker,
        retention,
        maintenance,
        LifecycleWorker(LifecycleService(db, memories)),  # V3 pruning (docs/v3.md)
        BootstrapWorker(coaccess),  # the co-access graph's bootstrap from git
    ]
    container = Container(
        settings,
        db,
        emb,
        memories,
        recall,
        sessions,
        checkpoints,
        WorkerRegistry(workers),
        obs,
        drift,
        documents,
        tracker,
        retention,
        repairs,
        maintenance,
        llm=llm,
        extraction_llm=extraction_llm,
        predictor=pred,
        phases=phases,
        active=active,
        observer=observer,
        tool_warnings=ToolWarnings(db),
        owns_embedder=embedder is None,
    )
    if start_workers:
        container.workers.start_all()
    return container


def _predictor(
    settings: Settings, db: Database, index: MemoryIndex, emb: Embedder | None, obs: Observability
) -> PredictorService:
    """The started predictor service over the sidecar of ``settings.home``, reporting to ``obs``.
    The sidecar (PyTorch, ~300 MiB) runs only with a model to serve or a training run; until then
    the daemon scores with the untrained model's formula (docs/architecture.md, Footprint)."""
    backend = sidecar_for(
        settings.predictor,
        db_path=settings.db_path,
        home=settings.home,
        embedding_model_id=emb.model_id if emb is not None else "none",
        native_dim=getattr(emb, "dimensions", 0) or 1 if emb is not None else 1,
        listeners=(obs.on_sidecar_error,),
    )
    pred = PredictorService(
        db,
        index,
        backend,
        settings.predictor,
        lifecycle=sidecar_lifecycle(backend, settings.predictor, home=settings.home),
        score_listeners=(obs.on_score,),
        training_listeners=(obs.on_training,),
    )
    pred.start()
    return pred
