"""V3 memory operations over the store: filtered listing, filtered recall, the review queue and
memory-to-memory relations (``memory_relations``, migration 0013).

Writes of memory fields go through :class:`memlane.services.memory_service.MemoryService` (history,
redaction, the index); relations are written here, in one transaction each.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memlane.config.clock import now_iso
from memlane.errors import NotFound, ValidationError
from memlane.services.inputs import RecallHit, RecallQuery, RecallResult
from memlane.services.memory_service import MemoryService
from memlane.services.recall_service import RecallService
from memlane.storage import relations as rel_sql
from memlane.storage import v3 as v3_sql
from memlane.storage.db import Database
from memlane.storage.models import Memory
from memlane.storage.v3 import V3Filter
from memlane.v3.model import SCOPES, SOURCES, check_choice, check_commit_sha, check_str

#: Recall with V3 conditions ranks this many candidates (``limit`` x 10, at least 100, at most
#: 1000) and keeps the first ``limit`` that match: a match ranked below the pool is not returned.
POOL_FACTOR, POOL_MIN, POOL_MAX = 10, 100, 1000
#: Most values of a repeatable filter (``type``).
MAX_FILTER_VALUES = 100


def check_filter(f: V3Filter) -> V3Filter:
    """Validate the filter's values (closed sets, lengths, the commit SHA).

    Raises:
        ValidationError: a scope or source outside its set, an over-long string, a bad SHA.
    """
    if len(f.types) > MAX_FILTER_VALUES:
        raise ValidationError(f"type: at most {MAX_FILTER_VALUES} values", details={"field": "type"})
    for s in f.scopes:
        check_choice(s, "scope", SCOPES)
    for s in f.sources:
        check_choice(s, "source", SOURCES)
    f = replace(
        f,
        scopes=tuple(dict.fromkeys(f.scopes)),
        sources=tuple(dict.fromkeys(f.sources)),
        types=tuple(dict.fromkeys(f.types)),
    )
    for name in ("project", "methodology", "work_unit", "related_file", "related_module"):
        v = getattr(f, name)
        if v is not None:
            check_str(v, name)
    for t in f.types:
        check_str(t, "type", max_chars=200)
    if f.commit_sha is not None:
        f = replace(f, commit_sha=check_commit_sha(f.commit_sha))
    return f


class V3Service:
    """Filtered reads, filtered recall, review and relations of V3 memories."""

    def __init__(self, db: Database, memories: MemoryService, recall: RecallService) -> None:
        self.db = db
        self.memories = memories
        self.recall_service = recall

    def search(self, f: V3Filter, *, limit: int = 50, offset: int = 0) -> tuple[list[Memory], int]:
        """Memories matching ``f``, newest first: ``(page, total)``.

        Raises:
            ValidationError: a bad filter value, ``limit`` outside [1, 1000] or a negative offset.
        """
        f = check_filter(f)
        if not 1 <= limit <= 1000 or offset < 0:
            raise ValidationError("limit must be in [1, 1000] and offset >= 0", details={"field": "limit"})
        return self.db.read(lambda c: v3_sql.query(c, f, limit=limit, offset=offset))

    def recall(self, q: RecallQuery, f: V3Filter) -> RecallResult:
        """Hybrid recall of ``q`` keeping only hits that match ``f`` (see :data:`POOL_FACTOR`).

        ``q.project`` and ``q.types`` filter inside recall as usual; ``f``'s project and types are
        ignored. Without V3 conditions this is plain recall.

        Raises:
            ValidationError: a bad query or filter value.
        """
        f = check_filter(f)
        if f.is_empty():
            return self.recall_service.recall(q)
        pool = min(POOL_MAX, max(POOL_MIN, q.limit * POOL_FACTOR))
        res = self.recall_service.recall(replace(q, limit=pool, touch=False))
        ids = [h.memory.id for h in res.hits]
        keep = self.db.read(lambda c: v3_sql.matching_ids(c, replace(f, project=None, types=()), ids))
        hits: list[RecallHit] = [h for h in res.hits if h.memory.id in keep][: q.limit]
        if q.touch and hits:  # only the returned hits count as accessed, as in plain recall
            self.recall_service._touch(hits)
        return RecallResult(hits, res.legs, res.took_ms, getattr(res, "ranker", "heuristic"))

    def counts(self, project: str | None = None) -> dict[str, Any]:
        """Live memories by scope, source and type; review, verified and stale counts."""
        return self.db.read(lambda c: v3_sql.counts(c, project))

    def verify(self, memory_id: str, *, verified: bool = True, who: str | None = None) -> Memory:
        """The user's review: ``verified`` True confirms (user_verified, no longer needs_review),
        False sends it back to review. Recorded in the memory's history.

        Raises:
            NotFound: unknown id. Conflict: the memory is deleted.
        """
        patch = (
            {"user_verified": True, "needs_review": False}
            if verified
            else {"user_verified": False, "needs_review": True}
        )
        return self.memories.update(memory_id, patch, who=who, why="verified" if verified else "sent to review")

    # -- relations --------------------------------------------------------------------------
    def relate(self, source_id: str, target_id: str, relation: str, *, weight: float = 1.0) -> dict[str, Any]:
        """Store ``source_id -relation-> target_id`` (both must exist and be live).

        Raises:
            NotFound: either memory is unknown. ValidationError: unknown relation, self-edge, bad weight.
        """
        for name, mid in (("source_id", source_id), ("target_id", target_id)):
            check_str(mid, name, max_chars=200)
            if self.memories.get(mid).is_deleted:
                raise NotFound(f"memory {mid!r:.80} is deleted", details={"id": mid[:80]})
        at = now_iso()
        rid = self.db.write(lambda c: rel_sql.add(c, source_id, target_id, relation, weight=weight, at=at))
        return {"id": rid, "source_id": source_id, "target_id": target_id, "relation": relation, "weight": weight}

    def relations(
        self, memory_id: str, *, direction: str = "both", relation: str | None = None
    ) -> list[dict[str, Any]]:
        """Relations touching ``memory_id`` (``direction``: out, in or both).

        Raises:
            NotFound: unknown memory. ValidationError: bad direction or relation.
        """
        self.memories.get(memory_id)
        rows = self.db.read(lambda c: rel_sql.list_for(c, memory_id, direction=direction, relation=relation))
        return [
            {
                "id": r.id,
                "source_id": r.source_id,
                "target_id": r.target_id,
                "relation": r.relation,
                "weight": r.weight,
                "created_at": r.created_at,
            }
            for r in rows
        ]

    def unrelate(self, source_id: str, target_id: str, relation: str | None = None) -> int:
        """Delete ``source_id -> target_id`` edges (one relation or all); returns how many."""
        return self.db.write(lambda c: rel_sql.remove(c, source_id, target_id, relation))
