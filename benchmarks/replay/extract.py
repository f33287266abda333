"""``memlane replay locomo --extract``: the pipeline v2 extraction over LoCoMo sessions through
the configured LLM provider (memory-pipeline-v2.md "Extraction Stage", "Decision Stage",
"Controlled Writes").

Each LoCoMo session (its turns joined, one ``speaker: text`` per line; cut to 12,000 chars by
extraction) is remembered as one raw memory in a fresh data directory (project = conversation
id), which enqueues its ``extract`` job; the extraction worker then drains the queue in this
thread. The report counts facts, entities, decisions by action, write outcomes (created,
deduped, skipped, ...), warnings and job statuses. With no LLM provider configured nothing is
run and the report says so (``provider: None``).
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlane.config import Settings, load_settings
from memlane.container import open_container
from memlane.ranker.locomo import load_locomo
from memlane.services.inputs import RememberInput
from memlane.storage import jobs as jobs_sql

NO_PROVIDER = (
    "no LLM provider configured: set llm.provider (ollama, openai or claude-code) in config.yaml "
    "or MEMLANE_LLM__PROVIDER, or memory.pipelineV2.extraction.provider"
)


def session_texts(
    data: Path, max_conversations: int | None = None, max_sessions: int | None = None
) -> list[tuple[str, int, str]]:
    """``(conversation id, session number, text)`` per LoCoMo session, in file order.

    Raises:
        ValueError: the file is not LoCoMo-shaped.
    """
    out = []
    for conv in load_locomo(data)[:max_conversations]:
        sessions: dict[int, list[str]] = {}
        for t in conv.turns:
            sessions.setdefault(t.session, []).append(t.text)
        for n in sorted(sessions)[:max_sessions]:
            out.append((conv.id, n, "\n".join(sessions[n])))
    return out


def run_extract_replay(
    data: Path,
    *,
    settings: Settings | None = None,
    keep: Path | None = None,
    max_conversations: int | None = None,
    max_sessions: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Run extraction over LoCoMo sessions; returns the report (see module doc).

    Args:
        settings: the configuration whose LLM is used (default: ``load_settings()``); its data
            directory is replaced by ``keep`` or a temporary one (the user's store is never touched).
        keep: data directory to create and keep.
        progress: ``progress(stage, done, total)`` after each job.

    Raises:
        ValueError: the file is not LoCoMo-shaped, or ``keep`` already holds a database.
        RuntimeError: the provider is configured but does not answer its probe.
    """
    base = settings or load_settings()
    sessions = session_texts(data, max_conversations, max_sessions)
    if keep is not None and (keep / "memories.db").exists():
        raise ValueError(f"{keep} already holds a database; choose a new directory")
    with tempfile.TemporaryDirectory(prefix="memlane-replay-extract-") as tmp:
        home = keep or Path(tmp)
        s = base.model_copy(update={"home": home})
        c = open_container(s)
        try:
            llm = c.extraction_llm
            report: dict[str, Any] = {
                "provider": getattr(llm, "name", None),
                "sessions": len(sessions),
                "mode": s.memory.pipeline_v2.mode(),
                "data_dir": str(keep) if keep else None,
            }
            if llm is None:
                return {**report, "message": NO_PROVIDER}
            if not llm.available():
                raise RuntimeError(f"LLM provider {llm.name} is configured but not reachable")
            t0 = time.perf_counter()
            ids = []
            for conv, n, text in sessions:
                ids.append(
                    c.memories.remember(RememberInput(content=text, project=conv, who="locomo", why=f"session {n}")).id
                )
            worker = c.workers.get("extraction")
            done = 0
            while worker.run_once() or worker.consecutive_failures:
                done += 1
                if progress:
                    progress("extraction jobs", done, len(ids))
                if done > len(ids) * 4:  # every job leased at most max_attempts times
                    break
            jobs = []
            for m in ids:
                j = c.db.read(lambda conn: jobs_sql.latest_for_memory(conn, m, "extract"))
                if j is not None:
                    jobs.append(j)
            report.update(_totals(jobs), seconds=time.perf_counter() - t0)
            report["derived_memories"] = c.memories.stats()["total"] - len(ids)
            return report
        finally:
            c.close()


def _totals(jobs: list[jobs_sql.Job]) -> dict[str, Any]:
    status = Counter(j.status for j in jobs)
    decisions: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    facts = entities = warnings = llm_calls = 0
    for j in jobs:
        r = j.result or {}
        facts += r.get("facts", 0)
        entities += r.get("entity_count", 0)
        warnings += r.get("warning_count", 0)
        llm_calls += r.get("llm_calls", 0)
        decisions.update(r.get("proposals", {}))
        outcomes.update({k: v for k, v in r.get("outcomes", {}).items() if v})
    errors = Counter((j.error or "")[:120] for j in jobs if j.status in ("dead", "pending", "skipped"))
    return {
        "jobs": dict(status),
        "facts": facts,
        "entities": entities,
        "decisions": dict(decisions),
        "outcomes": dict(outcomes),
        "deduped": outcomes.get("deduped", 0),
        "warnings": warnings,
        "llm_calls": llm_calls,
        "errors": dict(errors.most_common(5)),
    }


def render(report: dict[str, Any]) -> list[str]:
    """The report as short text lines for the CLI."""
    if report.get("provider") is None:
        return [f"extraction not run: {report['message']}"]
    return [
        f"extraction over {report['sessions']} LoCoMo sessions with {report['provider']} "
        f"(mode {report['mode']}) in {report['seconds']:.1f} s: jobs {report['jobs']}",
        f"facts: {report['facts']}, entities: {report['entities']}, LLM calls: {report['llm_calls']}, "
        f"warnings: {report['warnings']}",
        f"decisions: {report['decisions']}; outcomes: {report['outcomes']}; deduped: {report['deduped']}; "
        f"derived memories: {report['derived_memories']}",
        *([f"errors: {report['errors']}"] if report["errors"] else []),
    ]
