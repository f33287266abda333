"""Document ingest: create, list, read, delete documents, and the ``document_ingest`` job
handler that fetches, chunks and stores them as memories (memory-pipeline-v2.md "Document
Ingest", "URL Fetcher").

A document comes from a URL (fetched by :mod:`memlane.documents.fetcher`) or from raw text.
:meth:`DocumentService.create` inserts the ``queued`` row and its job in one write
transaction. The job (:meth:`DocumentService.process`, run by the ``documents`` worker outside
any transaction) moves the row ``fetching -> chunking -> embedding -> done``: each chunk is
embedded and written as one memory through :meth:`MemoryService.remember_many` (embedding
outside the write lock, then its own short transaction; the in-memory index follows), then
linked in ``document_memories``. Chunk memories have type ``document_chunk``, importance 0.3,
``source_type='document'``, ``source_id=<document id>`` and the title as a tag.

Outbound fetches obey :mod:`memlane.netguard`: a URL whose host is, or resolves to, a
loopback, private, link-local, multicast or otherwise non-public address is refused (at
create when the host is numeric or ``localhost``, with 422 ``address_refused``; otherwise when
fetched, failing the document at once), on every redirect hop, unless
``documents.allowedHosts`` lists it.

Dedup: a chunk already linked to a live memory (a retried job) is not written again; a chunk
whose text equals a live memory's (content hash) reuses that memory. Failures: a permanent one
(bad URL, HTTP 4xx, content type, size, no text) fails the document at once; others are
retried by the job queue up to ``worker.maxRetries`` attempts, then the document is
``failed`` with the error.
"""

from __future__ import annotations

import builtins
import logging
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memlane.config.clock import now_iso
from memlane.config.pipeline import PipelineV2Settings
from memlane.documents.chunking import chunk_text
from memlane.documents.fetcher import FetchError, FetchResult, check_target, fetch_url
from memlane.errors import Conflict, NotFound, PayloadTooLarge, ValidationError
from memlane.netguard import HostAllowlist
from memlane.services.inputs import RememberInput
from memlane.services.memory_service import MemoryService
from memlane.services.validation import MAX_SHORT_CHARS, check_text
from memlane.storage import documents as doc_sql
from memlane.storage import jobs as jobs_sql
from memlane.storage.db import Database
from memlane.storage.documents import Document, DocumentChunk
from memlane.storage.jobs import Job
from memlane.workers.runtime import SkipJob

log = logging.getLogger(__name__)

#: Job type of one document's ingest (``memory_jobs.job_type``; payload ``{"document_id"}``).
DOCUMENT_INGEST = "document_ingest"
#: Memory type and source type of chunk memories.
CHUNK_TYPE = "document_chunk"
CHUNK_SOURCE_TYPE = "document"
#: Importance of chunk memories (seed: 0.3).
CHUNK_IMPORTANCE = 0.3
#: The fetcher's deadline, ms (seed "URL Fetcher": 30 s, independent of the byte limit).
FETCH_TIMEOUT_MS = 30_000
#: Longest title kept, characters (also the tag limit).
MAX_TITLE_CHARS = MAX_SHORT_CHARS
#: Most tags a document may carry.
MAX_TAGS = 50

Fetcher = Callable[..., FetchResult]


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """A soft-deleted document and the ids of the chunk memories soft-deleted with it."""

    document: Document
    deleted_memory_ids: list[str]


class DocumentService:
    """Documents over one database and the memory service.

    Args:
        db: the database (migrated).
        memories: writes chunk memories (embedding, dedup, index).
        pipeline: returns the current pipeline settings (``documents.*``, ``worker.maxRetries``).
        fetch: the URL fetcher (``fetch_url``'s signature; called with ``timeout_ms``,
            ``max_bytes`` and ``allowed_hosts``).
        fetch_timeout_ms: the fetch deadline, ms.
        now: the clock, ISO-8601 UTC.
        on_enqueue: called after a document is queued (wakes the worker).
        on_done: called with the document's id after it is ingested (status ``done``); an
            exception is logged, never fails the job.
    """

    def __init__(
        self,
        db: Database,
        memories: MemoryService,
        pipeline: Callable[[], PipelineV2Settings],
        *,
        fetch: Fetcher = fetch_url,
        fetch_timeout_ms: float = FETCH_TIMEOUT_MS,
        now: Callable[[], str] = now_iso,
        on_enqueue: Callable[[], None] | None = None,
        on_done: Callable[[str], None] | None = None,
    ) -> None:
        self.db = db
        self.memories = memories
        self._pipeline = pipeline
        self._fetch = fetch
        self.fetch_timeout_ms = fetch_timeout_ms
        self._now = now
        self.on_enqueue = on_enqueue
        self.on_done = on_done

    # -- create / read / delete ---------------------------------------------------------
    def create(
        self,
        *,
        url: str | None = None,
        content: str | None = None,
        title: str | None = None,
        project: str | None = None,
        tags: Sequence[str] = (),
    ) -> Document:
        """Queue a document from ``url`` or raw ``content`` (exactly one) and its ingest job.

        Raises:
            ValidationError: neither or both of url/content, a malformed or non-http(s) URL,
                empty content, a bad title, project or tag. FetchRefused (422
                ``address_refused``): a numeric or ``localhost`` host naming a refused address
                not in ``documents.allowedHosts``. PayloadTooLarge: content over
                ``documents.maxContentBytes`` (UTF-8 bytes).
        """
        p = self._pipeline()
        if (url is None) == (content is None):
            raise ValidationError("give exactly one of url or content", details={"fields": ["url", "content"]})
        byte_length = None
        if url is not None:
            url = check_target(url, HostAllowlist(p.documents.allowed_hosts))
        else:
            check_text(content, "content", max_chars=p.documents.max_content_bytes)  # type: ignore[arg-type]
            byte_length = len(content.encode("utf-8"))  # type: ignore[union-attr]
            if byte_length > p.documents.max_content_bytes:
                raise PayloadTooLarge(
                    f"content: {byte_length} bytes is over the limit of {p.documents.max_content_bytes}",
                    details={"field": "content", "limit": p.documents.max_content_bytes},
                )
        if title is not None:
            title = check_text(title, "title", max_chars=MAX_TITLE_CHARS, allow_empty=True).strip() or None
        if project is not None:
            check_text(project, "project", max_chars=MAX_SHORT_CHARS, allow_empty=True)
        if isinstance(tags, str) or len(tags) > MAX_TAGS:
            raise ValidationError(f"tags: a list of at most {MAX_TAGS} strings", details={"field": "tags"})
        tags = tuple(check_text(t, "tags[]", max_chars=MAX_SHORT_CHARS) for t in tags)
        doc_id, at = str(uuid.uuid4()), self._now()

        def job(conn):
            doc_sql.insert(
                conn,
                id=doc_id,
                source_type="url" if url is not None else "text",
                source_url=url,
                title=title,
                raw_content=content,
                byte_length=byte_length,
                project=project,
                tags=tags,
                at=at,
            )
            jid = jobs_sql.enqueue(
                conn,
                DOCUMENT_INGEST,
                at=at,
                dedup_key=doc_id,
                payload={"document_id": doc_id},
                max_attempts=p.worker.max_retries,
            )
            doc_sql.set_job(conn, doc_id, jid)
            return doc_sql.get(conn, doc_id)

        doc = self.db.write(job)
        if self.on_enqueue is not None:
            self.on_enqueue()
        return doc

    def get(self, document_id: str) -> Document:
        """The document (deleted or not).

        Raises:
            NotFound: no document has this id.
        """
        doc = self.db.read(lambda c: doc_sql.get(c, document_id))
        if doc is None:
            raise NotFound(f"no document with id {document_id!r:.80}", details={"id": document_id[:80]})
        return doc

    def list(
        self, *, limit: int = 50, offset: int = 0, status: str | None = None, include_deleted: bool = False
    ) -> tuple[list[Document], int]:
        """A page of documents, newest first, and the total.

        Raises:
            ValidationError: an unknown status.
        """
        if status is not None and status not in doc_sql.STATUSES:
            raise ValidationError(f"status: one of {list(doc_sql.STATUSES)}", details={"field": "status"})
        return self.db.read(
            lambda c: doc_sql.list_page(c, limit=limit, offset=offset, status=status, include_deleted=include_deleted)
        )

    def chunks(self, document_id: str, *, limit: int = 100, offset: int = 0) -> builtins.list[DocumentChunk]:
        """A page of the document's chunks, in order, with their memories' content.

        Raises:
            NotFound: no document has this id.
        """
        self.get(document_id)
        return self.db.read(lambda c: doc_sql.chunks(c, document_id, limit=limit, offset=offset))

    def delete(self, document_id: str) -> DeleteResult:
        """Soft-delete a document and the live chunk memories no other live document shares.

        The document is marked first (a running ingest stops at its next chunk), then each memory
        is soft-deleted through :meth:`MemoryService.delete` (history, index, listeners).

        Raises:
            NotFound: unknown id. Conflict: already deleted.
        """
        doc = self.get(document_id)
        if doc.deleted_at is not None:
            raise Conflict("document is already deleted", details={"id": document_id})
        at = self._now()

        def delete(c: sqlite3.Connection) -> builtins.list[str]:
            doc_sql.mark_deleted(c, document_id, at=at)
            return doc_sql.exclusive_live_memories(c, document_id)

        ids = self.db.write(delete)
        deleted = []
        for mid in ids:
            try:
                self.memories.delete(mid, who="documents", why=f"document {document_id} deleted")
                deleted.append(mid)
            except (Conflict, NotFound):  # deleted meanwhile
                pass
        return DeleteResult(self.get(document_id), deleted)

    # -- the job ----------------------------------------------------------------------
    def process(self, job: Job) -> dict[str, Any]:
        """The ``document_ingest`` handler: fetch (URL documents), chunk, write chunk memories.

        Returns:
            the job result: document_id, chunks, created, deduplicated, already_linked.

        Raises:
            SkipJob: the document is gone, deleted, already done, or failed permanently.
            Exception: a retryable failure (the queue retries; the last attempt fails the document).
        """
        doc_id = str(job.payload.get("document_id", ""))
        doc = self.db.read(lambda c: doc_sql.get(c, doc_id, content=True))
        if doc is None:
            raise SkipJob("document not found")
        if doc.deleted_at is not None:
            raise SkipJob("document deleted")
        if doc.status == "done":
            raise SkipJob("document already ingested")
        self.db.write(lambda c: doc_sql.start_attempt(c, doc_id, at=self._now()))
        try:
            return self._ingest(doc)
        except SkipJob:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            permanent = (isinstance(exc, FetchError) and not exc.retryable) or isinstance(exc, _Permanent)
            if permanent or job.attempts >= job.max_attempts:
                self.db.write(lambda c: doc_sql.set_status(c, doc_id, "failed", at=self._now(), error=error))
                log.warning("document %s failed: %s", doc_id, error)
                if permanent:
                    raise SkipJob(f"failed: {error}") from exc
            else:
                self.db.write(lambda c: doc_sql.set_status(c, doc_id, "queued", at=self._now(), error=error))
            raise

    def _ingest(self, doc: Document) -> dict[str, Any]:
        p = self._pipeline().documents
        text, title = doc.raw_content, doc.title
        if doc.source_type == "url" and text is None:
            res = self._fetch(
                doc.source_url,
                timeout_ms=self.fetch_timeout_ms,
                max_bytes=p.max_content_bytes,
                allowed_hosts=HostAllowlist(p.allowed_hosts),
            )
            title = title or (res.title[:MAX_TITLE_CHARS] if res.title else None)
            self.db.write(
                lambda c: doc_sql.set_fetched(
                    c,
                    doc.id,
                    content=res.content,
                    content_type=res.content_type,
                    byte_length=res.byte_length,
                    title=title,
                    at=self._now(),
                )
            )
            text = res.content
        self.db.write(lambda c: doc_sql.set_status(c, doc.id, "chunking", at=self._now()))
        pieces = chunk_text(text or "", chunk_size=p.chunk_size, chunk_overlap=p.chunk_overlap)
        if not pieces:
            raise _Permanent("the document has no text")

        def embedding(c: sqlite3.Connection) -> None:
            doc_sql.set_chunk_count(c, doc.id, len(pieces), at=self._now())
            doc_sql.set_status(c, doc.id, "embedding", at=self._now())

        self.db.write(embedding)
        linked = self.db.read(lambda c: doc_sql.linked_chunks(c, doc.id))
        live = {m for m in linked.values() if not self.memories.get(m).is_deleted}
        tags = tuple(dict.fromkeys(((title,) if title else ()) + doc.tags))
        counts = {"created": 0, "deduplicated": 0, "already_linked": 0}
        for ch in pieces:
            if linked.get(ch.index) in live:
                counts["already_linked"] += 1
                continue
            if self.db.read(lambda c: doc_sql.get(c, doc.id)).deleted_at is not None:  # type: ignore[union-attr]
                raise SkipJob("document deleted during ingest")
            r = self.memories.remember_many(
                [
                    RememberInput(
                        content=ch.text,
                        type=CHUNK_TYPE,
                        importance=CHUNK_IMPORTANCE,
                        project=doc.project,
                        tags=tags,
                        metadata={"document_id": doc.id, "chunk_index": ch.index, "source_url": doc.source_url},
                        who="document-ingest",
                        why="document chunk",
                        source_type=CHUNK_SOURCE_TYPE,
                        source_id=doc.id,
                    )
                ]
            )[0]
            counts[r.status] += 1
            self.db.write(lambda c: doc_sql.link(c, doc.id, ch.index, r.id, at=self._now()))
        self.db.write(lambda c: doc_sql.set_status(c, doc.id, "done", at=self._now(), clear_error=True))
        if self.on_done is not None:
            try:
                self.on_done(doc.id)
            except Exception:
                log.exception("on_done of document %s failed", doc.id)
        return {"document_id": doc.id, "chunks": len(pieces), **counts}


class _Permanent(Exception):
    """A failure no retry can fix (e.g. the document has no text)."""
