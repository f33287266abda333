"""The score deadline (``scoreTimeoutMs``) and the kinds of score failures, at the daemon level.

predictive-memory-scorer.md Phase 3's fail-open rule: a reply later than ``scoreTimeoutMs``
(120 ms by default), a crash or a malformed reply means the baseline ranking for that request
and an error recorded. Two parts:

* a REAL sidecar (``memlane predictor serve``) under a container with the DEFAULT settings:
  the sidecar is made slow for real by stopping it (SIGSTOP, SIGCONT after), so a session-start
  meets the 120 ms deadline with no reply; and killed (SIGKILL) with a request in flight,
  which must be recorded as a crash, not a timeout;
* a stand-in sidecar (a few lines of Python speaking the same JSON-RPC lines, driven by the
  real :class:`SidecarClient`) for the replies a real sidecar does not send on purpose: a
  JSON-RPC error, a reply without result, scores for the wrong candidates.

No assertion depends on machine speed: "late" is made certain by the stopped process, and a
request expected to be scored gets a 30 s deadline, set through the live setting (the same
object a configuration change updates), which is itself what is being tested.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import api_client
from memlane.config import load_settings
from memlane.config.predictor import PredictorSettings
from memlane.container import Container, open_container
from memlane.predictor.client import SidecarClient
from memlane.services.inputs import RememberInput
from memlane.services.predictor_scoring import ERROR_KINDS, ScoreChannel
from memlane.sessions.inputs import StartInput
from memlane.storage import predictor as pred_sql

PROJECT = "deadline"
READY_S = 120
NOTES = [
    f"The {c} service {f}."
    for c in ("billing", "search", "auth")
    for f in (
        "deploys from the main branch every Tuesday",
        "pages on-call when p99 latency is over budget",
        "keeps its migrations under db/migrations",
    )
]  # 9 memories: a small request


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # the autouse env isolation is function-scoped
        for k in list(os.environ):
            if k.startswith("MEMLANE_"):
                mp.delenv(k)
        mp.setenv("MEMLANE_CONFIG", str(tmp_path_factory.getbasetemp() / "no-such-config.yaml"))
        yield tmp_path_factory.mktemp("deadline-home")


@pytest.fixture(scope="module")
def c(home, shared_embedder):
    """One container with the DEFAULT predictor settings (score deadline 120 ms), real sidecar."""
    settings = load_settings(home=home, sessions={"inject_limit": 3})
    assert settings.predictor.score_timeout_ms == 120.0  # the default under test
    c = open_container(settings, embedder=shared_embedder, predictor=True)
    try:
        assert c.predictor is not None and c.predictor.backend.wait_ready(READY_S)
        c.memories.remember_many(
            [RememberInput(content=t, project=PROJECT, importance=0.3 + 0.05 * i) for i, t in enumerate(NOTES)]
        )
        yield c
    finally:
        c.predictor.wait_training(300)
        c.close()


_n = 0


def start(c: Container, prefix: str):
    global _n
    _n += 1
    key = f"{prefix}-{_n}"
    return key, c.sessions.start(StartInput(key, project=PROJECT, context="deploying the billing service"))


def rows(c: Container, key: str) -> list[dict]:
    return c.db.read(
        lambda conn: [
            dict(r) for r in conn.execute("SELECT * FROM session_memories WHERE session_key = ? ORDER BY rank", (key,))
        ]
    )


def signals(c: Container, key: str) -> dict:
    return c.db.read(lambda conn: pred_sql.session_signals(conn, key))


def assert_baseline(c: Container, key: str, res) -> str:
    """The start served the baseline ranking: no predictor score or rank recorded, the injected
    memories are the baseline's top ``inject_limit``; returns the recorded ``predictor_error``."""
    got = rows(c, key)
    assert res.status == "new" and len(got) == len(NOTES)
    assert all(r["predictor_rank"] is None and r["predictor_score"] is None for r in got)
    assert {r["memory_id"] for r in got if r["was_injected"]} == {
        r["memory_id"] for r in got if r["baseline_rank"] <= 3
    }
    return signals(c, key)["predictor_error"]


def assert_scored(c: Container, key: str) -> None:
    got = rows(c, key)
    assert got and sorted(r["predictor_rank"] for r in got) == list(range(1, len(got) + 1))
    assert "predictor_error" not in signals(c, key)


def counts(c: Container) -> tuple[dict, dict]:
    """(the client's recorded error kinds, the channel's failed requests by kind), copies."""
    return dict(c.predictor.backend.error_counts), dict(c.predictor.channel.error_kinds)


@pytest.fixture
def deadline(c):
    """Set the live ``score_timeout_ms`` in place (what a configuration change does to the
    settings object the service holds); the default 120 ms is put back after the test."""
    live = c.settings.predictor
    assert c.predictor.settings is live  # the service reads the container's settings object
    yield lambda ms: setattr(live, "score_timeout_ms", ms)
    live.score_timeout_ms = 120.0


# ------------------------------------------------------------------------------ real sidecar


def test_a_stopped_sidecar_misses_the_default_deadline_then_the_next_start_is_scored(c, deadline):
    p = c.predictor
    assert p.channel.deadline_ms() == 120.0
    client0, kinds0 = counts(c)
    pid = p.backend.status()["pid"]
    os.kill(pid, signal.SIGSTOP)  # no reply can arrive before SIGCONT, which comes after the start
    try:
        key, res = start(c, "stopped")
    finally:
        os.kill(pid, signal.SIGCONT)
    error = assert_baseline(c, key, res)
    assert "timed out" in error
    client1, kinds1 = counts(c)
    assert client1.get("timeout", 0) == client0.get("timeout", 0) + 1
    assert client1.get("crash", 0) == client0.get("crash", 0)  # a late reply is not a crash
    assert kinds1 == {**kinds0, "timeout": kinds0.get("timeout", 0) + 1}
    last = p.channel.recent_errors[-1]
    assert last["kind"] == "timeout" and last["deadline_ms"] == 120.0  # the default deadline applied
    assert last["error"] == error
    with api_client(c, raise_server_exceptions=True) as client:
        st = client.get("/api/predictor/status").json()
    assert st["score_timeout_ms"] == 120.0 and st["score_error_kinds"] == kinds1
    assert st["score_recent_errors"][-1]["kind"] == "timeout"
    assert st["sidecar"]["alive"] and st["sidecar"]["pid"] == pid  # the same process, resumed

    # The next request gets its own reply (the late one is dropped). Its deadline is raised
    # through the live setting so that "scored" does not depend on machine speed; that the
    # change reaches the very next request is part of what is checked.
    deadline(30_000)
    assert p.channel.deadline_ms() == 30_000
    scored = p.channel.scored
    key, _ = start(c, "resumed")
    assert_scored(c, key)
    assert p.channel.scored == scored + 1 and counts(c)[1] == kinds1


def test_a_sidecar_killed_mid_request_is_recorded_as_a_crash_not_a_timeout(c, deadline):
    p = c.predictor
    backend = p.backend
    assert backend.wait_ready(READY_S)
    deadline(30_000)  # the crash must be seen long before the deadline could pass
    client0, kinds0 = counts(c)
    pid = backend.status()["pid"]
    out: dict = {}
    os.kill(pid, signal.SIGSTOP)
    try:
        worker = threading.Thread(target=lambda: out.update(zip(("key", "res"), start(c, "killed"))))
        worker.start()
        for _ in range(3000):  # the start's score request is in flight
            if backend._pending:
                break
            time.sleep(0.01)
        assert backend._pending, "the score request was never sent"
        os.kill(pid, signal.SIGKILL)
        worker.join(120)
        assert not worker.is_alive()
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    error = assert_baseline(c, out["key"], out["res"])
    assert "exited" in error and "timed out" not in error
    client1, kinds1 = counts(c)
    assert client1.get("crash", 0) == client0.get("crash", 0) + 1
    assert client1.get("timeout", 0) == client0.get("timeout", 0)  # not a timeout
    assert kinds1 == {**kinds0, "crash": kinds0.get("crash", 0) + 1}
    last = p.channel.recent_errors[-1]
    assert last["kind"] == "crash" and last["deadline_ms"] == 30_000
    assert backend.wait_ready(READY_S) and backend.status()["pid"] != pid  # started again
    key, _ = start(c, "after-kill")
    assert_scored(c, key)


# ------------------------------------------------------------------------------ stand-in sidecar

STAND_IN = textwrap.dedent("""
    import json, sys
    print(json.dumps({"jsonrpc": "2.0", "method": "ready", "params": {}}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        ids, mode = req["params"]["candidate_ids"], req["params"]["context_text"]
        if mode == "silent":
            continue
        reply = {"jsonrpc": "2.0", "id": req["id"]}
        if mode == "rpc_error":
            reply["error"] = {"code": -32603, "message": "boom"}
        elif mode == "no_result":
            pass
        elif mode == "wrong_ids":
            reply["result"] = {"scores": [{"id": "nope", "score": 1.0}]}
        else:
            reply["result"] = {"scores": [{"id": m, "score": float(i)} for i, m in enumerate(ids)]}
        print(json.dumps(reply), flush=True)
""")


@pytest.fixture
def stand_in(tmp_path: Path):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    client = SidecarClient([sys.executable, str(script)], crash_threshold=100)
    assert client.wait_ready(60)
    yield client
    client.close()


def request(mode: str) -> dict:
    return {"candidate_ids": ["a", "b", "c"], "context_text": mode}


def test_the_deadline_is_read_when_each_request_is_sent(stand_in):
    settings = PredictorSettings(score_timeout_ms=30_000)
    ch = ScoreChannel(stand_in, lambda: settings.score_timeout_ms)
    assert ch.score(request("ok")).ranked == ["c", "b", "a"]
    settings.score_timeout_ms = 1.0  # changed in place: the next request gets it
    pending = ch.send(request("silent"))
    settings.score_timeout_ms = 30_000  # a change after sending does not move a request's deadline
    assert pending.deadline_ms == 1.0
    res = pending.result()
    assert res.error and "timed out" in res.error and not res.scores
    assert ch.recent_errors[-1]["kind"] == "timeout" and ch.recent_errors[-1]["deadline_ms"] == 1.0
    ch2 = ScoreChannel(stand_in, 250.0)  # a plain number is accepted too
    assert ch2.deadline_ms() == 250.0
    assert ScoreChannel(stand_in, lambda: float("nan")).deadline_ms() == 0.0  # never raises


def test_every_failure_is_counted_by_its_kind(stand_in):
    ch = ScoreChannel(stand_in, 30_000)
    for mode, kind in (("rpc_error", "rpc_error"), ("no_result", "malformed"), ("wrong_ids", "malformed")):
        res = ch.score(request(mode))
        assert res.error and not res.scores, mode
        assert ch.recent_errors[-1]["kind"] == kind, (mode, ch.recent_errors[-1])
    assert ch.score(request("ok")).error is None
    off = ScoreChannel(None, 30_000)
    assert off.score(request("ok")).error == "RuntimeError: predictor off"
    assert off.error_kinds == {"unavailable": 1} and off.recent_errors[-1]["deadline_ms"] is None
    pending = ch.send(request("silent"))
    stand_in.kill()  # the request in flight fails when the reader sees the exit
    res = pending.result()
    assert "exited" in res.error and ch.recent_errors[-1]["kind"] == "crash"
    assert ch.error_kinds == {"rpc_error": 1, "malformed": 2, "crash": 1}
    assert ch.errors == sum(ch.error_kinds.values()) == 4 and ch.scored == 1
    assert set(ch.error_kinds) <= set(ERROR_KINDS)
