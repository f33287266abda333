"""Issue 37 findings 10 and 11: bounded work.

10. The continuity judge ran on one thread with an unbounded queue: 41 concurrent ``session-end``
    calls with ``wait: true`` against a hung LLM froze recall, ``/health`` and the hooks, and
    SIGTERM then took 248 s. Here the same attack runs against a real daemon and a real loopback
    LLM server that accepts every call and never answers; plus the judge's backlog bound, the
    ``wait`` timeout's honest answer, and the providers' abort (HTTP sockets, the CLI's process
    group).
11. ``memlane import`` read the whole file into memory (``/dev/zero``: 3.7 GB RSS in 10 s). Here
    the importer reads a FIFO fed by a thread (it must report an over-long line and commit
    batches before the writer has finished), and ``/dev/zero`` with its peak RSS checked.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from memlane.cli.importer import iter_lines, read_memories, run_import
from memlane.providers import ClaudeCodeProvider, LlmError, OllamaProvider, OpenAICompatProvider
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import EndInput, PromptInput, StartInput
from memlane.sessions.judge_queue import JudgeQueue, JudgeRefused
from memlane.storage import jobs as jobs_sql
from memlane.storage import sessions as sess_sql

#: A liveness guard, never a performance threshold: something that should happen at once is
#: given this long before the test calls it a hang (the failure these tests reproduce hangs
#: for minutes or forever).
HANG_GUARD_S = 60

JUDGE_PROMPT_START = "You are evaluating how well pre-loaded memories served"

TRANSCRIPT = "\n".join(
    f"user: step {i} of the deploy, push the docker image to staging\nassistant: done, image tag v{i}"
    for i in range(20)
)
assert len(TRANSCRIPT) >= 500

CORPUS = [
    "The deploy script pushes the Docker image to the staging registry.",
    "The user prefers tabs over spaces in Python files.",
    "Database backups run nightly at 02:00 UTC to an S3 bucket.",
    "The frontend is written in TypeScript with React and Vite.",
    "Kubernetes manifests live under deploy/k8s in the monorepo.",
]


# ------------------------------------------------------------------ a hung LLM server


class HungLlm:
    """A real loopback HTTP server speaking Ollama (/api/generate, /api/tags) and OpenAI
    (/v1/chat/completions, /v1/models): it reads every generate request and never answers."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.prompts: list[str] = []
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = b'{"models": [], "data": []}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                data = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                prompt = data.get("prompt") or data.get("messages", [{}])[0].get("content", "")
                with outer.arrived:
                    outer.prompts.append(prompt)
                    outer.arrived.notify_all()
                outer.release.wait()  # hung: no byte of an answer until the test ends
                try:
                    self.send_response(500)
                    self.end_headers()
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def judge_calls(self) -> int:
        with self.lock:
            return sum(p.startswith(JUDGE_PROMPT_START) for p in self.prompts)

    def wait_for_judge_calls(self, n: int) -> None:
        with self.arrived:
            ok = self.arrived.wait_for(
                lambda: sum(p.startswith(JUDGE_PROMPT_START) for p in self.prompts) >= n, timeout=HANG_GUARD_S
            )
        assert ok, f"the judge never called the LLM {n} time(s)"

    def ollama(self, **kw: Any) -> dict[str, Any]:
        return {"provider": "ollama", "model": "hung", "base_url": self.url, "timeout_s": 600, **kw}

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hung_llm() -> Iterator[HungLlm]:
    server = HungLlm()
    try:
        yield server
    finally:
        server.close()


# ------------------------------------------------------------------ finding 10, real daemon


def test_41_waiting_session_ends_against_a_hung_llm_leave_the_daemon_answering_and_sigterm_exits(
    start_daemon, hung_llm
) -> None:
    d = start_daemon(
        provider="none",
        env={
            "MEMLANE_LLM__PROVIDER": "ollama",
            "MEMLANE_LLM__MODEL": "hung",
            "MEMLANE_LLM__BASE_URL": hung_llm.url,
            "MEMLANE_LLM__TIMEOUT_S": "600",  # the model never answers: only the daemon's own bounds apply
            "MEMLANE_SESSIONS__JUDGE_WAIT_S": "600",
        },
    )  # waiting requests are released by the shutdown, not a timeout
    with d.client() as http:
        for text in CORPUS:
            assert http.post("/api/memory/remember", json={"content": text}).status_code == 200

    def end(i: int) -> httpx.Response:
        with d.client(timeout=HANG_GUARD_S * 5) as c:
            return c.post(
                "/api/hooks/session-end", json={"session_key": f"s{i}", "transcript": TRANSCRIPT, "wait": True}
            )

    pool = ThreadPoolExecutor(max_workers=41)
    try:
        futs = [pool.submit(end, i) for i in range(41)]
        answered: list[Future[httpx.Response]] = []
        try:
            for f in as_completed(futs, timeout=HANG_GUARD_S):
                answered.append(f)
                if len(answered) == 32:
                    break
        except TimeoutError:
            pytest.fail(f"only {len(answered)} of the 41 session-ends answered; the daemon froze\n{d.log()}")
        # 1 being judged + 8 waiting (sessions.judge_queue_max): the other 32 were scored at once
        for f in answered:
            r = f.result()
            assert r.status_code == 200, r.text
            assert (r.json()["scoring"], r.json()["scorer"], r.json()["judge"]) == ("done", "behavioral", "skipped")
        hung_llm.wait_for_judge_calls(1)
        assert hung_llm.judge_calls() == 1  # one judge call in flight, hung

        # recall, /health and the hooks keep answering while 9 requests wait on the judge
        with d.client(timeout=HANG_GUARD_S) as http:
            assert httpx.get(d.url + "/health", timeout=HANG_GUARD_S).status_code == 200
            r = http.post("/api/memory/recall", json={"query": "deploy docker image", "limit": 3})
            assert r.status_code == 200 and r.json()["results"], r.text
            assert http.post("/api/hooks/session-start", json={"session_key": "live"}).status_code == 200
            r = http.post("/api/hooks/user-prompt-submit", json={"session_key": "live", "prompt": "deploy image"})
            assert r.status_code == 200, r.text
            r = http.post("/api/hooks/session-end", json={"session_key": "live-2", "transcript": TRANSCRIPT})
            assert r.status_code == 200 and r.json()["judge"] == "skipped", r.text  # backlog full: never waits
        waiting = [f for f in futs if f not in answered]
        assert len(waiting) == 9 and not any(f.done() for f in waiting)

        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"memlane serve still running {HANG_GUARD_S} s after SIGTERM\n{d.log()}")
        took = time.monotonic() - t0
        print(f"\nSIGTERM -> exit {rc} in {took:.2f} s with 9 session-ends waiting on a hung judge")
        assert rc == 0, d.log()
        verdicts = sorted(f.result(timeout=HANG_GUARD_S).json()["judge"] for f in waiting)
        assert verdicts == ["failed"] + ["skipped"] * 8  # the call in flight aborted, the backlog handed back
    finally:
        pool.shutdown(wait=False, cancel_futures=True)

    conn = sqlite3.connect(f"file:{d.home / 'memories.db'}?mode=ro", uri=True)
    try:
        scores = dict(conn.execute("SELECT session_key, reasoning FROM session_scores WHERE session_key LIKE 's%'"))
        assert len(scores) == 41  # every session has a score and labels: none was lost to the shutdown
        assert sum("sessions already waiting for the judge" in r for r in scores.values()) == 32
        assert sum("LLM judge skipped: the daemon is shutting down" in r for r in scores.values()) == 8
        assert sum("LLM judge failed" in r and "aborted" in r for r in scores.values()) == 1
        jobs = dict(
            conn.execute(
                "SELECT status, COUNT(*) FROM memory_jobs WHERE job_type = 'session_summary' "
                "AND session_key LIKE 's%' GROUP BY status"
            )
        )
        assert jobs == {"skipped": 40, "failed": 1}
    finally:
        conn.close()


# ------------------------------------------------------------------ finding 10, in process


def _session(c, key: str) -> None:  # noqa: ANN001 - Container
    c.sessions.start(StartInput(key))
    c.sessions.prompt(PromptInput(key, "deploy script docker image"))


def _seed(c) -> None:  # noqa: ANN001
    for text in CORPUS:
        c.memories.remember(RememberInput(content=text))


def test_backlog_is_bounded_and_a_refused_session_is_scored_from_behaviour_with_the_reason(
    open_store, hung_llm
) -> None:
    c = open_store(llm=hung_llm.ollama(), sessions={"judge_queue_max": 2})
    _seed(c)
    for key in "abcd":
        _session(c, key)
    assert c.sessions.end(EndInput("a", transcript=TRANSCRIPT)).judge == "queued"
    hung_llm.wait_for_judge_calls(1)  # "a" is being judged (and hangs)
    assert [c.sessions.end(EndInput(k, transcript=TRANSCRIPT)).judge for k in "bc"] == ["queued", "queued"]
    res = c.sessions.end(EndInput("d", transcript=TRANSCRIPT), wait=True)  # would wait forever on the old code
    assert (res.scoring, res.scorer, res.judge) == ("done", "behavioral", "skipped")
    assert res.score == pytest.approx(0.5 / 5)  # one of five injected memories matched the prompt once
    sc = c.db.read(lambda conn: sess_sql.get_score(conn, "d"))
    assert sc["scorer"] == "behavioral"
    assert (
        "LLM judge skipped: 2 sessions already waiting for the judge (sessions.judge_queue_max = 2)" in sc["reasoning"]
    )
    job = c.db.read(lambda conn: jobs_sql.get(conn, res.summary_job_id))
    assert job.status == "skipped" and "sessions.judge_queue_max = 2" in job.error
    assert hung_llm.judge_calls() == 1


def test_wait_true_times_out_with_the_behavioural_score_and_the_judge_still_queued(open_store, hung_llm) -> None:
    c = open_store(llm=hung_llm.ollama(), sessions={"judge_wait_s": 0.2})
    _seed(c)
    _session(c, "a")
    _session(c, "b")
    c.sessions.end(EndInput("a", transcript=TRANSCRIPT))
    hung_llm.wait_for_judge_calls(1)
    res = c.sessions.end(EndInput("b", transcript=TRANSCRIPT), wait=True)
    assert (res.scoring, res.scorer, res.judge, res.labels) == ("queued", "behavioral", "queued", 0)
    assert res.score == pytest.approx(0.5 / 5)
    assert c.db.read(lambda conn: sess_sql.get_score(conn, "b")) is None  # the answer's score is not stored
    # shutdown: the backlog ("b") is scored from behaviour, the hung call ("a") is aborted
    c.sessions.stop_judge()
    c.sessions.wait_idle(timeout_s=HANG_GUARD_S)
    a = c.db.read(lambda conn: sess_sql.get_score(conn, "a"))
    b = c.db.read(lambda conn: sess_sql.get_score(conn, "b"))
    assert a["scorer"] == "behavioral" and "LLM judge failed" in a["reasoning"] and "aborted" in a["reasoning"]
    assert b["scorer"] == "behavioral" and "LLM judge skipped: the daemon is shutting down" in b["reasoning"]
    later = c.sessions.end(EndInput("c", transcript=TRANSCRIPT), wait=True)  # after the stop: never waits
    assert (later.scoring, later.judge) == ("done", "skipped")
    assert hung_llm.judge_calls() == 1


def test_judge_queue_states_stop_and_abort() -> None:
    gate = threading.Event()
    aborted: list[bool] = []
    q = JudgeQueue(lambda: 1, abort=lambda: (aborted.append(True), gate.set()))
    started = threading.Event()

    def blocked() -> str:
        started.set()
        gate.wait()
        return "judged"

    first = q.submit(blocked, lambda reason: f"skipped: {reason}")
    assert started.wait(HANG_GUARD_S)
    second = q.submit(lambda: "judged", lambda reason: f"skipped: {reason}")
    assert (q.state(first), q.state(second), q.pending, q.busy) == ("running", "queued", 1, True)
    with pytest.raises(JudgeRefused, match=r"1 sessions already waiting for the judge"):
        q.submit(lambda: "x", lambda reason: "y")
    q.stop()
    assert aborted == [True]
    assert first.result(HANG_GUARD_S) == "judged"
    assert second.result(HANG_GUARD_S) == "skipped: the daemon is shutting down"
    with pytest.raises(JudgeRefused, match="shutting down"):
        q.submit(lambda: "x", lambda reason: "y")
    assert q.close(HANG_GUARD_S)
    idle = JudgeQueue(lambda: 1, abort=lambda: aborted.append(True))
    idle.stop()
    assert aborted == [True]  # nothing running: nothing to abort
    assert idle.close(1.0)


@pytest.mark.parametrize("kind", ["ollama", "openai"])
def test_closing_an_http_provider_aborts_its_hung_call(hung_llm, kind) -> None:
    p = (
        OllamaProvider("hung", base_url=hung_llm.url, timeout_s=600)
        if kind == "ollama"
        else OpenAICompatProvider("hung", base_url=hung_llm.url + "/v1", timeout_s=600)
    )
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            p.generate(JUDGE_PROMPT_START + " ...")
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    t = threading.Thread(target=call)
    t.start()
    hung_llm.wait_for_judge_calls(1)
    p.close()
    t.join(HANG_GUARD_S)
    assert not t.is_alive(), "close() did not end the call (it would have waited 600 s)"
    assert len(outcome) == 1 and isinstance(outcome[0], LlmError)
    assert "aborted: the client was closed" in str(outcome[0])
    with pytest.raises(LlmError, match="aborted: the client was closed"):
        p.generate(JUDGE_PROMPT_START + " again")  # refused without connecting
    assert hung_llm.judge_calls() == 1
    p.close()  # idempotent


def test_closing_the_claude_cli_provider_kills_the_hung_process_group(tmp_path) -> None:
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "claude"
    script.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    p = ClaudeCodeProvider("haiku", command=str(script), timeout_s=600)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            p.generate("judge this")
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + HANG_GUARD_S
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the CLI stand-in never started"
        time.sleep(0.02)
    child = int(pidfile.read_text())
    p.close()
    t.join(HANG_GUARD_S)
    assert not t.is_alive(), "close() did not end the call"
    assert len(outcome) == 1 and isinstance(outcome[0], LlmError)
    assert "was killed: the provider was closed" in str(outcome[0])
    assert _gone(child), "the CLI's own child outlived the abort"
    with pytest.raises(LlmError, match="closed"):
        p.generate("again")


def _gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for a reaper counts as gone)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


# ------------------------------------------------------------------ finding 11: streaming import


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "in.fifo"
    os.mkfifo(path)
    return path


def test_reader_reports_an_over_long_line_from_a_fifo_before_the_writer_is_done(tmp_path) -> None:
    """The writer blocks after the over-long line until the reader has reported it: a reader that
    reads to the end first would never report it (the writer then gives up and says so)."""
    fifo = _fifo(tmp_path)
    reported = threading.Event()
    writer_saw_report: list[bool] = []

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(json.dumps({"content": "first"}).encode() + b"\n")
            fh.write(b"x" * 300_000)  # over the 100 kB limit below, no newline yet
            fh.flush()
            writer_saw_report.append(reported.wait(HANG_GUARD_S))
            fh.write(b"x" * 300_000 + b"\n")
            fh.write(json.dumps({"content": "after"}).encode() + b"\n")

    t = threading.Thread(target=write)
    t.start()
    got = []
    with open(fifo, "rb") as fh:
        for no, item, _ in read_memories(fh, max_bytes=100_000):
            got.append((no, item if isinstance(item, str) else item.content))
            if isinstance(item, str):
                reported.set()
    t.join(HANG_GUARD_S)
    assert writer_saw_report == [True]
    assert got == [(1, "first"), (2, "line longer than 100000 bytes: skipped"), (3, "after")]


def test_iter_lines_counts_every_byte_and_keeps_line_numbers(tmp_path) -> None:
    path = tmp_path / "in.jsonl"
    data = b'{"content": "a"}\n\n' + b"y" * 50 + b"\n" + b'"last"'
    path.write_bytes(data)
    with open(path, "rb") as fh:
        out = list(iter_lines(fh, max_bytes=20))
    assert [(no, line) for no, line, _ in out] == [(1, b'{"content": "a"}'), (2, b""), (3, None), (4, b'"last"')]
    assert sum(used for *_, used in out) == len(data)


def test_import_reports_bad_and_over_long_lines_by_number_and_imports_the_rest(open_store, tmp_path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"content": "one"}),
                "{not json",
                json.dumps({"content": "z" * 5000}),  # over the 1,000-byte line limit below
                json.dumps([1, 2]),
                "",
                json.dumps("two as a bare string"),
                json.dumps({"content": "three", "importance": "high"}),
            ]
        )
        + "\n"
    )
    home = tmp_path / "home"
    report = run_import(path, data_dir=home, url=None, batch=1, max_line_bytes=1000)
    assert (report["created"], report["deduplicated"], report["bad_lines"]) == (2, 0, 4)
    assert [no for no, _ in report["errors"]] == [2, 3, 4, 7]
    assert report["errors"][1] == (3, "line longer than 1000 bytes: skipped")
    assert report["errors"][0][1].startswith("not JSON")
    c = open_store(home)
    assert sorted(m.content for m in c.memories.list(limit=10)[0]) == ["one", "two as a bare string"]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(
        MEMLANE_HOME=str(home),
        MEMLANE_CONFIG=str(home / "no-such-config.yaml"),
        MEMLANE_EMBEDDING__PROVIDER="none",
        MEMLANE_LOG_LEVEL="warning",
    )
    return env


def _live(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return 0
    try:
        return conn.execute("SELECT COUNT(*) FROM memories WHERE is_deleted = 0").fetchone()[0]
    except sqlite3.OperationalError:  # not created / migrated yet
        return 0
    finally:
        conn.close()


def test_import_cli_writes_batches_while_the_fifo_is_still_open(tmp_path) -> None:
    """The writer holds back the last lines until two batches are in the store: an importer that
    reads everything before writing never commits them (the writer gives up and says so)."""
    fifo = _fifo(tmp_path)
    home = tmp_path / "home"
    db = home / "memories.db"
    committed_before_end: list[bool] = []

    def write() -> None:
        with open(fifo, "wb") as fh:
            for i in range(120):
                fh.write(json.dumps({"content": f"streamed memory number {i}"}).encode() + b"\n")
            fh.flush()
            deadline = time.monotonic() + HANG_GUARD_S * 2
            while _live(db) < 100 and time.monotonic() < deadline:
                time.sleep(0.05)
            committed_before_end.append(_live(db) >= 100)
            for i in range(120, 150):
                fh.write(json.dumps({"content": f"streamed memory number {i}"}).encode() + b"\n")

    t = threading.Thread(target=write)
    t.start()
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "import", str(fifo), "--data-dir", str(home), "--batch", "50"],
        env=_env(home),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_GUARD_S * 4,
    )
    t.join(HANG_GUARD_S)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "imported 150 new, 0 duplicates, 0 bad lines" in out.stdout
    assert committed_before_end == [True]
    assert _live(db) == 150


def test_import_of_dev_zero_keeps_its_memory_bounded(tmp_path) -> None:
    """/dev/zero is one endless line: the importer reports it once and keeps skipping with bounded
    memory (the old reader held it all: 3.7 GB RSS in 10 s)."""
    home = tmp_path / "home"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memlane", "import", "/dev/zero", "--data-dir", str(home)],
        env=_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        read = 0
        deadline = time.monotonic() + HANG_GUARD_S * 3
        while read < 2 * 1024**3 and time.monotonic() < deadline:  # 2 GiB of input consumed
            assert proc.poll() is None, "the importer stopped"
            read = _rchar(proc.pid)
            time.sleep(0.1)
        assert read >= 2 * 1024**3, f"the importer read only {read} bytes"
        peak = _vm_hwm_kib(proc.pid)
        print(f"\nimport /dev/zero: {read / 1024**3:.1f} GiB read, peak RSS {peak / 1024:.0f} MiB")
        assert peak < 600 * 1024, f"peak RSS {peak / 1024:.0f} MiB"
    finally:
        proc.kill()
        proc.wait(timeout=HANG_GUARD_S)


def _rchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")
