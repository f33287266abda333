"""The stdio MCP server: spawned by the agent once per session, it talks to the daemon over HTTP.

The daemon owns the database (and the in-memory vector index that follows it), so this process
never opens the database: :class:`HttpBackend` implements the tools' :class:`Backend` protocol with
the daemon's HTTP API. When no daemon answers, every tool returns the error text
``memlane daemon not reachable at URL; start it with `memlane serve` `` and the session goes on
(start the daemon and call again: nothing needs restarting).

Endpoints used: ``POST /api/memory/recall``, ``POST /api/memory/remember``,
``GET|PATCH|DELETE /api/memory/{id}``, ``GET /api/memories``, ``POST /api/sessions/feedback``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from memlane.config import Settings
from memlane.daemon_client import DaemonClient, DaemonError
from memlane.errors import Conflict, MemlaneError, NotFound, PayloadTooLarge, ValidationError
from memlane.mcp.server import build_mcp, search_hit

#: Seconds to wait for the daemon (a first recall may load the embedding model).
DEFAULT_TIMEOUT_S = 60.0

_ERRORS: dict[str, type[MemlaneError]] = {
    "validation_error": ValidationError,
    "not_found": NotFound,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
}


class HttpBackend:
    """The tools' backend over the daemon's HTTP API (blocking; one connection pool).

    Every method raises a :class:`MemlaneError`: :class:`~memlane.daemon_client.DaemonUnavailable`
    (the CLI's too) when the daemon is down or does not answer, otherwise the daemon's own error
    (its message kept verbatim, its code mapped back to the matching class).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        home: Path | None = None,
    ) -> None:
        self._client = DaemonClient(base_url, timeout_s, home=home, client_name="mcp", transport=transport)
        self.base_url = self._client.base_url

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self._client.request(method, path, **kwargs)
        except DaemonError as exc:
            if exc.daemon_code is None:
                raise MemlaneError(exc.daemon_message) from None
            cls = _ERRORS.get(exc.daemon_code, MemlaneError)
            raise cls(exc.daemon_message, details=exc.details or None) from None

    @staticmethod
    def _path(memory_id: str) -> str:
        return "/api/memory/" + quote(memory_id, safe="")

    def search(
        self, query: str, *, limit: int, project: str | None, types: list[str], where: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        body = self._request(
            "POST",
            "/api/v3/recall" if where else "/api/memory/recall",
            json={"query": query, "limit": limit, "project": project, "types": types, **(where or {})},
        )
        return [search_hit({**h, "score": round(h["score"], 6)}) for h in body["results"]]

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
        body = self._request(
            "POST",
            "/api/memory/remember",
            json={
                "content": content,
                "type": type,
                "importance": float(importance),
                "project": project,
                "tags": tags,
                "who": who,
                **(v3 or {}),
            },
        )
        return {"id": body["id"], "status": body["status"]}

    def get(self, memory_id: str) -> dict[str, Any]:
        return self._request("GET", self._path(memory_id))

    def list(self, *, limit: int, offset: int, project: str | None, type: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if project is not None:
            params["project"] = project
        if type is not None:
            params["type"] = type
        body = self._request("GET", "/api/memories", params=params)
        return {"items": body["items"], "total": body["total"]}

    def modify(self, memory_id: str, fields: dict[str, Any], *, who: str, why: str | None) -> dict[str, Any]:
        payload = dict(fields)
        if "importance" in payload:
            payload["importance"] = float(payload["importance"])
        payload.update(who=who, why=why)
        return self._request("PATCH", self._path(memory_id), json=payload)

    def forget(self, memory_id: str, *, who: str, why: str | None) -> dict[str, Any]:
        params = {"who": who} | ({"why": why} if why is not None else {})
        body = self._request("DELETE", self._path(memory_id), params=params)
        return {"id": body["id"], "deleted": body["is_deleted"]}

    def feedback(self, session_key: str, scores: dict[str, float]) -> dict[str, Any]:
        body = self._request(
            "POST", "/api/sessions/feedback", json={"session_key": session_key, "memory_feedback": scores}
        )
        return {"applied": body["applied"], "ignored": body["ignored"]}

    def prune(self, *, dry_run: bool, project: str | None) -> dict[str, Any]:
        body = self._request("POST", "/api/v3/lifecycle/run", json={"dry_run": dry_run, "project": project})
        return {k: body[k] for k in ("pruned", "stale_marked", "by_rule", "dry_run")}

    def phase(
        self, session_key: str, *, project: str | None, phase: str | None, work_unit: dict[str, str] | None
    ) -> dict[str, Any]:
        return self._request(
            "POST",
            "/api/v3/sessions/phase",
            json={"session_key": session_key, "project": project, "phase": phase, "work_unit": work_unit},
        )

    def close(self) -> None:
        self._client.close()


def run_stdio(settings: Settings, url: str | None = None) -> None:
    """Serve the memory tools over stdio (blocks until the client closes stdin).

    Args:
        settings: the effective settings (``settings.url`` is the daemon's URL).
        url: talk to the daemon at this URL instead.

    Nothing but MCP messages is written to stdout; logs go to stderr.
    """
    backend = HttpBackend(url or settings.url, home=settings.home)
    try:
        build_mcp(backend).run("stdio")
    finally:
        backend.close()
