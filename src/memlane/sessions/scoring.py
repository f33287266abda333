"""Session-end scoring: the continuity score, the training labels and the predictor comparison.

predictive-memory-scorer.md "Training Signals" / "Success Rate Tracking": a session is scored
by the LLM continuity judge when one is configured and the transcript is long enough, else
from behaviour (agent feedback, prompt matches); every candidate row gets its label
(``sessions.labels``), and with a predictor the session's NDCG@10 comparison is prepared in
memory and written in the same transaction as the score and the labels. Labels are rebuilt
when a memory is deleted, superseded or recovered after the session ended.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from memlane.providers.base import LlmError, LlmProvider
from memlane.sessions import continuity, labels
from memlane.storage import jobs as jobs_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database, savepoint
from memlane.storage.models import Memory

log = logging.getLogger(__name__)


class SessionScorer:
    """Scores ended sessions and (re)builds their labels.

    Args:
        db: the store.
        llm: the continuity judge, or None (behavioural scoring only).
        predictor: the PredictorService, or None (no comparison).
    """

    def __init__(self, db: Database, llm: LlmProvider | None = None, predictor: Any = None) -> None:
        self.db = db
        self.llm = llm
        self.predictor = predictor

    def score_behavioral(
        self, key: str, now: str, note: str | None = None, summary: tuple[str, str] | None = None
    ) -> tuple[str, float, float, int]:
        """``(scorer, score, confidence, rows labelled)`` from behaviour: one read, labels and the
        predictor comparison in memory, one write.

        Args:
            note: appended to the stored reasoning (why no judge verdict).
            summary: ``(status, error)`` for the session's summary job, set in the same write
                (e.g. ``("skipped", "judge backlog full")``).
        """
        rows, sess, compare = self._read_for_labels(key)
        sigs, injected, outcome = self._behavioral(rows, sess, now)
        reasoning = "scored from behavioural signals (agent feedback, prompt matches); no LLM judge" + (
            f"; {note}" if note else ""
        )
        used = sum(1 for c in injected if (c.agent_score or 0) > 0 or c.fts_hit_count > 0)

        def write_score(c: sqlite3.Connection) -> None:
            sess_sql.write_score(
                c,
                key,
                score=outcome.score,
                confidence=outcome.confidence,
                memories_recalled=len(injected),
                memories_used=used,
                novel_context_count=0,
                reasoning=reasoning,
                scorer="behavioral",
                model=None,
                at=now,
            )
            if summary is not None:
                _finish_summary(c, key, summary[0], now, error=summary[1][:500])

        n = self._conclude(
            key, rows, sess, sigs, compare, labels.SessionOutcome(outcome.score, outcome.confidence, 0), write_score
        )
        return "behavioral", outcome.score, outcome.confidence, n

    def behavioral_preview(self, key: str, now: str) -> tuple[float, float]:
        """``(score, confidence)`` the behavioural scorer gives the session now; nothing is
        written (a session-end that stopped waiting for the judge answers with it)."""
        rows, sess = self.db.read(lambda c: (sess_sql.session_memories(c, key), sess_sql.get_session(c, key)))
        _, _, outcome = self._behavioral(rows, sess, now)
        return outcome.score, outcome.confidence

    def _behavioral(
        self, rows: list[sess_sql.SessionMemory], sess: sess_sql.SessionRow | None, now: str
    ) -> tuple[list[labels.CandidateSignals], list[labels.CandidateSignals], labels.SessionOutcome]:
        """Every row's signals, the injected rows' signals and the behavioural outcome."""
        sigs = [self._signals(r, sess.started_at if sess else now) for r in rows]
        injected = [c for r, c in zip(rows, sigs) if r.was_injected]
        return sigs, injected, labels.behavioral_outcome(injected)

    def score_llm(self, key: str, transcript: str, now: str) -> tuple[str, float, float, int]:
        """``(scorer, score, confidence, rows labelled)`` from the LLM judge; a failed judge falls
        back to :meth:`score_behavioral` (and marks the summary job failed)."""
        rows = self.db.read(lambda c: sess_sql.session_memories(c, key))
        injected = [continuity.JudgedMemory(r.memory_id, r.content) for r in rows if r.was_injected]
        prompt = continuity.build_prompt(injected, transcript)
        try:
            reply = self.llm.generate(prompt, schema=continuity.REPLY_SCHEMA)  # type: ignore[union-attr]
            result = continuity.parse_reply(reply, injected)
            if result is None:
                raise LlmError("the judge's reply held no JSON object")
        except LlmError as exc:  # fail open: behaviour scores the session
            log.warning("continuity judge failed for %s: %s", key, exc)
            error = str(exc)
            self.db.write(lambda c: _finish_summary(c, key, "failed", now, error=error[:500]))
            return self.score_behavioral(key, now, note=f"LLM judge failed: {error[:200]}")

        # Labels are built from the rows as they are now (the judge took a while), with the
        # judge's per-memory relevance in place of the stored one.
        rows, sess, compare = self._read_for_labels(key)
        rel = {m: float(v) for m, v in result.per_memory.items()}
        rows = [replace(r, relevance_score=rel[r.memory_id]) if r.memory_id in rel else r for r in rows]
        sigs = [self._signals(r, sess.started_at) for r in rows] if sess is not None else []

        def write_score(conn: sqlite3.Connection) -> None:
            sess_sql.write_relevance(conn, key, result.per_memory)
            sess_sql.write_score(
                conn,
                key,
                score=result.score,
                confidence=result.confidence,
                memories_recalled=len(injected),
                memories_used=result.memories_used,
                novel_context_count=result.novel_context_count,
                reasoning=result.reasoning,
                scorer="llm",
                model=self.llm.name,  # type: ignore[union-attr]
                at=now,
            )
            _finish_summary(conn, key, "completed", now, result={"score": result.score})

        n = self._conclude(
            key,
            rows,
            sess,
            sigs,
            compare,
            labels.SessionOutcome(result.score, result.confidence, result.novel_context_count),
            write_score,
        )
        return "llm", result.score, result.confidence, n

    def _read_for_labels(
        self, key: str
    ) -> tuple[list[sess_sql.SessionMemory], sess_sql.SessionRow | None, dict[str, Any] | None]:
        """One read for a session-end: the candidate rows, the session and, with a predictor,
        its comparison inputs (None when compared already). Waits first for a predictor ranking
        the session-start is still recording."""
        pred = self.predictor
        if pred is not None:
            pred.wait_recorded(key)
        return self.db.read(
            lambda c: (
                sess_sql.session_memories(c, key),
                sess_sql.get_session(c, key),
                pred.comparison_inputs(c, key) if pred is not None else None,
            )
        )

    def _conclude(
        self,
        key: str,
        rows: list[sess_sql.SessionMemory],
        sess: sess_sql.SessionRow | None,
        sigs: list[labels.CandidateSignals],
        compare: dict[str, Any] | None,
        outcome: labels.SessionOutcome,
        write_score: Any,
    ) -> int:
        """Labels and the predictor's comparison in memory, then ONE write: ``write_score``, the
        labels, the comparison row and the policy state. Returns the rows labelled.

        The comparison runs in a savepoint: a failure there is logged and rolls back only the
        comparison (the predictor never breaks a session-end).
        """
        out = []
        if sess is not None:
            for r, c in zip(rows, sigs):
                lab = labels.build_label(c, outcome)
                out.append((r.id, lab.raw, lab.value, lab.reasons))
        cmp = None
        if self.predictor is not None and compare is not None and sess is not None:
            try:
                cmp = self.predictor.prepare_comparison(
                    key,
                    rows,
                    {r.memory_id: labels.evaluation_relevance(c, outcome) for r, c in zip(rows, sigs)},
                    confidence=outcome.confidence,
                    project=sess.project,
                    signals=compare,
                )
            except Exception:  # the predictor never breaks a session-end
                log.exception("predictor comparison for %s failed", key)

        def job(conn: sqlite3.Connection) -> bool:
            write_score(conn)
            sess_sql.write_labels(conn, out)
            if cmp is None:
                return False
            try:
                with savepoint(conn, "memlane_comparison"):
                    self.predictor.write_comparison(conn, cmp)
            except Exception:
                log.exception("writing the predictor comparison of %s failed", key)
                return False
            return True

        if self.db.write(job) and cmp is not None:
            try:
                self.predictor.after_comparison(cmp)
            except Exception:
                log.exception("scheduling a retrain after %s failed", key)
        return len(out)

    # -- labels ---------------------------------------------------------------------------
    def _signals(self, r: sess_sql.SessionMemory, started_at: str) -> labels.CandidateSignals:
        deleted_in_window = False
        if r.was_injected and r.is_deleted and r.deleted_at:
            delta = _parse(r.deleted_at) - _parse(started_at)
            deleted_in_window = timedelta(0) <= delta <= timedelta(hours=labels.DELETED_WINDOW_HOURS)
        return labels.CandidateSignals(
            was_injected=r.was_injected,
            fts_hit_count=r.fts_hit_count,
            similarity=r.similarity,
            relevance=r.relevance_score,
            agent_score=r.agent_relevance_score,
            superseded=r.superseded_by is not None,
            deleted_within_window=deleted_in_window,
            access_count=r.access_count,
            edited_since_start=r.last_edited_at is not None and r.last_edited_at > started_at,
        )

    def relabel(self, session_key: str) -> int:
        """(Re)build the labels of a scored session from its current signals; returns rows labelled."""
        score = self.db.read(lambda c: sess_sql.get_score(c, session_key))
        sess = self.db.read(lambda c: sess_sql.get_session(c, session_key))
        if score is None or sess is None:
            return 0
        outcome = labels.SessionOutcome(score["score"], score["confidence"], score["novel_context_count"])
        rows = self.db.read(lambda c: sess_sql.session_memories(c, session_key))
        out = []
        for r in rows:
            lab = labels.build_label(self._signals(r, sess.started_at), outcome)
            out.append((r.id, lab.raw, lab.value, lab.reasons))
        self.db.write(lambda c: sess_sql.write_labels(c, out))
        return len(out)

    def on_memory_event(self, event: str, memory: Memory) -> None:
        """Memory-service listener: rebuild labels after a delete, supersede or recover."""
        # Trigger: a memory was deleted or superseded after sessions injected it.
        # Why: "deleted within 24 h of injection" (-0.5) and "superseded" (-0.3) are labels
        #      that can only be known after the session ended.
        # Outcome: the labels of the scored sessions that hold this memory are rebuilt.
        if event not in ("deleted", "superseded", "recovered"):
            return
        keys = self.db.read(lambda c: sess_sql.scored_sessions_holding(c, memory.id))
        for k in keys:
            try:
                self.relabel(k)
            except Exception:  # a label refresh must never fail the user's delete
                log.exception("relabel of %s after %s failed", k, event)


def _parse(ts: str) -> datetime:
    dt = datetime.fromisoformat(ts)
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _finish_summary(
    conn: sqlite3.Connection, key: str, status: str, at: str, *, result: dict | None = None, error: str | None = None
) -> None:
    job_id = jobs_sql.latest_id_for_session(conn, key, "session_summary")
    if job_id is not None:
        jobs_sql.finish(conn, job_id, status=status, at=at, result=result, error=error)
