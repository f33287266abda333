"""Read-side of the knowledge graph for the API (memory-pipeline-v2.md "Knowledge Graph"):
entity lists and search, one entity with its mentions and relations, aspects, attributes, and
one-hop expansion. Returns JSON-able dicts; bad input raises :class:`memlane.errors.ValidationError`
(422), an unknown entity :class:`memlane.errors.NotFound` (404)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from memlane.errors import NotFound, ValidationError
from memlane.graph.search import entity_dict, expand
from memlane.services.validation import MAX_SHORT_CHARS, check_text
from memlane.storage import graph as graph_sql
from memlane.storage.db import Database

KINDS = ("attribute", "constraint")
STATUSES = ("active", "superseded", "deleted")
#: Longest expansion query kept, characters.
MAX_QUERY_CHARS = 4_000


class KnowledgeService:
    """Queries over the graph tables of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _entity(self, conn: Any, entity_id: str) -> graph_sql.Entity:
        e = graph_sql.get_entity(conn, entity_id)
        if e is None:
            raise NotFound(f"no entity with id {entity_id!r:.80}", details={"id": entity_id[:80]})
        return e

    def status(self, boost: Any = None) -> dict[str, Any]:
        """Row counts of the graph tables and, when given, the recall boost's telemetry
        (calls, boosted, timeouts, errors)."""
        out: dict[str, Any] = {"counts": self.db.read(graph_sql.counts)}
        if boost is not None and hasattr(boost, "telemetry"):
            out["boost"] = boost.telemetry()
        return out

    def list_entities(
        self, *, q: str | None = None, entity_type: str | None = None, limit: int = 50, offset: int = 0
    ) -> dict[str, Any]:
        """A page of entities, most mentioned first; ``q`` is a substring of the canonical name."""
        for name, v in (("q", q), ("type", entity_type)):
            if v is not None:
                check_text(v, name, max_chars=MAX_SHORT_CHARS, allow_empty=True)
        rows, total = self.db.read(
            lambda c: graph_sql.list_entities(
                c, q=q or None, entity_type=entity_type or None, limit=limit, offset=offset
            )
        )
        return {"entities": [entity_dict(e) for e in rows], "total": total, "limit": limit, "offset": offset}

    def get_entity(self, entity_id: str, *, mentions_limit: int = 20) -> dict[str, Any]:
        """One entity with its newest mentions (memory id, mention text, confidence, content) and
        its relations (both directions, with names).

        Raises:
            NotFound: no such entity.
        """

        def read(c: Any) -> dict[str, Any]:
            e = self._entity(c, entity_id)
            return {
                **entity_dict(e),
                "mentions_list": [asdict(m) for m in graph_sql.entity_mentions(c, entity_id, mentions_limit)],
                "relations": [asdict(r) for r in graph_sql.entity_relations(c, entity_id, 100)],
            }

        return self.db.read(read)

    def entity_view(
        self,
        entity_id: str,
        *,
        mentions_limit: int = 25,
        mentions_offset: int = 0,
        attributes_limit: int = 25,
        attributes_offset: int = 0,
        relations_limit: int = 100,
    ) -> dict[str, Any]:
        """Everything one entity's page shows, in one read: the entity, a page of its mentions
        (newest first) with their total, its relations (most mentioned first), its aspects, a
        page of its active attributes (newest first) with their total.

        Returns:
            ``{**entity, "mentions_list", "mentions_total", "relations", "aspects", "attributes",
            "attributes_total"}``.
        Raises:
            NotFound: no such entity.
        """

        def read(c: Any) -> dict[str, Any]:
            e = self._entity(c, entity_id)
            return {
                **entity_dict(e),
                "mentions_list": [
                    asdict(m) for m in graph_sql.entity_mentions(c, entity_id, mentions_limit, mentions_offset)
                ],
                "mentions_total": graph_sql.entity_mention_count(c, entity_id),
                "relations": [asdict(r) for r in graph_sql.entity_relations(c, entity_id, relations_limit)],
                "aspects": [asdict(a) for a in graph_sql.aspects_of_entity(c, entity_id)],
                "attributes": [
                    asdict(a)
                    for a in graph_sql.attributes_of_entity(
                        c, entity_id, limit=attributes_limit, offset=attributes_offset
                    )
                ],
                "attributes_total": graph_sql.attribute_count(c, entity_id),
            }

        return self.db.read(read)

    def aspects(self, entity_id: str) -> dict[str, Any]:
        """The entity's aspects, heaviest first, with active attribute counts.

        Raises:
            NotFound: no such entity.
        """

        def read(c: Any) -> dict[str, Any]:
            self._entity(c, entity_id)
            return {"entity_id": entity_id, "aspects": [asdict(a) for a in graph_sql.aspects_of_entity(c, entity_id)]}

        return self.db.read(read)

    def attributes(
        self,
        entity_id: str,
        *,
        aspect_id: str | None = None,
        kind: str | None = None,
        status: str | None = "active",
        limit: int = 100,
        offset: int = 0,
    ) -> dict[str, Any]:
        """The entity's attributes, newest first, optionally one aspect's, one kind, one status.

        Raises:
            NotFound: no such entity. ValidationError: an unknown kind or status.
        """
        if kind is not None and kind not in KINDS:
            raise ValidationError(f"kind: must be one of {', '.join(KINDS)}", details={"field": "kind"})
        if status is not None and status not in STATUSES:
            raise ValidationError(f"status: must be one of {', '.join(STATUSES)}", details={"field": "status"})

        def read(c: Any) -> dict[str, Any]:
            self._entity(c, entity_id)
            rows = graph_sql.attributes_of_entity(
                c, entity_id, aspect_id=aspect_id, kind=kind, status=status, limit=limit, offset=offset
            )
            return {"entity_id": entity_id, "attributes": [asdict(a) for a in rows], "limit": limit, "offset": offset}

        return self.db.read(read)

    def expand(self, *, query: str | None = None, entity_id: str | None = None, limit: int = 50) -> dict[str, Any]:
        """One-hop expansion from the entities a query names, or from one entity.

        Raises:
            ValidationError: neither or both of ``query`` and ``entity_id``.
            NotFound: ``entity_id`` names no entity.
        """
        if (query is None) == (entity_id is None):
            raise ValidationError("give exactly one of query and entity_id", details={"field": "query"})
        if query is not None:
            check_text(query, "query", max_chars=MAX_QUERY_CHARS, allow_empty=True)

        def read(c: Any) -> dict[str, Any]:
            if entity_id is not None:
                self._entity(c, entity_id)
            return expand(c, query=query, entity_id=entity_id, memory_limit=limit)

        return {"query": query, "entity_id": entity_id, **self.db.read(read)}
