"""Session-start over real SQLite stores: Phase 0 verification items 1 and 2
(predictive-memory-scorer.md "Verification"), idempotency, exclusions, effectiveScore,
the status line, the character budget and topic diversity.

Similarity is computed by the real local embedding model, except in the 4,000-memory
pre-filter test, where a real loopback HTTP server speaking the Ollama embedding protocol
returns deterministic pseudo-random vectors (embedding 4,000 texts with the local model would
take most of a minute on two cores).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from memlane.config import SessionSettings
from memlane.services.inputs import RememberInput
from memlane.sessions.inject import Shown, render_line
from memlane.sessions.inputs import EndInput, PromptInput, StartInput
from memlane.sessions.service import SessionService
from memlane.sessions.start import CONTEXT_EMBED_CHARS
from memlane.storage import sessions as sess_sql

NOW = "2026-03-01T12:00:00.000Z"
NOW_DT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def ago(days: float) -> str:
    return (NOW_DT - timedelta(days=days)).isoformat().replace("+00:00", "Z")


def remember(c, content: str, **kw) -> str:
    return c.memories.remember(RememberInput(content=content, **kw)).id


def rows(c, key: str) -> list[sess_sql.SessionMemory]:
    return c.db.read(lambda conn: sess_sql.session_memories(conn, key))


def raw_rows(c, key: str) -> list[tuple]:
    return c.db.read(
        lambda conn: [
            tuple(r) for r in conn.execute("SELECT * FROM session_memories WHERE session_key = ? ORDER BY id", (key,))
        ]
    )


def shown_lines(inject: str) -> list[str]:
    return [ln for ln in inject.splitlines() if ln.startswith("- [")]


# ------------------------------------------------------------------ Phase 0, item 1


def test_phase0_1_session_memories_populated(open_store, shared_embedder) -> None:
    """After a session-start, session_memories holds every candidate with the right ids and scores."""
    c = open_store(embedding="local", sessions={"inject_limit": 3})
    corpus = [
        ("The deploy script pushes the Docker image to the staging registry.", 0.9, 2),
        ("The user prefers tabs over spaces in Python files.", 0.8, 0),
        ("Database backups run nightly at 02:00 UTC to an S3 bucket.", 0.6, 10),
        ("The frontend is written in TypeScript with React and Vite.", 0.5, 1),
        ("CI runs the full test suite on every pull request.", 0.7, 20),
        ("Kubernetes manifests live under deploy/k8s in the monorepo.", 0.4, 3),
    ]
    ids = {
        remember(c, text, importance=imp, project="web", created_at=ago(days)): (text, imp, days)
        for text, imp, days in corpus
    }
    other = remember(c, "Another project's secret sauce recipe.", importance=1.0, project="elsewhere")
    context = "Working on the deployment pipeline: Docker images and the staging registry"
    res = c.sessions.start(StartInput("s-1", project="web", context=context, now=NOW, harness="claude-code"))

    assert res.status == "new"
    got = rows(c, "s-1")
    assert {r.memory_id for r in got} == set(ids)  # every eligible memory, nothing from another project
    assert other not in {r.memory_id for r in got}
    assert res.candidate_count == len(ids)
    cv = shared_embedder.embed([context])[0]
    for r in got:
        text, imp, days = ids[r.memory_id]
        assert r.source == "effective"
        assert r.effective_score == pytest.approx(imp * 0.95**days, rel=1e-6)
        assert r.similarity == pytest.approx(float(shared_embedder.embed([text])[0] @ cv), abs=1e-4)
        assert r.predictor_score is None and r.relevance_score is None
        assert r.fts_hit_count == 0 and r.agent_feedback_count == 0 and r.label is None
        assert r.created_at == NOW
    # ranks are 1..n; the baseline ranks follow effectiveScore
    assert sorted(r.rank for r in got) == list(range(1, len(ids) + 1))
    by_baseline = sorted(got, key=lambda r: r.baseline_rank)
    assert [r.effective_score for r in by_baseline] == sorted((r.effective_score for r in got), reverse=True)
    # the injected memories are the top 3 by final rank and the ones the answer names
    injected = [r.memory_id for r in sorted(got, key=lambda r: r.rank) if r.was_injected]
    assert injected == [r.memory_id for r in sorted(got, key=lambda r: r.rank)][:3]
    assert [i["id"] for i in res.injected] == injected
    assert [i["short_id"] for i in res.injected] == [i[:8] for i in injected]
    for mid in injected:
        assert f"[{mid[:8]}]" in res.inject and ids[mid][0] in res.inject
    # the final score is the baseline score (no topic overlap in this corpus)
    for r in got:
        assert r.final_score == pytest.approx(r.effective_score, rel=1e-6)
    sess = c.db.read(lambda conn: sess_sql.get_session(conn, "s-1"))
    assert (sess.candidate_count, sess.injected_count, sess.status) == (len(ids), 3, "active")
    assert (sess.project, sess.harness, sess.context, sess.started_at) == ("web", "claude-code", context, NOW)


# ------------------------------------------------------------------ Phase 0, item 2

DIM = 32


def fake_vector(text: str) -> list[float]:
    """A deterministic unit vector per text (seeded by its SHA-256), rounded for JSON."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(DIM)
    return [round(float(x), 6) for x in v / np.linalg.norm(v)]


@pytest.fixture
def embed_server() -> Iterator[dict[str, Any]]:
    """A real loopback HTTP server speaking Ollama's ``POST /api/embed``."""
    state: dict[str, Any] = {"requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["requests"] += 1
            out = json.dumps({"model": body["model"], "embeddings": [fake_vector(t) for t in body["input"]]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=5)


def test_phase0_2_prefilter_pool_bounded_with_4000_memories(open_store, embed_server) -> None:
    """Pool = top 50 by effectiveScore U top 50 by similarity among the top 200; ~70-100, never
    above candidate_pool_size, whatever the context."""
    c = open_store(embedding={"provider": "ollama", "model": "m", "base_url": embed_server["url"], "batch_size": 512})
    n = 4000
    imps = [0.2 + 0.75 * ((i * 7919) % n) / n for i in range(n)]
    days = [((i * 31) % 300) / 10 for i in range(n)]
    texts = [f"note {i}: component c{i % 97} behaves as configured in module m{i % 13}" for i in range(n)]
    results = c.memories.remember_many(
        [
            RememberInput(content=t, importance=imp, created_at=ago(d), project="big")
            for t, imp, d in zip(texts, imps, days)
        ]
    )
    assert all(r.status == "created" and r.embedded for r in results)
    ids = [r.id for r in results]

    # the pool computed independently from the inputs
    eff = np.array([float(np.float32(imp)) * 0.95**d for imp, d in zip(imps, days)])
    order = sorted(range(n), key=lambda i: -eff[i])
    top200 = order[:200]
    vecs = np.array([fake_vector(t) for t in texts], dtype=np.float64)

    sizes = []
    for k, context in enumerate(["deploying the api", "billing reports", "a" * 5000, "module m3 config"]):
        res = c.sessions.start(StartInput(f"big-{k}", project="big", context=context, now=NOW))
        pool = {r.memory_id for r in rows(c, f"big-{k}")}
        sizes.append(len(pool))
        assert res.candidate_count == len(pool) <= 100
        cv = np.array(fake_vector(context[:CONTEXT_EMBED_CHARS]))
        sims = vecs[top200] @ cv
        by_sim = [top200[j] for j in np.argsort(-sims, kind="stable")[:50]]
        expected = {ids[i] for i in order[:50]} | {ids[i] for i in by_sim}
        assert pool == expected
        assert len(res.injected) == 10
    assert all(70 <= s <= 100 for s in sizes), sizes

    # the cap binds when the union is larger than candidate_pool_size
    capped = SessionService(c.memories, c.recall, SessionSettings(candidate_pool_size=60))
    try:
        res = capped.start(StartInput("capped", project="big", context="deploying the api", now=NOW))
        assert res.candidate_count == 60 == len(rows(c, "capped"))
        # without the similarity path the pool is the top 50 by effectiveScore
        no_sim = SessionService(c.memories, c.recall, SessionSettings(similarity_top=0))
        try:
            no_sim.start(StartInput("no-sim", project="big", context="deploying the api", now=NOW))
            assert {r.memory_id for r in rows(c, "no-sim")} == {ids[i] for i in order[:50]}
        finally:
            no_sim.close()
    finally:
        capped.close()


# ------------------------------------------------------------------ idempotency


def test_repeated_start_records_nothing(open_store) -> None:
    c = open_store()
    for i in range(5):
        remember(c, f"memory {i} about the build", importance=0.5 + i / 10)
    first = c.sessions.start(StartInput("dup", project=None, now=NOW))
    before = raw_rows(c, "dup")
    assert first.status == "new" and len(before) == 5
    for source in (None, "resume", "compact"):
        again = c.sessions.start(StartInput("dup", source=source, now=NOW))
        assert again.status == "existing"
        assert again.inject == ""
        assert again.candidate_count == 0 and again.injected == []
    assert raw_rows(c, "dup") == before
    assert c.db.read(lambda conn: conn.execute("SELECT count(*) FROM sessions").fetchone()[0]) == 1


# ------------------------------------------------------------------ exclusions


def test_superseded_and_deleted_never_injected(open_store) -> None:
    c = open_store()
    old = remember(c, "The API listens on port 8080.", importance=1.0)
    new = remember(c, "The API listens on port 9090 since the migration.", importance=0.6)
    gone = remember(c, "The staging database is called stage-db-1.", importance=0.95)
    keep = remember(c, "Logs are shipped to Loki.", importance=0.5)
    c.db.write(lambda conn: conn.execute("UPDATE memories SET superseded_by = ? WHERE id = ?", (new, old)))
    c.memories.index.set_superseded(c.memories.get(old).seq, True)
    c.memories.delete(gone)

    res = c.sessions.start(StartInput("ex", now=NOW))
    recorded = {r.memory_id for r in rows(c, "ex")}
    assert recorded == {new, keep}
    assert {i["id"] for i in res.injected} == {new, keep}
    assert "8080" not in res.inject and "stage-db-1" not in res.inject

    # prompts never bring them back either
    p = c.sessions.prompt(PromptInput("ex", "which port does the API listen on, 8080? stage-db-1?"))
    assert old not in p.matched and gone not in p.matched
    assert "8080" not in p.inject and "stage-db-1" not in p.inject


def test_superseded_after_reload(open_store, tmp_path) -> None:
    """superseded_by set in SQL is seen by a freshly loaded index (container reopened)."""
    home = tmp_path / "reload"
    c = open_store(home=home)
    old = remember(c, "Old fact about the scheduler.", importance=1.0)
    new = remember(c, "New fact about the scheduler.", importance=0.5)
    c.db.write(lambda conn: conn.execute("UPDATE memories SET superseded_by = ? WHERE id = ?", (new, old)))
    c2 = open_store(home=home)
    res = c2.sessions.start(StartInput("reloaded", now=NOW))
    assert [i["id"] for i in res.injected] == [new]


def test_decayed_below_01_excluded_but_pinned_kept(open_store) -> None:
    c = open_store()
    faded = remember(c, "Faded memory from two months ago.", importance=0.5, created_at=ago(60))  # 0.023
    pinned = remember(c, "Pinned memory from two months ago.", importance=0.5, created_at=ago(60), pinned=True)
    kept = remember(c, "Borderline kept memory.", importance=0.2, created_at=ago(13))  # 0.2 * 0.95^13 = 0.103
    dropped = remember(c, "Borderline dropped memory.", importance=0.2, created_at=ago(14))  # 0.0976
    zero = remember(c, "Unimportant memory.", importance=0.0, created_at=NOW)
    res = c.sessions.start(StartInput("decay", now=NOW))
    got = {r.memory_id: r for r in rows(c, "decay")}
    assert set(got) == {pinned, kept}
    assert got[pinned].effective_score == 1.0
    assert got[kept].effective_score == pytest.approx(0.2 * 0.95**13, rel=1e-6)
    assert got[pinned].rank == 1
    assert {faded, dropped, zero}.isdisjoint({i["id"] for i in res.injected})


def test_injection_does_not_bump_access_count(open_store) -> None:
    c = open_store()
    ids = [remember(c, f"Fact number {i} about the release train.", importance=0.9) for i in range(4)]
    res = c.sessions.start(StartInput("acc", now=NOW))
    assert len(res.injected) == 4
    c.sessions.prompt(PromptInput("acc", "release train fact number 2"))
    c.db.write(lambda conn: None)  # flush any queued background write
    for i in ids:
        m = c.memories.get(i)
        assert m.access_count == 0 and m.last_accessed is None


def test_project_scope_includes_global_memories(open_store) -> None:
    c = open_store()
    a = remember(c, "Project A fact.", project="a")
    b = remember(c, "Project B fact.", project="b")
    g = remember(c, "Global fact.")
    c.sessions.start(StartInput("pa", project="a", now=NOW))
    c.sessions.start(StartInput("all", now=NOW))
    assert {r.memory_id for r in rows(c, "pa")} == {a, g}
    assert {r.memory_id for r in rows(c, "all")} == {a, b, g}


# ------------------------------------------------------------------ status line


def test_status_line_counts_scored_sessions(open_store) -> None:
    c = open_store()
    remember(c, "Something worth knowing.")
    res = c.sessions.start(StartInput("first", now=NOW))
    assert res.inject.splitlines()[0] == "[memlane: collecting | 0/10 sessions | baseline only]"
    assert res.predictor_state == "collecting"
    c.sessions.end(EndInput("first", now=NOW))
    for i in range(2):
        c.sessions.start(StartInput(f"more-{i}", now=NOW))
        c.sessions.end(EndInput(f"more-{i}", now=NOW))
    c.sessions.start(StartInput("unscored", now=NOW))  # started, never ended: not counted
    res = c.sessions.start(StartInput("fourth", now=NOW))
    assert res.inject.splitlines()[0] == "[memlane: collecting | 3/10 sessions | baseline only]"
    for i in range(9):
        c.sessions.end(EndInput(f"extra-{i}", now=NOW))
    res = c.sessions.start(StartInput("later", now=NOW))
    assert res.inject.splitlines()[0] == "[memlane: collecting | 10/10 sessions | baseline only]"


def test_status_line_without_memories(open_store) -> None:
    c = open_store()
    res = c.sessions.start(StartInput("empty", now=NOW))
    assert res.inject == "[memlane: collecting | 0/10 sessions | baseline only]\n"
    assert res.candidate_count == 0 and res.injected == []


# ------------------------------------------------------------------ budget


def test_inject_budget_chars_respected(open_store) -> None:
    c = open_store(sessions={"inject_budget_chars": 300})
    big = remember(c, "L" * 400, importance=1.0, created_at=NOW)
    mids = [remember(c, f"{i} " + "m" * 98, importance=0.9 - i / 10, created_at=NOW) for i in range(4)]
    res = c.sessions.start(StartInput("budget", now=NOW))
    lines = shown_lines(res.inject)
    assert sum(len(ln) + 1 for ln in lines) <= 300
    # each line costs 27 + 100 = 127 chars: two fit, the 400-char memory is skipped
    assert [i["id"] for i in res.injected] == mids[:2]
    assert big not in res.inject
    injected_rows = {r.memory_id for r in rows(c, "budget") if r.was_injected}
    assert injected_rows == set(mids[:2])
    for mid in mids[:2]:
        m = c.memories.get(mid)
        assert render_line(Shown(mid, m.created_at, m.content)).rstrip("\n") in lines


def test_zero_budget_injects_nothing(open_store) -> None:
    c = open_store(sessions={"inject_budget_chars": 0})
    remember(c, "short")
    res = c.sessions.start(StartInput("nobudget", now=NOW))
    assert res.injected == [] and shown_lines(res.inject) == []
    assert "<memory-feedback>" not in res.inject
    assert len(rows(c, "nobudget")) == 1  # still recorded as a candidate


def test_feedback_request_names_an_injected_id(open_store) -> None:
    c = open_store()
    mid = remember(c, "Some fact.")
    res = c.sessions.start(StartInput("fb", now=NOW))
    assert "<memory-feedback>" in res.inject and f'"{mid[:8]}": 0.8' in res.inject
    off = open_store(home=c.settings.home.parent / "off", sessions={"agent_feedback": False})
    remember(off, "Some fact.")
    assert "<memory-feedback>" not in off.sessions.start(StartInput("fb", now=NOW)).inject


# ------------------------------------------------------------------ effectiveScore


def test_effective_score_importance_times_095_pow_days(open_store) -> None:
    c = open_store()
    a = remember(c, "Alpha memory.", importance=0.9, created_at=ago(30))  # 0.9 * 0.95^30 = 0.193
    b = remember(c, "Bravo memory.", importance=0.3, created_at=ago(0))  # 0.300
    cc = remember(c, "Charlie memory.", importance=0.6, created_at=ago(5))  # 0.464
    d = remember(c, "Delta memory.", importance=0.8, created_at=ago(10))  # 0.479
    fut = remember(c, "Future memory.", importance=0.35, created_at=ago(-3))  # negative age counts as 0
    res = c.sessions.start(StartInput("eff", now=NOW))
    got = {r.memory_id: r for r in rows(c, "eff")}
    expected = {a: 0.9 * 0.95**30, b: 0.3, cc: 0.6 * 0.95**5, d: 0.8 * 0.95**10, fut: 0.35}
    for mid, value in expected.items():
        assert got[mid].effective_score == pytest.approx(value, rel=1e-6)
    order = [d, cc, fut, b, a]
    assert [i["id"] for i in res.injected] == order
    assert [got[m].rank for m in order] == [1, 2, 3, 4, 5]
    assert [got[m].baseline_rank for m in order] == [1, 2, 3, 4, 5]
    # a later "now" decays everything by the same factor: same order, scores x 0.95^10
    later = (NOW_DT + timedelta(days=10)).isoformat()
    c.sessions.start(StartInput("eff-later", now=later))
    got2 = {r.memory_id: r for r in rows(c, "eff-later")}
    assert got2[a].effective_score == pytest.approx(0.9 * 0.95**40, rel=1e-6)
    assert got2[fut].effective_score == pytest.approx(0.35 * 0.95**7, rel=1e-6)


# ------------------------------------------------------------------ topic diversity

DUP_1 = "The deploy script pushes the Docker image to the staging registry before production."
DUP_2 = "The deploy script pushes the Docker image to the staging registry before going to production."
DISTINCT = [
    "The user prefers tabs over spaces in Python files.",
    "Database backups run nightly at 02:00 UTC to an S3 bucket.",
    "The frontend is written in TypeScript with React and Vite.",
]


def _diversity_corpus(c) -> tuple[str, str, list[str]]:
    d1 = remember(c, DUP_1, importance=0.9, created_at=NOW)
    d2 = remember(c, DUP_2, importance=0.89, created_at=NOW)
    others = [remember(c, t, importance=0.8 - i / 10, created_at=NOW) for i, t in enumerate(DISTINCT)]
    return d1, d2, others


def test_topic_diversity_near_duplicates_do_not_both_take_top_slots(open_store, tmp_path) -> None:
    c = open_store(embedding="local", sessions={"inject_limit": 2})
    d1, d2, others = _diversity_corpus(c)
    res = c.sessions.start(StartInput("div", context="deploying the service", now=NOW))
    assert [i["id"] for i in res.injected] == [d1, others[0]]
    got = {r.memory_id: r for r in rows(c, "div")}
    assert got[d2].final_score == pytest.approx(0.89 * 0.55, rel=1e-5)  # second on its topic
    assert got[d2].baseline_rank == 2 and got[d2].rank == 5  # 0.4895 < 0.6, the lowest distinct one
    for mid in [d1, *others]:
        assert got[mid].final_score == pytest.approx(got[mid].effective_score)

    # without vectors there is no diversity pass: the near-duplicates take both slots
    plain = open_store(home=tmp_path / "plain", sessions={"inject_limit": 2})
    p1, p2, _ = _diversity_corpus(plain)
    res = plain.sessions.start(StartInput("div", now=NOW))
    assert [i["id"] for i in res.injected] == [p1, p2]


def test_prompt_before_start_does_not_block_the_start(open_store) -> None:
    c = open_store()
    for i in range(5):
        remember(c, f"Fact number {i} about the deploy pipeline and its staging step.")
    c.sessions.prompt(PromptInput(session_key="early", prompt="deploy pipeline"))
    res = c.sessions.start(StartInput(session_key="early"))
    assert res.status == "new" and res.candidate_count == 5
    injected = [r for r in rows(c, "early") if r.was_injected]
    assert len(injected) == 5
    again = c.sessions.start(StartInput(session_key="early"))
    assert again.status == "existing" and again.inject == ""
