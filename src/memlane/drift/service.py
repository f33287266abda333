"""Drift and staleness of memories at retrieval (docs/drift.md).

:class:`DriftService` keeps, in memory, each memory's references and its open prediction errors
(the *flags*). Retrieval paths call it:

* :meth:`DriftService.after_recall` (recall, MCP search, prompt-submit's recall): hits whose
  memory is flagged get the score and confidence penalty and a warning prefix; hits with
  references are queued for a check. Cost on the answer path: one dict lookup per hit.
* :meth:`DriftService.injectable` (session-start, prompt-submit): drops flagged memories from
  what is injected proactively.

The check runs write-behind on one background thread (:meth:`check`): for each memory with
document references, the max cosine similarity between its claim (its text without its
references, embedded at the check) and the current chunk vectors (in-memory index) and sentence
vectors (stored per text version) of each referenced document, one matrix product per document.
The first check of a reference (queued when the memory is written or updated) stores that
similarity as the reference's baseline; later, ``baseline - max_sim > threshold`` writes a
``memory_drift`` row (debounced: an open row of the same memory and document within
``debounce_hours`` is updated, strongest signal kept). For each file
reference, a ``stat``: a missing file writes ``memory_stale_file`` and marks the reference stale.
When a memory is superseded, the memories whose claim about the same entity and aspect depended
on it get ``memory_stale_entity`` rows (:meth:`DriftService.entity_invalidated`).

Updating a memory resolves its open rows and re-extracts its references; forgetting it deletes
them (listeners on :class:`memlane.services.memory_service.MemoryService`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from memlane.config.clock import now_iso, to_iso
from memlane.config.drift import DriftSettings
from memlane.drift import references as refs_mod
from memlane.drift.propagation import propagate
from memlane.drift.sentences import split_sentences
from memlane.drift.slots import slots
from memlane.drift.staleness import git_changes, git_root
from memlane.errors import NotFound, ValidationError
from memlane.lru import LRUCache
from memlane.recall.memory_index import MemoryIndex
from memlane.storage import drift as drift_sql
from memlane.storage import graph as graph_sql
from memlane.storage import memories as mem_sql
from memlane.storage import relations as rel_sql
from memlane.storage.db import Database
from memlane.storage.drift import Baseline, PredictionError, Reference

log = logging.getLogger(__name__)

#: The chunk memories of documents are what references point at; they are never checked.
CHUNK_TYPE = "document_chunk"
#: Documents whose sentence vectors are kept in memory (least recently used dropped).
SENTENCE_CACHE = 256
#: Prefix of a document reference stored before its document is ingested (resolved at check).
UNRESOLVED = "?"
#: Reference kinds checked at retrieval (entity references are acted on when the graph changes).
CHECKED_KINDS = ("document", "file")


@dataclass(frozen=True, slots=True)
class Flag:
    """Why a memory is not trusted: an open prediction error in short."""

    error_id: int
    error_type: str
    target: str
    distance: float
    label: str
    #: For drift: the similarity then and now and a slot change, e.g. ``similarity 0.98 -> 0.62; 2020 -> 2021``.
    detail: str = ""

    def warning(self) -> str:
        """The words of the warning prefix for this flag."""
        if self.error_type == "memory_drift":
            return f"drifted from document {self.label!r} ({self.detail or f'drop {self.distance:.2f}'})"
        if self.error_type == "memory_stale_file":
            return f"file {self.target} {self.label}"
        if self.error_type == "memory_stale_entity":
            return f"entity {self.label} was superseded"  # label: 'name' (aspect)
        return f"external signal from {self.label}"


def warning_prefix(flags: Sequence[Flag]) -> str:
    """``[STALE: ...]`` (a file or entity is gone) or ``[DRIFT: ...]``, the reasons joined by ``; ``."""
    kind = "STALE" if any(f.error_type in ("memory_stale_file", "memory_stale_entity") for f in flags) else "DRIFT"
    return f"[{kind}: " + "; ".join(dict.fromkeys(f.warning() for f in flags)) + "]"


@dataclass(frozen=True, slots=True)
class Measure:
    """A memory's claim compared with a document it references (:meth:`DriftService.measure`).

    ``similarity``: max cosine similarity over the document's chunk and sentence vectors;
    ``nearest``/``nearest_similarity``: its nearest sentence and that sentence's similarity
    (None/0.0 without sentence vectors); ``claim_slots``: the claim's slots
    (:func:`memlane.drift.slots.slots`); ``baseline``: the reference's baseline (None: not taken
    yet, or taken with another model).
    """

    similarity: float
    nearest: str | None
    nearest_similarity: float
    claim_slots: frozenset[str]
    baseline: Baseline | None

    @property
    def drop(self) -> float:
        """``baseline.similarity - similarity`` (0.0 without a baseline): how far the claim moved
        away from what it referred to when the baseline was taken (seed
        memory-drift-detection.md: the memory's embedding *has drifted*). A sentence the
        embedding always put far from its own text in the page (Markdown noise, an admonition)
        does not move, so it does not score."""
        return 0.0 if self.baseline is None else self.baseline.similarity - self.similarity

    def slot_change(self, min_similarity: float) -> tuple[list[str], list[str]] | None:
        """``(was, now)`` when the nearest sentence is still the claim's own statement (its
        similarity >= ``min_similarity``) but a slot the baseline's sentence confirmed is gone
        from it (``was``) and it holds slots the claim does not (``now``): ``2020 -> 2021``,
        ``allow_redirects -> follow_redirects``. None otherwise, or without a baseline."""
        if self.baseline is None or not self.baseline.slots or self.nearest is None:
            return None
        if self.nearest_similarity < min_similarity:
            return None
        here = slots(self.nearest)
        was, now = self.baseline.slots - here, here - self.claim_slots
        return (sorted(was), sorted(now)) if was and now else None

    def drifted(self, threshold: float, min_similarity: float) -> bool:
        """A drop above ``threshold``, or a slot change (:meth:`slot_change`)."""
        return self.baseline is not None and (self.drop > threshold or self.slot_change(min_similarity) is not None)

    def as_baseline(self, model: str, document: str, min_similarity: float) -> Baseline:
        """This comparison as a reference's baseline: the similarity, and the claim's slots its
        nearest sentence holds when that sentence is its own statement (similarity >=
        ``min_similarity``)."""
        held: frozenset[str] = frozenset()
        if self.nearest is not None and self.nearest_similarity >= min_similarity:
            held = self.claim_slots & slots(self.nearest)
        return Baseline(self.similarity, model, document, held)


def _flag(e: PredictionError) -> Flag:
    ctx = e.context
    if e.error_type == "memory_drift":
        label = str(ctx.get("title") or e.target)
        then, now, sl = ctx.get("baseline_similarity"), ctx.get("max_sim"), ctx.get("slots")
        parts = []
        if isinstance(then, (int, float)) and isinstance(now, (int, float)):
            parts.append(f"similarity {then:.2f} -> {now:.2f}")
        if isinstance(sl, dict) and sl.get("was") and sl.get("now"):
            parts.append(f"{', '.join(map(str, sl['was']))} -> {', '.join(map(str, sl['now']))}")
        if parts:
            return Flag(e.error_id, e.error_type, e.target, e.cosine_distance, label, "; ".join(parts))
    elif e.error_type == "memory_stale_file":
        label = str(ctx.get("reason") or "is missing")
    elif e.error_type == "memory_stale_entity":
        label = repr(str(ctx.get("entity") or e.target)) + (f" ({ctx['aspect']})" if ctx.get("aspect") else "")
    else:
        label = str(ctx.get("source") or "unknown")
    return Flag(e.error_id, e.error_type, e.target, e.cosine_distance, label)


class DriftService:
    """Drift detection, file staleness and the retrieval rules over one store.

    Args:
        db: the database (migrated to 0013).
        index: the in-memory index (memory and chunk vectors).
        settings: returns the current :class:`DriftSettings` (read at use time).
        embedder: returns the embedder (None: chunk vectors only, no sentence vectors).
        now: the clock, ISO-8601 UTC.
    """

    def __init__(
        self,
        db: Database,
        index: MemoryIndex,
        settings: Callable[[], DriftSettings],
        *,
        embedder: Callable[[], Any] | None = None,
        now: Callable[[], str] = now_iso,
    ) -> None:
        self.db = db
        self.index = index
        self._settings = settings
        self._now = now
        self._lock = threading.Lock()
        self._refs: dict[str, tuple[Reference, ...]] = {}
        self._project: dict[str, str | None] = {}
        self._flags: dict[str, tuple[Flag, ...]] = {}
        self._pending: set[str] = set()
        self._checked: dict[str, float] = {}  # memory id -> time.monotonic() of its last queued check
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlane-drift")
        self._closed = False
        self._embedder = embedder
        self._starts = 0
        self._seen_projects: set[str] = set()
        self._sentences: LRUCache[str, tuple[tuple[str, str], tuple[str, ...], np.ndarray]] = LRUCache(SENTENCE_CACHE)

    # -- state ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read every live memory's references and open prediction errors into memory."""

        def read(conn):
            refs = drift_sql.references(conn)
            projects = drift_sql.referencing_projects(conn)
            return refs, projects, drift_sql.open_errors(conn)

        refs, projects, errors = self.db.read(read)
        by_mem: dict[str, list[Reference]] = {}
        for r in refs:
            if r.kind in CHECKED_KINDS:
                by_mem.setdefault(r.memory_id, []).append(r)
        flags: dict[str, list[Flag]] = {}
        for e in errors:
            flags.setdefault(e.memory_id, []).append(_flag(e))
        with self._lock:
            self._refs = {k: tuple(v) for k, v in by_mem.items()}
            self._project = projects
            self._flags = {k: tuple(v) for k, v in flags.items()}

    def flags_of(self, memory_id: str) -> tuple[Flag, ...]:
        """The memory's open flags (empty: trusted)."""
        return self._flags.get(memory_id, ())

    def references_of(self, memory_id: str) -> tuple[Reference, ...]:
        """The memory's document and file references (the ones checked at retrieval)."""
        return self._refs.get(memory_id, ())

    def _add_flag(self, memory_id: str, flag: Flag) -> None:
        with self._lock:
            old = [f for f in self._flags.get(memory_id, ()) if f.error_id != flag.error_id]
            newly = memory_id not in self._flags
            self._flags[memory_id] = (*old, flag)
        if newly:  # flagged wrong or stale: its related memories feel it (confidence propagation)
            self._propagate_flag(memory_id)

    def _drop(self, memory_id: str, *, refs: bool) -> None:
        with self._lock:
            self._flags.pop(memory_id, None)
            self._checked.pop(memory_id, None)
            if refs:
                self._refs.pop(memory_id, None)
                self._project.pop(memory_id, None)

    # -- write side -------------------------------------------------------------------------
    def extract_in_tx(
        self, conn, memory_id: str, content: str, project: str | None, at: str, related_files: Sequence[str] = ()
    ) -> tuple[Reference, ...]:
        """Extract and store the memory's references inside the caller's write transaction, and
        remember them. ``related_files`` (V3's field) are file candidates besides the paths in the
        text. Document references whose document is not ingested yet are kept with target
        ``?<raw>`` and resolved at each check. The entities the linker linked the memory to (its
        hook runs earlier in the same transaction) are stored as ``entity`` references.
        Returns the document and file references (the ones checked at retrieval)."""
        cands = refs_mod.extract(content) + [
            refs_mod.Candidate("file", f) for f in related_files if isinstance(f, str) and f
        ]
        out: list[Reference] = []
        found: list[tuple[str, str]] = []
        if any(c.kind in ("wiki", "url", "id") for c in cands):  # the documents are read only then
            found = refs_mod.document_references(cands, refs_mod.DocumentTable(drift_sql.live_documents(conn)))
        resolved = {raw for raw, _ in found}
        for raw, doc in found:
            out.append(Reference(memory_id, "document", raw, doc))
        for c in cands:
            if c.kind in ("wiki", "url") and c.raw not in resolved and len(out) < 2 * refs_mod.MAX_PER_KIND:
                out.append(Reference(memory_id, "document", c.raw, UNRESOLVED + c.raw))
        for raw, rel in refs_mod.file_references(cands, project):
            out.append(Reference(memory_id, "file", raw, rel))
        entities = [
            Reference(memory_id, "entity", name, eid) for eid, name in graph_sql.memory_entities(conn, memory_id)
        ]
        drift_sql.replace_references(conn, memory_id, out + entities, at=at)
        with self._lock:
            if out:
                self._refs[memory_id] = tuple(out)
                self._project[memory_id] = project
            else:
                self._refs.pop(memory_id, None)
        return tuple(out)

    def created_hook(self, conn, new: Any, at: str) -> None:
        """``MemoryService.created_hooks`` entry: references of a new memory (same transaction)."""
        if new.type != CHUNK_TYPE:
            self.extract_in_tx(conn, new.id, new.content, new.project, at, getattr(new, "related_files", ()) or ())

    def on_memory_event(self, event: str, memory: Any) -> None:
        """``MemoryService.listeners`` entry: ``updated`` resolves open rows and re-extracts the
        references; ``deleted`` removes rows and references; ``superseded`` propagates a drop to
        zero to its related memories (its own row unchanged); ``recovered`` re-extracts."""
        if memory.type == CHUNK_TYPE:
            return
        at = self._now()
        if event == "updated":

            def job(conn):
                drift_sql.resolve_memory(conn, memory.id, at=at)
                self.extract_in_tx(
                    conn, memory.id, memory.content, memory.project, at, getattr(memory, "related_files", ()) or ()
                )

            self.db.write(job)
            self._drop(memory.id, refs=False)
            self.schedule([memory])  # the re-extracted references take their baselines now
        elif event == "deleted":
            self.db.write(lambda conn: drift_sql.delete_memory(conn, memory.id))
            self._drop(memory.id, refs=True)
        elif event == "superseded":  # its related memories lose what it gave them
            try:
                self.propagate(memory.id, 0.0, store_source=False)
            except Exception:
                log.exception("confidence propagation from superseded %s failed", memory.id)
            try:
                self.entity_invalidated(memory.id, getattr(memory, "superseded_by", None))
            except Exception:
                log.exception("entity staleness from superseded %s failed", memory.id)
        elif event == "recovered":
            self.db.write(
                lambda conn: self.extract_in_tx(
                    conn, memory.id, memory.content, memory.project, at, getattr(memory, "related_files", ()) or ()
                )
            )
            self.schedule([memory])

    def document_ingested(self, document_id: str) -> None:
        """``DocumentService``'s ``on_done``: the memories whose link named a document not
        ingested when they were written (stored as ``?<raw>``), that now resolves to this one and
        has no baseline yet, are checked (write-behind), which takes their baseline against the
        document as ingested. Returns at once."""
        if self._closed or not self._settings().enabled:
            return
        with self._lock:
            waiting = [
                mid
                for mid, refs in self._refs.items()
                if any(r.kind == "document" and r.target.startswith(UNRESOLVED) for r in refs)
            ]
        if waiting:
            try:
                self._pool.submit(self._first_resolved, waiting, document_id)
            except RuntimeError:
                pass

    def _first_resolved(self, memory_ids: list[str], document_id: str) -> None:
        try:
            docs = refs_mod.DocumentTable(self.db.read(drift_sql.live_documents))
            base = self.db.read(lambda c: drift_sql.baselines(c, memory_ids))
            due = [
                mid
                for mid in memory_ids
                if any(
                    r.kind == "document"
                    and r.target.startswith(UNRESOLVED)
                    and (mid, r.raw) not in base
                    and docs.resolve(refs_mod.candidate_of(r.raw)) == document_id
                    for r in self._refs.get(mid, ())
                )
            ]
            if due:
                seqs = self.db.read(lambda c: drift_sql.seqs_of(c, due))
                now = time.monotonic()
                with self._lock:
                    self._checked.update((m, now) for m in due)
                self.check([(m, seqs[m]) for m in due if m in seqs])
        except Exception:
            log.exception("drift baselines of document %s failed", document_id)

    def on_created(self, entries: Sequence[Any]) -> None:
        """``MemoryService.created_listeners`` entry, after the commit: queue a check of the new
        memories that have references, which records each document reference's baseline against
        the document as it is when the memory is written (write-behind; returns at once)."""
        self.schedule(entries)

    def entity_invalidated(self, memory_id: str, superseded_by: str | None) -> list[PredictionError]:
        """Knowledge-graph invalidation (layer 3): the attributes the graph took from
        ``memory_id`` were superseded (:mod:`memlane.graph.invalidation`); each other live memory
        with an ``entity`` reference to such an attribute's entity and an active attribute of its
        own in the same aspect (its claim about that facet of the entity) gets a
        ``memory_stale_entity`` row (target: the entity id; debounced like the others). An
        attribute without an aspect flags nothing (it says no facet to depend on).

        Returns the rows written or updated."""
        s = self._settings()
        if not s.enabled:
            return []
        at = self._now()
        since = _minus_hours(at, s.debounce_hours)
        skip = [memory_id] + ([superseded_by] if superseded_by else [])

        def job(conn):
            eids = []
            for a in graph_sql.invalidated_attributes_of_memory(conn, memory_id):
                if a.status != "superseded" or a.aspect_id is None:
                    continue
                for mid in drift_sql.entity_dependents(conn, a.entity_id, a.aspect_id, skip):
                    eid, _ = drift_sql.record(
                        conn,
                        memory_id=mid,
                        error_type="memory_stale_entity",
                        target=a.entity_id,
                        distance=1.0,
                        context={
                            "entity": a.entity_name,
                            "entity_id": a.entity_id,
                            "aspect": a.aspect_name,
                            "attribute": a.content,
                            "source_memory": memory_id,
                            "superseded_by": superseded_by,
                        },
                        at=at,
                        debounce_since=since,
                    )
                    eids.append(eid)
            return drift_sql.get_errors(conn, sorted(set(eids)))

        rows = self.db.write(job)
        for e in rows:
            if e.resolved_at is None:
                self._add_flag(e.memory_id, _flag(e))
        return rows

    # -- retrieval rules --------------------------------------------------------------------
    def injectable(self, memory_ids: Sequence[str]) -> list[str]:
        """``memory_ids`` without the flagged ones (never injected proactively), order kept."""
        if not self._settings().enabled or not self._flags:
            return list(memory_ids)
        return [m for m in memory_ids if m not in self._flags]

    def after_recall(self, hits: list[Any]) -> list[Any]:
        """Apply the retrieval rules to recall hits (``RecallHit``) and queue their check.

        A flagged hit's memory comes back with its content prefixed by the warning and its
        confidence, like its score, multiplied by ``1 - penalty``; hits are re-sorted by score.
        Never raises (a failure leaves the hits as they were)."""
        s = self._settings()
        if not s.enabled or not hits:
            return hits
        try:
            self.schedule([h.memory for h in hits])
            if not self._flags:
                return hits
            keep = 1.0 - s.penalty
            out, changed = [], False
            for h in hits:
                flags = self._flags.get(h.memory.id)
                if flags:
                    m = dataclasses.replace(
                        h.memory,
                        content=f"{warning_prefix(flags)} {h.memory.content}",
                        confidence=h.memory.confidence * keep,
                    )
                    h = dataclasses.replace(h, memory=m, score=h.score * keep)
                    changed = True
                out.append(h)
            if changed:
                out.sort(key=lambda h: -h.score)
            return out
        except Exception:  # the rules never fail a recall
            log.exception("drift retrieval rules skipped")
            return hits

    def schedule(self, memories: Sequence[Any]) -> None:
        """Queue a write-behind check of the memories that have references (``Memory``-like:
        ``id``, ``seq``, ``project``). Returns at once."""
        if self._closed or not self._settings().enabled:
            return
        due = []
        now, gap = time.monotonic(), self._settings().recheck_seconds
        with self._lock:
            for m in memories:
                if m.id in self._refs and m.id not in self._pending and now - self._checked.get(m.id, -1e18) >= gap:
                    self._pending.add(m.id)
                    self._checked[m.id] = now
                    due.append((m.id, m.seq))
        if due:
            try:
                self._pool.submit(self._run, due)
            except RuntimeError:  # closing
                with self._lock:
                    self._pending.difference_update(i for i, _ in due)

    def schedule_ids(self, memory_ids: Sequence[str]) -> None:
        """Like :meth:`schedule` for memory ids alone (session-start); seqs are read on the
        background thread."""
        if self._closed or not self._settings().enabled:
            return
        now, gap = time.monotonic(), self._settings().recheck_seconds
        with self._lock:
            ids = [
                m
                for m in memory_ids
                if m in self._refs and m not in self._pending and now - self._checked.get(m, -1e18) >= gap
            ]
            self._pending.update(ids)
            self._checked.update((m, now) for m in ids)
        if ids:
            try:
                self._pool.submit(self._run_ids, ids)
            except RuntimeError:
                with self._lock:
                    self._pending.difference_update(ids)

    def _run_ids(self, ids: list[str]) -> None:
        try:
            seqs = self.db.read(lambda c: drift_sql.seqs_of(c, ids))
            self.check([(m, seqs[m]) for m in ids if m in seqs])
        except Exception:
            log.exception("drift check failed")
        finally:
            with self._lock:
                self._pending.difference_update(ids)

    def _run(self, due: list[tuple[str, int]]) -> None:
        try:
            self.check(due)
        except Exception:
            log.exception("drift check failed")
        finally:
            with self._lock:
                self._pending.difference_update(i for i, _ in due)

    def drain(self) -> None:
        """Wait until every queued check has run."""
        if not self._closed:
            self._pool.submit(lambda: None).result()

    def close(self) -> None:
        """Finish queued checks and stop the background thread (idempotent)."""
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)

    # -- the check --------------------------------------------------------------------------
    def check(self, due: Sequence[tuple[str, int]]) -> list[PredictionError]:
        """Check memories ``(id, seq)`` now: drift from referenced documents and missing files.

        Returns the rows written or updated. Runs on the caller's thread (the write-behind thread,
        or a test, the sweep and the benchmark)."""
        s = self._settings()
        items = [(mid, seq, self._refs.get(mid, ())) for mid, seq in due]
        items = [(mid, seq, r) for mid, seq, r in items if r]
        if not items:
            return []
        at = self._now()
        writes: list[dict[str, Any]] = []
        doc_pairs: list[tuple[str, int, str, str]] = []
        docs = None
        for mid, seq, refs in items:
            for r in refs:
                if r.kind == "document":
                    if docs is None:  # resolved again at each check: a re-ingested URL follows its newest
                        docs = refs_mod.DocumentTable(self.db.read(drift_sql.live_documents))
                    target = docs.resolve(refs_mod.candidate_of(r.raw))
                    if target:
                        doc_pairs.append((mid, seq, r.raw, target))
                elif r.kind == "file":
                    root = self._project.get(mid)
                    if root and not os.path.exists(os.path.join(root, r.target)):
                        writes.append(
                            {
                                "memory_id": mid,
                                "error_type": "memory_stale_file",
                                "target": r.target,
                                "distance": 1.0,
                                "context": {"reason": "is missing", "project": root},
                            }
                        )
        fresh: list[tuple[str, str, Baseline]] = []
        if doc_pairs:
            found, fresh = self._drift(doc_pairs, s.threshold)
            writes += found
        if not writes and not fresh:
            return []
        since = _minus_hours(at, s.debounce_hours)

        def job(conn):
            drift_sql.set_baselines(conn, fresh, at=at)
            out = []
            for w in writes:
                if w["error_type"] == "memory_stale_file":
                    drift_sql.mark_file_stale(conn, w["memory_id"], w["target"], reason="missing", at=at)
                if not mem_sql.is_live(conn, w["memory_id"]):
                    continue
                eid, _ = drift_sql.record(
                    conn,
                    memory_id=w["memory_id"],
                    error_type=w["error_type"],
                    target=w["target"],
                    distance=w["distance"],
                    context=w["context"],
                    at=at,
                    debounce_since=since,
                )
                out.append(eid)
            return drift_sql.get_errors(conn, out)

        rows = self.db.write(job)
        for e in rows:
            if e.resolved_at is None:
                self._add_flag(e.memory_id, _flag(e))
        return rows

    def similarities(self, pairs: Sequence[tuple[int, str]]) -> list[float | None]:
        """Max cosine similarity between each memory (by seq; its claim, :meth:`_claim_vectors`)
        and a document (by id): the max over the document's current chunk vectors (from the
        in-memory index) and its sentence vectors (:meth:`sentence_vectors`). None when the memory
        or the document has no vector."""
        return [None if c is None else c[0] for c in self._compare(pairs)]

    def _compare(self, pairs: Sequence[tuple[int, str]]) -> list[tuple[float, str | None, float, str] | None]:
        """Per ``(seq, document id)``: ``(max similarity over chunks and sentences, the nearest
        sentence's text or None, its similarity, the claim's text)``; None without vectors."""
        doc_ids = sorted({d for _, d in pairs})
        chunks = self.db.read(lambda c: drift_sql.chunk_rows(c, doc_ids))
        mem_seqs = sorted({m for m, _ in pairs})
        mvecs, mhas = self.index.vectors_of(mem_seqs)
        mvecs = _unit(mvecs)
        claims = self._claim_vectors(mem_seqs, mvecs, mhas)
        row = {seq: i for i, seq in enumerate(mem_seqs)}
        units: dict[str, tuple[np.ndarray | None, tuple[str, ...], np.ndarray | None]] = {}
        for d in doc_ids:
            rows = chunks.get(d, [])
            cvecs = None
            if rows:
                cv, chas = self.index.vectors_of([seq for seq, _ in rows])
                if chas.any():
                    cvecs = _unit(cv[chas])
            found = self.sentence_units(d, [text for _, text in rows])
            sents, svecs = found if found is not None and len(found[1]) else ((), None)
            if cvecs is not None or svecs is not None:
                units[d] = (cvecs, sents, svecs)
        out: list[tuple[float, str | None, float, str] | None] = []
        for m, d in pairs:
            i, u = row[m], units.get(d)
            if not mhas[i] or u is None:
                out.append(None)
                continue
            cvecs, sents, svecs = u
            best, nearest, near_sim = -1.0, None, 0.0
            if cvecs is not None:
                best = float(np.max(cvecs @ mvecs[i]))
            if svecs is not None:
                ss = svecs @ mvecs[i]
                j = int(np.argmax(ss))
                nearest, near_sim = sents[j], float(ss[j])
                best = max(best, near_sim)
            out.append((best, nearest, near_sim, claims.get(m, "")))
        return out

    def model_id(self) -> str:
        """The embedding model similarities are measured with (a baseline of another model is
        measured again); ``index`` without an embedder (the index's own vectors)."""
        emb = self._embedder() if self._embedder is not None else None
        return "index" if emb is None else str(getattr(emb, "model_id", type(emb).__name__))

    def measure(self, pairs: Sequence[tuple[str, int, str, str]]) -> list[Measure | None]:
        """For each ``(memory id, seq, raw reference, document id)``: the claim's current
        comparison with the document (:class:`Measure`: its max similarity, nearest sentence,
        slots and the reference's stored baseline, None when it has none or one measured with
        another model); None when the memory or the document has no vector. Reads only."""
        compared = self._compare([(seq, d) for _, seq, _, d in pairs])
        model = self.model_id()
        base = self.db.read(lambda c: drift_sql.baselines(c, sorted({m for m, *_ in pairs})))
        out: list[Measure | None] = []
        for (mid, _, raw, _), cmp in zip(pairs, compared):
            if cmp is None:
                out.append(None)
                continue
            b = base.get((mid, raw))
            sim, nearest, near_sim, claim = cmp
            out.append(Measure(sim, nearest, near_sim, slots(claim), b if b is not None and b.model == model else None))
        return out

    def _claim_vectors(self, seqs: Sequence[int], vecs: np.ndarray, has: np.ndarray) -> dict[int, str]:
        """Replace, in place, the vectors of memories whose text holds references by the unit
        vector of their claim (:func:`memlane.drift.references.without_references`): the
        reference markup is not what the document is to still say. Rows stay as they are
        without an embedder or when the text holds no reference. Returns ``seq -> claim text``
        (empty without an embedder)."""
        emb = self._embedder() if self._embedder is not None else None
        if emb is None:
            return {}
        texts = self.db.read(lambda c: drift_sql.contents_by_seq(c, list(seqs)))
        rows, claims, out = [], [], {}
        for i, seq in enumerate(seqs):
            text = texts.get(seq)
            claim = refs_mod.without_references(text) if text else ""
            out[seq] = claim
            if claim and claim != text:
                rows.append(i)
                claims.append(claim)
        if not claims:
            return out
        cv = _unit(np.asarray(emb.embed(claims), dtype=np.float32))
        if cv.shape[1] != vecs.shape[1]:
            return out
        vecs[rows] = cv
        has[rows] = True
        return out

    def sentence_vectors(self, document_id: str, chunk_texts: Sequence[str]) -> np.ndarray | None:
        """Unit vectors [n, d] of the sentences of a document's current chunks
        (:meth:`sentence_units`); None without an embedder."""
        found = self.sentence_units(document_id, chunk_texts)
        return None if found is None else found[1]

    def sentence_units(self, document_id: str, chunk_texts: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray] | None:
        """The sentences of a document's current chunks (:func:`split_sentences`) and their unit
        vectors [n, d], embedded once per version of its text and model: kept in memory for the
        last :data:`SENTENCE_CACHE` documents and stored (``drift_sentence_vectors``, migration
        0017) so that a restart reads them (and cuts the sentences again) instead of embedding
        again; None without an embedder. A statement that is still in the document finds its
        own sentence here, which a 2,000-character chunk's vector does not resolve
        (docs/drift.md)."""
        emb = self._embedder() if self._embedder is not None else None
        if emb is None or not chunk_texts:
            return None
        text = "\n\n".join(chunk_texts)
        model = str(getattr(emb, "model_id", type(emb).__name__))
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        hit = self._sentences.get(document_id)
        if hit is not None and hit[0] == (model, key):
            return hit[1], hit[2]
        sents = tuple(split_sentences(text))
        if not sents:
            return None
        vecs = self.db.read(lambda c: drift_sql.sentence_vectors(c, document_id, model, key))
        if vecs is None or vecs.shape != (len(sents), self.index.dimensions):
            vecs = _unit(np.asarray(emb.embed(list(sents)), dtype=np.float32))
            if vecs.shape[1] != self.index.dimensions:
                return None
            at = self._now()
            self.db.write(lambda c: drift_sql.put_sentence_vectors(c, document_id, model, key, vecs, at=at))
        self._sentences.put(document_id, ((model, key), sents, vecs))
        return sents, vecs

    def _drift(
        self, pairs: list[tuple[str, int, str, str]], threshold: float
    ) -> tuple[list[dict[str, Any]], list[tuple[str, str, Baseline]]]:
        """The drift rows of ``(memory id, seq, raw, document id)`` pairs (:meth:`Measure.drifted`:
        a similarity drop above ``threshold`` from the baseline, or a slot change), and the
        baselines to store for the pairs that have none (measured now: a first check against a
        document records where the claim stands, and scores nothing)."""
        measured = self.measure(pairs)
        model = self.model_id()
        slot_sim = self._settings().slot_similarity
        out: list[dict[str, Any]] = []
        fresh: list[tuple[str, str, Baseline]] = []
        titles: dict[str, str | None] = {}
        for (mid, _, raw, doc), m in zip(pairs, measured):
            if m is None:
                continue
            if m.baseline is None:
                fresh.append((mid, raw, m.as_baseline(model, doc, slot_sim)))
                continue
            if not m.drifted(threshold, slot_sim):
                continue
            if doc not in titles:
                titles[doc] = self.db.read(lambda c: drift_sql.document_title(c, doc))
            change = m.slot_change(slot_sim)
            out.append(
                {
                    "memory_id": mid,
                    "error_type": "memory_drift",
                    "target": doc,
                    "distance": m.drop,
                    "context": {
                        "document_id": doc,
                        "title": titles[doc],
                        "max_sim": m.similarity,
                        "baseline_similarity": m.baseline.similarity,
                        "baseline_document": m.baseline.document,
                        "threshold": threshold,
                        **({"slots": {"was": change[0], "now": change[1]}} if change else {}),
                    },
                }
            )
        return out, fresh

    # -- staleness sweep --------------------------------------------------------------------
    def sweep(self, project: str | None = None) -> dict[str, Any]:
        """Check every file reference (of one project root, or all): a missing file that git saw
        renamed gets its reference rewritten to the new path (its stale rows resolved); any other
        missing file marks the reference stale and writes a ``memory_stale_file`` row.

        Returns counts: ``checked``, ``missing``, ``renamed``, ``stale``, ``git`` (repositories
        read), and the ``renames`` / ``stale_files`` as ``[memory_id, old, new]`` /
        ``[memory_id, path, reason]``."""
        s = self._settings()
        rows = self.db.read(lambda c: drift_sql.file_references(c, project))
        by_root: dict[str, list[tuple[Reference, str]]] = {}
        for ref, root, created in rows:
            by_root.setdefault(root, []).append((ref, created))
        renames: list[list[str]] = []
        stale: list[list[str]] = []
        repos = 0
        for root, refs in by_root.items():
            missing = [(r, created) for r, created in refs if not os.path.exists(os.path.join(root, r.target))]
            if not missing:
                continue
            changes = None
            groot = git_root(root) if s.git else None
            if groot is not None:
                repos += 1
                changes = git_changes(groot, since=min(created for _, created in missing))
                prefix = os.path.relpath(os.path.realpath(root), os.path.realpath(groot)).replace(os.sep, "/")
                prefix = "" if prefix == "." else prefix + "/"
            for r, _ in missing:
                verdict, new = ("unknown", None)
                if changes is not None and groot is not None:
                    verdict, new = changes.final(prefix + r.target)
                    if new is not None and new.startswith(prefix) and os.path.exists(os.path.join(groot, new)):
                        new = new[len(prefix) :]
                    else:
                        new = None
                if verdict == "renamed" and new is not None:
                    renames.append([r.memory_id, r.target, new])
                else:
                    stale.append([r.memory_id, r.target, "was deleted (git)" if verdict == "deleted" else "is missing"])
        at = self._now()
        since = _minus_hours(at, s.debounce_hours)

        def job(conn):
            eids = []
            for mid, old, new in renames:
                drift_sql.rename_file(conn, mid, old, new)
                drift_sql.resolve_target(conn, mid, old, "memory_stale_file", at=at)
            for mid, path, reason in stale:
                drift_sql.mark_file_stale(conn, mid, path, reason=reason, at=at)
                eid, _ = drift_sql.record(
                    conn,
                    memory_id=mid,
                    error_type="memory_stale_file",
                    target=path,
                    distance=1.0,
                    context={"reason": reason},
                    at=at,
                    debounce_since=since,
                )
                eids.append(eid)
            return drift_sql.get_errors(conn, eids), drift_sql.references(conn, sorted({m for m, *_ in renames}))

        if renames or stale:
            errors, fresh = self.db.write(job)
            with self._lock:
                for mid in {m for m, *_ in renames}:
                    self._refs[mid] = tuple(x for x in fresh if x.memory_id == mid and x.kind in CHECKED_KINDS)
                    left = tuple(
                        f
                        for f in self._flags.get(mid, ())
                        if not (
                            f.error_type == "memory_stale_file"
                            and any(f.target == o for m2, o, _ in renames if m2 == mid)
                        )
                    )
                    if left:
                        self._flags[mid] = left
                    else:
                        self._flags.pop(mid, None)
            for e in errors:
                self._add_flag(e.memory_id, _flag(e))
        return {
            "checked": len(rows),
            "missing": len(renames) + len(stale),
            "renamed": len(renames),
            "stale": len(stale),
            "git": repos,
            "renames": renames,
            "stale_files": stale,
        }

    def session_started(self, project: str | None) -> None:
        """Count a session-start; the sweep runs (write-behind) every ``sweep_every_sessions``
        starts, and for a project at its first session in this process when it has had no
        earlier one."""
        s = self._settings()
        if self._closed or not s.enabled or s.sweep_every_sessions <= 0:
            return
        with self._lock:
            self._starts += 1
            every = self._starts % s.sweep_every_sessions == 0
            first = project is not None and project not in self._seen_projects
            if project is not None:
                self._seen_projects.add(project)
        if every or first:
            try:
                self._pool.submit(self._sweep_job, None if every else project, first and not every)
            except RuntimeError:
                pass

    def _sweep_job(self, project: str | None, only_if_new: bool) -> None:
        try:
            if only_if_new and self.db.read(lambda c: drift_sql.session_count(c, project)) > 1:
                return
            self.sweep(project)
        except Exception:
            log.exception("staleness sweep failed")

    # -- confidence propagation -------------------------------------------------------------
    def propagate(self, memory_id: str, new_confidence: float, *, store_source: bool = True) -> dict[str, float]:
        """Change a memory's confidence to ``new_confidence`` and propagate the change along its
        relations (:mod:`memlane.drift.propagation`), in one write transaction. With
        ``store_source`` False the memory's own row is left as it is (a flag whose penalty is
        applied at retrieval) and only its neighbours change.

        Returns ``memory id -> new confidence`` of every memory changed (the source included
        when stored).

        Raises:
            ValidationError: a confidence outside [0, 1]. NotFound: no live memory with that id.
        """
        if (
            isinstance(new_confidence, bool)
            or not isinstance(new_confidence, (int, float))
            or not 0.0 <= new_confidence <= 1.0
        ):
            raise ValidationError("confidence: a number in [0, 1]", details={"field": "confidence"})
        floor = self._settings().propagation_floor
        at = self._now()

        def job(conn):
            cur = drift_sql.confidences(conn, [memory_id]).get(memory_id)
            if cur is None:
                raise NotFound(f"memory {memory_id} not found")

            def neighbours(node):
                return [
                    (r.target_id if r.source_id == node else r.source_id, r.relation, r.weight)
                    for r in rel_sql.list_for(conn, node)
                ]

            changes = propagate(
                memory_id,
                cur,
                float(new_confidence),
                neighbours=neighbours,
                confidence=lambda m: drift_sql.confidences(conn, [m]).get(m),
                floor=floor,
            )
            if store_source:
                changes = {memory_id: float(new_confidence), **changes}
            drift_sql.set_confidence(conn, changes, at=at)
            return changes

        return self.db.write(job)

    def _propagate_flag(self, memory_id: str) -> None:
        """A new flag: the memory's neighbours feel the penalty its retrieval applies."""
        try:
            cur = self.db.read(lambda c: drift_sql.confidences(c, [memory_id])).get(memory_id)
            if cur is not None:
                self.propagate(memory_id, cur * (1.0 - self._settings().penalty), store_source=False)
        except Exception:
            log.exception("confidence propagation from %s failed", memory_id)

    # -- consumer surface -------------------------------------------------------------------
    def list(
        self,
        *,
        error_type: str | None = None,
        memory_id: str | None = None,
        resolved: bool | None = False,
        limit: int = 50,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Prediction errors, newest first, each with its ``memory`` sub-object.

        Raises:
            ValidationError: an unknown error type, limit outside [1, 1000] or a negative offset.
        """
        if error_type is not None and error_type not in drift_sql.ERROR_TYPES:
            raise ValidationError(
                f"error_type: one of {', '.join(drift_sql.ERROR_TYPES)}", details={"field": "error_type"}
            )
        if not 1 <= limit <= 1000 or offset < 0:
            raise ValidationError("limit must be in [1, 1000] and offset >= 0", details={"field": "limit"})
        rows = self.db.read(
            lambda c: drift_sql.list_errors(
                c, error_type=error_type, memory_id=memory_id, resolved=resolved, limit=limit, offset=offset
            )
        )
        return [{**e.as_dict(), "memory": m} for e, m in rows]

    def record_signal(self, memory_id: str, *, source: str, evidence: Any, weight: float = 1.0) -> dict[str, Any]:
        """Store external evidence that a memory is stale (a ``memory_external_signal`` row).

        Raises:
            ValidationError: empty or long source, evidence not a JSON object, weight outside [0, 10].
            NotFound: no live memory with that id.
        """
        if not isinstance(source, str) or not source.strip() or len(source) > 200:
            raise ValidationError("source: a non-empty string of at most 200 characters", details={"field": "source"})
        if not isinstance(evidence, dict):
            raise ValidationError("evidence: a JSON object", details={"field": "evidence"})
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight <= 10.0:
            raise ValidationError("weight: a number in [0, 10]", details={"field": "weight"})
        at = self._now()

        def job(conn):
            if not mem_sql.is_live(conn, memory_id):
                raise NotFound(f"memory {memory_id} not found")
            eid, _ = drift_sql.record(
                conn,
                memory_id=memory_id,
                error_type="memory_external_signal",
                target="",
                distance=float(weight),
                weight=float(weight),
                at=at,
                debounce_since=None,
                context={"source": source.strip(), "evidence": evidence},
                query=f"signal:{source.strip()}",
            )
            return drift_sql.get_errors(conn, [eid])[0]

        e = self.db.write(job)
        self._add_flag(memory_id, _flag(e))
        return e.as_dict()

    def resolve(self, error_id: int) -> bool:
        """Dismiss one open row (a false positive). Returns False when unknown or already resolved."""
        at = self._now()
        ok = self.db.write(lambda c: drift_sql.resolve(c, error_id, at=at))
        if ok:
            with self._lock:
                for mid, flags in list(self._flags.items()):
                    rest = tuple(f for f in flags if f.error_id != error_id)
                    if len(rest) != len(flags):
                        if rest:
                            self._flags[mid] = rest
                        else:
                            self._flags.pop(mid)
        return ok


def _unit(v: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    n = np.linalg.norm(v, axis=1)
    n[n == 0] = 1.0
    return v / n[:, None]


def _minus_hours(at: str, hours: float) -> str | None:
    """``at`` minus ``hours`` as a timestamp string; None for a zero window (no debounce)."""
    if hours <= 0:
        return None
    return to_iso(datetime.fromisoformat(at.replace("Z", "+00:00")) - timedelta(hours=hours))
