"""Seed verification items 7, 15, 35 and 38 through the daemon's own services, with a REAL
sidecar subprocess (``memlane predictor serve``), real SQLite stores and the real local
embedder (predictive-memory-scorer.md, "Phases 1-3" verification list).

A module fixture builds one *trained home*: 30 memories, then rated sessions through the real
session pipeline (start, agent feedback, end, comparison, retrain in the sidecar) until the
sidecar has accepted a model that ranks differently from the baseline. Each test copies that
home and opens its own container on the copy. Where a test needs a track record the daemon
only earns over dozens of sessions (cold start exited, a given success rate), it writes a
persisted policy state into the copy before opening it, the way ``memlane bench sessions``
does (:func:`benchmarks.sessions.seed_alpha`); the daemon then reads it as it reads any
saved state. Score deadlines are 30 s, so nothing depends on machine speed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.sessions import seed_alpha
from memlane.config import load_settings
from memlane.config import predictor as C
from memlane.config.clock import now_iso
from memlane.container import Container, open_container
from memlane.predictor import policy
from memlane.predictor.dataset import load_sessions
from memlane.services.inputs import RememberInput
from memlane.sessions.inject import short_id
from memlane.sessions.inputs import EndInput, StartInput
from memlane.storage import predictor as pred_sql
from memlane.storage.db import connect, open_readonly
from predictor_corpus_helpers import CONTEXTS, CORPUS, FACTS, PROJECT, READY_S

TRANSCRIPT = "\n".join(
    f"user: step {i} of the deploy, push the docker image to staging\nassistant: done, image tag v{i}"
    for i in range(20)
)
#: The baseline ranks (1-based) the agent rates useful while the trained home is built: far
#: below the injected five, so the trained predictor disagrees with the baseline.
LIFTED_RANKS = range(21, 26)
RRF_K = 12.0
DIVERSITY_THRESHOLD, DIVERSITY_DECAY, DIVERSITY_FLOOR = 0.85, 0.5, 0.1


# ------------------------------------------------------------------------------ containers


def open_home(home: Path, embedder, **predictor: Any) -> Container:
    """A container on ``home`` with its sidecar ready (inject limit 5, score deadline 30 s)."""
    llm = predictor.pop("llm", None)
    extra = {"llm": llm} if llm else {}
    settings = load_settings(
        home=home, sessions={"inject_limit": 5}, predictor={"score_timeout_ms": 30_000, **predictor}, **extra
    )
    c = open_container(settings, embedder=embedder, predictor=True)
    assert c.predictor is not None and c.predictor.backend.wait_ready(READY_S)
    return c


def close_home(c: Container) -> None:
    c.predictor.wait_training(300)
    c.close()


@contextmanager
def opened(home: Path, embedder, **predictor: Any) -> Iterator[Container]:
    c = open_home(home, embedder, **predictor)
    try:
        yield c
    finally:
        close_home(c)


@contextmanager
def sidecar_stopped(c: Container) -> Iterator[int]:
    """SIGSTOP the sidecar for the block (nothing it is asked can be answered before the block ends)."""
    pid = c.predictor.backend.status()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def rows(c: Container, key: str) -> list[dict]:
    return c.db.read(
        lambda conn: [
            dict(r) for r in conn.execute("SELECT * FROM session_memories WHERE session_key = ? ORDER BY rank", (key,))
        ]
    )


def training_rows(c: Container) -> list[dict]:
    return c.db.read(lambda conn: [dict(r) for r in conn.execute("SELECT * FROM predictor_training_log ORDER BY id")])


def comparison(c: Container, key: str) -> dict:
    (row,) = c.db.read(
        lambda conn: [
            dict(r) for r in conn.execute("SELECT * FROM predictor_comparisons WHERE session_key = ?", (key,))
        ]
    )
    return row


def persist_state(home: Path, state: policy.PolicyState) -> None:
    """Write ``state`` as the daemon's saved policy state (read by the next container)."""
    conn = connect(home / "memories.db")
    try:
        conn.execute("BEGIN IMMEDIATE")
        pred_sql.save_state(conn, state.to_dict(), now_iso())
        conn.execute("COMMIT")
    finally:
        conn.close()


def saved_state(home: Path) -> policy.PolicyState:
    conn = connect(home / "memories.db", read_only=True)
    try:
        return policy.PolicyState.from_dict(pred_sql.load_state(conn))
    finally:
        conn.close()


def rated_session(c: Container, key: str, context: str, ratings) -> tuple[Any, list[dict]]:
    """Start ``key``, rate its candidates with ``ratings(rows) -> {id: score}``, end it."""
    res = c.sessions.start(StartInput(key, project=PROJECT, context=context))
    got = rows(c, key)
    fb = ratings(got)
    assert c.sessions.feedback(key, fb).applied == len(fb)
    c.sessions.end(EndInput(key, project=PROJECT), wait=True)
    return res, got


def lift_deep_baseline_ranks(got: list[dict]) -> dict[str, float]:
    """The injected five rated useless, baseline ranks 21-25 rated useful (confidence 1.0)."""
    out = {r["memory_id"]: 0.0 for r in got if r["was_injected"]}
    out.update({r["memory_id"]: 1.0 for r in got if r["baseline_rank"] in LIFTED_RANKS})
    return out


@pytest.fixture(scope="module")
def trained_home(tmp_path_factory, shared_embedder) -> Path:
    """A closed home whose sidecar accepted a model trained on rated sessions (min_training_sessions
    and train_interval_sessions 1: every rated session retrains), built by the real pipeline."""
    with pytest.MonkeyPatch.context() as mp:  # the autouse env isolation is function-scoped
        for k in list(os.environ):
            if k.startswith("MEMLANE_"):
                mp.delenv(k)
        mp.setenv("MEMLANE_CONFIG", str(tmp_path_factory.getbasetemp() / "no-such-config.yaml"))
        home = tmp_path_factory.mktemp("trained-home")
        with opened(
            home, shared_embedder, min_training_sessions=1, train_interval_sessions=1, exploration_rate=0.0
        ) as c:
            c.memories.remember_many(
                [RememberInput(content=t, project=PROJECT, importance=0.3 + 0.02 * i) for i, t in enumerate(CORPUS)]
            )
            for i in range(4):
                rated_session(c, f"train-{i}", CONTEXTS[i % len(CONTEXTS)], lift_deep_baseline_ranks)
                c.predictor.wait_training(300)
            accepted = [r for r in training_rows(c) if r["accepted"]]
            assert accepted, training_rows(c)
            assert c.predictor.state.trained and c.predictor.phase() == "warming"
        return home


@pytest.fixture
def home(trained_home: Path, tmp_path: Path) -> Path:
    """A private copy of the trained home."""
    dst = tmp_path / "home"
    shutil.copytree(trained_home, dst)
    return dst


# ------------------------------------------------------------------------------ item 7: RRF


def memory_vectors(c: Container, ids: list[str]) -> dict[str, np.ndarray | None]:
    """Each memory's stored content vector of the serving embedder (None: none stored)."""
    model = c.embedder.model_id
    got = c.db.read(
        lambda conn: {
            r[0]: r[1]
            for r in conn.execute(
                f"""SELECT m.id, e.vector FROM memories m LEFT JOIN embeddings e
            ON e.content_hash = m.content_hash AND e.model = ?
            WHERE m.id IN ({",".join("?" * len(ids))})""",
                [model, *ids],
            )
        }
    )
    return {m: None if got.get(m) is None else np.frombuffer(got[m], dtype="<f4").astype(np.float64) for m in ids}


def expected_fusion(
    baseline_rank: dict[str, int],
    predictor_rank: dict[str, int],
    alpha: float,
    vectors: dict[str, np.ndarray | None],
    k: float = RRF_K,
) -> tuple[list[str], dict[str, float]]:
    """The seed's fused ranking, computed here from the recorded ranks alone.

    RRF: ``alpha / (k + rank_baseline) + (1 - alpha) / (k + rank_predictor)``, a rank missing
    from one list counting as N + 1. Then topic diversity as built (sessions/diversity.py): walk
    by fused score; a memory whose cosine to j >= 1 already-walked memories exceeds 0.85 is
    multiplied by ``0.9 * 0.5 ** j + 0.1``; memories without a vector are never attenuated.

    Returns:
        (ids by adjusted score, best first; ``{id: adjusted score}``).
    """
    ids = list(baseline_rank)
    n = len(set(ids) | set(predictor_rank))
    fused = {
        m: alpha / (k + baseline_rank.get(m, n + 1)) + (1 - alpha) / (k + predictor_rank.get(m, n + 1)) for m in ids
    }
    walk = sorted(ids, key=lambda m: -fused[m])
    assert len({fused[m] for m in ids}) == len(ids), "tied fused scores: the walk order would be ambiguous"
    taken: list[str] = []
    adjusted = {}
    for m in walk:
        v = vectors[m]
        overlaps = 0
        if v is not None:
            for t in taken:
                w = vectors[t]
                if w is None:
                    continue
                cos = float(v @ w)
                assert abs(cos - DIVERSITY_THRESHOLD) > 1e-5, "a cosine on the threshold: ambiguous"
                overlaps += cos > DIVERSITY_THRESHOLD
        factor = (1 - DIVERSITY_FLOOR) * DIVERSITY_DECAY**overlaps + DIVERSITY_FLOOR if overlaps else 1.0
        adjusted[m] = fused[m] * factor
        taken.append(m)
    order = sorted(ids, key=lambda m: -adjusted[m])
    assert len({adjusted[m] for m in ids}) == len(ids), "tied adjusted scores: the final order would be ambiguous"
    return order, adjusted


#: An alpha no rank pair can tie at (1 - alpha and alpha are far from small-integer ratios).
EARNED_ALPHA = 0.41421356


def test_item7_session_start_injects_the_rrf_fusion_of_both_recorded_rankings(home, shared_embedder):
    """Seed item 7 (RRF fusion): with an earned alpha < 1 (a persisted policy state: trained,
    cold start exited, past the early floors, margins earned; ``seed_alpha``), the
    session-start's final ranking, its recorded final scores and the injected list are exactly
    RRF (k = 12) of the recorded baseline and predictor ranks at that alpha, followed by topic
    diversity; neither alpha 1 nor alpha 0 gives that order. (The sidecar ranks every
    candidate, so the missing-rank rule, N + 1, is not reached through the daemon.)"""
    seed_alpha(home, EARNED_ALPHA)  # trained, cold start exited, past the floors, margins earned
    with opened(home, shared_embedder, exploration_rate=0.0) as c:
        p = c.predictor
        assert p.phase() == "active" and p.alpha() == pytest.approx(EARNED_ALPHA, abs=1e-12)
        key = "fused-1"
        res = c.sessions.start(StartInput(key, project=PROJECT, context=CONTEXTS[2]))
        got = rows(c, key)
        sig = c.db.read(lambda conn: pred_sql.session_signals(conn, key))
        vectors = memory_vectors(c, [r["memory_id"] for r in got])
    assert "predictor_error" not in sig and sig["phase"] == "active"
    alpha = sig["alpha"]
    assert alpha == pytest.approx(EARNED_ALPHA, abs=1e-12)  # the alpha this start recorded it used
    assert len(got) == len(CORPUS) and all(r["predictor_rank"] is not None for r in got)
    b_rank = {r["memory_id"]: r["baseline_rank"] for r in got}
    p_rank = {r["memory_id"]: r["predictor_rank"] for r in got}
    assert sorted(p_rank.values()) == sorted(b_rank.values()) == list(range(1, len(got) + 1))
    by_base = sorted(b_rank, key=b_rank.get)
    by_pred = sorted(p_rank, key=p_rank.get)
    assert by_pred != by_base, "the trained predictor must disagree with the baseline for this test to bite"

    order, adjusted = expected_fusion(b_rank, p_rank, alpha, vectors)
    recorded = [r["memory_id"] for r in sorted(got, key=lambda r: r["rank"])]
    assert recorded == order
    for r in got:
        assert r["final_score"] == pytest.approx(adjusted[r["memory_id"]], rel=1e-9, abs=0), r["memory_id"]
    assert [m["id"] for m in res.injected] == order[:5]
    assert {r["memory_id"] for r in got if r["was_injected"]} == set(order[:5])
    # the alpha matters: alpha 1 (the baseline alone) and alpha 0 (the predictor alone) give other orders
    assert expected_fusion(b_rank, p_rank, 1.0, vectors)[0] != order
    # nearly the predictor's order alone (at exactly 0 the fused scores are 1 / (k + r), and a
    # diversity factor of 0.55 = 22 / 40 can tie two of them: ranks 10 and 28)
    assert expected_fusion(b_rank, p_rank, 0.00314159, vectors)[0] != order
    assert any(
        adjusted[m] != pytest.approx(alpha / (RRF_K + b_rank[m]) + (1 - alpha) / (RRF_K + p_rank[m]), rel=1e-12)
        for m in order
    ), "topic diversity never applied"


# ------------------------------------------------------------------------------ item 15: drift


class RecordingBackend:
    """The real sidecar client, with every ``call``'s method, params and reply kept (a
    pass-through: nothing is changed, the sidecar answers)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, Any, Any]] = []

    def call(self, method: str, params: Any = None, *, timeout_s: float) -> Any:
        reply = self.inner.call(method, params, timeout_s=timeout_s)
        self.calls.append((method, params, reply))
        return reply

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_item15_drift_reset_through_the_service(home, shared_embedder):
    """Seed item 15 (drift detection): after cold start exited, a success rate below 0.3 for
    driftResetWindow eligible sessions resets alpha to 1.0 and the EMA to 0.5, increments
    drift_resets, and schedules a retrain ('drift') that runs train_from_db with the replay
    buffer and writes a predictor_training_log row carrying the new drift_resets count."""
    window = 3
    start = saved_state(home)
    state = policy.PolicyState.from_dict(
        {
            **start.to_dict(),
            "success_rate": 0.05,
            "cold_start_exited": True,
            "sessions_since_exit": C.EARLY_ACTIVE_RAMP_SESSIONS,
            "low_streak": 0,
            "drifting": False,
            # a window of the largest margins: the losses below (down to -1 each once the model
            # disagrees with the injected five) leave its mean above 0, so the margin guard does not
            # take the influence away before the drift reset this test is about
            "margin_ema": 0.1,
            "recent_margins": [1.0] * C.MARGIN_WINDOW,
            "sessions_since_train": 0,
        }
    )
    assert policy.alpha_for(state) == pytest.approx(0.95)
    persist_state(home, state)
    with opened(home, shared_embedder, drift_reset_window=window, min_training_sessions=1, exploration_rate=0.0) as c:
        p = c.predictor
        resets, logged = p.state.drift_resets, len(training_rows(c))
        assert p.phase() == "active" and p.alpha() < 1.0

        def rate_injected(got):
            return {r["memory_id"]: 1.0 for r in got if r["was_injected"]}

        for i in range(window - 1):  # below the threshold, but not for `window` sessions yet
            rated_session(c, f"low-{i}", CONTEXTS[i], rate_injected)
            assert comparison(c, f"low-{i}")["ema_updated"] == 1
            assert p.state.low_streak == i + 1 and p.state.success_rate < C.DRIFT_RESET_THRESHOLD
            assert p.state.drift_resets == resets and not p.state.drifting
            assert p.phase() == "active" and p.alpha() < 1.0
        assert len(training_rows(c)) == logged  # no retrain is due yet
        p.backend = recorder = RecordingBackend(p.backend)
        key = "low-last"
        res = c.sessions.start(StartInput(key, project=PROJECT, context=CONTEXTS[3]))
        assert all(r["predictor_rank"] is not None for r in rows(c, key))
        c.sessions.feedback(key, {m["id"]: 1.0 for m in res.injected})
        with sidecar_stopped(c):  # the drift retrain waits on the stopped sidecar: the reset is observable
            c.sessions.end(EndInput(key, project=PROJECT), wait=True)
            assert p.state.drift_resets == resets + 1 and p.state.drifting
            assert p.state.success_rate == C.DRIFT_RESET_EMA == 0.5
            assert not p.state.cold_start_exited and p.state.low_streak == 0 and p.state.recent_wins == []
            assert p.alpha() == 1.0 and p.phase() == "retraining"
            assert p.status_line() == "[predictor: retraining | drift detected | baseline fallback]"
            assert p.status()["training"] is True  # the retrain is scheduled (waiting on the sidecar)
            row = comparison(c, key)
            assert row["ema_updated"] == 1 and row["success_rate"] == 0.5
            assert row["alpha"] < 1.0  # the session itself was served with the alpha before the reset
            saved = policy.PolicyState.from_dict(c.db.read(pred_sql.load_state))
            assert saved.drift_resets == resets + 1 and saved.success_rate == 0.5 and saved.drifting
            # while retraining, a start is served the baseline: alpha 1
            key2 = "during-retrain"
            c.sessions.start(StartInput(key2, project=PROJECT, context=CONTEXTS[4]), defer_predictor=True)
            sig = c.db.read(lambda conn: pred_sql.session_signals(conn, key2))
            assert sig is None  # deferred: the alpha-1 start answered without the (stopped) predictor
            late = rows(c, key2)
            assert {r["memory_id"] for r in late if r["was_injected"]} == {
                r["memory_id"] for r in late if r["baseline_rank"] <= 5
            }
        p.wait_training(300)
        new = training_rows(c)[logged:]
        assert [r["trigger"] for r in new] == ["drift"], new
        run = new[0]
        assert run["drift_resets"] == resets + 1 and run["error"] is None
        assert run["steps"] > 0 and run["sample_count"] > 0 and run["loss"] is not None
        (method, params, reply) = [x for x in recorder.calls if x[0] == "train_from_db"][-1]
        assert params["trigger"] == "drift" and params["influential"] is False  # alpha was 1 when it ran
        assert not p.state.drifting and p.state.drift_resets == resets + 1
        assert p.alpha() == 1.0  # influence is earned again from cold start
        assert c.db.read(pred_sql.load_state)["drift_resets"] == resets + 1
        model_id, dim = c.embedder.model_id, c.embedder.dimensions
    # The replay buffer was mixed into the drift retrain: the top sessions by continuity score,
    # every one of them loaded. The drift reset put the model back in cold start, so the canary
    # set was not held out: the run trained on it, and says so.
    conn = open_readonly(home / "memories.db")
    try:
        canary = set(pred_sql.canary_keys(conn))
        buffer = pred_sql.replay_keys(conn, size=C.REPLAY_BUFFER_SIZE, min_confidence=C.MIN_SCORER_CONFIDENCE)
        loadable = load_sessions(
            conn, embedding_model=model_id, native_dim=dim, min_confidence=C.MIN_SCORER_CONFIDENCE, keys=buffer
        )
    finally:
        conn.close()
    assert reply["replay_sessions"] == len(loadable) >= 1
    assert reply["canary_sessions"] == len(canary) >= 1
    assert set(reply["canary_seen"]) == canary and p.state.canary_seen == reply["canary_seen"]


# ------------------------------------------------------------------------------ item 35: exploration


class Judge:
    """A loopback OpenAI-compatible continuity judge with scripted replies."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.prompts: list[str] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
                judge.prompts.append(body["messages"][0]["content"])
                text = judge.replies.pop(0) if judge.replies else ""
                out = json.dumps(
                    {
                        "id": "c1",
                        "object": "chat.completion",
                        "model": "m",
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        ],
                    }
                ).encode()
                self.send_response(200 if text else 500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def settings(self) -> dict[str, Any]:
        return {"provider": "openai", "model": "m", "base_url": self.url + "/v1"}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def judge() -> Iterator[Judge]:
    j = Judge()
    try:
        yield j
    finally:
        j.close()


def test_item35_an_explored_memory_is_recorded_judged_labelled_and_trained_on(home, shared_embedder, judge):
    """Seed item 35 (exploration sampling): with the predictor trained (no longer collecting), an
    explored memory appears in session_memories with source='exploration', receives a relevance
    score from the continuity judge and a label at session-end, and its session reaches the
    training data with that label (the sidecar trains on it)."""
    with opened(home, shared_embedder, exploration_rate=1.0, min_training_sessions=1, llm=judge.settings()) as c:
        p = c.predictor
        assert p.phase() == "warming"
        key = "explored-1"
        res = c.sessions.start(StartInput(key, project=PROJECT, context=CONTEXTS[1]))
        sig = c.db.read(lambda conn: pred_sql.session_signals(conn, key))
        replaced, explored = sig["exploration"]["replaced"], sig["exploration"]["explored"]
        by_id = {r["memory_id"]: r for r in rows(c, key)}
        assert by_id[explored]["source"] == "exploration" and by_id[explored]["was_injected"] == 1
        assert by_id[replaced]["was_injected"] == 0
        assert [m for m, r in by_id.items() if r["source"] == "exploration"] == [explored]
        assert res.injected[-1]["id"] == explored
        injected = [m["id"] for m in res.injected]
        per_memory = {short_id(m): (0.9 if m == explored else 0.1) for m in injected}
        judge.replies.append(
            json.dumps(
                {
                    "score": 0.7,
                    "confidence": 0.9,
                    "memories_used": 1,
                    "novel_context_count": 0,
                    "reasoning": "The explored memory was the one used.",
                    "per_memory": [{"id": k, "relevance": v} for k, v in per_memory.items()],
                }
            )
        )
        end = c.sessions.end(EndInput(key, project=PROJECT, transcript=TRANSCRIPT), wait=True)
        assert end.scorer == "llm" and end.confidence == 0.9
        assert f"[{short_id(explored)}]" in judge.prompts[-1]  # the judge saw it like any injected memory
        p.wait_training(300)
        after = {r["memory_id"]: r for r in rows(c, key)}
        assert after[explored]["relevance_score"] == 0.9
        assert after[explored]["label"] == pytest.approx(0.9)
        assert json.loads(after[explored]["label_reason"]) == ["injected:per_memory_relevance"]
        assert comparison(c, key)["ema_updated"] == 1
        canary = c.db.read(pred_sql.canary_keys)
        reply = p.backend.call("train_from_db", {"limit": 1}, timeout_s=120)  # the newest session only
        model_id = c.embedder.model_id
        dim = c.embedder.dimensions
    assert key not in canary
    assert reply["sample_count"] == 1 and reply["steps"] > 0 and reply.get("error") is None
    # the training data the sidecar loads: this session, the explored memory with its label
    conn = open_readonly(home / "memories.db")
    try:
        (session,) = load_sessions(
            conn, embedding_model=model_id, native_dim=dim, min_confidence=C.MIN_SCORER_CONFIDENCE, keys=[key]
        )
        order = [r.memory_id for r in pred_sql.session_candidates(conn, key, model_id)]
    finally:
        conn.close()
    assert session.session_id == key and len(order) == session.num_candidates
    i = order.index(explored)
    assert session.labels[i] == pytest.approx(0.9)
    assert session.labels[i] == max(session.labels)


# ------------------------------------------------------------------------------ item 38 (daemon)

MIXED_TEXT_ONLY = [
    f"The legacy {comp} cron job {fact}." for comp in ("billing", "search", "auth") for fact in FACTS[:4]
]  # 12 memories stored without a vector


def test_item38_a_pool_of_embedded_and_text_only_memories_is_scored_and_trained_on(tmp_path, shared_embedder):
    """Seed item 38 (mixed path), in the daemon: a session whose pool mixes memories with stored
    vectors and memories without one (stored while no embedder was configured) is scored by
    the sidecar on both paths, every score finite and ranked; the session's training rows keep
    each candidate's path; a retrain on such sessions is accepted and then lifts the text-only
    memories the agent rated useful from the bottom of the baseline (low importance) above the
    embedded ones it rated useless: lacking a vector does not keep a relevant memory down."""
    home = tmp_path / "mixed"
    plain = open_container(load_settings(home=home, embedding={"provider": "none"}), predictor=False)
    try:
        plain.memories.remember_many(
            [
                RememberInput(content=t, project=PROJECT, importance=0.15 + 0.01 * i)
                for i, t in enumerate(MIXED_TEXT_ONLY)
            ]
        )
    finally:
        plain.close()
    with opened(home, shared_embedder, min_training_sessions=1, train_interval_sessions=1, exploration_rate=0.0) as c:
        c.memories.remember_many(
            [RememberInput(content=t, project=PROJECT, importance=0.3 + 0.02 * i) for i, t in enumerate(CORPUS)]
        )
        vectors = memory_vectors(c, c.db.read(lambda conn: [r[0] for r in conn.execute("SELECT id FROM memories")]))
        text_only = {m for m, v in vectors.items() if v is None}
        assert len(text_only) == len(MIXED_TEXT_ONLY) and len(vectors) == len(CORPUS) + len(MIXED_TEXT_ONLY)

        def rate_text_only(got):
            return {
                r["memory_id"]: (1.0 if r["memory_id"] in text_only else 0.0)
                for r in got
                if r["was_injected"] or r["memory_id"] in text_only
            }

        keys = []
        for i in range(3):
            key = f"mixed-{i}"
            _, got = rated_session(c, key, CONTEXTS[i], rate_text_only)
            keys.append(key)
            ids = {r["memory_id"] for r in got}
            assert ids & text_only and ids - text_only, "the pool must mix both kinds"
            for r in got:
                assert r["predictor_score"] is not None and np.isfinite(r["predictor_score"])
                assert (r["similarity"] is None) == (r["memory_id"] in text_only)
                assert (json.loads(r["features"])["context_similarity"] is None) == (r["memory_id"] in text_only)
            assert sorted(r["predictor_rank"] for r in got) == list(range(1, len(got) + 1))
            c.predictor.wait_training(300)
        assert any(r["accepted"] for r in training_rows(c)), training_rows(c)
        last = "mixed-probe"
        c.sessions.start(StartInput(last, project=PROJECT, context=CONTEXTS[3]))
        probe = rows(c, last)
        model_id, dim = c.embedder.model_id, c.embedder.dimensions
    assert all(np.isfinite(r["predictor_score"]) for r in probe)
    text = [r for r in probe if r["memory_id"] in text_only]
    emb = [r for r in probe if r["memory_id"] not in text_only]
    assert len(text) == len(MIXED_TEXT_ONLY) and min(r["baseline_rank"] for r in text) > len(emb)  # the bottom
    text_ranks = sorted(r["predictor_rank"] for r in text)
    emb_ranks = sorted(r["predictor_rank"] for r in emb)
    # the memories the agent kept rating useful are not left at the bottom for lacking a vector
    assert np.mean(text_ranks) < np.mean(emb_ranks), (text_ranks, emb_ranks)
    conn = open_readonly(home / "memories.db")
    try:
        for key in keys:
            (session,) = load_sessions(
                conn, embedding_model=model_id, native_dim=dim, min_confidence=C.MIN_SCORER_CONFIDENCE, keys=[key]
            )
            order = [r.memory_id for r in pred_sql.session_candidates(conn, key, model_id)]
            assert [bool(x) for x in session.candidate_is_embedded] == [m not in text_only for m in order]
    finally:
        conn.close()
