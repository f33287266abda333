"""Session-end over real SQLite stores with a real loopback HTTP server speaking the OpenAI
(``POST /v1/chat/completions``) and Ollama (``POST /api/generate``) protocols as the continuity
judge: Phase 0 verification items 3, 6 and 7, transcripts, the summary job, behavioural
scoring, judge failures (fail open), clamping, labels and the negative signals."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memlane.providers import OllamaProvider, OpenAICompatProvider
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import EndInput, PromptInput, StartInput
from memlane.sessions.service import SessionService
from memlane.storage import jobs as jobs_sql
from memlane.storage import sessions as sess_sql

# ------------------------------------------------------------------ the loopback judge


@dataclass
class Reply:
    """One scripted answer: ``text`` is wrapped in the protocol's JSON; ``raw`` is sent as is."""

    text: str | None = None
    status: int = 200
    raw: bytes | None = None
    delay_s: float = 0.0
    gate: threading.Event | None = None


@dataclass
class Judge:
    url: str = ""
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    @property
    def prompts(self) -> list[str]:
        return [r["prompt"] for r in self.requests]

    def openai(self, **kw: Any) -> dict[str, Any]:
        return {"provider": "openai", "model": "m", "base_url": self.url + "/v1", **kw}

    def ollama(self, **kw: Any) -> dict[str, Any]:
        return {"provider": "ollama", "model": "judge", "base_url": self.url, **kw}


def _wrap(path: str, text: str) -> bytes:
    if path.endswith("/api/generate"):
        return json.dumps(
            {"model": "judge", "created_at": "2026-01-01T00:00:00Z", "response": text, "done": True}
        ).encode()
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }
    ).encode()


@pytest.fixture
def judge() -> Iterator[Judge]:
    state = Judge()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
            prompt = body.get("prompt") if "prompt" in body else body["messages"][0]["content"]
            with lock:
                state.requests.append({"path": self.path, "json": body, "prompt": prompt})
                reply = state.replies.pop(0) if state.replies else Reply(status=500, raw=b"no scripted reply")
            if reply.gate is not None:
                reply.gate.wait(30)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            out = reply.raw if reply.raw is not None else _wrap(self.path, reply.text or "")
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=5)


def verdict(
    per_memory: dict[str, float],
    *,
    score: float = 0.7,
    confidence: float = 0.9,
    used: int = 1,
    novel: int = 0,
    reasoning: str = "The deploy memory was used.",
    think: bool = True,
) -> str:
    """A judge reply in the style of small local models: a think block, then a fenced JSON object."""
    body = {
        "score": score,
        "confidence": confidence,
        "memories_used": used,
        "novel_context_count": novel,
        "reasoning": reasoning,
        "per_memory": [{"id": k, "relevance": v} for k, v in per_memory.items()],
    }
    head = "<think>\nThe user talked about deploys. {not json} Let me rate.\n</think>\n" if think else ""
    return head + "```json\n" + json.dumps(body, indent=2) + "\n```"


# ------------------------------------------------------------------ helpers

TRANSCRIPT = "\n".join(
    f"user: step {i} of the deploy, push the docker image to staging\nassistant: done, image tag v{i}"
    for i in range(20)
)
assert len(TRANSCRIPT) >= 500

CORPUS = [
    ("The deploy script pushes the Docker image to the staging registry.", 0.9),
    ("The user prefers tabs over spaces in Python files.", 0.8),
    ("Database backups run nightly at 02:00 UTC to an S3 bucket.", 0.7),
    ("The frontend is written in TypeScript with React and Vite.", 0.6),
    ("Kubernetes manifests live under deploy/k8s in the monorepo.", 0.5),
]


def seed(c, corpus=CORPUS, **kw) -> list[str]:
    return [c.memories.remember(RememberInput(content=t, importance=imp, **kw)).id for t, imp in corpus]


def rows(c, key: str) -> dict[str, sess_sql.SessionMemory]:
    return {r.memory_id: r for r in c.db.read(lambda conn: sess_sql.session_memories(conn, key))}


def score_row(c, key: str) -> dict[str, Any] | None:
    return c.db.read(lambda conn: sess_sql.get_score(conn, key))


def job(c, job_id: int) -> jobs_sql.Job:
    return c.db.read(lambda conn: jobs_sql.get(conn, job_id))


def started(c, key: str = "s", **kw) -> list[str]:
    res = c.sessions.start(StartInput(key, **kw))
    return [i["id"] for i in res.injected]


# ------------------------------------------------------------------ Phase 0, item 3


def test_phase0_3_per_memory_relevance_filled_after_session_end(open_store, judge) -> None:
    """After session-end, relevance_score is filled for each injected memory by the LLM judge."""
    c = open_store(llm=judge.openai(), sessions={"inject_limit": 3})
    ids = seed(c)
    injected = started(c)
    assert injected == ids[:3]
    judge.script(
        Reply(
            verdict(
                {injected[0][:8]: 0.9, injected[1][:8]: 0.2, injected[2][:8]: 0.0},
                score=0.75,
                confidence=0.85,
                used=1,
                novel=1,
            )
        )
    )
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True)
    assert (res.scoring, res.scorer, res.score, res.confidence) == ("done", "llm", 0.75, 0.85)
    assert res.labels == 5 and res.transcript_stored
    got = rows(c, "s")
    assert [got[i].relevance_score for i in injected] == [0.9, 0.2, 0.0]
    assert all(got[i].relevance_score is None for i in ids[3:])  # candidates not shown are not judged
    sc = score_row(c, "s")
    assert sc["scorer"] == "llm" and sc["model"] == "openai:m"
    assert sc["memories_recalled"] == 3 and sc["memories_used"] == 1 and sc["novel_context_count"] == 1
    assert sc["reasoning"] == sc["continuity_reasoning"] == "The deploy memory was used."
    assert judge.requests[0]["path"] == "/v1/chat/completions"
    assert judge.requests[0]["json"]["model"] == "m"
    # labels follow the judge: injected rows take their per-memory relevance
    assert got[injected[0]].raw_label == pytest.approx(0.9) and got[injected[0]].label == pytest.approx(0.9)
    assert job(c, res.summary_job_id).status == "completed"


# ------------------------------------------------------------------ Phase 0, item 6


def test_phase0_6_behavioral_label_adjustment(open_store, judge) -> None:
    """FTS overlap modifies labels: injected + matched gets +0.1; not injected + matched >= 2
    times gets at least 0.6."""
    c = open_store(llm=judge.openai(), sessions={"inject_limit": 2})
    ids = seed(c)
    deploy, tabs, backups, frontend, k8s = ids
    assert started(c) == [deploy, tabs]
    for q in (
        "deploy script docker image",
        "tabs over spaces?",
        "nightly backups bucket",
        "where do nightly backups go",
    ):
        c.sessions.prompt(PromptInput("s", q))
    got = rows(c, "s")
    assert (got[deploy].fts_hit_count, got[tabs].fts_hit_count, got[backups].fts_hit_count) == (1, 1, 2)
    judge.script(Reply(verdict({deploy[:8]: 0.5, tabs[:8]: 0.95}, score=0.6)))
    assert c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True).scorer == "llm"
    got = rows(c, "s")
    # injected and matched: continuity label + 0.1 (capped at 1.0)
    assert got[deploy].raw_label == pytest.approx(0.5) and got[deploy].label == pytest.approx(0.6)
    assert got[tabs].raw_label == pytest.approx(0.95) and got[tabs].label == pytest.approx(1.0)
    assert "fts:injected_and_matched+0.1" in got[deploy].label_reason
    # not injected, matched twice: at least 0.6 (it was a plain negative before)
    assert got[backups].raw_label == 0.0 and got[backups].label == pytest.approx(0.6)
    assert "fts:missed_matched_2x>=0.6" in got[backups].label_reason
    # not injected, never matched: unchanged true negatives
    assert got[frontend].label == 0.0 and got[k8s].label == 0.0


def test_behavioral_adjustment_without_llm(open_store) -> None:
    c = open_store(sessions={"inject_limit": 2})
    deploy, tabs, backups, *_ = seed(c)
    started(c)
    for q in ("deploy script docker image", "nightly backups bucket", "backups again nightly"):
        c.sessions.prompt(PromptInput("s", q))
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT))
    # behaviour alone: deploy matched once (0.5), tabs never (0): score 0.25, confidence 0.5
    assert (res.scorer, res.score, res.confidence) == ("behavioral", pytest.approx(0.25), pytest.approx(0.5))
    got = rows(c, "s")
    assert got[deploy].raw_label == pytest.approx(0.125)  # 0.25 x 0.5 (low-scoring session)
    assert got[deploy].label == pytest.approx(0.225)  # + 0.1 confirmed by a match
    assert got[tabs].raw_label == pytest.approx(0.125)
    assert got[tabs].label == pytest.approx(0.025)  # unused and continuity < 0.3: -0.1
    assert got[backups].label == pytest.approx(0.6)


# ------------------------------------------------------------------ Phase 0, item 7


BANNED = ("predictor", "baseline", "effective", "source", "exploration", "fts", "rank", "candidate")


def test_phase0_7_blind_evaluation(open_store, judge) -> None:
    """The judge prompt does not say which ranker proposed which memory."""
    c = open_store(llm=judge.openai(), sessions={"inject_limit": 3})
    ids = seed(c)
    injected = started(c)
    c.sessions.prompt(PromptInput("s", "frontend typescript react"))  # matches a memory not injected
    judge.script(Reply(verdict({i[:8]: 0.5 for i in injected})))
    c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True)
    assert len(judge.prompts) == 1
    p = judge.prompts[0]
    low = p.lower()
    for word in BANNED:
        assert word not in low, word
    for mid in injected:
        assert f"[{mid[:8]}]" in p and mid not in p  # 8-char ids, never full ids
    for mid in set(ids) - set(injected):
        assert mid[:8] not in p  # only what the agent was shown
    for text, _ in CORPUS[:3]:
        assert text in p
    assert TRANSCRIPT[-4000:] in p


# ------------------------------------------------------------------ transcripts

UNICODE = (
    "naïve café — 日本語のテキスト, emoji 🎉👩‍💻, RTL עברית, combining e\u0301, "
    "zero-width\u200bspace, line sep\u2028para sep\u2029, tabs\tand CRLF\r\n  trailing spaces   \n"
)


def test_transcript_stored_losslessly_once(open_store) -> None:
    c = open_store()
    t1 = UNICODE * 200 + "x" * 100_000
    r1 = c.sessions.end(EndInput("t", transcript=t1, harness="claude-code", project="p"))
    assert r1.transcript_stored
    assert c.db.read(lambda conn: sess_sql.get_transcript(conn, "t")) == t1
    r2 = c.sessions.end(EndInput("t", transcript="a different transcript"))
    assert not r2.transcript_stored
    assert c.db.read(lambda conn: sess_sql.get_transcript(conn, "t")) == t1
    row = c.db.read(
        lambda conn: dict(
            conn.execute("SELECT harness, project FROM session_transcripts WHERE session_key = 't'").fetchone()
        )
    )
    assert row == {"harness": "claude-code", "project": "p"}


def test_transcript_limits(open_store) -> None:
    from memlane.errors import PayloadTooLarge, ValidationError

    c = open_store(sessions={"max_transcript_chars": 1000})
    with pytest.raises(PayloadTooLarge):
        c.sessions.end(EndInput("big", transcript="y" * 1001))
    with pytest.raises(ValidationError):
        c.sessions.end(EndInput("nul", transcript="a\x00b"))
    assert c.db.read(lambda conn: conn.execute("SELECT count(*) FROM sessions").fetchone()[0]) == 0
    assert c.sessions.end(EndInput("ok", transcript="y" * 1000)).transcript_stored
    assert not c.sessions.end(EndInput("none")).transcript_stored


def test_end_marks_session_ended_once(open_store) -> None:
    c = open_store()
    started(c, "e", now="2026-01-01T00:00:00Z")
    c.sessions.end(EndInput("e", now="2026-01-01T01:00:00Z"))
    c.sessions.end(EndInput("e", now="2026-01-01T02:00:00Z"))
    s = c.db.read(lambda conn: sess_sql.get_session(conn, "e"))
    assert s.status == "ended" and s.ended_at == "2026-01-01T01:00:00.000Z"


# ------------------------------------------------------------------ summary job


def test_summary_job_skipped_without_provider(open_store) -> None:
    c = open_store()
    res = c.sessions.end(EndInput("j", transcript=TRANSCRIPT, reason="logout"))
    j = job(c, res.summary_job_id)
    assert (j.job_type, j.session_key, j.dedup_key, j.status) == ("session_summary", "j", "j", "skipped")
    assert j.error == "no LLM provider configured"
    assert j.payload == {"reason": "logout", "transcript_chars": len(TRANSCRIPT)}


def test_summary_job_pending_then_completed_with_provider(open_store, judge) -> None:
    c = open_store(llm=judge.openai())
    ids = seed(c)
    started(c)
    gate = threading.Event()
    judge.script(Reply(verdict({ids[0][:8]: 1.0}), gate=gate))
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT))
    assert (res.scoring, res.scorer, res.score) == ("queued", None, None)
    assert job(c, res.summary_job_id).status == "pending"
    assert score_row(c, "s") is None
    gate.set()
    c.sessions.wait_idle()
    j = job(c, res.summary_job_id)
    assert j.status == "completed" and j.result == {"score": 0.7} and j.error is None
    assert score_row(c, "s")["scorer"] == "llm"
    assert rows(c, "s")[ids[0]].relevance_score == 1.0


def test_summary_job_with_provider_but_no_transcript_is_skipped(open_store, judge) -> None:
    c = open_store(llm=judge.openai())
    res = c.sessions.end(EndInput("j"))
    j = job(c, res.summary_job_id)
    assert j.status == "skipped" and j.error == "no transcript"
    assert res.scorer == "behavioral" and judge.requests == []


def test_short_transcript_is_not_judged_and_its_job_is_not_left_pending(open_store, judge) -> None:
    """Transcripts under 500 characters are scored from behaviour; the summary job must not stay
    'pending' forever (no worker would ever finish it)."""
    c = open_store(llm=judge.openai())
    seed(c)
    started(c)
    res = c.sessions.end(EndInput("s", transcript="too short to judge"), wait=True)
    assert res.scorer == "behavioral" and res.scoring == "done"
    assert judge.requests == []
    j = job(c, res.summary_job_id)
    assert j.status == "skipped"
    assert j.error == "transcript under 500 characters: not judged"


def test_summary_job_deduplicated_while_pending(open_store, judge) -> None:
    c = open_store(llm=judge.openai())
    gate = threading.Event()
    judge.script(Reply(verdict({}), gate=gate), Reply(verdict({})))
    r1 = c.sessions.end(EndInput("d", transcript=TRANSCRIPT))
    r2 = c.sessions.end(EndInput("d", transcript=TRANSCRIPT))
    assert r1.summary_job_id == r2.summary_job_id
    gate.set()
    c.sessions.wait_idle()


# ------------------------------------------------------------------ scorers


def test_no_provider_scores_behaviourally(open_store) -> None:
    c = open_store()
    deploy, tabs, *_ = seed(c)
    started(c)
    c.sessions.prompt(PromptInput("s", "x", memory_feedback={deploy[:8]: 0.9, tabs[:8]: -0.4}))
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT))
    assert res.scoring == "done" and res.scorer == "behavioral"
    # 5 injected: deploy 0.9, tabs clipped to 0, three unobserved 0 -> 0.18; 2/5 rated -> 0.7
    assert res.score == pytest.approx(0.18) and res.confidence == pytest.approx(0.7)
    sc = score_row(c, "s")
    assert sc["scorer"] == "behavioral" and sc["model"] is None
    assert "no LLM judge" in sc["reasoning"]
    assert sc["memories_recalled"] == 5 and sc["memories_used"] == 1
    got = rows(c, "s")
    # agent-rated labels: 0.7 x agent + 0.2 x fts + 0.1 x continuity
    assert got[deploy].label == pytest.approx(0.7 * 0.9 + 0.1 * 0.18)
    assert got[tabs].label == pytest.approx(max(-0.5, 0.7 * -0.4 + 0.1 * 0.18))
    assert got[deploy].raw_label == pytest.approx(0.9)


def test_end_of_unknown_session(open_store) -> None:
    c = open_store()
    res = c.sessions.end(EndInput("ghost", transcript=TRANSCRIPT))
    assert (res.scorer, res.score, res.confidence, res.labels) == ("behavioral", 0.0, 0.3, 0)
    assert c.db.read(lambda conn: sess_sql.get_session(conn, "ghost")).status == "ended"


def test_provider_passed_directly_and_ollama_protocol(open_store, judge) -> None:
    c = open_store()
    ids = seed(c)
    for name, provider, path in (
        ("oa", OpenAICompatProvider("m", base_url=judge.url + "/v1"), "/v1/chat/completions"),
        ("ol", OllamaProvider("judge", base_url=judge.url), "/api/generate"),
    ):
        svc = SessionService(c.memories, c.recall, c.settings.sessions, llm=provider)
        try:
            svc.start(StartInput(name))
            judge.script(Reply(verdict({ids[0][:8]: 0.8}, score=0.9)))
            res = svc.end(EndInput(name, transcript=TRANSCRIPT), wait=True)
            assert (res.scorer, res.score) == ("llm", 0.9)
            assert judge.requests[-1]["path"] == path
            assert rows(c, name)[ids[0]].relevance_score == 0.8
            assert score_row(c, name)["model"] == provider.name
        finally:
            svc.close()
            provider.close()


def test_ollama_via_settings(open_store, judge) -> None:
    c = open_store(llm=judge.ollama())
    ids = seed(c)
    started(c)
    judge.script(Reply(verdict({ids[1][:8]: 0.4}, think=False)))
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True)
    assert res.scorer == "llm" and judge.requests[0]["json"]["prompt"] == judge.prompts[0]
    assert rows(c, "s")[ids[1]].relevance_score == 0.4


# ------------------------------------------------------------------ judge failures (fail open)


@pytest.mark.parametrize(
    "reply, llm_extra, expect",
    [
        (Reply(status=500, raw=b'{"error": "model crashed"}'), {}, "HTTP 500"),
        (Reply("I think the session went well, the memories helped."), {}, "no JSON object"),
        (Reply('```json\n{"score": 0.9, "per_memory": [\n```'), {}, "no JSON object"),
        (Reply(raw=b"<html>not json</html>"), {}, "not valid JSON"),
        (Reply(raw=b'{"choices": []}'), {}, "choices"),
        (Reply(verdict({}), delay_s=1.5), {"timeout_s": 0.3}, "timed out"),
    ],
    ids=["http-500", "prose", "broken-json", "non-json-body", "wrong-shape", "timeout"],
)
def test_judge_failure_falls_back_to_behavioural(open_store, judge, reply, llm_extra, expect) -> None:
    c = open_store(llm=judge.openai(**llm_extra))
    seed(c)
    started(c)
    c.sessions.prompt(PromptInput("s", "deploy script docker image"))
    judge.script(reply)
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True)
    assert res.scoring == "done" and res.scorer == "behavioral"
    assert res.score == pytest.approx(0.5 / 5)  # one of five injected memories matched once
    sc = score_row(c, "s")
    assert sc["scorer"] == "behavioral"
    assert "LLM judge failed" in sc["reasoning"] and expect in sc["reasoning"]
    j = job(c, res.summary_job_id)
    assert j.status == "failed" and expect in j.error
    assert all(r.relevance_score is None for r in rows(c, "s").values())
    assert all(r.label is not None for r in rows(c, "s").values())
    assert len(judge.requests) == 1


def test_judge_failure_in_background_still_scores(open_store, judge) -> None:
    c = open_store(llm=judge.openai())
    seed(c)
    started(c)
    judge.script(Reply(status=503, raw=b"overloaded"))
    assert c.sessions.end(EndInput("s", transcript=TRANSCRIPT)).scoring == "queued"
    c.sessions.wait_idle()
    assert score_row(c, "s")["scorer"] == "behavioral"


# ------------------------------------------------------------------ clamping


def test_llm_numbers_are_clamped(open_store, judge) -> None:
    c = open_store(llm=judge.openai(), sessions={"inject_limit": 3})
    seed(c)
    injected = started(c)
    body = (
        '{"score": 1.7, "confidence": -0.5, "memories_used": -3, "novel_context_count": 2.5,'
        f' "per_memory": [{{"id": "{injected[0][:8]}", "relevance": 3}},'
        f' {{"id": "{injected[1][:8]}", "relevance": -2}},'
        f' {{"id": "{injected[2][:8]}", "relevance": "high"}},'
        ' {"id": "zzzzzzzz", "relevance": 0.5}], "reasoning": ["not", "a", "string"]}'
    )
    judge.script(Reply(body))
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True)
    assert (res.scorer, res.score, res.confidence) == ("llm", 1.0, 0.0)
    sc = score_row(c, "s")
    assert (sc["memories_used"], sc["novel_context_count"], sc["reasoning"]) == (0, 2, "")
    got = rows(c, "s")
    assert [got[i].relevance_score for i in injected] == [1.0, 0.0, 0.0]
    assert all(-0.5 <= r.label <= 1.0 for r in got.values())


def test_judge_reply_with_a_giant_integer_is_clamped(open_store, judge) -> None:
    c = open_store(llm=judge.openai(), sessions={"inject_limit": 1})
    (deploy, *_) = seed(c)
    started(c)
    big = "9" * 400
    judge.script(
        Reply(
            f'{{"score": {big}, "confidence": 0.8, "novel_context_count": {big},'
            f' "per_memory": [{{"id": "{deploy[:8]}", "relevance": {big}}}]}}'
        )
    )
    res = c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True)
    assert (res.scorer, res.score, res.confidence) == ("llm", 1.0, 0.8)
    assert rows(c, "s")[deploy].relevance_score == 1.0
    assert score_row(c, "s")["novel_context_count"] == 10_000


# ------------------------------------------------------------------ labels


def test_labels_keep_raw_and_final(open_store, judge) -> None:
    c = open_store(llm=judge.openai(), sessions={"inject_limit": 2})
    deploy, tabs, backups, *_ = seed(c)
    started(c)
    c.sessions.prompt(PromptInput("s", "deploy script docker image"))
    judge.script(Reply(verdict({deploy[:8]: 0.4, tabs[:8]: 0.1}, score=0.2)))
    c.sessions.end(EndInput("s", transcript=TRANSCRIPT), wait=True)
    got = rows(c, "s")
    assert (got[deploy].raw_label, got[deploy].label) == (pytest.approx(0.4), pytest.approx(0.5))
    assert got[deploy].label_reason == ["injected:per_memory_relevance", "fts:injected_and_matched+0.1"]
    # tabs: never matched and continuity 0.2 < 0.3: 0.1 - 0.1
    assert (got[tabs].raw_label, got[tabs].label) == (pytest.approx(0.1), pytest.approx(0.0))
    assert got[tabs].label_reason == ["injected:per_memory_relevance", "fts:unused_low_continuity-0.1"]
    assert got[backups].label_reason == ["not_injected:true_negative"]
    # the session API exposes both
    view = c.sessions.get("s")
    assert {m.memory_id: (m.raw_label, m.label) for m in view["memories"]}[deploy] == (
        pytest.approx(0.4),
        pytest.approx(0.5),
    )


def test_deleted_within_24h_of_injection_is_relabelled_minus_05(open_store) -> None:
    c = open_store(sessions={"inject_limit": 2})
    deploy, tabs, backups, *_ = seed(c)
    started(c)
    c.sessions.end(EndInput("s", transcript=TRANSCRIPT))
    before = rows(c, "s")
    assert before[deploy].label != -0.5
    c.memories.delete(deploy, who="user", why="wrong")  # the listener relabels the session
    after = rows(c, "s")
    assert after[deploy].label == -0.5
    assert after[deploy].raw_label == before[deploy].raw_label
    assert after[deploy].label_reason[-1] == "negative:deleted_within_24h"
    assert after[tabs].label == before[tabs].label
    # a deleted candidate that was never injected is not the "don't show me this" signal
    c.memories.delete(backups)
    assert rows(c, "s")[backups].label != -0.5
    # recovering the memory relabels again
    c.memories.recover(deploy)
    assert rows(c, "s")[deploy].label != -0.5


def test_deleted_long_after_the_session_is_not_minus_05(open_store) -> None:
    c = open_store(sessions={"inject_limit": 1})
    (deploy, *_) = seed(c)
    two_days_ago = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    c.sessions.start(StartInput("old", now=two_days_ago))
    c.sessions.end(EndInput("old", now=two_days_ago))
    c.memories.delete(deploy)
    assert rows(c, "old")[deploy].label != -0.5
    assert "negative:deleted_within_24h" not in rows(c, "old")[deploy].label_reason


def test_delete_before_scoring_then_end(open_store) -> None:
    c = open_store(sessions={"inject_limit": 1})
    (deploy, *_) = seed(c)
    started(c)
    c.memories.delete(deploy)  # not scored yet: nothing to relabel, must not fail
    c.sessions.end(EndInput("s"))
    assert rows(c, "s")[deploy].label == -0.5


def test_superseded_gets_minus_03(open_store) -> None:
    c = open_store(sessions={"inject_limit": 2})
    deploy, tabs, backups, *_ = seed(c)
    started(c)
    c.sessions.end(EndInput("s", transcript=TRANSCRIPT))
    before = rows(c, "s")
    c.db.write(
        lambda conn: conn.execute("UPDATE memories SET superseded_by = ? WHERE id IN (?, ?)", (tabs, deploy, backups))
    )
    assert c.sessions.relabel("s") == 5
    after = rows(c, "s")
    assert after[deploy].label == pytest.approx(-0.3) and after[backups].label == pytest.approx(-0.3)
    assert after[deploy].raw_label == before[deploy].raw_label
    assert after[deploy].label_reason[-1] == "negative:superseded"
    assert after[tabs].label == before[tabs].label
    assert c.sessions.relabel("not-scored") == 0


def test_soft_negatives_when_similar_to_the_context(open_store) -> None:
    c = open_store(embedding="local", sessions={"inject_limit": 1})
    deploy_text = "The deploy script pushes the Docker image to the staging registry."
    ids = seed(
        c,
        [
            ("The user prefers tabs over spaces in Python files.", 0.9),
            (deploy_text, 0.5),
            ("Our deploy script uploads Docker images to the staging registry.", 0.4),
            ("Database backups run nightly at 02:00 UTC to an S3 bucket.", 0.3),
        ],
    )
    c.sessions.start(StartInput("s", context=deploy_text))
    c.sessions.end(EndInput("s"))
    got = rows(c, "s")
    assert got[ids[0]].was_injected
    soft = [r for r in got.values() if not r.was_injected and r.similarity > 0.6]
    plain = [r for r in got.values() if not r.was_injected and r.similarity <= 0.6]
    assert {r.memory_id for r in soft} == {ids[1], ids[2]}
    assert [r.memory_id for r in plain] == [ids[3]]
    for r in soft:
        assert r.raw_label == 0.25 and r.label == 0.25
        assert r.label_reason == ["not_injected:soft_negative"]
    assert plain[0].label == 0.0


def test_a_resumed_session_keeps_the_longer_transcript(open_store) -> None:
    c = open_store()
    first = "user: hello\nassistant: hi"
    c.sessions.end(EndInput("resumed", transcript=first))
    longer = first + "\nuser: and now the rest\nassistant: done"
    assert c.sessions.end(EndInput("resumed", transcript=longer)).transcript_stored
    assert c.db.read(lambda conn: sess_sql.get_transcript(conn, "resumed")) == longer
    assert not c.sessions.end(EndInput("resumed", transcript="short")).transcript_stored
    assert c.db.read(lambda conn: sess_sql.get_transcript(conn, "resumed")) == longer


def test_edit_boost_needs_an_update_event_not_a_delete(open_store) -> None:
    c = open_store()
    a = c.memories.remember(RememberInput(content="Alpha fact about deploys.")).id
    b = c.memories.remember(RememberInput(content="Beta fact about releases.")).id
    c.sessions.start(StartInput(session_key="e"))
    c.memories.update(a, {"importance": 0.9})
    c.memories.delete(b)
    c.memories.recover(b)
    c.sessions.end(EndInput("e"))
    reasons = {r.memory_id: r.label_reason for r in c.db.read(lambda conn: sess_sql.session_memories(conn, "e"))}
    assert "edited:recently+0.05" in reasons[a]
    assert "edited:recently+0.05" not in reasons[b]


def test_session_end_warms_the_next_context(open_store) -> None:
    c = open_store(embedding="local")
    c.memories.remember(RememberInput(content="The staging cluster is called orion.", project="/repo"))
    c.sessions.start(StartInput(session_key="w1", project="/repo", cwd="/repo"))
    c.sessions.prompt(PromptInput(session_key="w1", prompt="where is staging?", project="/repo"))
    c.sessions.end(EndInput("w1", project="/repo", cwd="/repo"))
    c.sessions._warmer.submit(lambda: None).result(timeout=60)  # the warm-up job ran
    hits = c.sessions.contexts.hits
    c.sessions.start(StartInput(session_key="w2", project="/repo", cwd="/repo"))
    assert c.sessions.contexts.hits == hits + 1
