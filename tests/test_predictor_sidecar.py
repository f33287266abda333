"""The predictor sidecar as a real subprocess: JSON-RPC 2.0 over stdio, the client's failure
handling (timeouts, crashes, malformed replies, crash-disable) and the read-only DB boundary."""

from __future__ import annotations

import base64
import hashlib
import json
import queue
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from memlane.predictor.client import PredictorRpcError, PredictorUnavailable, SidecarClient, sidecar_command
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database, open_readonly
from memlane.storage.embeddings import upsert as upsert_embeddings
from memlane.storage.migrations import migrate

DIM = 8
MODEL_ID = "test-8"
START_TIMEOUT = 180.0  # torch import on a busy machine; a budget, never asserted on
BIG_TIMEOUT = 30.0  # a reply deadline far above any expected latency
SESSION_TIME = "2026-02-03T09:30:00+01:00"
AT = "2026-02-03T08:00:00.000Z"


# -- database ------------------------------------------------------------------------------------


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def seed_database(path: Path, *, n_memories: int = 40, n_sessions: int = 12, n_candidates: int = 10) -> dict:
    rng = np.random.default_rng(0)
    db = Database(path)
    migrate(db)
    vectors = {f"m{i}": unit(rng) for i in range(n_memories)}

    def fill(conn: sqlite3.Connection) -> None:
        for mid, vec in vectors.items():
            content = f"memory {mid} about topic {int(mid[1:]) % 7}"
            h = hashlib.sha256(content.encode()).hexdigest()
            conn.execute(
                """INSERT INTO memories (id, content, normalized_content, content_hash, created_at,
                                updated_at) VALUES (?,?,?,?,?,?)""",
                (mid, content, content, h, AT, AT),
            )
            upsert_embeddings(conn, [(h, vec)], MODEL_ID, AT)
        for s in range(n_sessions):
            key = f"session-{s:02d}"
            started = f"2026-02-{s + 1:02d}T09:00:00.000Z"
            mids = [f"m{j}" for j in rng.choice(n_memories, n_candidates, replace=False)]
            sess_sql.insert_session(
                conn,
                key=key,
                project=f"p{s % 2}",
                harness="test",
                cwd=None,
                context=f"working on topic {s % 7}",
                started_at=started,
                predictor_state="collecting",
            )
            sess_sql.record_candidates(
                conn,
                key,
                [
                    sess_sql.CandidateRow(
                        memory_id=m, source="effective", final_score=1.0 / (r + 1), rank=r, was_injected=r < 4
                    )
                    for r, m in enumerate(mids)
                ],
                started,
            )
            pred_sql.set_session_inputs(
                conn,
                key,
                context_vector=unit(rng),
                context_model=MODEL_ID,
                signals={"session_time": f"2026-02-{s + 1:02d}T09:00:00", "session_gap_hours": 4.0 + s},
            )
            pred_sql.set_candidate_features(
                conn,
                key,
                {
                    m: {
                        "age_days": float(r),
                        "importance": float(rng.uniform()),
                        "access_count": r,
                        "is_embedded": True,
                        "baseline_score": 1.0 / (r + 1),
                        "baseline_rank": r,
                    }
                    for r, m in enumerate(mids)
                },
            )
            ids = dict(
                conn.execute("SELECT memory_id, id FROM session_memories WHERE session_key = ?", (key,)).fetchall()
            )
            labels = [1.0 if r in (1, 5) else (0.5 if r == 7 else 0.0) for r in range(n_candidates)]
            sess_sql.write_labels(conn, [(ids[m], lab, lab, ["test"]) for m, lab in zip(mids, labels)])
            sess_sql.write_score(
                conn,
                key,
                score=0.5 + s / 50,
                confidence=0.9,
                memories_recalled=4,
                memories_used=2,
                novel_context_count=0,
                reasoning=None,
                scorer="llm",
                model=None,
                at=started,
            )
        pred_sql.refresh_canary(conn, size=2, min_confidence=0.6, at=AT)

    db.write(fill)
    db.close()
    return vectors


def dump(path: Path) -> str:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    path = tmp_path_factory.mktemp("sidecar-db") / "memlane.db"
    vectors = seed_database(path)
    return path, vectors


# -- processes -----------------------------------------------------------------------------------


def command(db_path: Path, model_dir: Path) -> list[str]:
    return sidecar_command(db_path=db_path, model_dir=model_dir, embedding_model_id=MODEL_ID, native_dim=DIM)


@pytest.fixture(scope="module")
def sidecar(seeded, tmp_path_factory):
    db_path, _ = seeded
    base = tmp_path_factory.mktemp("sidecar")
    client = SidecarClient(command(db_path, base / "predictor"), stderr_path=base / "sidecar.log")
    assert client.wait_ready(START_TIMEOUT), (base / "sidecar.log").read_text()
    yield client
    client.close()


class RawSidecar:
    """A Popen'ed process fed raw lines; replies are read through a queue (never blocks forever)."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, *lines: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(line + "\n" for line in lines))
        self.proc.stdin.flush()

    def read(self, timeout: float = START_TIMEOUT) -> dict | None:
        line = self.lines.get(timeout=timeout)
        return None if line is None else json.loads(line)

    def read_all(self) -> list[dict]:
        """Close stdin (the sidecar finishes its work and exits) and return every reply left."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        out = []
        while (msg := self.read()) is not None:
            out.append(msg)
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                if not self.proc.stdin.closed:
                    self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def raw(seeded, tmp_path_factory):
    db_path, _ = seeded
    model_dir = tmp_path_factory.mktemp("raw") / "predictor"
    side = RawSidecar(command(db_path, model_dir))
    ready = side.read()
    assert ready is not None and ready.get("method") == "ready" and "id" not in ready
    side.model_dir = model_dir  # type: ignore[attr-defined]
    yield side
    side.close()


def request(rid, method: str, params=None) -> str:
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg)


# -- score requests ------------------------------------------------------------------------------


def b64(matrix: np.ndarray) -> str:
    return base64.b64encode(np.asarray(matrix, dtype="<f4").tobytes()).decode()


def score_params(n: int = 100, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    emb = np.stack([unit(rng) for _ in range(n)])
    return {
        "candidate_ids": [f"cand-{i}" for i in range(n)],
        "candidates": [
            {
                "age_days": float(i),
                "importance": (i % 10) / 10,
                "access_count": i % 4,
                "baseline_rank": i,
                "baseline_score": 1.0 / (i + 1),
            }
            for i in range(n)
        ],
        "candidate_embeddings_b64": b64(emb),
        "candidate_is_embedded": [i % 3 != 0 for i in range(n)],
        "candidate_texts": [f"memory text number {i} about topic {i % 7}" for i in range(n)],
        "context_embedding_b64": b64(unit(rng)[None, :]),
        "session_time": SESSION_TIME,
        "session_gap_hours": 5.0,
        "project": "memlane",
    }


def test_ready_notification_carries_status(sidecar, seeded):
    ready = sidecar.ready_status
    assert ready is not None
    assert ready["embedding_model_id"] == MODEL_ID and ready["native_dim"] == DIM
    assert ready["trained"] is False and ready["model_version"] == 0 and ready["model_ready"] is False
    assert ready["checkpoint_error"] is None and ready["busy_training"] is False
    assert ready["db"] == str(seeded[0])


def test_status(sidecar):
    status = sidecar.call("status", timeout_s=BIG_TIMEOUT)
    for key in (
        "trained",
        "training_pairs",
        "model_version",
        "last_trained",
        "busy_training",
        "pid",
        "feature_schema",
        "parameters",
    ):
        assert key in status
    assert status["pid"] == sidecar.status()["pid"]
    assert sidecar.status()["alive"] and sidecar.status()["ready"] and not sidecar.status()["disabled"]


def test_score_100_candidates_text_and_b64_embeddings(sidecar):
    params = score_params(100)
    result = sidecar.call("score", params, timeout_s=BIG_TIMEOUT)
    assert [s["id"] for s in result["scores"]] == params["candidate_ids"]
    values = np.array([s["score"] for s in result["scores"]])
    assert values.shape == (100,) and np.isfinite(values).all()
    assert isinstance(result["model_version"], int) and isinstance(result["trained"], bool)
    assert result["took_ms"] >= 0
    again = sidecar.call("score", params, timeout_s=BIG_TIMEOUT)
    assert again["model_version"] == result["model_version"]
    assert again["scores"] == result["scores"]  # deterministic


def test_json_and_b64_embeddings_score_identically(sidecar):
    params = score_params(20, seed=3)
    emb = np.frombuffer(base64.b64decode(params["candidate_embeddings_b64"]), dtype="<f4").reshape(20, DIM)
    ctx = np.frombuffer(base64.b64decode(params["context_embedding_b64"]), dtype="<f4")
    as_json = {
        k: v
        for k, v in params.items()
        if k not in ("candidate_embeddings_b64", "candidate_is_embedded", "context_embedding_b64")
    }
    as_json["candidate_embeddings"] = [
        row.tolist() if flag else None for row, flag in zip(emb, params["candidate_is_embedded"])
    ]
    as_json["context_embedding"] = ctx.tolist()
    first = sidecar.call("score", params, timeout_s=BIG_TIMEOUT)
    second = sidecar.call("score", as_json, timeout_s=BIG_TIMEOUT)
    assert first["model_version"] == second["model_version"]
    assert first["scores"] == second["scores"]


def test_score_by_id_reads_vectors_from_the_db(sidecar, seeded):
    _, vectors = seeded
    ids = [f"m{i}" for i in range(10)]
    common = {"candidate_ids": ids, "session_time": SESSION_TIME, "context_embedding": vectors["m0"].tolist()}
    from_db = sidecar.call("score", common, timeout_s=BIG_TIMEOUT)
    explicit = sidecar.call(
        "score", {**common, "candidate_embeddings": [vectors[m].tolist() for m in ids]}, timeout_s=BIG_TIMEOUT
    )
    assert from_db["model_version"] == explicit["model_version"]
    assert from_db["scores"] == explicit["scores"]
    unknown = sidecar.call("score", {**common, "candidate_ids": ["m0", "not-in-db"]}, timeout_s=BIG_TIMEOUT)
    assert [s["id"] for s in unknown["scores"]] == ["m0", "not-in-db"]


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"candidate_ids": []},
        {"candidate_ids": ["a", "a"]},
        {"candidate_ids": ["a"], "context_embedding": [0.1] * (DIM + 1)},
        {"candidate_ids": ["a", "b"], "candidate_embeddings_b64": base64.b64encode(b"\0" * 12).decode()},
        {"candidate_ids": ["a"], "candidate_embeddings_b64": "***not base64***"},
        {"candidate_ids": ["a"], "session_time": "yesterday-ish"},
        {"candidate_ids": ["a"], "candidates": [{"age_days": "old"}]},
        {"candidate_ids": ["a"], "project": 7},
        {"candidate_ids": [f"x{i}" for i in range(1001)]},
    ],
)
def test_invalid_score_params_are_32602(sidecar, params):
    with pytest.raises(PredictorRpcError) as err:
        sidecar.call("score", params, timeout_s=BIG_TIMEOUT)
    assert err.value.details["code"] == -32602
    assert sidecar.alive


def test_rpc_errors_via_client(sidecar):
    before = sidecar.error_counts["rpc_error"]
    with pytest.raises(PredictorRpcError) as err:
        sidecar.call("no_such_method", timeout_s=BIG_TIMEOUT)
    assert err.value.details["code"] == -32601 and "no_such_method" in str(err.value)
    with pytest.raises(PredictorRpcError) as err:
        sidecar.call("train_from_db", {"epochs": 0}, timeout_s=BIG_TIMEOUT)
    assert err.value.details["code"] == -32602
    with pytest.raises(PredictorRpcError) as err:
        sidecar.call("train", {"candidate_ids": ["m1", "m2"], "labels": [1.0]}, timeout_s=BIG_TIMEOUT)
    assert err.value.details["code"] == -32602
    assert sidecar.error_counts["rpc_error"] == before + 3
    assert sidecar.call("status", timeout_s=BIG_TIMEOUT)["pid"] == sidecar.status()["pid"]


def test_train_from_db_trains_and_leaves_the_db_unchanged(sidecar, seeded):
    db_path, _ = seeded
    before_dump, before_bytes = dump(db_path), db_path.read_bytes()
    version_before = sidecar.call("status", timeout_s=BIG_TIMEOUT)["model_version"]
    result = sidecar.call("train_from_db", {"epochs": 2}, timeout_s=120)
    assert result["accepted"], result
    assert result["model_version"] == version_before + 1
    assert result["canary_sessions"] == 2 and result["sample_count"] == 10
    assert result["replay_sessions"] >= 1
    status = sidecar.call("status", timeout_s=BIG_TIMEOUT)
    assert status["trained"] is True and status["model_version"] == result["model_version"]
    assert status["busy_training"] is False and status["last_trained"]
    saved = sidecar.call("save_checkpoint", timeout_s=BIG_TIMEOUT)
    assert hashlib.sha256(Path(saved["path"]).read_bytes()).hexdigest() == saved["sha256"]
    assert saved["model_version"] == result["model_version"]
    assert dump(db_path) == before_dump
    assert db_path.read_bytes() == before_bytes


def test_train_inline_session(sidecar, seeded):
    _, vectors = seeded
    ids = [f"m{i}" for i in range(8)]
    result = sidecar.call(
        "train",
        {
            "candidate_ids": ids,
            "labels": [1, 0, 0, 0.5, 0, 0, 0, 0],
            "session_time": SESSION_TIME,
            "continuity_score": 0.85,
            "context_embedding": vectors["m0"].tolist(),
            "epochs": 1,
        },
        timeout_s=120,
    )
    assert {"accepted", "model_version", "loss", "step", "gates"} <= set(result)
    assert result["sample_count"] == 1


def test_readonly_connection_cannot_write(seeded):
    db_path, _ = seeded
    conn = open_readonly(db_path)
    try:
        assert conn.execute("PRAGMA query_only").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 12
        for sql in [
            "INSERT INTO predictor_canary (session_key, confidence, added_at) VALUES ('x', 1, 'now')",
            "UPDATE sessions SET project = 'hijacked'",
            "DELETE FROM session_memories",
            "CREATE TABLE sneaky (x)",
            "DROP TABLE predictor_state",
        ]:
            with pytest.raises(sqlite3.OperationalError, match="readonly|query_only"):
                conn.execute(sql)
        # Even with query_only switched off the file itself is opened read-only (mode=ro).
        conn.execute("PRAGMA query_only = OFF")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO predictor_canary (session_key, confidence, added_at) VALUES ('x', 1, 'n')")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("UPDATE sessions SET project = 'hijacked'")
    finally:
        conn.close()
    assert "hijacked" not in dump(db_path)


# -- raw JSON-RPC --------------------------------------------------------------------------------


def test_every_jsonrpc_error_code_and_notifications(raw):
    raw.send(
        "this is not json",
        '{"jsonrpc": "2.0", "id": 5}',
        "[1, 2]",
        '{"jsonrpc": "1.0", "id": 6, "method": "status"}',
        '{"jsonrpc": "2.0", "id": {"a": 1}, "method": "status"}',
        request(7, "no_such_method"),
        request(8, "score", {"candidate_ids": "x"}),
        request(9, "score", [1, 2]),
        '{"jsonrpc": "2.0", "method": "status"}',  # a notification: no reply
        request("s-1", "status"),
    )
    replies = [raw.read() for _ in range(9)]
    assert all(r is not None and r["jsonrpc"] == "2.0" for r in replies)
    got = [(r["id"], r.get("error", {}).get("code")) for r in replies]
    assert got == [
        (None, -32700),
        (5, -32600),
        (None, -32600),
        (6, -32600),
        (None, -32600),
        (7, -32601),
        (8, -32602),
        (9, -32602),
        ("s-1", None),
    ]
    assert replies[-1]["result"]["native_dim"] == DIM
    assert all(isinstance(r["error"]["message"], str) and r["error"]["message"] for r in replies[:-1])
    assert raw.proc.poll() is None


def test_internal_error_is_32603_and_the_sidecar_survives(raw):
    model_dir: Path = raw.model_dir
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    model_dir.write_text("a file where the model directory should be")
    try:
        raw.send(request(20, "save_checkpoint"), request(21, "status"))
        err, status = raw.read(), raw.read()
    finally:
        model_dir.unlink()
    assert err["id"] == 20 and err["error"]["code"] == -32603
    assert status["id"] == 21 and "result" in status
    assert raw.proc.poll() is None


def test_score_is_answered_while_train_from_db_runs(raw):
    raw.send(
        request(30, "train_from_db", {"epochs": 3}), request(31, "score", score_params(100)), request(32, "status")
    )
    replies = [raw.read(), raw.read(), raw.read()]
    order = [r["id"] for r in replies]
    # The score and the status are answered by the reader while the trainer thread works.
    assert order.index(31) < order.index(30) and order.index(32) < order.index(30)
    by_id = {r["id"]: r for r in replies}
    assert len(by_id[31]["result"]["scores"]) == 100
    assert "result" in by_id[30] and by_id[30]["result"]["steps"] > 0


def test_non_finite_results_are_answered_and_do_not_kill_the_sidecar(seeded, tmp_path):
    # Finite but huge embeddings make the model's scores and the training loss non-finite. Every
    # request must still get a JSON-RPC answer, and the sidecar must keep serving: closing stdin
    # then lets it finish everything and exit cleanly, so all its replies can be collected.
    db_path, _ = seeded
    side = RawSidecar(command(db_path, tmp_path / "predictor"))
    try:
        assert side.read()["method"] == "ready"
        n = 3
        huge = {
            "candidate_ids": [f"c{i}" for i in range(n)],
            "candidate_embeddings": [[1e30] * DIM] * n,
            "context_embedding": [1e30] * DIM,
            "session_time": SESSION_TIME,
        }
        side.send(
            request(1, "train", {**huge, "labels": [1.0, 0.0, 0.0], "epochs": 1}),
            request(2, "score", huge),
            request(3, "status"),
        )
        replies = side.read_all()
        by_id = {r.get("id"): r for r in replies}
        assert side.proc.wait() == 0, f"the sidecar died; replies: {replies}"
        assert set(by_id) == {1, 2, 3}
        assert by_id[2]["error"]["code"] in (-32602, -32603)
        assert "result" in by_id[3]
        train = by_id[1]
        assert ("error" in train) or train["result"]["accepted"] is False
    finally:
        side.close()


# -- crash, restart, fail-open -------------------------------------------------------------------


def wait_for(predicate, what: str, budget: float = 60.0) -> None:
    give_up = time.monotonic() + budget
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def timed_call(client: SidecarClient, method: str, params, timeout_s: float):
    t0 = time.monotonic()
    try:
        result = client.call(method, params, timeout_s=timeout_s)
    except Exception as exc:  # returned for the assertions
        return exc, time.monotonic() - t0
    return result, time.monotonic() - t0


def test_sigkill_mid_request_fails_fast_and_the_next_start_works(seeded, tmp_path):
    db_path, _ = seeded
    client = SidecarClient(command(db_path, tmp_path / "predictor"))
    try:
        assert client.wait_ready(START_TIMEOUT)
        first_pid = client.status()["pid"]
        with ThreadPoolExecutor(1) as pool:
            fut = pool.submit(timed_call, client, "train_from_db", {"epochs": 1000, "max_seconds": 600}, BIG_TIMEOUT)
            wait_for(lambda: bool(client._pending), "the train request to be sent")
            # A status answered after the train line was read proves the train is in flight.
            client.call("status", timeout_s=BIG_TIMEOUT)
            client.kill()
            outcome, elapsed = fut.result()
        assert isinstance(outcome, PredictorUnavailable), outcome
        assert elapsed < BIG_TIMEOUT  # failed on the crash, not on the deadline
        wait_for(lambda: len(client.crashes) == 1, "the crash to be counted")
        assert client.error_counts["crash"] == 1 and not client.disabled
        with pytest.raises(PredictorUnavailable):
            client.call("status", timeout_s=BIG_TIMEOUT)  # restarting: the baseline serves meanwhile
        assert client.wait_ready(START_TIMEOUT)
        status = client.call("status", timeout_s=BIG_TIMEOUT)
        assert status["pid"] != first_pid and client.restarts == 1
        assert len(client.call("score", score_params(10), timeout_s=BIG_TIMEOUT)["scores"]) == 10
    finally:
        client.close()


FAKE_SIDECAR = textwrap.dedent("""
    import json, sys, time
    mode = sys.argv[1]
    def out(obj):
        sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\\n")
        sys.stdout.flush()
    if mode != "never-ready":
        out({"jsonrpc": "2.0", "method": "ready", "params": {"fake": True, "mode": mode}})
    seen = 0
    for line in sys.stdin:
        req = json.loads(line)
        seen += 1
        if mode == "echo":
            out({"jsonrpc": "2.0", "id": req["id"], "result": {"method": req["method"], "params": req["params"]}})
        elif mode == "garbage":
            out("this is not json {")
        elif mode == "array":
            out([1, 2, 3])
        elif mode == "no-result":
            out({"jsonrpc": "2.0", "id": req["id"]})
        elif mode == "wrong-id":
            out({"jsonrpc": "2.0", "id": str(req["id"]), "result": {}})
        elif mode == "exit":
            sys.exit(3)
        elif mode == "slow-first":
            if seen == 1:
                time.sleep(1.0)
            out({"jsonrpc": "2.0", "id": req["id"], "result": {"method": req["method"]}})
        elif mode in ("sleep", "never-ready"):
            time.sleep(3600)
""")


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def fake(tmp_path):
    script = tmp_path / "fake_sidecar.py"
    script.write_text(FAKE_SIDECAR)
    clients: list[SidecarClient] = []

    def make(mode: str, **kw) -> SidecarClient:
        c = SidecarClient([sys.executable, str(script), mode], **kw)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.kill()
        c.close(timeout_s=5)


def test_fake_echo_round_trip(fake):
    client = fake("echo")
    assert client.wait_ready(START_TIMEOUT) and client.ready_status == {"fake": True, "mode": "echo"}
    assert client.call("ping", {"x": 1}, timeout_s=BIG_TIMEOUT) == {"method": "ping", "params": {"x": 1}}
    assert client.call("ping", None, timeout_s=BIG_TIMEOUT)["params"] == {}


def test_crash_disable_after_three_crashes_and_reenable_after_cooldown(fake):
    clock = FakeClock()
    client = fake("echo", crash_threshold=3, crash_window_s=3600, cooldown_s=600, clock=clock)
    for i in range(3):
        assert not client.disabled
        assert client.wait_ready(START_TIMEOUT)
        assert client.call("ping", timeout_s=BIG_TIMEOUT)["method"] == "ping"
        client.kill()
        wait_for(lambda: len(client.crashes) == i + 1, f"crash {i + 1} to be counted")
        clock.t += 10
    assert client.disabled and client.status()["disabled"]
    assert client.crashes_last_window() == 3 and client.error_counts["crash"] == 3
    with pytest.raises(PredictorUnavailable, match="disabled"):
        client.call("ping", timeout_s=BIG_TIMEOUT)
    client.start()
    assert not client.alive  # nothing is spawned while disabled
    clock.t += 600 - 10 - 1  # one second before the cool-down ends
    assert client.disabled
    with pytest.raises(PredictorUnavailable, match="disabled"):
        client.call("ping", timeout_s=BIG_TIMEOUT)
    clock.t += 1
    assert not client.disabled and len(client.crashes) == 0
    assert client.wait_ready(START_TIMEOUT)
    assert client.call("ping", timeout_s=BIG_TIMEOUT)["method"] == "ping"
    assert client.restarts == 3


def test_crashes_outside_the_window_do_not_disable(fake):
    clock = FakeClock()
    client = fake("echo", crash_threshold=3, crash_window_s=100, cooldown_s=600, clock=clock)
    for advance in [0, 150, 10]:
        clock.t += advance
        assert client.wait_ready(START_TIMEOUT)
        client.kill()
        wait_for(lambda: bool(client.crashes) and client.crashes[-1] == clock.t, "the crash to be counted")
    assert not client.disabled and client.crashes_last_window() == 2 and client.error_counts["crash"] == 3
    clock.t += 10
    assert client.wait_ready(START_TIMEOUT)
    client.kill()
    wait_for(lambda: bool(client.crashes) and client.crashes[-1] == clock.t, "the fourth crash")
    assert client.disabled


def test_sidecar_exiting_mid_request_fails_fast(fake):
    client = fake("exit")
    assert client.wait_ready(START_TIMEOUT)
    outcome, elapsed = timed_call(client, "score", {}, BIG_TIMEOUT)
    assert isinstance(outcome, PredictorUnavailable) and elapsed < BIG_TIMEOUT
    wait_for(lambda: client.error_counts["crash"] == 1, "the crash to be recorded")
    assert "code 3" in client.errors[-1]["message"]


def test_reply_without_result_or_error_is_unavailable_at_once(fake):
    client = fake("no-result")
    assert client.wait_ready(START_TIMEOUT)
    outcome, elapsed = timed_call(client, "score", {}, BIG_TIMEOUT)
    assert isinstance(outcome, PredictorUnavailable) and elapsed < BIG_TIMEOUT
    assert client.error_counts["malformed"] == 1 and client.errors[-1]["kind"] == "malformed"
    assert client.alive


@pytest.mark.parametrize("mode", ["garbage", "array", "wrong-id"])
def test_unusable_reply_is_unavailable_and_recorded(fake, mode):
    client = fake(mode)
    assert client.wait_ready(START_TIMEOUT)
    with pytest.raises(PredictorUnavailable):
        client.call("score", {}, timeout_s=1.0)
    if mode != "wrong-id":
        assert client.error_counts["malformed"] == 1
        assert any(e["kind"] == "malformed" for e in client.status()["recent_errors"])
    assert client.error_counts["timeout"] == 1  # nothing answered this request
    assert client.alive and not client._pending


def test_timeout_with_a_sleeping_sidecar(fake):
    client = fake("sleep")
    assert client.wait_ready(START_TIMEOUT)
    with pytest.raises(PredictorUnavailable, match="timed out"):
        client.call("score", {}, timeout_s=0.2)
    assert client.error_counts["timeout"] == 1 and client.errors[-1]["kind"] == "timeout"
    assert client.alive and not client._pending and len(client.crashes) == 0


def test_late_reply_is_dropped_and_the_next_call_gets_its_own(fake):
    client = fake("slow-first")
    assert client.wait_ready(START_TIMEOUT)
    with pytest.raises(PredictorUnavailable, match="timed out"):
        client.call("first", timeout_s=0.1)
    assert client.call("second", timeout_s=BIG_TIMEOUT) == {"method": "second"}


def test_not_ready_is_unavailable(fake):
    client = fake("never-ready")
    client.start()
    with pytest.raises(PredictorUnavailable, match="starting"):
        client.call("status", timeout_s=BIG_TIMEOUT)
    assert client.error_counts["not_ready"] == 1 and client.alive and not client.ready


def test_spawn_failure_is_recorded_as_a_crash(tmp_path):
    client = SidecarClient([str(tmp_path / "no-such-binary")], crash_threshold=2, clock=FakeClock())
    with pytest.raises(PredictorUnavailable):
        client.call("status", timeout_s=BIG_TIMEOUT)
    assert client.error_counts["spawn"] == 1 and len(client.crashes) == 1
    with pytest.raises(PredictorUnavailable):
        client.call("status", timeout_s=BIG_TIMEOUT)
    assert client.disabled


def test_close_fails_pending_calls(fake):
    client = fake("sleep")
    assert client.wait_ready(START_TIMEOUT)
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(timed_call, client, "score", {}, BIG_TIMEOUT)
        wait_for(lambda: bool(client._pending), "the request to be sent")
        client.close(timeout_s=0.5)
        outcome, elapsed = fut.result()
    assert isinstance(outcome, PredictorUnavailable) and elapsed < BIG_TIMEOUT
    assert not client.alive and client.error_counts["crash"] == 0
