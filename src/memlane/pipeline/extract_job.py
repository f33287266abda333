"""The ``extract`` job handler: one memory through extraction, decisions and controlled writes
(memory-pipeline-v2.md "Worker Model", "Extraction Stage", "Decision Stage", "Controlled Writes").

The container registers :func:`make_handler`'s handler on its ``extraction`` JobWorkers. Per job, outside any transaction: read the source memory -> extract (LLM) -> embed the
facts -> decide per fact (hybrid candidates + LLM) -> contradiction checks; then one write
transaction (:func:`memlane.pipeline.writes.apply_writes`).

Outcomes: ``completed`` with the report as the job result; ``skipped`` (:class:`SkipJob`) when
there is no LLM provider (``extraction_status='skipped'``, recorded in history; the raw memory is
untouched and nothing blocks), the source is gone/deleted or is itself a derived memory; an LLM
failure raises (the worker retries with backoff) and on the last attempt marks the memory
``failed``. An attempt whose transaction committed but whose job completion was lost (crash in
between) is recognised by its ``extraction`` history row and not applied twice.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

from memlane.config import Settings
from memlane.config.clock import now_iso
from memlane.pipeline.decision import run_shadow_decisions
from memlane.pipeline.extraction import extract
from memlane.pipeline.jobs import DERIVED_SOURCE_TYPE
from memlane.pipeline.writes import WriteReport, apply_writes, assess_contradictions, prefetch_vectors, record_status
from memlane.providers.base import LlmError, LlmProvider
from memlane.services.memory_service import MemoryService
from memlane.storage import jobs as jobs_sql
from memlane.storage import memories as mem_sql
from memlane.storage import pipeline_audit as audit_sql
from memlane.storage.jobs import Job
from memlane.workers.runtime import CompletedInTransaction, SkipJob, lease_ahead_hook

NO_LLM_REASON = "no LLM provider configured"
#: Warnings kept in a job result (the full list is counted).
MAX_RESULT_WARNINGS = 50


def make_handler(
    memories: MemoryService,
    settings: Settings,
    llm_of: Callable[[], LlmProvider | None],
    *,
    now: Callable[[], str] = now_iso,
) -> Callable[[Job], dict[str, Any] | CompletedInTransaction]:
    """The ``extract`` handler.

    Args:
        memories: the memory service the facts are written through.
        settings: the daemon's settings; ``memory.pipeline_v2`` and ``recall`` are read per job
            (hot flags apply at once).
        llm_of: returns the extraction LLM (None: jobs are skipped).
        now: the clock for audit timestamps (ISO-8601 UTC).
    """

    def handle_extract(job: Job) -> dict[str, Any] | CompletedInTransaction:
        """Process one ``extract`` job. The writes and the job's completion (with its result)
        commit in one transaction; returns :class:`CompletedInTransaction` carrying that result
        (or the earlier attempt's summary when it had committed but its completion was lost).

        Raises:
            SkipJob: no LLM provider, source memory missing/deleted/derived.
            LlmError: the provider failed (retried by the worker).
        """
        pipeline = settings.memory.pipeline_v2
        memory_id = job.memory_id
        source = memories.db.read(lambda conn: mem_sql.get(conn, memory_id)) if memory_id else None
        if source is None:
            raise SkipJob("source memory not found")
        done = memories.db.read(lambda conn: audit_sql.job_summary(conn, source.id, job.id))
        if done is not None:  # an earlier attempt committed; only its job completion was lost
            if done.get("status") in ("skipped", "failed"):
                raise SkipJob(str(done.get("reason", done.get("status"))))
            return {**done, "replayed": True}
        if source.is_deleted:
            raise SkipJob("source memory deleted")  # its history ends with the deletion, nothing added
        if source.source_type == DERIVED_SOURCE_TYPE:
            reason = "derived memory (not re-extracted)"
            record_status(memories, source.id, job.id, "skipped", reason, now())
            raise SkipJob(reason)
        llm = llm_of()
        if llm is None:
            # Trigger: no LLM is configured (llm.provider none).
            # Why: the raw memory is already durable; extraction is an optional layer on top.
            # Outcome: recorded as skipped (extraction_status and the job's status and reason; no
            # history row, which would add one line to every memory's history), nothing blocks.
            record_status(memories, source.id, job.id, "skipped", NO_LLM_REASON, now(), audit=False)
            raise SkipJob(NO_LLM_REASON)
        timeout_s = pipeline.extraction.timeout / 1000.0
        model = getattr(llm, "name", type(llm).__name__)
        try:
            extraction = extract(llm, source.content, timeout_s=timeout_s)
            vectors = prefetch_vectors(memories, extraction.facts)
            decisions = run_shadow_decisions(
                llm,
                memories,
                settings.recall,
                extraction.facts,
                vectors,
                project=source.project,
                exclude_ids={source.id},
                timeout_s=timeout_s,
            )
        except LlmError as exc:
            if job.attempts >= job.max_attempts:
                record_status(
                    memories,
                    source.id,
                    job.id,
                    "failed",
                    f"{type(exc).__name__}: {exc}"[:500],
                    now(),
                    {"attempts": job.attempts},
                )
            raise
        assessments = assess_contradictions(decisions.proposals, pipeline, llm)
        warnings = extraction.warnings + decisions.warnings
        summary = {
            "warnings": warnings[:MAX_RESULT_WARNINGS],
            "warning_count": len(warnings),
            "llm_calls": 1 + decisions.llm_calls,
            "input_truncated": extraction.input_truncated,
            "proposals": dict(Counter(p.action for p in decisions.proposals)),
            "entities": [e.as_dict() for e in extraction.entities][:MAX_RESULT_WARNINGS],
        }

        def result_of(report: WriteReport) -> dict[str, Any]:
            return {
                "status": "shadow" if report.mode == "shadow" else "completed",
                "mode": report.mode,
                "model": model,
                "facts": len(extraction.facts),
                "entity_count": len(extraction.entities),
                "proposals": summary["proposals"],
                "outcomes": report.counts(),
                "created_ids": report.created_ids,
                "superseded_ids": report.superseded_ids,
                "review_needed": sum(bool(a and a.review_needed) for a in assessments),
                "graph_persisted": report.graph_persisted,
                "warnings": summary["warnings"],
                "warning_count": len(warnings),
                "llm_calls": summary["llm_calls"],
            }

        lease_next = lease_ahead_hook()

        def finish(conn: sqlite3.Connection, report: WriteReport) -> None:
            jobs_sql.complete(conn, job.id, now=now(), result=result_of(report))
            if lease_next is not None:  # the worker's next job, in this same transaction
                lease_next(conn)

        report = apply_writes(
            memories,
            source=source,
            job_id=job.id,
            extraction=extraction,
            proposals=decisions.proposals,
            assessments=assessments,
            pipeline=pipeline,
            vectors=vectors,
            extraction_model=model,
            at=now(),
            summary=summary,
            finish=finish,
        )
        return CompletedInTransaction(result_of(report))

    return handle_extract
