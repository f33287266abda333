"""Controlled writes: apply (or only record) one memory's proposals in ONE write transaction
(memory-pipeline-v2.md "Pipeline Modes", "Controlled Writes", "Semantic Contradiction Detection").

Two phases, never an LLM or embedding call under the write lock:

1. outside: :func:`prefetch_vectors` embeds every fact (cached by content hash) and
   :func:`assess_contradictions` runs the syntactic detector (and, when enabled, the semantic
   LLM check with its timeout) on UPDATE/DELETE proposals;
2. inside :func:`apply_writes` (one ``Database.write``): per proposal, by mode --

   * ``shadow`` (shadowMode or mutationsFrozen): nothing is written to memories; the proposal is audited;
   * NONE: recorded; UPDATE/DELETE without allowUpdateDelete: ``blocked``;
   * ADD (and, in full mode, UPDATE/DELETE) through the gates: fact confidence below
     ``extraction.min_confidence`` (0.7) -> ``skipped/low_fact_confidence``; empty normalized content
     -> ``skipped/empty_fact_content``; same content_hash as a live memory -> ``deduped`` (checked
     first, and again on a UNIQUE collision); else a new memory (source_type ``pipeline_v2``,
     who ``pipeline-v2``, why ``extracted-fact``, linked by source_id/metadata to the source),
     created by ``MemoryService.create_in_tx``, the create path of remember and import.
   * Beyond the seed, full mode never overwrites or deletes: UPDATE/DELETE create the fact as a new
     memory and mark the target ``superseded_by`` it (the target row and its history stay).

   Every proposal gets a ``proposal`` history row on the source memory (action, outcome, reason,
   fact, confidences, target, model, counts, reviewNeeded), one ``extraction`` row summarises the
   job, ``extraction_status`` becomes ``completed`` or ``shadow``, and extracted entities go to the
   knowledge graph (``memlane.graph.store.persist_extraction``) when that module exists.

The index and listeners follow after the commit (``MemoryService.after_commit``).
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlane.config.pipeline import PipelineV2Settings
from memlane.errors import Conflict, EmbeddingError
from memlane.graph.store import persist_extraction as _persist_graph
from memlane.normalize import normalize_and_hash
from memlane.pipeline.contradiction import (
    MIN_SEMANTIC_OVERLAP,
    overlap,
    semantic_contradiction,
    syntactic_contradiction,
)
from memlane.pipeline.decision import DESTRUCTIVE, Proposal
from memlane.pipeline.extraction import ExtractionResult, Fact
from memlane.pipeline.jobs import DERIVED_SOURCE_TYPE
from memlane.providers.base import LlmProvider
from memlane.recall.memory_index import IndexEntry
from memlane.services.memory_service import MemoryService, supersede_in_tx
from memlane.storage import embeddings as emb_sql
from memlane.storage import memories as mem_sql
from memlane.storage import pipeline_audit as audit_sql
from memlane.storage.models import Memory, NewMemory

log = logging.getLogger(__name__)

WHO = "pipeline-v2"
WHY = "extracted-fact"
OUTCOMES = ("created", "deduped", "skipped", "recorded", "blocked", "superseded", "shadow")


@dataclass(frozen=True, slots=True)
class Assessment:
    """Contradiction checks of one destructive proposal: ``syntactic`` is the detector's reason or None."""

    syntactic: str | None = None
    semantic: dict[str, Any] | None = None

    @property
    def review_needed(self) -> bool:
        return self.syntactic is not None or bool(self.semantic and self.semantic.get("contradicts"))


@dataclass(slots=True)
class WriteReport:
    """What :func:`apply_writes` did: one outcome per proposal, plus the ids it created and superseded."""

    mode: str
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    created_ids: list[str] = field(default_factory=list)
    superseded_ids: list[str] = field(default_factory=list)
    graph_persisted: bool = False
    #: persist_extraction's counts (entities, relations_created...), when the graph ran.
    graph: dict[str, Any] | None = None

    def counts(self) -> dict[str, int]:
        """Proposals per outcome (every key of :data:`OUTCOMES`)."""
        c = {k: 0 for k in OUTCOMES}
        for o in self.outcomes:
            c[o["outcome"]] += 1
        return c


def prefetch_vectors(memories: MemoryService, facts: Sequence[Fact]) -> dict[str, np.ndarray]:
    """content_hash -> float32 [d] embedding of each fact, stored ones read, the rest embedded in one
    batch, outside any transaction (seed: "pre-fetches embeddings ... outside the transaction lock").
    An embedding failure returns what is known (facts without a vector use BM25 only, are stored unembedded)."""
    emb = memories.embedder
    if emb is None or not facts:
        return {}
    texts: dict[str, str] = {}
    for f in facts:
        nc = normalize_and_hash(f.content)
        if nc.storage_content:
            texts.setdefault(nc.content_hash, nc.storage_content)
    have = memories.db.read(lambda c: emb_sql.get_vectors(c, list(texts), emb.model_id))
    missing = [(h, t) for h, t in texts.items() if h not in have]
    out = dict(have)
    if missing:
        try:
            for (h, _), v in zip(missing, emb.embed([t for _, t in missing])):
                out[h] = np.asarray(v, dtype=np.float32)
        except EmbeddingError as exc:
            log.warning("fact embedding failed; %d facts use BM25 only: %s", len(missing), exc)
    return out


def assess_contradictions(
    proposals: Sequence[Proposal], pipeline: PipelineV2Settings, llm: LlmProvider | None
) -> list[Assessment | None]:
    """One entry per proposal (None unless UPDATE/DELETE with a target): the syntactic detector, then
    for UPDATE with overlap >= 3 tokens and no syntactic hit, the semantic LLM check when
    ``semanticContradictionEnabled`` (timeout ``semanticContradictionTimeoutMs``). Advisory only."""
    out: list[Assessment | None] = []
    for p in proposals:
        if p.action not in DESTRUCTIVE or not p.target_content:
            out.append(None)
            continue
        syn = syntactic_contradiction(p.fact.content, p.target_content)
        sem = None
        if (
            syn is None
            and p.action == "UPDATE"
            and llm is not None
            and pipeline.semantic_contradiction_enabled
            and overlap(p.fact.content, p.target_content) >= MIN_SEMANTIC_OVERLAP
        ):
            sem = semantic_contradiction(
                llm, p.fact.content, p.target_content, timeout_ms=pipeline.semantic_contradiction_timeout_ms
            ).as_dict()
        out.append(Assessment(syn, sem))
    return out


def _new_memory(
    source: Memory,
    fact: Fact,
    nc: Any,
    model: str | None,
    embedded: bool,
    job_id: int,
    extraction_model: str,
    target_id: str | None,
    at: str,
) -> NewMemory:
    meta = {
        "source_memory_id": source.id,
        "extraction_model": extraction_model,
        "fact_type": fact.type,
        "job_id": job_id,
    }
    if target_id:
        meta["supersedes"] = target_id
    return NewMemory(
        id=str(uuid.uuid4()),
        type=fact.type,
        content=nc.storage_content,
        normalized_content=nc.normalized_content,
        content_hash=nc.content_hash,
        context=None,
        context_hash=None,
        importance=source.importance,
        confidence=fact.confidence,
        project=source.project,
        tags=tuple(source.tags),
        metadata=meta,
        who=WHO,
        why=WHY,
        source_type=DERIVED_SOURCE_TYPE,
        source_id=source.id,
        created_at=at,
        pinned=False,
        embedding_model=model if embedded else None,
    )


def apply_writes(
    memories: MemoryService,
    *,
    source: Memory,
    job_id: int,
    extraction: ExtractionResult,
    proposals: Sequence[Proposal],
    assessments: Sequence[Assessment | None],
    pipeline: PipelineV2Settings,
    vectors: dict[str, np.ndarray],
    extraction_model: str,
    at: str,
    summary: dict[str, Any],
    finish: Callable[[sqlite3.Connection, WriteReport], None] | None = None,
) -> WriteReport:
    """Apply or record ``proposals`` of the memory ``source`` in one write transaction (see module doc).

    Args:
        vectors: content_hash -> float32 [d], from :func:`prefetch_vectors` (upserted with new memories).
        assessments: from :func:`assess_contradictions`, aligned with ``proposals``.
        summary: extra keys stored on the job's ``extraction`` history row (warnings, llm_calls...).
        finish: called last inside the same transaction with the finished report (the extract
            handler completes its job there, so effects and completion commit together).
    Returns:
        the report; the index and listeners are already in step when it returns.
    """
    mode = pipeline.mode()
    model = memories.embedder.model_id if memories.embedder is not None else None
    report = WriteReport(mode)
    base = {
        "job_id": job_id,
        "mode": mode,
        "source_memory_id": source.id,
        "extraction_model": extraction_model,
        "fact_count": len(extraction.facts),
        "entity_count": len(extraction.entities),
    }

    def job(conn: sqlite3.Connection) -> tuple[list[IndexEntry], list[Memory]]:
        entries: list[IndexEntry] = []
        superseded: list[Memory] = []

        def create(fact: Fact, nc: Any, target_id: str | None) -> str | None:
            new = _new_memory(
                source, fact, nc, model, nc.content_hash in vectors, job_id, extraction_model, target_id, at
            )
            try:
                entry = memories.create_in_tx(
                    conn, new, at=at, vectors=vectors, history_changes={"source_memory_id": source.id, "job_id": job_id}
                )
            except Conflict:  # a live twin appeared: the defensive dedup of the seed
                return None
            if new.embedding_model and model:
                emb_sql.upsert(conn, [(nc.content_hash, vectors[nc.content_hash])], model, at)
            entries.append(entry)
            report.created_ids.append(new.id)
            return new.id

        def supersede(target_id: str, new_id: str) -> bool:
            t = mem_sql.get(conn, target_id)
            if t is None or t.is_deleted or t.superseded_by is not None or t.id == new_id:
                return False
            superseded.append(supersede_in_tx(conn, target_id, new_id, who=WHO, why=WHY, at=at))
            report.superseded_ids.append(target_id)
            return True

        for p, a in zip(proposals, assessments):
            fact, nc = p.fact, normalize_and_hash(p.fact.content)
            memory_id: str | None = None
            if mode == "shadow":
                outcome, reason = "shadow", ("mutations_frozen" if pipeline.mutations_frozen else "shadow_mode")
            elif p.action == "NONE":
                outcome, reason = "recorded", "no_action"
            elif p.action in DESTRUCTIVE and not pipeline.destructive_allowed:
                outcome, reason = "blocked", "destructive_mutations_blocked"
            elif fact.confidence < pipeline.extraction.min_confidence:
                outcome, reason = "skipped", "low_fact_confidence"
            elif not nc.normalized_content.strip():
                outcome, reason = "skipped", "empty_fact_content"
            else:
                existing = mem_sql.find_live_by_hash(conn, nc.content_hash)
                memory_id = existing.id if existing is not None else create(fact, nc, p.target_id)
                if memory_id is None:  # UNIQUE collision: dedup again, defensively
                    existing = mem_sql.find_live_by_hash(conn, nc.content_hash)
                    memory_id = existing.id if existing is not None else None
                if existing is not None:
                    outcome, reason = "deduped", "duplicate_content"
                elif memory_id is None:
                    outcome, reason = "skipped", "insert_conflict"
                else:
                    outcome, reason = "created", "applied"
                if p.action in DESTRUCTIVE and p.target_id and memory_id and supersede(p.target_id, memory_id):
                    outcome, reason = "superseded", f"{p.action.lower()}_superseded_target"
            row = {
                **base,
                "action": p.action,
                "outcome": outcome,
                "reason": reason,
                "fact_type": fact.type,
                "fact_confidence": fact.confidence,
                "decision_confidence": p.confidence,
                "decision_reason": p.reason,
                "target_id": p.target_id,
                "memory_id": memory_id,
                "candidate_ids": list(p.candidate_ids),
                "review_needed": bool(a and a.review_needed),
                "contradiction": ({"syntactic": a.syntactic, "semantic": a.semantic} if a else None),
            }
            audit_sql.add_event(
                conn,
                source.id,
                "proposal",
                changes=row,
                at=at,
                old_content=p.target_content,
                new_content=fact.content,
                who=WHO,
                why=reason,
            )
            report.outcomes.append(row)
        if mode != "shadow" and pipeline.graph.enabled and extraction.entities:
            graph = _persist_graph(
                conn,
                memory_id=source.id,
                entities=[{"name": n} for n in extraction.entity_names()],
                relations=[e.as_dict() for e in extraction.entities],
                at=at,
            )
            report.graph_persisted = not (isinstance(graph, dict) and graph.get("error"))
            report.graph = graph if isinstance(graph, dict) else None
        status = "shadow" if mode == "shadow" else "completed"
        audit_sql.add_event(
            conn,
            source.id,
            "extraction",
            at=at,
            who=WHO,
            why=status,
            changes={
                **base,
                **summary,
                "status": status,
                "outcomes": report.counts(),
                "created_ids": report.created_ids,
                "superseded_ids": report.superseded_ids,
                "graph_persisted": report.graph_persisted,
                "graph": report.graph,
            },
        )
        audit_sql.set_extraction_status(conn, source.id, status)
        if finish is not None:
            finish(conn, report)
        return entries, superseded

    entries, superseded = memories.db.write(job)
    memories.after_commit(created=entries, superseded=superseded)
    return report


def record_status(
    memories: MemoryService,
    source_id: str,
    job_id: int,
    status: str,
    reason: str,
    at: str,
    extra: dict[str, Any] | None = None,
    audit: bool = True,
) -> None:
    """Without proposals: set ``extraction_status`` (``skipped`` / ``failed``) and, with ``audit``,
    add the job's ``extraction`` history row with the reason, in one write transaction."""

    def job(conn: sqlite3.Connection) -> None:
        if mem_sql.get(conn, source_id) is None:
            return
        if audit:
            audit_sql.add_event(
                conn,
                source_id,
                "extraction",
                at=at,
                who=WHO,
                why=reason,
                changes={"job_id": job_id, "status": status, "reason": reason, **(extra or {})},
            )
        audit_sql.set_extraction_status(conn, source_id, status)

    memories.db.write(job)
