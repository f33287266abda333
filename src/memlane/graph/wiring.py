"""Wiring of the knowledge graph into a container (called once from
``memlane.container._wire_pipeline``).

Registers, with settings read at use time (``settings.memory.pipeline_v2``, hot flags):

* the inline entity linker as a ``MemoryService.created_hooks`` hook (``graph.enabled``);
* the graph boost on ``RecallService.graph_boost`` (``graph.enabled``, ``boost_weight``,
  ``boost_timeout_ms``);
* worker ``structural-classify`` (JobWorker for ``structural_classify`` jobs, using the
  extraction LLM when one is configured; runs while ``enabled`` and ``graph.enabled``);
* worker ``aspect-feedback`` (ended sessions -> aspect weights; runs while ``graph.enabled``).
"""

from __future__ import annotations

from typing import Any

from memlane.graph.aspects import AspectFeedbackWorker
from memlane.graph.classify import JOB_TYPE, ClassifyHandler
from memlane.graph.linker import linker_hook
from memlane.graph.search import GraphBooster
from memlane.workers.runtime import JobWorker

CLASSIFY_WORKER = "structural-classify"
FEEDBACK_WORKER = "aspect-feedback"


def wire(c: Any) -> None:
    """Hook the graph into container ``c`` (a :class:`memlane.container.Container`)."""
    pipeline = lambda: c.settings.memory.pipeline_v2  # noqa: E731
    graph = lambda: pipeline().graph  # noqa: E731
    c.memories.created_hooks.append(linker_hook(graph))
    c.recall.graph_boost = GraphBooster(c.db, graph, memory_count=lambda: c.recall.index.size)
    worker = JobWorker(c.db, CLASSIFY_WORKER, poll_ms=lambda: pipeline().worker.poll_ms,
                       lease_timeout_ms=lambda: pipeline().worker.lease_timeout_ms,
                       enabled=lambda: pipeline().enabled and graph().enabled)
    worker.register(JOB_TYPE, ClassifyHandler(c.db, lambda: c.extraction_llm))
    c.workers.add(worker)
    c.workers.add(AspectFeedbackWorker(c.db, enabled=lambda: graph().enabled))
