"""A real daemon process (``python -m memlane serve``) over the network: durability across a
``kill -9`` and concurrent writers; plus an in-process concurrency test of the service.

Every process started here is killed in a fixture teardown. Traffic goes to 127.0.0.1 only,
and every request loop is bounded.
"""

from __future__ import annotations

import signal
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import free_port  # noqa: F401
from memlane.normalize import content_hash
from memlane.services.inputs import RememberInput


def test_daemon_serves_over_the_network(start_daemon):
    d = start_daemon()
    with d.client(timeout=30) as http:
        h = http.get("/health").json()
        assert h["status"] == "ok" and h["embedding_model"] == "all-MiniLM-L6-v2-onnx-int8"
        assert Path(h["db_path"]) == d.home / "memories.db"
        r = http.post("/api/memory/remember", json={"content": "Alice is allergic to peanuts."})
        assert r.status_code == 200 and r.json()["embedded"] is True
        http.post("/api/memory/remember", json={"content": "The office coffee machine is broken."})
        res = http.post("/api/memory/recall", json={"query": "nut allergy"}).json()
        assert res["legs"] == ["bm25", "vector"]
        assert res["results"][0]["content"] == "Alice is allergic to peanuts."
        err = http.get("/api/memory/nope")
        assert err.status_code == 404 and err.json()["error"]["code"] == "not_found"
        bad = http.post("/api/memory/remember", content=b"{", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"


def test_oversize_chunked_body_over_the_network(start_daemon):
    d = start_daemon(provider="none")
    limit = 16 * 1024 * 1024

    def chunks():
        yield b'{"content": "x", "metadata": {"pad": "'
        block = b"p" * (1024 * 1024)
        for _ in range(limit // len(block) + 2):
            yield block
        yield b'"}}'

    with d.client(timeout=60) as http:
        r = http.post("/api/memory/remember", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "payload_too_large"
        assert http.get("/health").json()["memories"] == 0


def test_acknowledged_writes_survive_kill_9(start_daemon, tmp_path):
    home = tmp_path / "durable"
    d = start_daemon(home)
    acked: dict[str, str] = {}
    with d.client(timeout=30) as http:
        for i in range(40):
            content = f"Durable memory number {i}: the deploy key rotates every {i + 1} days."
            r = http.post("/api/memory/remember", json={"content": content, "project": "dur"})
            assert r.status_code == 200, r.text
            acked[r.json()["id"]] = content
        batch = [{"content": f"Batched durable memory {i}"} for i in range(25)]
        r = http.post("/api/memory/remember", json={"memories": batch})
        assert r.status_code == 200
        for item, res in zip(batch, r.json()["results"]):
            acked[res["id"]] = item["content"]
        mid = next(iter(acked))
        assert http.patch(f"/api/memory/{mid}", json={"content": "Patched before the crash."}).status_code == 200
        acked[mid] = "Patched before the crash."
        gone = list(acked)[1]
        assert http.delete(f"/api/memory/{gone}").status_code == 200

    d.kill(signal.SIGKILL)
    assert d.proc.returncode == -signal.SIGKILL

    d2 = start_daemon(home)
    with d2.client(timeout=30) as http:
        for mid, content in acked.items():
            r = http.get(f"/api/memory/{mid}")
            assert r.status_code == 200, (mid, r.text)
            assert r.json()["content"] == content
            assert r.json()["is_deleted"] is (mid == gone)
        assert http.get("/api/memories", params={"limit": 1}).json()["total"] == len(acked) - 1
        # vectors came back too: the index was reloaded from SQLite
        assert http.get("/api/memories", params={"limit": 1}).json()["stats"]["indexed"] == len(acked)
        res = http.post(
            "/api/memory/recall", json={"query": "how often is the deploy key rotated", "project": "dur"}
        ).json()
        assert "vector" in res["legs"] and res["results"]
        assert http.get(f"/api/memory/{gone}/history").json()[-1]["event"] == "deleted"


def variant(text: str, k: int) -> str:
    """Equivalent spellings of ``text`` (same content_hash)."""
    return [text, text.upper(), f"  {text}  ", text.replace(" ", "\t  "), text + "!!", text.lower() + "."][k % 6]


def test_concurrent_writers_against_the_real_process(start_daemon):
    d = start_daemon()
    n_threads, per_thread, pool = 16, 50, 120
    base = [f"Concurrent fact {i} about service {i % 7} and region {i % 5}" for i in range(pool)]
    results: dict[str, set[str]] = defaultdict(set)  # content_hash -> ids
    problems: list[str] = []
    lock = threading.Lock()
    stop_readers = threading.Event()

    def writer(t: int) -> None:
        with d.client(timeout=60) as http:
            i = 0
            while i < per_thread:
                if t % 4 == 0 and i + 5 <= per_thread:  # some threads send batches of 5
                    items = [variant(base[(t * 31 + i + j) % pool], t + j) for j in range(5)]
                    r = http.post("/api/memory/remember", json={"memories": [{"content": c} for c in items]})
                    pairs = list(zip(items, r.json()["results"])) if r.status_code == 200 else []
                    i += 5
                else:
                    items = [variant(base[(t * 17 + i * 7) % pool], t + i)]
                    r = http.post("/api/memory/remember", json={"content": items[0]})
                    pairs = [(items[0], r.json())] if r.status_code == 200 else []
                    i += 1
                with lock:
                    if r.status_code != 200 or "locked" in r.text:
                        problems.append(f"{r.status_code} {r.text[:200]}")
                    for content, res in pairs:
                        assert res["content_hash"] == content_hash(content)
                        results[res["content_hash"]].add(res["id"])

    def reader() -> None:
        with d.client(timeout=60) as http:
            for k in range(200):
                if stop_readers.is_set():
                    return
                r = http.post("/api/memory/recall", json={"query": f"service {k % 7} region"})
                if r.status_code != 200:
                    with lock:
                        problems.append(f"recall {r.status_code} {r.text[:200]}")

    with ThreadPoolExecutor(max_workers=n_threads + 2) as ex:
        readers = [ex.submit(reader) for _ in range(2)]
        writers = [ex.submit(writer, t) for t in range(n_threads)]
        for f in writers:
            f.result()
        stop_readers.set()
        for f in readers:
            f.result()

    assert problems == []
    assert "database is locked" not in d.log()
    assert "Traceback" not in d.log()
    dup_ids = {h: ids for h, ids in results.items() if len(ids) != 1}
    assert dup_ids == {}, "a content got more than one id"
    with d.client(timeout=30) as http:
        listing = http.get("/api/memories", params={"limit": 1000}).json()
        assert listing["total"] == len(results)
        assert {m["id"] for m in listing["items"]} == {next(iter(ids)) for ids in results.values()}
        assert listing["stats"]["indexed"] == len(results)
        # each memory's history has one 'created' and a 'deduplicated' row per later duplicate
        sample = listing["items"][0]["id"]
        events = [e["event"] for e in http.get(f"/api/memory/{sample}/history").json()]
        assert events[0] == "created" and set(events[1:]) <= {"deduplicated"}


def test_concurrent_remember_many_in_process(vstore):
    pool = [f"In-process fact {i}: cache {i % 3} shard {i % 11}" for i in range(60)]
    n_threads, rounds = 8, 12
    errors: list[BaseException] = []
    seen: dict[str, set[str]] = defaultdict(set)
    lock = threading.Lock()
    barrier = threading.Barrier(n_threads)

    def work(t: int) -> None:
        try:
            barrier.wait(timeout=30)
            for r in range(rounds):
                batch = [variant(pool[(t * 7 + r * 5 + j) % len(pool)], t + j) for j in range(6)]
                res = vstore.memories.remember_many([RememberInput(c) for c in batch])
                assert len(res) == len(batch)
                with lock:
                    for c, x in zip(batch, res):
                        assert x.content_hash == content_hash(c)
                        assert x.status in ("created", "deduplicated")
                        seen[x.content_hash].add(x.id)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not any(th.is_alive() for th in threads)
    assert errors == []
    assert all(len(ids) == 1 for ids in seen.values())
    items, total = vstore.memories.list(limit=1000)
    assert total == len(seen)
    assert {m.id for m in items} == {next(iter(ids)) for ids in seen.values()}
    stats = vstore.memories.stats()
    assert stats["indexed"] == len(seen) and stats["live"] == len(seen)
    created = vstore.db.read(
        lambda c: c.execute("SELECT count(*) FROM memory_history WHERE event = 'created'").fetchone()[0]
    )
    dedup = vstore.db.read(
        lambda c: c.execute("SELECT count(*) FROM memory_history WHERE event = 'deduplicated'").fetchone()[0]
    )
    assert created == len(seen) and created + dedup == n_threads * rounds * 6


def test_sigterm_stops_the_workers_and_closes_the_store(start_daemon, tmp_path):
    """SIGTERM mid-pipeline: uvicorn's graceful shutdown, then the container closes (exit 0):
    no job stays leased by the dead process (else it waits for the 5-minute lease timeout)."""
    home = tmp_path / "term"
    d = start_daemon(home, provider="none")
    with d.client(timeout=60) as http:
        for start in range(0, 1200, 200):  # one extraction job per memory, skipped (no LLM) by 2 workers
            batch = [
                {"content": f"Note {i}: the staging host for service {i % 37} is node-{i % 11}."}
                for i in range(start, start + 200)
            ]
            assert http.post("/api/memory/remember", json={"memories": batch}).status_code == 200
        jobs = http.get("/api/pipeline/status").json()["jobs"]["extract"]
    assert jobs.get("pending", 0) + jobs.get("leased", 0) > 0  # the workers are busy when the signal comes
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=60) == 0, d.log()
    import sqlite3

    conn = sqlite3.connect(home / "memories.db")
    try:
        leased = conn.execute("SELECT COUNT(*) FROM memory_jobs WHERE status = 'leased'").fetchone()[0]
        total = conn.execute("SELECT COUNT(*) FROM memory_jobs WHERE job_type = 'extract'").fetchone()[0]
    finally:
        conn.close()
    assert leased == 0 and total == 1200
