"""Writing and reading memories: remember (single and batch), get, update, delete, recover,
history, list and stats.

Write path (ARCHITECTURE "The three paths", 1): normalise and hash (memory-pipeline-v2.md
"Content Normalization") -> embed what has no vector yet, in batches, *outside* the write
lock -> one write transaction per chunk (memory rows, FTS by trigger, history rows, vectors)
-> the in-memory index follows the commit. An exact duplicate (same content_hash as
a live memory) returns the existing id with status ``deduplicated`` and a history row.
An embedding failure never loses the write: the memory is stored without a vector.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import numpy as np

from memlane.config.clock import now_iso, parse_iso
from memlane.embedding.base import Embedder
from memlane.errors import Conflict, EmbeddingError, NotFound, ValidationError
from memlane.normalize import content_hash, normalize_and_hash
from memlane.recall.memory_index import IndexEntry, MemoryIndex
from memlane.redact import redact, redact_json, redacts_memory
from memlane.services.extensions import CreatedListener, MemoryCreatedHook, MemoryListener
from memlane.services.inputs import RememberInput, RememberResult
from memlane.services.validation import MAX_SHORT_CHARS, check_metadata, check_text, check_unit
from memlane.storage import embeddings as emb_sql
from memlane.storage import memories as mem_sql
from memlane.storage.db import Database
from memlane.storage.models import HistoryEntry, Memory, NewMemory
from memlane.v3.model import check_v3

log = logging.getLogger(__name__)

#: Memories per write transaction during a batch remember; the next chunk is embedded while
#: this one is written (:meth:`MemoryService.remember_many`).
WRITE_CHUNK = 64

#: Largest integer SQLite binds (a larger Python int raises OverflowError).
_SQLITE_INT_MAX = 2**63 - 1


def context_text(content: str, context: str) -> str:
    """The text embedded for a memory's context vector: its context, then its content."""
    return f"{context}\n{content}"


class MemoryService:
    """The memory store's behaviour over one database, one embedder and the in-memory index.

    Args:
        db: the database (migrated).
        embedder: the embedding provider, or None for BM25-only.
        index: the in-memory index of every memory (vectors of ``embedder.model_id``).
        max_content_chars: largest accepted content, characters.
        embed_batch: texts per embedding call.
        redact_memories: the ``redact.memories`` mode (``hooks``, ``all``, ``off``), or a callable
            returning it at each write (the daemon's settings can change at run time): which
            memories have the secrets in their text redacted before they are stored
            (:func:`memlane.redact.redacts_memory`).
        created_hooks: run for each created memory inside its write transaction
            (:class:`memlane.services.extensions.MemoryCreatedHook`).
        listeners: told of each committed update, delete, recover or supersede.
        created_listeners: told of the memories a write created, after the commit and indexing.
    """

    def __init__(
        self,
        db: Database,
        embedder: Embedder | None,
        index: MemoryIndex,
        *,
        max_content_chars: int = 100_000,
        embed_batch: int = 64,
        redact_memories: str | Callable[[], str] = "hooks",
        created_hooks: Sequence[MemoryCreatedHook] = (),
        listeners: Sequence[MemoryListener] = (),
        created_listeners: Sequence[CreatedListener] = (),
    ) -> None:
        self.db = db
        self._redact_mode = redact_memories if callable(redact_memories) else (lambda: redact_memories)
        self.embedder = embedder
        self.index = index
        self.max_content_chars = max_content_chars
        self.embed_batch = embed_batch
        #: Told of every committed update, delete, recover or supersede, in this order.
        self.listeners: tuple[MemoryListener, ...] = tuple(listeners)
        #: Run for each created memory inside its write transaction, in this order.
        self.created_hooks: tuple[MemoryCreatedHook, ...] = tuple(created_hooks)
        #: Told of the memories a write created, after the commit and the index upsert.
        self.created_listeners: tuple[CreatedListener, ...] = tuple(created_listeners)

    def _emit_created(self, entries: Sequence[IndexEntry]) -> None:
        if not entries:
            return
        for listener in self.created_listeners:
            try:
                listener(entries)
            except Exception:
                log.exception("created listener failed on %d memories", len(entries))

    def _emit(self, event: str, memory: Memory) -> None:
        for listener in list(self.listeners):
            try:
                listener(event, memory)
            except Exception:
                log.exception("listener failed on %s of %s", event, memory.id)

    # -- validation ----------------------------------------------------------------------
    def validate(self, item: RememberInput) -> RememberInput:
        """Check and canonicalise one input; its text (content, context, why, tags, metadata
        strings) is redacted when ``redact.memories`` covers its ``source_type``.

        Raises:
            ValidationError / PayloadTooLarge: the input is unacceptable.
        """
        check_text(item.content, "content", max_chars=self.max_content_chars)
        check_text(item.type, "type", max_chars=MAX_SHORT_CHARS)
        check_unit(item.importance, "importance")
        check_unit(item.confidence, "confidence")
        for name in ("project", "who", "why", "source_type", "source_id"):
            value = getattr(item, name)
            if value is not None:
                check_text(value, name, max_chars=MAX_SHORT_CHARS, allow_empty=True)
        for tag in item.tags:
            check_text(tag, "tags[]", max_chars=MAX_SHORT_CHARS)
        if item.context is not None:
            check_text(item.context, "context", max_chars=self.max_content_chars, allow_empty=True)
        check_metadata(item.metadata)
        created = parse_iso(item.created_at, "created_at") if item.created_at else None
        if not normalize_and_hash(item.content).storage_content:
            raise ValidationError("content: must not be empty", details={"field": "content"})
        item = replace(item, created_at=created, context=(item.context or None))
        v3 = check_v3(
            type_=item.type,
            scope=item.scope,
            source=item.source,
            work_unit_ref=item.work_unit_ref,
            related_files=item.related_files,
            related_modules=item.related_modules,
            citation_text=item.citation_text,
            commit_sha=item.commit_sha,
            type_fields=item.type_fields,
            decay_half_life_days=item.decay_half_life_days,
            needs_review=item.needs_review,
            user_verified=item.user_verified,
        )
        v3.pop("methodology")
        item = replace(item, **v3)
        if redacts_memory(self._redact_mode(), item.source_type):
            # before hashing, embedding and the write: the memory row, its history, FTS, the
            # vectors and whatever the pipeline extracts from it never see the secret
            item = replace(
                item,
                content=redact(item.content),
                context=redact(item.context) if item.context else None,
                why=redact(item.why) if item.why else item.why,
                tags=tuple(redact(t) for t in item.tags),
                metadata=redact_json(item.metadata),
                citation_text=redact(item.citation_text) if item.citation_text else item.citation_text,
                type_fields=redact_json(item.type_fields),
            )
        return item

    # -- embedding (never under the write lock) -----------------------------------------
    def _embed_missing(
        self, texts: dict[str, str], progress: Callable[[int], None] | None = None
    ) -> dict[str, np.ndarray]:
        """Vectors for ``hash -> text``: existing ones read from the DB, the rest embedded in batches.

        Raises:
            EmbeddingError: the provider failed.
        """
        if self.embedder is None or not texts:
            return {}
        model = self.embedder.model_id
        have = self.db.read(lambda c: emb_sql.get_vectors(c, list(texts), model))
        missing = [(h, t) for h, t in texts.items() if h not in have]
        out = dict(have)
        for start in range(0, len(missing), self.embed_batch):
            chunk = missing[start : start + self.embed_batch]
            vecs = self.embedder.embed([t for _, t in chunk])
            for (h, _), v in zip(chunk, vecs):
                out[h] = np.asarray(v, dtype=np.float32)
            if progress:
                progress(len(chunk))
        return out

    # -- remember ------------------------------------------------------------------------
    def remember(self, item: RememberInput) -> RememberResult:
        """Store one memory (see :meth:`remember_many`)."""
        return self.remember_many([item])[0]

    def remember_many(
        self, items: Sequence[RememberInput], progress: Callable[[int], None] | None = None
    ) -> list[RememberResult]:
        """Store memories; returns one result per input, in order.

        ``progress(n)`` is called as n more inputs are committed.

        Chunks of :data:`WRITE_CHUNK` inputs, each one write transaction; chunk k+1 is embedded
        on this thread while the writer thread commits chunk k (embedding and SQLite use both
        cores; docs/benchmarks.md, "Ingest"). Chunks commit in input order, so a duplicate in a
        later chunk finds the earlier one.

        Raises:
            ValidationError / PayloadTooLarge: an input is unacceptable (nothing is written).
            Whatever a write raises (StorageError, Conflict): the chunks before it stay committed.
        """
        items = [self.validate(i) for i in items]
        prepared = []
        for it in items:
            nc = normalize_and_hash(it.content)
            ctx_hash = content_hash(context_text(nc.storage_content, it.context)) if it.context else None
            prepared.append((it, nc, ctx_hash))
        results: list[RememberResult] = []
        in_flight: tuple[Future, int] | None = None  # the chunk being written, its size
        try:
            for start in range(0, len(prepared), WRITE_CHUNK):
                chunk = prepared[start : start + WRITE_CHUNK]
                vectors = self._chunk_vectors(chunk)
                if in_flight is not None:
                    done, in_flight = in_flight, None
                    results.extend(self._written(done[0]))
                    if progress:
                        progress(done[1])
                in_flight = (self._submit_chunk(chunk, vectors), len(chunk))
        finally:
            # also when embedding raised: a submitted chunk commits, so the index must follow it
            if in_flight is not None:
                results.extend(self._written(in_flight[0]))
                if progress:
                    progress(in_flight[1])
        return results

    def _chunk_vectors(self, chunk: list) -> dict[str, np.ndarray]:
        """Content and context vectors of a chunk of prepared inputs (``{}`` if embedding failed:
        the memories are stored without vectors)."""
        texts: dict[str, str] = {}
        for it, nc, ch in chunk:
            texts.setdefault(nc.content_hash, nc.storage_content)
            if ch:
                texts.setdefault(ch, context_text(nc.storage_content, it.context or ""))
        try:
            return self._embed_missing(texts)
        except EmbeddingError as exc:
            log.warning("embedding failed, storing %d memories without vectors: %s", len(chunk), exc)
            return {}

    def _written(self, fut: Future) -> list[RememberResult]:
        """Wait for a chunk :meth:`_submit_chunk` queued; once committed, index its memories and
        tell the created listeners."""
        results, entries = self.db.wait(fut)
        for e in entries:
            self._index_upsert(e)
        self._emit_created(entries)
        return results

    def _submit_chunk(self, chunk: list, vectors: dict[str, np.ndarray]) -> Future:
        """Queue the write transaction of a chunk (its vectors, then each memory: a live duplicate
        gets a ``deduplicated`` history row, a new one :meth:`create_in_tx`); the future's result
        is ``(results, index entries)``."""
        model = self.embedder.model_id if self.embedder else None
        now = now_iso()

        def job(conn: sqlite3.Connection) -> tuple[list[RememberResult], list[IndexEntry]]:
            results, entries = [], []
            if vectors and model:
                emb_sql.upsert(conn, vectors.items(), model, now)
            for it, nc, ch in chunk:
                existing = mem_sql.find_live_by_hash(conn, nc.content_hash)
                if existing is not None:
                    mem_sql.add_history(
                        conn,
                        existing.id,
                        "deduplicated",
                        new_content=nc.storage_content,
                        who=it.who,
                        why=it.why,
                        at=now,
                        changes={"source_type": it.source_type, "source_id": it.source_id},
                    )
                    results.append(
                        RememberResult(
                            existing.id, "deduplicated", nc.content_hash, existing.embedding_model is not None
                        )
                    )
                    continue
                embedded = nc.content_hash in vectors
                new = NewMemory(
                    id=str(uuid.uuid4()),
                    type=it.type,
                    content=nc.storage_content,
                    normalized_content=nc.normalized_content,
                    content_hash=nc.content_hash,
                    context=it.context,
                    context_hash=ch,
                    importance=it.importance,
                    confidence=it.confidence,
                    project=it.project,
                    tags=tuple(it.tags),
                    metadata=dict(it.metadata),
                    who=it.who,
                    why=it.why,
                    source_type=it.source_type,
                    source_id=it.source_id,
                    created_at=it.created_at or now,
                    pinned=it.pinned,
                    embedding_model=model if embedded else None,
                    scope=it.scope or "global",
                    source=it.source,
                    work_unit_ref=it.work_unit_ref,
                    methodology=it.work_unit_ref["methodology"] if it.work_unit_ref else None,
                    related_files=it.related_files,
                    related_modules=it.related_modules,
                    needs_review=it.needs_review,
                    user_verified=it.user_verified,
                    citation_text=it.citation_text,
                    commit_sha=it.commit_sha,
                    decay_half_life_days=it.decay_half_life_days,
                    type_fields=it.type_fields,
                )
                entries.append(self.create_in_tx(conn, new, at=now, vectors=vectors))
                results.append(RememberResult(new.id, "created", nc.content_hash, embedded))
            return results, entries

        return self.db.submit(job)

    def create_in_tx(
        self,
        conn: sqlite3.Connection,
        new: NewMemory,
        *,
        at: str,
        vectors: dict[str, np.ndarray],
        history_changes: dict[str, Any] | None = None,
    ) -> IndexEntry:
        """The one create path of a memory (remember, import, the pipeline's derived facts), inside
        the caller's write transaction: the row (FTS by trigger), its ``created`` history row (who,
        why from ``new``; ``history_changes`` as its changes), then every created hook.

        The caller has checked for a live duplicate and stored the vectors; once the transaction
        commits it hands the returned entry to :meth:`after_commit` (or the index directly).

        Args:
            conn: the write connection, inside ``Database.write``.
            new: the normalised, hashed memory; ``created_at`` set.
            at: the write time (ISO-8601 UTC), of the history row and the hooks.
            vectors: content or context hash -> float32 [d]; the content vector is used when
                ``new.embedding_model`` is set, the context vector when ``new.context_hash`` is.
            history_changes: the ``changes`` JSON of the history row ({} when None).
        Returns:
            the memory's index entry (live, not superseded).
        Raises:
            Conflict: a live memory has the same content hash (its UNIQUE index; nothing is written).
            Whatever a created hook raises (the caller's transaction rolls back).
        """
        try:
            seq = mem_sql.insert(conn, new)
        except sqlite3.IntegrityError as exc:
            raise Conflict("a live memory has the same content", details={"content_hash": new.content_hash}) from exc
        mem_sql.add_history(
            conn, new.id, "created", new_content=new.content, who=new.who, why=new.why, at=at, changes=history_changes
        )
        for hook in self.created_hooks:
            hook(conn, new, at)
        return IndexEntry.created(
            seq,
            new,
            vectors.get(new.content_hash) if new.embedding_model else None,
            vectors.get(new.context_hash) if new.context_hash else None,
        )

    def _index_upsert(self, entry: IndexEntry) -> None:
        # Trigger: a provider returned vectors of a new size after the index was built.
        # Why: the row is committed; failing the request now would misreport a durable write.
        # Outcome: the memory is indexed without vectors (BM25 only until re-embedded); logged.
        try:
            self.index.upsert(entry)
        except ValueError as exc:
            log.error("vectors of seq %d not indexed: %s", entry.seq, exc)
            self.index.upsert(entry.without_vectors())

    # -- reads -----------------------------------------------------------------------------
    def get(self, memory_id: str) -> Memory:
        """The memory with this id, deleted or not.

        Raises:
            NotFound: no memory has this id.
        """
        m = self.db.read(lambda c: mem_sql.get(c, memory_id))
        if m is None:
            raise NotFound(f"no memory with id {memory_id!r:.80}", details={"id": memory_id[:80]})
        return m

    def history(self, memory_id: str) -> list[HistoryEntry]:
        """Every create, update, delete, recover and dedup event of a memory, oldest first.

        Raises:
            NotFound: no memory has this id.
        """
        self.get(memory_id)
        return self.db.read(lambda c: mem_sql.history(c, memory_id))

    def list(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        project: str | None = None,
        type_: str | None = None,
        include_deleted: bool = False,
        order: str = "newest",
    ) -> tuple[list[Memory], int]:
        """A page of memories and the total matching count.

        Raises:
            ValidationError: ``limit`` < 1 or ``offset`` < 0, or either past SQLite's 64-bit integers.
        """
        for name, value, low in (("limit", limit, 1), ("offset", offset, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _SQLITE_INT_MAX:
                raise ValidationError(
                    f"{name}: must be an integer in [{low}, {_SQLITE_INT_MAX}]", details={"field": name}
                )
        return self.db.read(
            lambda c: mem_sql.list_page(
                c,
                limit=limit,
                offset=offset,
                project=project,
                type_=type_,
                include_deleted=include_deleted,
                order=order,
            )
        )

    def live_count(self) -> int:
        """Live memories (one index-only count: cheap enough for a liveness probe)."""
        return self.db.read(mem_sql.live_count)

    def stats(self) -> dict[str, Any]:
        """Counts by state, type, project and embedding model, plus vectors per model."""
        s = self.db.read(mem_sql.stats)
        s["vectors_by_model"] = self.db.read(emb_sql.count)
        s["embedding_model"] = self.embedder.model_id if self.embedder else None
        s["indexed"] = len(self.index)
        return s

    # -- update / delete / recover --------------------------------------------------------
    def update(
        self, memory_id: str, patch: dict[str, Any], *, who: str | None = None, why: str | None = None
    ) -> Memory:
        """Change fields of a live memory; a content change re-normalises, re-hashes and re-embeds.

        Patchable: content, context, type, importance, confidence, project, tags, metadata, pinned,
        and the V3 fields (scope, source, work_unit_ref, related_files, related_modules, needs_review,
        user_verified, citation_text, commit_sha, decay_half_life_days, type_fields).
        Text fields and ``why`` are redacted when ``redact.memories`` covers the memory's
        ``source_type`` (as :meth:`validate` does at remember).

        Raises:
            NotFound: unknown id. Conflict: the memory is deleted, or the new content duplicates
            another live memory. ValidationError: a bad value or an unknown field.
        """
        allowed = {
            "content",
            "context",
            "type",
            "importance",
            "confidence",
            "project",
            "tags",
            "metadata",
            "pinned",
        } | _V3_PATCHABLE
        unknown = set(patch) - allowed
        if unknown:
            raise ValidationError(f"cannot patch {sorted(unknown)}; patchable: {sorted(allowed)}")
        _check_actor(who, why)
        current = self.get(memory_id)
        if current.is_deleted:
            raise Conflict("memory is deleted; recover it first", details={"id": memory_id})
        fields: dict[str, Any] = {}
        for key, value in patch.items():
            if key in ("importance", "confidence"):
                fields[key] = check_unit(value, key)
            elif key == "type":
                fields[key] = check_text(value, key, max_chars=MAX_SHORT_CHARS)
            elif key == "project":
                if value is not None:
                    check_text(value, key, max_chars=MAX_SHORT_CHARS, allow_empty=True)
                fields[key] = value
            elif key == "tags":
                if not isinstance(value, (list, tuple)):
                    raise ValidationError("tags: expected a list of strings")
                fields[key] = tuple(check_text(t, "tags[]", max_chars=MAX_SHORT_CHARS) for t in value)
            elif key == "metadata":
                fields[key] = check_metadata(value)
            elif key == "pinned":
                if not isinstance(value, bool):
                    raise ValidationError("pinned: expected true or false", details={"field": "pinned"})
                fields[key] = value
            elif key == "context":
                if value is not None:
                    check_text(value, "context", max_chars=self.max_content_chars, allow_empty=True)
                fields[key] = value or None
        v3_keys = set(patch) & _V3_PATCHABLE
        if v3_keys or "type" in fields:  # the V3 fields are checked together, against the new type
            merged = {k: patch.get(k, getattr(current, k)) for k in _V3_PATCHABLE}
            v3 = check_v3(type_=fields.get("type", current.type), **merged)
            for k in v3_keys:
                fields[k] = v3[k]
            if "work_unit_ref" in v3_keys:
                fields["methodology"] = v3["methodology"]
        scrub = redacts_memory(self._redact_mode(), current.source_type)  # as at remember (validate)
        if scrub:
            why = redact(why) if why else why
            for key in ("context", "tags", "metadata", "citation_text", "type_fields"):
                if fields.get(key) is not None:
                    fields[key] = redact_json(fields[key])
        content = current.content
        if "content" in patch:
            check_text(patch["content"], "content", max_chars=self.max_content_chars)
            nc = normalize_and_hash(redact(patch["content"]) if scrub else patch["content"])
            if not nc.storage_content:
                raise ValidationError("content: must not be empty")
            content = nc.storage_content
            fields.update(
                content=nc.storage_content, normalized_content=nc.normalized_content, content_hash=nc.content_hash
            )
        context = fields.get("context", current.context) if "context" in fields else current.context
        ch = content_hash(context_text(content, context)) if context else None
        if "content" in fields or "context" in fields:
            fields["context_hash"] = ch
        texts = {}
        if "content_hash" in fields:
            texts[fields["content_hash"]] = content
        if ch and "context_hash" in fields:
            texts[ch] = context_text(content, context or "")
        try:
            vectors = self._embed_missing(texts)
        except EmbeddingError as exc:
            log.warning("embedding failed on update of %s: %s", memory_id, exc)
            vectors = {}
        model = self.embedder.model_id if self.embedder else None
        if "content_hash" in fields:
            fields["embedding_model"] = model if fields["content_hash"] in vectors else None
        now = now_iso()
        changes = {
            k: [_plain(getattr(current, k)), _plain(v)]
            for k, v in fields.items()
            if k not in ("normalized_content", "content_hash", "context_hash", "embedding_model")
            and _plain(getattr(current, k)) != _plain(v)
        }

        def job(conn: sqlite3.Connection) -> Memory:
            if "content_hash" in fields:
                other = mem_sql.find_live_by_hash(conn, fields["content_hash"])
                if other is not None and other.id != memory_id:
                    raise Conflict(
                        "another live memory already has this content",
                        details={"id": memory_id, "duplicate_of": other.id},
                    )
            if vectors and model:
                emb_sql.upsert(conn, vectors.items(), model, now)
            mem_sql.update_fields(conn, memory_id, fields, now)
            mem_sql.add_history(
                conn,
                memory_id,
                "updated",
                old_content=current.content,
                new_content=content,
                changes=changes,
                who=who,
                why=why,
                at=now,
            )
            return mem_sql.get(conn, memory_id)  # type: ignore[return-value]

        updated = self.db.write(job)
        self._reindex(updated)
        self._emit("updated", updated)
        return updated

    def _reindex(self, m: Memory) -> None:
        vecs: dict[str, np.ndarray] = {}
        if self.embedder is not None:
            hashes = [m.content_hash] + ([m.context_hash] if m.context_hash else [])
            model = self.embedder.model_id
            vecs = self.db.read(lambda c: emb_sql.get_vectors(c, hashes, model))
        cv = vecs.get(m.content_hash)
        xv = vecs.get(m.context_hash) if m.context_hash and cv is not None else None
        self._index_upsert(IndexEntry.from_memory(m, cv, xv))

    def delete(self, memory_id: str, *, who: str | None = None, why: str | None = None) -> Memory:
        """Soft-delete: the row stays, recall skips it unless asked, :meth:`recover` restores it.

        Raises:
            NotFound: unknown id. Conflict: already deleted.
        """
        return self._set_deleted(memory_id, True, who, why)

    def recover(self, memory_id: str, *, who: str | None = None, why: str | None = None) -> Memory:
        """Undo a soft delete.

        Raises:
            NotFound: unknown id. Conflict: not deleted, or a live memory now has the same content.
        """
        return self._set_deleted(memory_id, False, who, why)

    def supersede(self, old_id: str, new_id: str, *, who: str | None = None, why: str | None = None) -> Memory:
        """Mark ``old_id`` superseded by ``new_id``: the row stays (nothing is lost), a
        ``superseded`` history row records it, recall and session pools that exclude superseded
        memories skip it; listeners get ``superseded``.

        Raises:
            NotFound: either id is unknown. Conflict: old is deleted, already superseded, or is new.
        """
        _check_actor(who, why)
        now = now_iso()

        def job(conn: sqlite3.Connection) -> Memory:
            return supersede_in_tx(conn, old_id, new_id, who=who, why=why, at=now)

        m = self.db.write(job)
        self.after_commit(superseded=[m])
        return m

    def after_commit(self, *, created: Sequence[IndexEntry] = (), superseded: Sequence[Memory] = ()) -> None:
        """Bring the index and listeners in step with rows another service committed in its own
        transaction (the pipeline's derived memories and supersessions)."""
        for e in created:
            self._index_upsert(e)
        self._emit_created(created)
        for m in superseded:
            self.index.set_superseded(m.seq, m.superseded_by is not None)
            self._emit("superseded", m)

    def _set_deleted(self, memory_id: str, deleted: bool, who: str | None, why: str | None) -> Memory:
        _check_actor(who, why)
        self.get(memory_id)
        now = now_iso()

        def job(conn: sqlite3.Connection) -> Memory:
            m = mem_sql.get(conn, memory_id)
            if m is None:
                raise NotFound(f"no memory with id {memory_id!r:.80}")
            if m.is_deleted == deleted:
                raise Conflict(f"memory is already {'deleted' if deleted else 'live'}", details={"id": memory_id})
            if not deleted:
                other = mem_sql.find_live_by_hash(conn, m.content_hash)
                if other is not None:
                    raise Conflict(
                        "a live memory with the same content exists; cannot recover",
                        details={"id": memory_id, "duplicate_of": other.id},
                    )
            mem_sql.set_deleted(conn, memory_id, deleted, now)
            mem_sql.add_history(
                conn, memory_id, "deleted" if deleted else "recovered", old_content=m.content, who=who, why=why, at=now
            )
            return mem_sql.get(conn, memory_id)  # type: ignore[return-value]

        m = self.db.write(job)
        self.index.set_deleted(m.seq, deleted)
        self._emit("deleted" if deleted else "recovered", m)
        return m


def supersede_in_tx(
    conn: sqlite3.Connection, old_id: str, new_id: str, *, who: str | None, why: str | None, at: str
) -> Memory:
    """Inside the caller's write transaction: set ``old.superseded_by = new_id`` and add the
    ``superseded`` history row. Returns the old memory as updated (call
    :meth:`MemoryService.after_commit` with it once the transaction commits).

    Raises:
        NotFound: either id is unknown. Conflict: old is deleted, already superseded, or is new.
    """
    old, new = mem_sql.get(conn, old_id), mem_sql.get(conn, new_id)
    if old is None or new is None:
        missing = old_id if old is None else new_id
        raise NotFound(f"no memory with id {missing!r:.80}", details={"id": missing[:80]})
    if old_id == new_id or old.is_deleted or old.superseded_by is not None:
        raise Conflict(
            "memory cannot be superseded (deleted, already superseded, or by itself)",
            details={"id": old_id, "superseded_by": old.superseded_by},
        )
    mem_sql.update_fields(conn, old_id, {"superseded_by": new_id}, at)
    mem_sql.add_history(
        conn,
        old_id,
        "superseded",
        old_content=old.content,
        new_content=new.content,
        changes={"superseded_by": [None, new_id]},
        who=who,
        why=why,
        at=at,
    )
    return mem_sql.get(conn, old_id)  # type: ignore[return-value]


#: The V3 fields :meth:`MemoryService.update` accepts (checked by memlane.v3.model.check_v3).
_V3_PATCHABLE = frozenset(
    {
        "scope",
        "source",
        "work_unit_ref",
        "related_files",
        "related_modules",
        "needs_review",
        "user_verified",
        "citation_text",
        "commit_sha",
        "decay_half_life_days",
        "type_fields",
    }
)


def _check_actor(who: str | None, why: str | None) -> None:
    """Validate the attribution of an update, delete or recover (as remember does)."""
    for name, value in (("who", who), ("why", why)):
        if value is not None:
            check_text(value, name, max_chars=MAX_SHORT_CHARS, allow_empty=True)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
