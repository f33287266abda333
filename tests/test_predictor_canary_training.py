"""The canary set and training: held out once cold start has exited.

A real store, a real sidecar subprocess and the daemon's :class:`Retrainer`. Until cold start
exits the Retrainer asks ``train_from_db`` to train on the canary members too
(``hold_out_canary`` false), and the reply lists them in ``canary_seen``; from then on they are
held out. The first run after the exit swaps the members the live model has seen for sessions
that started after its last run, so the NDCG gate compares held-out sessions again
(docs/predictor.md, "The canary is trained on until cold start exits").
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from memlane.config import predictor as C
from memlane.predictor import policy
from memlane.predictor.client import SidecarClient, sidecar_command
from memlane.services.predictor_training import Retrainer
from memlane.storage import predictor as pred_sql
from memlane.storage.db import Database
from memlane.storage.migrations import migrate
from predictor_store_helpers import insert_memory, insert_scored_session

DIM = 8
MODEL_ID = "test-8"
AT = "2026-02-01T08:00:00.000Z"
START_TIMEOUT = 180.0  # torch import on a busy machine; a budget, never asserted on
TRAIN_TIMEOUT = 300.0
N_MEMORIES = 12


def add_session(conn, s: int) -> None:
    """Session ``s{s:02d}``, started on day ``s + 2`` of February 2026; its candidates are the
    twelve memories in a rotating order, and the first of them is the useful one."""
    started = f"2026-02-{s + 2:02d}T09:00:00.000Z"
    ids = [f"m{(s + i) % N_MEMORIES}" for i in range(N_MEMORIES)]
    rng = np.random.default_rng(s)
    ctx = rng.normal(size=DIM).astype(np.float32)
    insert_scored_session(
        conn,
        f"s{s:02d}",
        None,
        started,
        ids,
        local_time=started[:19],
        ctx=ctx / np.linalg.norm(ctx),
        model=MODEL_ID,
        raw=lambda r: {
            "baseline_rank": r,
            "baseline_score": 1.0 / (r + 1),
            "is_embedded": True,
            "age_days": float(r),
            "importance": 0.5,
            "access_count": r,
        },
    )


@pytest.fixture()
def store(tmp_path):
    db = Database(tmp_path / "memlane.db")
    migrate(db)
    rng = np.random.default_rng(0)

    def fill(conn) -> None:
        for i in range(N_MEMORIES):
            v = rng.normal(size=DIM).astype(np.float32)
            insert_memory(conn, f"m{i}", f"note m{i} about topic {i % 3}", v / np.linalg.norm(v), model=MODEL_ID, at=AT)
        for s in range(12):
            add_session(conn, s)
        pred_sql.refresh_canary(conn, size=2, min_confidence=C.MIN_SCORER_CONFIDENCE, at=AT, replace=False)

    db.write(fill)
    yield db
    db.close()


@pytest.fixture()
def client(store, tmp_path):
    c = SidecarClient(
        sidecar_command(
            db_path=store.path, model_dir=tmp_path / "predictor", embedding_model_id=MODEL_ID, native_dim=DIM
        ),
        stderr_path=tmp_path / "sidecar.log",
    )
    assert c.wait_ready(START_TIMEOUT), (tmp_path / "sidecar.log").read_text()
    yield c
    c.close()


def ndcg_gate(report: dict) -> dict:
    return next(g for g in report["gates"]["gates"] if g["name"] == "ndcg_drop")


def test_the_sidecar_trains_on_the_canary_only_when_asked_to(store, client):
    canary = store.read(pred_sql.canary_keys)
    assert canary == ["s10", "s11"]
    free = client.call(
        "train_from_db", {"epochs": 3, "influential": False, "hold_out_canary": False}, timeout_s=TRAIN_TIMEOUT
    )
    assert free["accepted"], free
    assert free["sample_count"] == 12 and free["canary_sessions"] == 2
    assert free["canary_seen"] == canary
    held = client.call("train_from_db", {"epochs": 3, "influential": True}, timeout_s=TRAIN_TIMEOUT)
    assert held["sample_count"] == 10 and held["canary_sessions"] == 2
    # the live lineage trained on both members, accepted or not: the NDCG gate has nothing to use
    assert held["canary_seen"] == canary
    gate = ndcg_gate(held)
    assert gate["skipped"] and "trained on by the previous model" in gate["detail"]


def test_the_first_run_with_influence_swaps_the_seen_members_for_newer_sessions(store, client):
    state = policy.PolicyState(trained=False, training_sessions=12, sessions_since_train=12)
    retrainer = Retrainer(store, threading.Lock(), state=lambda: state, backend=lambda: client)
    try:
        first = retrainer.run("manual")
        assert first["accepted"] == 1 and first["sample_count"] == 12, first
        assert state.canary_seen == ["s10", "s11"] and state.trained_through == "2026-02-13T09:00:00.000Z"
        assert store.read(pred_sql.canary_keys) == ["s10", "s11"]

        store.write(lambda c: [add_session(c, s) for s in (12, 13, 14)])
        state.training_sessions += 3
        # cold start exited, but the margin guard holds alpha at 1: influence may come at any
        # session, so the run is gated on sessions it did not train on
        state.cold_start_exited, state.sessions_since_exit, state.success_rate = True, 1, 0.7
        assert policy.alpha_for(state) == 1.0
        second = retrainer.run("manual")
        # the canary grew to a fifth of 15 sessions with the newest one, s14; then the two
        # members the live model had trained on made way for the other two sessions since its
        # run. No member was trained on, by the live model or by this run.
        assert store.read(pred_sql.canary_keys) == ["s12", "s13", "s14"]
        assert second["sample_count"] == 12
        assert second["canary_ndcg"] is not None  # the gate had held-out members to compare on
        assert not ndcg_gate(second)["skipped"]
        assert state.canary_seen == [] and state.trained_through == "2026-02-16T09:00:00.000Z"
    finally:
        retrainer.close()
