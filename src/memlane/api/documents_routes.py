"""Document ingest endpoints (memory-pipeline-v2.md "Document Ingest"):

* ``POST /api/documents`` -- queue a document from ``url`` (http/https) or raw ``content``;
  202 with the document (status ``queued``); the ``documents`` worker ingests it.
* ``GET /api/documents`` -- a page of documents, newest first (``status`` filter).
* ``GET /api/documents/{id}`` -- one document with its status, error and chunk counts.
* ``DELETE /api/documents/{id}`` -- soft-delete it and its chunk memories (those no other live
  document shares).
* ``GET /api/documents/{id}/chunks`` -- its chunks in order, with the memory ids.

Errors use the one JSON shape: 422 bad input (``fetch_failed`` for a malformed or non-http(s)
URL, ``address_refused`` for a numeric or ``localhost`` host that names a loopback, private,
link-local or other non-public address not in ``documents.allowedHosts``; hosts given by name
are checked when fetched, see :mod:`memlane.netguard`), 413 content over
``documents.maxContentBytes``, 404 unknown id, 409 already deleted.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from memlane.container import Container

#: Largest offset accepted in a page request.
MAX_OFFSET = 1_000_000_000


class DocumentIn(BaseModel):
    """A document to ingest: exactly one of ``url`` or ``content``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str | None = Field(None, description="http(s) URL to fetch (text/*, JSON or XML; HTML is stripped).")
    content: str | None = Field(None, description="Raw text to ingest instead of a URL.")
    title: str | None = Field(None, description="Title; for a URL the page <title> fills it when absent.")
    project: str | None = Field(None, description="Project scope of the chunk memories; null = global.")
    tags: list[str] = Field(default_factory=list, description="Tags added to every chunk memory.")


def router(container: Container) -> APIRouter:
    """The document routes over ``container.documents`` (built by memlane.container)."""
    r = APIRouter(tags=["documents"])

    @r.post("/api/documents", status_code=202)
    def create_document(body: DocumentIn) -> JSONResponse:
        """Queue a document for ingest; returns it (status ``queued``) with 202."""
        doc = container.documents.create(
            url=body.url, content=body.content, title=body.title, project=body.project, tags=tuple(body.tags)
        )
        return JSONResponse(doc.as_dict(), status_code=202)

    @r.get("/api/documents")
    def list_documents(
        limit: int = Query(50, ge=1, le=1000),
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
        status: str | None = None,
        include_deleted: bool = False,
    ) -> dict[str, Any]:
        """A page of documents, newest first: ``items``, ``total``, ``limit``, ``offset``."""
        items, total = container.documents.list(
            limit=limit, offset=offset, status=status, include_deleted=include_deleted
        )
        return {"items": [d.as_dict() for d in items], "total": total, "limit": limit, "offset": offset}

    @r.get("/api/documents/{document_id}")
    def get_document(document_id: str) -> dict[str, Any]:
        """One document: source, title, status (queued, fetching, chunking, embedding, done,
        failed), error, attempts, chunk_count, memory_count (live chunk memories)."""
        return container.documents.get(document_id).as_dict()

    @r.delete("/api/documents/{document_id}")
    def delete_document(document_id: str) -> dict[str, Any]:
        """Soft-delete the document and its chunk memories; returns the document and
        ``deleted_memory_ids``."""
        res = container.documents.delete(document_id)
        return {"document": res.document.as_dict(), "deleted_memory_ids": res.deleted_memory_ids}

    @r.get("/api/documents/{document_id}/chunks")
    def document_chunks(
        document_id: str, limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0, le=MAX_OFFSET)
    ) -> dict[str, Any]:
        """The document's chunks in order: ``chunk_index``, ``memory_id``, ``content``, ``is_deleted``."""
        chunks = container.documents.chunks(document_id, limit=limit, offset=offset)
        return {
            "document_id": document_id,
            "items": [
                {
                    "chunk_index": c.chunk_index,
                    "memory_id": c.memory_id,
                    "content": c.content,
                    "is_deleted": c.is_deleted,
                }
                for c in chunks
            ],
            "limit": limit,
            "offset": offset,
        }

    return r
