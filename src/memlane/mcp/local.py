"""The MCP tools in the daemon's own process: :class:`LocalBackend` over the services of an open
container, and :func:`build_server` (the ``/mcp`` endpoint, :mod:`memlane.mcp.http`). The stdio
server (:mod:`memlane.mcp.stdio`) does not import this module, so it stays light: no database, no
embedder.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from memlane.container import Container
from memlane.errors import ValidationError
from memlane.mcp.server import PruneResult, build_mcp, memory_dict, search_hit
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.v3.model import check_str


class LocalBackend:
    """The tools over the services of an open container (the daemon's own process)."""

    def __init__(self, container: Container) -> None:
        self.c = container

    def search(
        self, query: str, *, limit: int, project: str | None, types: list[str], where: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        q = RecallQuery(query=query, limit=limit, project=project, types=tuple(types))
        if where:  # V3 conditions (memlane.v3.service.V3Service.recall)
            from memlane.storage.v3 import V3Filter
            from memlane.v3.service import V3Service

            conditions: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in where.items()}
            f = V3Filter(**conditions)
            res = V3Service(self.c.db, self.c.memories, self.c.recall).recall(q, f)
        else:
            res = self.c.recall.recall(q)
        return [search_hit({**memory_dict(h.memory), "score": round(h.score, 6)}) for h in res.hits]

    def store(
        self,
        content: str,
        *,
        type: str,
        importance: float,
        project: str | None,
        tags: list[str],
        who: str,
        v3: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {
            k: tuple(v) if k in ("related_files", "related_modules") else v for k, v in (v3 or {}).items()
        }
        r = self.c.memories.remember(
            RememberInput(
                content=content, type=type, importance=importance, project=project, tags=tuple(tags), who=who, **extra
            )
        )
        return {"id": r.id, "status": r.status}

    def get(self, memory_id: str) -> dict[str, Any]:
        return memory_dict(self.c.memories.get(memory_id))

    def list(self, *, limit: int, offset: int, project: str | None, type: str | None) -> dict[str, Any]:
        items, total = self.c.memories.list(limit=limit, offset=offset, project=project, type_=type)
        return {"items": [memory_dict(m) for m in items], "total": total}

    def modify(self, memory_id: str, fields: dict[str, Any], *, who: str, why: str | None) -> dict[str, Any]:
        return memory_dict(self.c.memories.update(memory_id, fields, who=who, why=why))

    def forget(self, memory_id: str, *, who: str, why: str | None) -> dict[str, Any]:
        m = self.c.memories.delete(memory_id, who=who, why=why)
        return {"id": m.id, "deleted": m.is_deleted}

    def feedback(self, session_key: str, scores: dict[str, float]) -> dict[str, Any]:
        r = self.c.sessions.feedback(session_key, scores)
        return {"applied": r.applied, "ignored": r.ignored}

    def prune(self, *, dry_run: bool, project: str | None) -> dict[str, Any]:
        from memlane.v3.lifecycle import LifecycleService

        r = LifecycleService(self.c.db, self.c.memories).run(project=project, dry_run=dry_run)
        return {k: r[k] for k in PruneResult.model_fields}

    def phase(
        self, session_key: str, *, project: str | None, phase: str | None, work_unit: dict[str, str] | None
    ) -> dict[str, Any]:
        if self.c.phases is None:
            raise ValidationError("phases are off in this process", details={"field": "phase"})
        check_str(session_key, "session_key", max_chars=256)
        return self.c.phases.resolve(session_key, project, phase=phase, work_unit=work_unit).to_dict()


def build_server(container: Container) -> MCPServer:
    """The MCP server over ``container``'s services (in-process; the caller owns the container).

    Tools: memory_search, memory_store, memory_get, memory_list, memory_modify, memory_forget,
    memory_feedback, memory_prune, memory_phase (see each tool's description for shapes and errors).
    """
    return build_mcp(LocalBackend(container))
