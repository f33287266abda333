"""Timelines: what happened to one session or one memory, in order
(predictive-memory-scorer.md "4.4 Timeline Integration").

Each event is ``{"at": ISO-8601 UTC, "source", "event", "details"}``; sources are ``session``,
``memory`` (history rows), ``job``, ``predictor``, ``checkpoint`` and ``label``. A session's
timeline has its start and injections, the predictor's ``scored`` event (candidates, top pick,
alpha), FTS hits on prompts (``fts_only`` candidates), checkpoints, the memories recorded in it,
its jobs, its end, its continuity score, and the predictor's ``comparison`` and
``fts_overlap`` events. A memory's has its history (created, updated, deleted, recovered,
superseded, pipeline proposals), its jobs and every session that had it as a candidate
(``candidate`` / ``injected``, then ``labelled`` with the training label when scored).
Events at the same instant keep that order.
"""

from __future__ import annotations

import json
from typing import Any

from memlane.errors import NotFound
from memlane.storage import dashboard as dash_sql
from memlane.storage.db import Database


def _ev(at: str | None, source: str, event: str, **details: Any) -> dict[str, Any] | None:
    return None if not at else {"at": at, "source": source, "event": event, "details": details}


def session_timeline(events: dict[str, Any]) -> list[dict[str, Any]]:
    """The ordered events of a session from :func:`memlane.storage.dashboard.session_events`."""
    s = events["session"]
    out: list[dict[str, Any] | None] = [
        _ev(
            s["started_at"],
            "session",
            "started",
            project=s["project"],
            candidates=s["candidate_count"],
            injected=s["injected_count"],
            predictor_state=s["predictor_state"],
        )
    ]
    cands = events["candidates"]
    pooled = [c for c in cands if c["source"] != "fts_only"]
    injected = [c["memory_id"] for c in pooled if c["was_injected"]]
    if pooled:
        out.append(
            _ev(
                s["started_at"], "session", "injected", memory_ids=injected, count=len(injected), candidates=len(pooled)
            )
        )
    ranked = [c for c in pooled if c["predictor_rank"] is not None]
    if ranked:
        top = min(ranked, key=lambda c: c["predictor_rank"])
        out.append(
            _ev(
                s["started_at"],
                "predictor",
                "scored",
                candidates=len(ranked),
                top_pick=top["memory_id"],
                alpha=events["signals"].get("alpha"),
                model_version=events["signals"].get("model_version"),
            )
        )
    for c in cands:
        if c["source"] == "fts_only":
            out.append(_ev(c["created_at"], "session", "fts_hit", memory_id=c["memory_id"], hits=c["fts_hit_count"]))
    for cp in events["checkpoints"]:
        out.append(_ev(cp["created_at"], "checkpoint", cp["trigger"], id=cp["id"], prompt_count=cp["prompt_count"]))
    for m in events["memories"]:
        out.append(_ev(m["created_at"], "memory", "recorded", memory_id=m["id"], type=m["type"]))
    out.extend(_job_events(events["jobs"]))
    out.append(_ev(s["ended_at"], "session", "ended", prompts=s["prompt_count"]))
    sc = events["score"]
    if sc:
        labelled = sum(1 for c in cands if c["label"] is not None)
        out.append(
            _ev(
                sc["created_at"],
                "session",
                "scored",
                score=sc["score"],
                confidence=sc["confidence"],
                scorer=sc["scorer"],
                novel_context_count=sc["novel_context_count"],
                labelled=labelled,
                reasoning=(sc["reasoning"] or "")[:500],
            )
        )
    cmp = events["comparison"]
    if cmp:
        out.append(
            _ev(
                cmp["created_at"],
                "predictor",
                "comparison",
                predictor_ndcg=cmp["predictor_ndcg"],
                baseline_ndcg=cmp["baseline_ndcg"],
                predictor_won=cmp["predictor_won"],
                margin=cmp["margin"],
                success_rate=cmp["success_rate"],
                alpha=cmp["alpha"],
            )
        )
        if cmp["fts_overlap_score"] is not None:
            matched = sum(1 for c in pooled if c["was_injected"] and c["fts_hit_count"] > 0)
            out.append(
                _ev(
                    cmp["created_at"],
                    "predictor",
                    "fts_overlap",
                    injected_matched=matched,
                    injected_total=len(injected),
                    fts_only_inserts=len(cands) - len(pooled),
                    score=cmp["fts_overlap_score"],
                )
            )
    return _ordered(out)


def memory_timeline(events: dict[str, Any]) -> list[dict[str, Any]]:
    """The ordered events of a memory from :func:`memlane.storage.dashboard.memory_events`."""
    out: list[dict[str, Any] | None] = []
    for h in events["history"]:
        try:
            changes = json.loads(h["changes"]) if h["changes"] else {}
        except ValueError:
            changes = {}
        out.append(
            _ev(
                h["created_at"],
                "memory",
                h["event"],
                who=h["who"],
                why=h["why"],
                changed=sorted(changes)[:20] if isinstance(changes, dict) else [],
            )
        )
    out.extend(_job_events(events["jobs"]))
    for s in events["sessions"]:
        out.append(
            _ev(
                s["started_at"],
                "session",
                "injected" if s["was_injected"] else "candidate",
                session_key=s["session_key"],
                rank=s["rank"],
                pool_source=s["source"],
                fts_hits=s["fts_hit_count"],
            )
        )
        if s["label"] is not None:
            reasons = json.loads(s["label_reason"]) if s["label_reason"] else []
            out.append(
                _ev(
                    s["scored_at"] or s["started_at"],
                    "label",
                    "labelled",
                    session_key=s["session_key"],
                    label=s["label"],
                    reasons=reasons,
                )
            )
    return _ordered(out)


def _ordered(events: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    kept = [e for e in events if e is not None]
    return sorted(kept, key=lambda e: e["at"])  # stable: same-instant events keep their order


def timeline(db: Database, key: str) -> dict[str, Any]:
    """The timeline of the session with this key, else of the memory with this id.

    Returns:
        ``{"kind": "session" | "memory", "key", "events": [...]}``.
    Raises:
        NotFound: no session and no memory has this key.
    """

    def read(c: Any) -> tuple[str, dict[str, Any]] | None:
        if dash_sql.session_exists(c, key):
            return "session", dash_sql.session_events(c, key)
        if dash_sql.memory_exists(c, key):
            return "memory", dash_sql.memory_events(c, key)
        return None

    found = db.read(read)
    if found is None:
        raise NotFound(f"no session or memory {key!r:.80}", details={"key": key[:80]})
    kind, events = found
    return {
        "kind": kind,
        "key": key,
        "events": session_timeline(events) if kind == "session" else memory_timeline(events),
    }


def _job_events(jobs: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """Each job's ``enqueued`` event and, once it left the queue, its outcome event
    (None where a time is missing, as :func:`_ev`)."""
    out: list[dict[str, Any] | None] = []
    for j in jobs:
        out.append(_ev(j["created_at"], "job", "enqueued", id=j["id"], job_type=j["job_type"]))
        if j["status"] not in ("pending", "leased"):
            out.append(
                _ev(
                    j["updated_at"],
                    "job",
                    j["status"],
                    id=j["id"],
                    job_type=j["job_type"],
                    attempts=j["attempts"],
                    error=j["error"],
                )
            )
    return out
