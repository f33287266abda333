"""Knowledge graph endpoints (memory-pipeline-v2.md "Knowledge Graph"): ``/api/knowledge/...``.

Thin: each endpoint validates its query parameters and calls one
:class:`memlane.graph.knowledge.KnowledgeService` method. Errors use the one JSON error shape
(422 bad parameters, 404 unknown entity).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from memlane.container import Container
from memlane.graph.knowledge import KnowledgeService


def router(container: Container) -> APIRouter:
    """The knowledge routes over ``container``'s database."""
    r = APIRouter(tags=["knowledge"])
    svc = KnowledgeService(container.db)

    @r.get("/api/knowledge/status")
    def knowledge_status() -> dict[str, Any]:
        """Graph table row counts, the graph settings, and the recall boost's telemetry."""
        g = container.settings.memory.pipeline_v2.graph
        return {
            **svc.status(container.recall.graph_boost),
            "graph": {"enabled": g.enabled, "boost_weight": g.boost_weight, "boost_timeout_ms": g.boost_timeout_ms},
        }

    @r.get("/api/knowledge/entities")
    def list_entities(
        q: str | None = Query(None, max_length=200, description="Substring of the entity name."),
        type: str | None = Query(None, max_length=64, description="Entity type, e.g. tool, person."),
        limit: int = Query(50, ge=1, le=500),
        offset: int = Query(0, ge=0, le=1_000_000),
    ) -> dict[str, Any]:
        """Entities, most mentioned first (``mentions`` = memories linked); ``q`` searches names."""
        return svc.list_entities(q=q, entity_type=type, limit=limit, offset=offset)

    @r.get("/api/knowledge/entities/{entity_id}")
    def get_entity(entity_id: str, mentions_limit: int = Query(20, ge=1, le=500)) -> dict[str, Any]:
        """One entity with its newest memory mentions and its relations."""
        return svc.get_entity(entity_id, mentions_limit=mentions_limit)

    @r.get("/api/knowledge/entities/{entity_id}/aspects")
    def entity_aspects(entity_id: str) -> dict[str, Any]:
        """The entity's aspects (weight in [0, 1], heaviest first) with attribute counts."""
        return svc.aspects(entity_id)

    @r.get("/api/knowledge/entities/{entity_id}/attributes")
    def entity_attributes(
        entity_id: str,
        aspect_id: str | None = Query(None, max_length=64),
        kind: str | None = Query(None, description="attribute | constraint"),
        status: str | None = Query("active", description="active | superseded | deleted"),
        limit: int = Query(100, ge=1, le=500),
        offset: int = Query(0, ge=0, le=1_000_000),
    ) -> dict[str, Any]:
        """The entity's attributes, newest first (``kind=constraint``: decisions, importance 0.85)."""
        return svc.attributes(entity_id, aspect_id=aspect_id, kind=kind, status=status, limit=limit, offset=offset)

    @r.get("/api/knowledge/expand")
    def expand(
        query: str | None = Query(None, max_length=4000),
        entity_id: str | None = Query(None, max_length=64),
        limit: int = Query(50, ge=1, le=200),
    ) -> dict[str, Any]:
        """One hop from the entities named in ``query`` (or from ``entity_id``): the entities,
        their neighbours and the ids of linked live memories (newest first)."""
        return svc.expand(query=query, entity_id=entity_id, limit=limit)

    return r
