"""The predictor wired into the daemon, with a REAL sidecar subprocess (``memlane predictor serve``).

predictive-memory-scorer.md "Hook Flow (session-start)", "Ranking Fusion", "Success Rate
Tracking", "Exploration Sampling", "Cold Start", the ``predictor_comparisons`` table and the
agent-facing status lines. One store of 30 real memories (local ONNX embedder) is shared by
the module: the first container (one sidecar) runs the session, comparison, retrain and
exploration checks in file order, then is closed and reopened on the same home (second
sidecar) for persistence, fail-open (SIGKILL, third sidecar) and API checks. Tests that need
a trained predictor drive it there themselves (:func:`drive_to_warming`), so each also runs
alone. The score deadline is raised to 30 s wherever a scored session is expected, so no
assertion depends on machine speed; the fail-open tests lower it through ``p.settings``, which
the service reads when it sends each request, and check which deadline and error kind were
recorded. A training run refused by a gate is provoked with infinite labels. Deferred session-starts (``defer_predictor``: the answer
goes out before the predictor's ranking, which is recorded right after) are made certain to
answer first by stopping the sidecar (SIGSTOP) while they run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import api_client
from memlane.config import load_settings
from memlane.config.clock import now_iso
from memlane.container import Container, open_container
from memlane.services.inputs import RememberInput
from memlane.sessions import labels
from memlane.sessions.inject import short_id
from memlane.sessions.inputs import EndInput, StartInput
from memlane.storage import predictor as pred_sql
from predictor_corpus_helpers import CONTEXTS, CORPUS, PROJECT, READY_S

NOT_NULL = (
    "predictor_ndcg",
    "baseline_ndcg",
    "margin",
    "scorer_confidence",
    "ema_updated",
    "success_rate",
    "alpha",
    "predictor_top_ids",
    "baseline_top_ids",
    "relevance_scores",
    "created_at",
)
COLLECTING = re.compile(r"^\[predictor: collecting \| (\d+)/10 sessions \| baseline only\]$")


class World:
    """The shared home and its currently open container (one real sidecar at a time)."""

    def __init__(self, home: Path, embedder) -> None:
        self.home, self.embedder, self.c = home, embedder, None
        self.n = 0

    def open(self, **predictor) -> Container:
        settings = load_settings(
            home=self.home, sessions={"inject_limit": 5}, predictor={"score_timeout_ms": 30_000, **predictor}
        )
        self.c = open_container(settings, embedder=self.embedder, predictor=True)
        assert self.c.predictor is not None and self.c.predictor.backend.wait_ready(READY_S)
        return self.c

    def close(self) -> None:
        if self.c is not None:
            self.c.predictor.wait_training(300)
            self.c.close()
            self.c = None

    def key(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


@pytest.fixture(scope="module")
def world(tmp_path_factory, shared_embedder):
    with pytest.MonkeyPatch.context() as mp:  # the autouse env isolation is function-scoped
        for k in list(os.environ):
            if k.startswith("MEMLANE_"):
                mp.delenv(k)
        mp.setenv("MEMLANE_CONFIG", str(tmp_path_factory.getbasetemp() / "no-such-config.yaml"))
        w = World(tmp_path_factory.mktemp("predictor-home"), shared_embedder)
        c = w.open()
        c.memories.remember_many(
            [RememberInput(content=t, project=PROJECT, importance=0.3 + 0.02 * i) for i, t in enumerate(CORPUS)]
        )
        yield w
        w.close()


# ------------------------------------------------------------------------------ helpers


def rows(c: Container, key: str) -> list[dict]:
    return c.db.read(
        lambda conn: [
            dict(r) for r in conn.execute("SELECT * FROM session_memories WHERE session_key = ? ORDER BY rank", (key,))
        ]
    )


def signals(c: Container, key: str) -> dict:
    return c.db.read(lambda conn: pred_sql.session_signals(conn, key))


def comparison_rows(c: Container, key: str) -> list[dict]:
    return c.db.read(
        lambda conn: [
            dict(r) for r in conn.execute("SELECT * FROM predictor_comparisons WHERE session_key = ?", (key,))
        ]
    )


def training_rows(c: Container) -> list[dict]:
    return c.db.read(lambda conn: [dict(r) for r in conn.execute("SELECT * FROM predictor_training_log ORDER BY id")])


def start(w: World, prefix: str, i: int = 0, project: str = PROJECT):
    key = w.key(prefix)
    return key, w.c.sessions.start(StartInput(key, project=project, context=CONTEXTS[i % len(CONTEXTS)]))


def start_deferred(w: World, prefix: str, i: int = 0, project: str = PROJECT, now: str | None = None):
    """A session-start as the HTTP hook makes it: the predictor's ranking may be recorded after it."""
    key = w.key(prefix)
    return key, w.c.sessions.start(
        StartInput(key, project=project, context=CONTEXTS[i % len(CONTEXTS)], now=now), defer_predictor=True
    )


@contextmanager
def sidecar_stopped(c: Container):
    """SIGSTOP the sidecar for the block (a reply cannot arrive before the block ends)."""
    pid = c.predictor.backend.status()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def recorded(c: Container, key: str) -> dict[str, tuple]:
    """{memory id: everything a session-start records about the candidate}."""
    return {
        r["memory_id"]: (
            r["predictor_score"],
            r["predictor_rank"],
            r["baseline_rank"],
            r["rank"],
            r["final_score"],
            r["was_injected"],
            r["source"],
            json.loads(r["features"]),
        )
        for r in rows(c, key)
    }


def labelled_session(w: World, prefix: str, i: int = 0) -> str:
    """A session the agent rated (every injected memory 1.0: confidence 1.0, training-grade)."""
    key, res = start(w, prefix, i)
    assert w.c.sessions.feedback(key, {m["id"]: 1.0 for m in res.injected}).applied == len(res.injected)
    w.c.sessions.end(EndInput(key, project=PROJECT), wait=True)
    w.c.predictor.wait_training(300)
    return key


def drive_to_warming(w: World) -> None:
    """Exit 'collecting' by driving the real pipeline (no PolicyState is constructed by hand):
    min_training_sessions=1 and train_interval_sessions=1, then rated sessions until a retrain
    is accepted. 'active' would also need > 40 % wins over 10 comparisons, which rated baseline
    picks cannot give (the baseline then has NDCG 1 and a tie is not a win); 'warming' is enough
    for exploration, which only cold start ('collecting') and 'disabled' switch off."""
    p = w.c.predictor
    p.settings = p.settings.model_copy(update={"min_training_sessions": 1, "train_interval_sessions": 1})
    for i in range(4):
        if p.phase() in ("warming", "active"):
            return
        labelled_session(w, "drive", i)
    assert p.phase() in ("warming", "active"), (p.status(), training_rows(w.c))


def score_request(ids: list[str]) -> dict:
    return {
        "candidate_ids": ids,
        "session_time": "2026-03-01T12:00:00+00:00",
        "session_gap_hours": 5.0,
        "project": PROJECT,
        "context_text": "deploying the billing service",
    }


# ------------------------------------------------------------------------------ 1. session-start


def test_start_records_both_rankings_features_signals_and_the_status_line(world):
    c = world.c
    n = c.predictor.state.training_sessions
    key, res = start(world, "start")
    got = rows(c, key)
    assert res.status == "new" and len(got) == res.candidate_count == len(CORPUS)
    for r in got:  # the predictor scored every candidate, during cold start too (recorded, no influence)
        assert r["predictor_score"] is not None and r["predictor_rank"] is not None and r["baseline_rank"] is not None
        feats = json.loads(r["features"])
        assert feats["baseline_rank"] == r["baseline_rank"] - 1  # raw signals, 0-based rank
        assert {
            "age_days",
            "importance",
            "access_count",
            "is_superseded",
            "baseline_score",
            "context_similarity",
        } <= set(feats)
    assert sorted(r["predictor_rank"] for r in got) == list(range(1, len(got) + 1))
    assert sorted(r["baseline_rank"] for r in got) == list(range(1, len(got) + 1))
    # alpha = 1 in cold start: injection follows the baseline
    assert {r["memory_id"] for r in got if r["was_injected"]} == {
        r["memory_id"] for r in got if r["baseline_rank"] <= 5
    }
    sig = signals(c, key)
    assert {"session_time", "session_gap_hours", "alpha", "phase", "model_version"} <= set(sig)
    assert sig["alpha"] == 1.0 and sig["phase"] == "collecting" and "predictor_error" not in sig
    line = res.inject.splitlines()[0]
    m = COLLECTING.match(line)
    assert m and int(m.group(1)) == min(n, 10), line
    assert line == c.predictor.status_line()


def test_deferred_start_answers_first_and_records_exactly_the_ranking_a_waiting_start_records(world):
    c = world.c
    assert c.predictor.phase() == "collecting" and c.predictor.alpha() == 1.0
    now = now_iso()  # both starts see the same pool, signals and previous session
    scored = c.predictor.channel.scored
    key, res = start_deferred(world, "deferred", 0, now=now)
    # the answer did not wait for the predictor: the session and its candidates are committed,
    # the predictor's part waits for the answer to be out (res.release: the hook's background task)
    assert res.status == "new" and res.candidate_count == len(CORPUS) and res.release is not None
    time.sleep(0.2)
    got = rows(c, key)
    assert len(got) == len(CORPUS) and all(r["predictor_rank"] is None and r["features"] is None for r in got)
    assert signals(c, key) is None and c.predictor.pending_records() == 1 and c.predictor.channel.scored == scored
    with sidecar_stopped(c):
        res.release()
        res.release()  # idempotent
        time.sleep(0.2)
        assert all(r["predictor_rank"] is None for r in rows(c, key)) and c.predictor.pending_records() == 1
    assert c.predictor.wait_recorded(key, timeout_s=60) and c.predictor.pending_records() == 0
    assert c.predictor.channel.scored == scored + 1
    key2 = world.key("waited")  # the same start, waiting for the predictor
    res2 = c.sessions.start(StartInput(key2, project=PROJECT, context=CONTEXTS[0], now=now))
    assert recorded(c, key) == recorded(c, key2)
    assert all(v[1] is not None for v in recorded(c, key).values())
    assert signals(c, key) == signals(c, key2) and "predictor_error" not in signals(c, key)
    assert res.injected == res2.injected and res.inject == res2.inject


def test_a_deferred_record_never_released_is_released_by_a_later_start(world, monkeypatch):
    import memlane.services.deferred_records as ps

    c = world.c
    assert c.predictor.alpha() == 1.0
    key, res = start_deferred(world, "unreleased", 1)  # nobody calls res.release()
    monkeypatch.setattr(ps, "RELEASE_FALLBACK_S", 0.0)
    key2, res2 = start_deferred(world, "releaser", 2)
    res2.release()
    for _ in range(3000):
        if c.predictor.pending_records() == 0:
            break
        time.sleep(0.01)
    assert c.predictor.pending_records() == 0
    assert all(r["predictor_rank"] is not None for k in (key, key2) for r in rows(c, k))


def test_end_right_after_a_deferred_start_compares_on_the_recorded_ranking(world):
    c = world.c
    assert c.predictor.alpha() == 1.0
    with sidecar_stopped(c) as pid:
        key, res = start_deferred(world, "end-now", 1)
        assert all(r["predictor_rank"] is None for r in rows(c, key))
        assert c.sessions.feedback(key, {m["id"]: 1.0 for m in res.injected}).applied == len(res.injected)
        # the sidecar answers 0.3 s into the session-end, which must wait for the ranking
        resume = threading.Timer(0.3, os.kill, (pid, signal.SIGCONT))
        resume.start()
        try:
            c.sessions.end(EndInput(key, project=PROJECT), wait=True)
        finally:
            resume.join()
    c.predictor.wait_training(300)
    got = rows(c, key)
    assert all(r["predictor_rank"] is not None and r["label"] is not None for r in got)
    (row,) = comparison_rows(c, key)
    by_pred = [r["memory_id"] for r in sorted(got, key=lambda r: r["predictor_rank"])]
    by_base = [r["memory_id"] for r in sorted(got, key=lambda r: r["baseline_rank"])]
    assert json.loads(row["predictor_top_ids"]) == by_pred[:10]
    assert json.loads(row["baseline_top_ids"]) == by_base[:10]
    assert row["ema_updated"] == 1 and row["scorer_confidence"] >= 0.6


# ------------------------------------------------------------------------------ 3. comparisons


def test_end_records_a_full_comparison_and_moves_the_ema_once(world):
    c = world.c
    rated = labelled_session(world, "rated", 1)
    key, _ = start(world, "unrated", 2)  # no feedback: confidence 0.3, excluded from the EMA
    c.sessions.end(EndInput(key, project=PROJECT), wait=True)
    for k, updated in ((rated, 1), (key, 0)):
        (row,) = comparison_rows(c, k)
        assert all(row[col] is not None for col in NOT_NULL), row
        assert row["ema_updated"] == updated
        assert (row["predictor_won"] is None) == (row["ema_updated"] == 0)
        top_p, top_b = json.loads(row["predictor_top_ids"]), json.loads(row["baseline_top_ids"])
        assert len(top_p) == len(top_b) == 10 and set(json.loads(row["relevance_scores"])) >= set(top_b)
        assert row["margin"] == pytest.approx(row["predictor_ndcg"] - row["baseline_ndcg"])
    assert comparison_rows(c, rated)[0]["scorer_confidence"] >= 0.6 > comparison_rows(c, key)[0]["scorer_confidence"]
    assert comparison_rows(c, rated)[0]["success_rate"] == pytest.approx(c.db.read(pred_sql.load_state)["success_rate"])

    # a second end of the same session: re-scored, but the EMA and counters do not move again
    c.predictor.wait_training(300)
    before = c.predictor.state.to_dict()
    first = comparison_rows(c, rated)
    c.sessions.end(EndInput(rated, project=PROJECT), wait=True)
    c.predictor.wait_training(300)
    assert c.predictor.state.to_dict() == before
    assert comparison_rows(c, rated) == first


def test_the_comparison_counts_a_soft_negative_as_irrelevant(world):
    c = world.c
    # the context is one memory's text: the five other components' copies of that fact differ
    # by one word (cosine > 0.6) and only 5 memories are injected, so one of the six at least
    # is a soft negative (trains at 0.25) in the comparison's pool
    key = world.key("soft")
    res = c.sessions.start(StartInput(key, project=PROJECT, context=CORPUS[0]))
    c.sessions.feedback(key, {m["id"]: 1.0 for m in res.injected})
    c.sessions.end(EndInput(key, project=PROJECT), wait=True)
    c.predictor.wait_training(300)
    (row,) = comparison_rows(c, key)
    relevance = json.loads(row["relevance_scores"])
    pool = [r for r in rows(c, key) if r["memory_id"] in relevance]
    soft = [r for r in pool if json.loads(r["label_reason"]) == ["not_injected:soft_negative"]]
    assert soft and all(r["label"] == 0.25 and relevance[r["memory_id"]] == 0.0 for r in soft)
    # a rated memory counts its rating and FTS term, without the session's continuity term
    rated = [r for r in pool if r["agent_relevance_score"] is not None]
    assert rated and all(json.loads(r["label_reason"])[0].startswith("agent:") for r in rated)
    for r in rated:
        expected = min(1.0, 0.7 * r["agent_relevance_score"] + 0.2 * labels.fts_adjustment(r["fts_hit_count"]))
        assert relevance[r["memory_id"]] == pytest.approx(expected)
    assert all(relevance[r["memory_id"]] == pytest.approx(r["label"]) for r in pool if r not in soft + rated)
    assert any(v > 0 for v in relevance.values())


# ------------------------------------------------------------------------------ 4. retraining


def test_retrain_every_interval_writes_a_log_row_and_model_bin(world):
    c = world.c
    p = c.predictor
    p.wait_training(300)
    p.settings = p.settings.model_copy(update={"train_interval_sessions": 2, "min_training_sessions": 1})
    for i in range(3):
        since, logged = p.state.sessions_since_train, len(training_rows(c))
        labelled_session(world, "interval", i)
        new = training_rows(c)[logged:]
        assert len(new) == (1 if since + 1 >= 2 else 0), (since, new)
        assert p.state.sessions_since_train == (0 if new else since + 1)
    runs = [r for r in training_rows(c) if r["trigger"] == "interval"]
    assert runs
    for r in runs:
        assert r["loss"] is not None and r["steps"] > 0 and r["sample_count"] > 0 and r["duration_ms"] > 0
        gates = json.loads(r["gates"])
        assert isinstance(gates["passed"], bool) and {g["name"] for g in gates["gates"]} >= {"losses_finite"}
        assert r["error"] is None
    accepted = [r for r in runs if r["accepted"]]
    assert accepted, runs
    assert (world.home / "predictor" / "model.bin").is_file()
    assert p.state.trained and p.state.model_version == accepted[-1]["model_version"] >= 1
    assert p.phase() == "warming"
    assert p.status_line().startswith("[predictor: warming | success_rate=")


def test_a_retrain_that_fails_a_gate_keeps_the_model_and_is_logged_and_counted(world):
    from rich.console import Console

    from memlane.cli.predictor_cmd import status_table
    from memlane.config import predictor as C

    drive_to_warming(world)  # a trained model serves
    c = world.c
    p = c.predictor
    p.wait_training(300)
    ids = c.db.read(lambda conn: [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY seq LIMIT 12")])
    req = score_request(ids)
    scores = p.backend.call("score", req, timeout_s=60)["scores"]
    version, model_bin = p.state.model_version, (world.home / "predictor" / "model.bin").read_bytes()
    assert p.state.trained and version >= 1
    with api_client(c, raise_server_exceptions=True) as client:
        runs = client.get("/api/predictor/status").json()["training_runs"]
    assert runs["total"] == len(training_rows(c)) == runs["accepted"] + runs["rejected"] and runs["accepted"] >= 1
    # Fill the canary set now, as the retrain would, so that the retrain adds no member: the
    # corrupted sessions are then all on the training side (a canary with infinite labels would
    # make the sidecar's report unserialisable: an error, not a failed gate).
    size = min(C.CANARY_SIZE, p.state.training_sessions // 5)
    c.db.write(
        lambda conn: pred_sql.refresh_canary(conn, size=size, min_confidence=C.MIN_SCORER_CONFIDENCE, at=now_iso())
    )
    saved = c.db.read(
        lambda conn: conn.execute(
            "SELECT id, label FROM session_memories WHERE label IS NOT NULL "
            "AND session_key NOT IN (SELECT session_key FROM predictor_canary)"
        ).fetchall()
    )
    assert saved
    # Corrupted labels: +inf (SQLite stores it; NaN would read back as NULL) make the ListNet
    # loss non-finite, which the losses_finite gate refuses.
    c.db.write(
        lambda conn: conn.executemany(
            "UPDATE session_memories SET label = ? WHERE id = ?", [(float("inf"), r[0]) for r in saved]
        )
    )
    try:
        row = p.retrain("manual")
    finally:
        c.db.write(
            lambda conn: conn.executemany(
                "UPDATE session_memories SET label = ? WHERE id = ?", [(r[1], r[0]) for r in saved]
            )
        )
    assert row["accepted"] == 0 and row["trigger"] == "manual" and row["model_version"] == version
    failed = [g["name"] for g in row["gates"]["gates"] if not g["passed"]]
    assert row["gates"]["passed"] is False and "losses_finite" in failed, row
    logged = training_rows(c)[-1]  # the run's accepted=0 row
    assert logged["accepted"] == 0 and logged["trigger"] == "manual" and logged["model_version"] == version
    assert json.loads(logged["gates"])["passed"] is False
    # the old model keeps serving: same version, same checkpoint file, same scores
    assert p.state.model_version == version and p.state.trained
    assert (world.home / "predictor" / "model.bin").read_bytes() == model_bin
    assert p.backend.call("status", timeout_s=60)["model_version"] == version
    assert p.backend.call("score", req, timeout_s=60)["scores"] == scores
    # and the run is counted, by reason, in the status the daemon returns and the CLI prints
    with api_client(c, raise_server_exceptions=True) as client:
        st = client.get("/api/predictor/status").json()
    after = st["training_runs"]
    assert after["total"] == runs["total"] + 1 and after["accepted"] == runs["accepted"]
    assert after["rejected"] == runs["rejected"] + 1
    assert after["rejected_by_reason"] == {
        **runs["rejected_by_reason"],
        "gates": runs["rejected_by_reason"]["gates"] + 1,
    }
    assert after == c.db.read(pred_sql.training_outcomes) == p.status()["training_runs"]
    console = Console(width=300, record=True)
    console.print(status_table(st))
    why = after["rejected_by_reason"]
    assert (
        f"{after['total']} runs, {after['accepted']} accepted, {after['rejected']} rejected, the old model "
        f"kept serving (gates {why['gates']}, no validation gain {why['no_validation_gain']}, "
        f"error {why['error']})"
    ) in console.export_text()


# ------------------------------------------------------------------------------ 2. exploration


def test_exploration_injects_the_disagreement_candidate_instead_of_the_last_slot(world):
    c = world.c
    drive_to_warming(world)
    p = c.predictor
    old = p.settings
    p.settings = old.model_copy(update={"exploration_rate": 1.0})
    try:
        key, res = start(world, "explore", 3)
        # A start that could answer before the predictor (alpha = 1) but drew exploration needs
        # the predictor's ranking now: it explores the same way and records everything at once.
        assert p.alpha() == 1.0
        key_d, res_d = start_deferred(world, "explore-deferred", 3)
        assert p.pending_records() == 0
    finally:
        p.settings = old
    sig_d = signals(c, key_d)
    assert "predictor_error" not in sig_d and sig_d["exploration"]["explored"] == res_d.injected[-1]["id"]
    assert all(r["predictor_rank"] is not None for r in rows(c, key_d))
    assert [r["memory_id"] for r in rows(c, key_d) if r["source"] == "exploration"] == [
        sig_d["exploration"]["explored"]
    ]
    sig = signals(c, key)
    assert sig["phase"] in ("warming", "active") and "predictor_error" not in sig
    replaced, explored = sig["exploration"]["replaced"], sig["exploration"]["explored"]
    by_id = {r["memory_id"]: r for r in rows(c, key)}
    assert by_id[explored]["source"] == "exploration" and by_id[explored]["was_injected"] == 1
    assert by_id[replaced]["was_injected"] == 0 and by_id[replaced]["source"] == "effective"
    assert [r["memory_id"] for r in by_id.values() if r["source"] == "exploration"] == [explored]
    ids = [m["id"] for m in res.injected]
    assert ids[-1] == explored and replaced not in ids and f"[{short_id(explored)}]" in res.inject
    # the explored memory is the non-injected candidate with the largest rank disagreement
    delta = {
        m: abs(r["baseline_rank"] - r["predictor_rank"])
        for m, r in by_id.items()
        if m == explored or (not r["was_injected"] and m != replaced)
    }
    assert delta[explored] == max(delta.values())


# ------------------------------------------------------------------------------ 5. persistence


def test_state_and_model_survive_a_daemon_restart(world):
    drive_to_warming(world)
    c = world.c
    ids = c.db.read(lambda conn: [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY seq LIMIT 12")])
    req = score_request(ids)
    c.predictor.wait_training(300)
    state = c.predictor.state.to_dict()
    status = c.predictor.backend.call("status", timeout_s=60)
    scores = c.predictor.backend.call("score", req, timeout_s=60)
    assert state["trained"] and status["model_version"] == state["model_version"] >= 1
    assert scores["model_version"] == state["model_version"]
    world.close()

    c2 = world.open(min_training_sessions=1, train_interval_sessions=1)
    assert c2.predictor.state.to_dict() == state  # restored from predictor_state
    assert c2.db.read(pred_sql.load_state) == state
    assert c2.predictor.phase() == "warming"
    status2 = c2.predictor.backend.call("status", timeout_s=60)
    assert status2["model_version"] == status["model_version"] and status2["trained"]
    assert status2.get("checkpoint_error") is None
    assert c2.predictor.backend.call("score", req, timeout_s=60)["scores"] == scores["scores"]


# ------------------------------------------------------------------------------ 6-7. fail-open


def ready(world) -> Container:
    """The current container (the reopened one in file order) with its sidecar ready."""
    assert world.c.predictor.backend.wait_ready(READY_S)
    return world.c


def assert_baseline_session(c: Container, key: str, res) -> dict:
    got = rows(c, key)
    assert (
        res.status == "new" and got and all(r["predictor_rank"] is None and r["predictor_score"] is None for r in got)
    )
    assert {r["memory_id"] for r in got if r["was_injected"]} == {
        r["memory_id"] for r in got if r["baseline_rank"] <= 5
    }
    assert res.inject.startswith("[predictor: ")
    sig = signals(c, key)
    assert sig["predictor_error"]
    return sig


def test_sigkilled_sidecar_means_baseline_then_a_restart_scores_again(world):
    c = ready(world)
    backend = c.predictor.backend
    crashes = backend.error_counts.get("crash", 0)
    pid = backend.status()["pid"]
    backend.kill()
    # Let the reader thread see the EOF before the start. Without this wait the test is racy: a
    # call() that finds the process already reaped restarts it first, and the reader then skips
    # recording the crash (SidecarClient._read_loop: "a restarted sidecar already took over").
    with api_client(c, raise_server_exceptions=True) as client:
        for _ in range(400):
            side = client.get("/api/predictor/status").json()["sidecar"]
            if side["error_counts"].get("crash", 0) > crashes:
                break
            time.sleep(0.05)
        assert side["error_counts"]["crash"] == crashes + 1 and not side["alive"], side
        key, res = start(world, "killed")  # the sidecar is dead: this start fails open
        assert_baseline_session(c, key, res)
        side = client.get("/api/predictor/status").json()["sidecar"]
        assert side["error_counts"]["crash"] == crashes + 1 and side["crashes_last_hour"] >= 1
        assert not side["disabled"] and any(e["kind"] == "crash" for e in side["recent_errors"])
    assert backend.wait_ready(READY_S)  # the start spawned a new sidecar
    assert backend.status()["pid"] != pid and backend.restarts >= 1
    key, _ = start(world, "after-restart")
    assert all(r["predictor_rank"] is not None for r in rows(c, key))
    assert "predictor_error" not in signals(c, key)


def test_reply_later_than_score_timeout_means_baseline_and_a_timeout_error(world):
    c = ready(world)
    p = c.predictor
    # A three-memory project keeps the score request far below the 64 KiB pipe buffer, so the
    # request is written even while the sidecar is stopped (a larger one blocks in call()'s
    # write, which no deadline covers).
    if not c.db.read(lambda conn: conn.execute("SELECT 1 FROM memories WHERE project = 'tiny'").fetchone()):
        c.memories.remember_many(
            [RememberInput(content=f"Tiny project note {i}: {t}", project="tiny") for i, t in enumerate(CORPUS[:3])]
        )
    timeouts = p.backend.error_counts.get("timeout", 0)
    crashes = p.backend.error_counts.get("crash", 0)
    kinds = dict(p.channel.error_kinds)
    old = p.settings
    # The service reads the live setting when it sends each request: the replaced settings
    # give this start a 1 us deadline (the settings allow any value > 0).
    p.settings = old.model_copy(update={"score_timeout_ms": 0.001})
    # SIGSTOP makes "late" certain: with only a tiny deadline, a loaded machine could deschedule
    # this thread past the deadline check while the reply is being read.
    pid = p.backend.status()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        key, res = start(world, "late", project="tiny")
    finally:
        os.kill(pid, signal.SIGCONT)
        p.settings = old
    assert res.candidate_count == 3
    sig = assert_baseline_session(c, key, res)
    assert "timed out" in sig["predictor_error"]
    assert p.backend.error_counts["timeout"] == timeouts + 1
    assert p.backend.error_counts.get("crash", 0) == crashes  # a late reply is not a crash
    assert dict(p.channel.error_kinds) == {**kinds, "timeout": kinds.get("timeout", 0) + 1}
    last = p.channel.recent_errors[-1]
    assert last["kind"] == "timeout" and last["deadline_ms"] == 0.001  # the short deadline applied
    assert last["error"] == sig["predictor_error"]
    assert p.channel.deadline_ms() == 30_000  # and the restored setting applies to the next request
    key, _ = start(world, "in-time")  # the late reply is dropped; the next call gets its own
    assert all(r["predictor_rank"] is not None for r in rows(c, key))
    assert "predictor_error" not in signals(c, key)


def test_deferred_record_fails_open_on_a_timeout_and_on_a_sidecar_killed_mid_flight(world):
    c = ready(world)
    p = c.predictor
    backend = p.backend
    old = p.settings
    p.settings = old.model_copy(update={"exploration_rate": 0.0})  # no start may wait for the predictor
    try:
        _deferred_fail_open(world, c, p, backend)
    finally:
        p.settings = old


def _deferred_fail_open(world, c, p, backend) -> None:
    # 1. a late reply: the deadline counts from the request, as for a start that waits
    timeouts = backend.error_counts.get("timeout", 0)
    settings = p.settings
    p.settings = settings.model_copy(update={"score_timeout_ms": 0.001})
    try:
        with sidecar_stopped(c):
            key, res = start_deferred(world, "deferred-late")
            assert p.wait_recorded(key, timeout_s=60)
    finally:
        p.settings = settings
    sig = assert_baseline_session(c, key, res)
    assert "timed out" in sig["predictor_error"] and backend.error_counts["timeout"] == timeouts + 1
    last = p.channel.recent_errors[-1]
    assert last["kind"] == "timeout" and last["deadline_ms"] == 0.001  # the short deadline applied
    # 2. the sidecar dies while the request is in flight: the record fails open, the session
    # ends without a comparison (the predictor did not score it), the next start scores again
    crashes = backend.error_counts.get("crash", 0)
    timeouts = backend.error_counts.get("timeout", 0)
    kinds = dict(p.channel.error_kinds)
    with sidecar_stopped(c) as pid:
        key, res = start_deferred(world, "deferred-killed", 2)
        res.release()  # the answer is out: the request goes to the (stopped) sidecar
        for _ in range(600):  # the request reached the (stopped) sidecar
            if backend._pending:
                break
            time.sleep(0.01)
        assert backend._pending and all(r["predictor_rank"] is None for r in rows(c, key))
        os.kill(pid, signal.SIGKILL)
        assert p.wait_recorded(key, timeout_s=60) and p.pending_records() == 0
    sig = assert_baseline_session(c, key, res)
    # a crash, not a timeout (which also raises PredictorUnavailable): the request failed when
    # the reader saw the exit, with its 30 s deadline still running
    assert "PredictorUnavailable" in sig["predictor_error"] and "exited" in sig["predictor_error"]
    assert backend.error_counts["crash"] == crashes + 1
    assert backend.error_counts.get("timeout", 0) == timeouts
    assert dict(p.channel.error_kinds) == {**kinds, "crash": kinds.get("crash", 0) + 1}
    last = p.channel.recent_errors[-1]
    assert last["kind"] == "crash" and last["deadline_ms"] == 30_000
    c.sessions.feedback(key, {m["id"]: 1.0 for m in res.injected})
    c.sessions.end(EndInput(key, project=PROJECT), wait=True)
    assert comparison_rows(c, key) == [] and all(r["label"] is not None for r in rows(c, key))
    assert backend.wait_ready(READY_S)
    key, _ = start_deferred(world, "deferred-after-kill")
    assert p.wait_recorded(key, timeout_s=60)
    assert all(r["predictor_rank"] is not None for r in rows(c, key)) and "predictor_error" not in signals(c, key)


# ------------------------------------------------------------------------------ 8. API


def test_api_status_comparisons_training_and_manual_train(world):
    c = ready(world)
    drive_to_warming(world)  # a training run exists even when this test runs alone
    labelled_session(world, "api", 4)  # and at least one comparison
    with api_client(c, raise_server_exceptions=True) as client:
        st = client.get("/api/predictor/status").json()
        assert st["enabled"] is True and {"phase", "alpha", "status_line", "state", "sidecar"} <= set(st)
        assert st["phase"] == c.predictor.phase() and st["alpha"] == 1.0
        assert st["status_line"] == c.predictor.status_line()
        assert st["state"] == c.predictor.state.to_dict()
        assert st["sidecar"]["alive"] and st["sidecar"]["ready"]
        comps = client.get("/api/predictor/comparisons", params={"limit": 5}).json()
        assert 1 <= len(comps) <= 5 and all(isinstance(x["predictor_top_ids"], list) for x in comps)
        assert comps[0]["session_key"].startswith("api-")
        before = client.get("/api/predictor/training").json()
        assert before and isinstance(before[0]["gates"], dict)
        r = client.post("/api/predictor/train")
        assert r.status_code == 200, r.text
        row = r.json()
        assert row["trigger"] == "manual" and row["error"] is None and row["steps"] > 0
        assert {"model_version", "accepted", "loss", "sample_count", "duration_ms", "gates"} <= set(row)
        after = client.get("/api/predictor/training").json()
        assert len(after) == len(before) + 1 and after[0]["trigger"] == "manual"
        assert after[0]["model_version"] == row["model_version"] == c.predictor.state.model_version
        assert client.get("/api/predictor/comparisons", params={"limit": 0}).status_code == 422
        # The session-start hook answers before the predictor at alpha = 1 and its ranking follows
        # (rate 0); a start that draws exploration scores before it answers instead (rate 1) and
        # its ranking is in the start's own write, which the hook's background task queues.
        rate = c.predictor.settings.exploration_rate
        try:
            for draw in (0.0, 1.0):
                c.predictor.settings.exploration_rate = draw
                key = f"api-hook-{draw:g}"
                scored, deferred = c.predictor.channel.scored, c.predictor.records.deferred
                r = client.post(
                    "/api/hooks/session-start", json={"session_key": key, "project": PROJECT, "context": CONTEXTS[0]}
                )
                assert r.status_code == 200 and r.json()["status"] == "new"
                assert c.predictor.records.deferred == deferred + (draw == 0.0)
                assert c.predictor.wait_recorded(key, timeout_s=60) and c.predictor.channel.scored == scored + 1
                assert c.sessions.inflight.wait(key, timeout_s=60) in (None, True)  # the start committed
                got = rows(c, key)
                assert got and sorted(x["predictor_rank"] for x in got) == list(range(1, len(got) + 1))
        finally:
            c.predictor.settings.exploration_rate = rate


def test_api_without_predictor_reports_disabled_and_refuses_train(tmp_path):
    c = open_container(load_settings(home=tmp_path / "off", embedding={"provider": "none"}), predictor=False)
    try:
        assert c.predictor is None
        with api_client(c, raise_server_exceptions=True) as client:
            st = client.get("/api/predictor/status").json()
            assert st["enabled"] is False and st["alpha"] == 1.0
            r = client.post("/api/predictor/train")
            assert r.status_code == 409
            err = r.json()["error"]
            assert err["code"] == "predictor_off" and err["message"] and err["details"] == {}
            assert client.get("/api/predictor/comparisons").json() == []
            assert client.get("/api/predictor/training").json() == []
    finally:
        c.close()
