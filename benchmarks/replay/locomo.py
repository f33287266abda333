"""``memlane replay locomo``: drive the session lifecycle over HTTP with LoCoMo.

Through a real daemon (started on a fresh data directory unless a URL is given):

1. Each LoCoMo session is an agent session of project ``locomo/{conversation}``, dated at the
   session's date: session-start; each turn of the first speaker is a prompt
   (user-prompt-submit); the session's turns are remembered (batch, with the two preceding
   turns as context); session-end with the session's transcript.
2. Each question is its own short session dated just after the last session: session-start,
   the question as the prompt, then agent feedback that rates every memory shown in that
   session (injected at start or recalled on the prompt) 1.0 if it is one of the question's
   evidence turns and 0.0 otherwise, as an agent that used them would; then session-end.

Prints per-phase latencies and what session_memories, labels and scores now hold: the
training data of the predictor.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from benchmarks.daemon import free_port, start_daemon
from benchmarks.metrics import latency_summary
from memlane.auth import auth_headers
from memlane.config import default_home
from memlane.config.clock import to_iso
from memlane.ranker.locomo import Conversation, load_locomo

#: Remember batches per LoCoMo session are sent in one request.
CONTEXT_TURNS = 2


@dataclass
class Timings:
    """Per-phase client-side latencies, ms."""

    phases: dict[str, list[float]] = field(default_factory=dict)

    def add(self, phase: str, ms: float) -> None:
        self.phases.setdefault(phase, []).append(ms)

    def report(self) -> dict[str, Any]:
        return {k: latency_summary(v) for k, v in self.phases.items() if v}


class _Driver:
    def __init__(self, http: httpx.Client, timings: Timings) -> None:
        self.http = http
        self.t = timings

    def post(self, phase: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        r = self.http.post(path, json=body)
        self.t.add(phase, (time.perf_counter() - start) * 1000)
        if r.status_code >= 400:
            raise RuntimeError(f"{path} answered {r.status_code}: {r.text[:300]}")
        return r.json()


def replay_conversation(d: _Driver, conv: Conversation, *, max_questions: int | None = None) -> dict[str, int]:
    """Replay one conversation's sessions and questions; returns counts."""
    project = f"locomo/{conv.id}"
    speaker = conv.turns[0].speaker if conv.turns else ""
    dia_of: dict[str, str] = {}
    counts = {"sessions": 0, "prompts": 0, "question_sessions": 0, "ratings": 0, "evidence_shown": 0}
    by_session: dict[int, list] = {}
    for t in conv.turns:
        by_session.setdefault(t.session, []).append(t)
    for n in sorted(by_session):
        turns = by_session[n]
        key = f"{conv.id}-s{n}"
        now = to_iso(turns[0].timestamp)
        d.post(
            "session_start",
            "/api/hooks/session-start",
            {"session_key": key, "project": project, "harness": "replay", "now": now},
        )
        for t in turns:
            if t.speaker == speaker:
                d.post(
                    "prompt_submit",
                    "/api/hooks/user-prompt-submit",
                    {"session_key": key, "project": project, "prompt": t.text, "now": to_iso(t.timestamp)},
                )
                counts["prompts"] += 1
        batch = [
            {
                "content": t.text,
                "project": project,
                "type": "dialogue",
                "created_at": to_iso(t.timestamp),
                "metadata": {"dia_id": t.dia_id, "session": t.session},
                "source_type": "session",
                "source_id": key,
                "who": "replay",
                "context": " ".join(p.text for p in turns[max(0, i - CONTEXT_TURNS) : i]) or None,
            }
            for i, t in enumerate(turns)
        ]
        res = d.post("remember", "/api/memory/remember", {"memories": batch})
        for item, r in zip(batch, res["results"]):
            dia_of.setdefault(r["id"], item["metadata"]["dia_id"])
        d.post(
            "session_end",
            "/api/hooks/session-end",
            {
                "session_key": key,
                "project": project,
                "now": to_iso(turns[-1].timestamp),
                "transcript": "\n".join(t.text for t in turns),
                "wait": True,
            },
        )
        counts["sessions"] += 1
    after = conv.last_timestamp + timedelta(seconds=1)
    questions = conv.questions[:max_questions] if max_questions else conv.questions
    for q in questions:
        key = f"{conv.id}-q{q.index}"
        now = to_iso(after)
        start = d.post(
            "session_start",
            "/api/hooks/session-start",
            {"session_key": key, "project": project, "harness": "replay", "now": now, "context": q.question},
        )
        prompt = d.post(
            "prompt_submit",
            "/api/hooks/user-prompt-submit",
            {"session_key": key, "project": project, "prompt": q.question, "now": now},
        )
        shown = [m["id"] for m in start["injected"]] + prompt["injected"]
        evidence = set(q.evidence)
        rating = {mid: (1.0 if dia_of.get(mid) in evidence else 0.0) for mid in dict.fromkeys(shown)}
        counts["evidence_shown"] += sum(1 for v in rating.values() if v > 0)
        if rating:
            fb = d.post("feedback", "/api/sessions/feedback", {"session_key": key, "memory_feedback": rating})
            counts["ratings"] += fb["applied"]
        d.post(
            "session_end",
            "/api/hooks/session-end",
            {
                "session_key": key,
                "project": project,
                "now": now,
                "wait": True,
                "transcript": f"user: {q.question}\nassistant: {q.answer or ''}",
            },
        )
        counts["question_sessions"] += 1
    return counts


def run_replay(
    data: Path,
    *,
    url: str | None = None,
    max_conversations: int | None = None,
    max_questions: int | None = None,
    keep: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Replay LoCoMo through a daemon; returns timings, counts and the sessions summary.

    Args:
        url: an already running daemon; default: start one on a fresh data directory (``keep``
            to keep that directory, e.g. to train the predictor on it next).

    Raises:
        ValueError: the file is not LoCoMo-shaped. RuntimeError: the daemon failed.
    """
    convs = load_locomo(data)[:max_conversations] if max_conversations else load_locomo(data)
    tmp = None
    proc = None
    home: Path | None = None
    if url is None:
        if keep is None:
            tmp = tempfile.TemporaryDirectory(prefix="memlane-replay-")
        home = keep or Path(tmp.name)  # type: ignore[union-attr]
        home.mkdir(parents=True, exist_ok=True)
        port = free_port()
        proc = start_daemon(home, port)
        url = f"http://127.0.0.1:{port}"
    timings = Timings()
    totals: dict[str, int] = {}
    t0 = time.perf_counter()
    try:
        with httpx.Client(
            base_url=url, timeout=300, headers=auth_headers(home if home is not None else default_home())
        ) as http:
            d = _Driver(http, timings)
            for i, conv in enumerate(convs):
                counts = replay_conversation(d, conv, max_questions=max_questions)
                for k, v in counts.items():
                    totals[k] = totals.get(k, 0) + v
                if progress:
                    progress(f"replayed {conv.id}", i + 1, len(convs))
            summary = http.get("/api/sessions/summary").json()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except Exception:
                proc.kill()
        if tmp is not None:
            tmp.cleanup()
    return {
        "conversations": len(convs),
        "seconds": time.perf_counter() - t0,
        "counts": totals,
        "latency_ms": timings.report(),
        "sessions": summary,
        "data_dir": str(keep) if keep else None,
    }
