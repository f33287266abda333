"""The seed's own request shapes (predictive-memory-scorer.md, "Daemon Communication Protocol")
sent to a REAL sidecar subprocess: ``score`` with its ``signals`` object, ``train`` in its
single-session form, and malformed seed-shaped requests (-32602, the sidecar keeps serving).

Verification item 42 ("Month encoding: model receives month-of-year sin/cos features, verified
in JSON-RPC score request") is checked here through the score request's ``return_features``:
the feature matrix the model was given, as the sidecar built it.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3

import numpy as np
import pytest

from memlane.predictor.client import PredictorRpcError, SidecarClient, sidecar_command
from memlane.storage.db import Database
from memlane.storage.embeddings import upsert as upsert_embeddings
from memlane.storage.migrations import migrate

DIM = 8
MODEL_ID = "test-8"
START_TIMEOUT = 180.0  # torch import on a busy machine; a budget, never asserted on
BIG_TIMEOUT = 60.0  # a reply deadline far above any expected latency, never asserted on
TRAIN_TIMEOUT = 300.0
AT = "2025-06-01T08:00:00.000Z"  # the memories' creation, before any cut-off used here
# memory id -> stored project: alpha's, beta's, and one stored under no project
PROJECTS = {
    "m-alpha-0": "alpha-proj",
    "m-alpha-1": "alpha-proj",
    "m-beta-0": "beta-proj",
    "m-beta-1": "beta-proj",
    "m-none-0": None,
    "m-none-1": None,
}
IDS = list(PROJECTS)
N = len(IDS)
SUPERSEDED = [False, True, False, True, False, True]
LABELS = [1.0, -0.3, 0.8, -0.3, 0.5, -0.3]  # per-memory relevance, superseded ones negative


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("seed-shapes-db") / "memlane.db"
    rng = np.random.default_rng(7)
    vectors = {mid: unit(rng) for mid in IDS}
    db = Database(path)
    migrate(db)

    def fill(conn: sqlite3.Connection) -> None:
        for mid, vec in vectors.items():
            content = f"note {mid} about deploys"
            h = hashlib.sha256(content.encode()).hexdigest()
            conn.execute(
                """INSERT INTO memories (id, content, normalized_content, content_hash, project,
                                created_at, updated_at) VALUES (?,?,?,?,?,?,?)""",
                (mid, content, content, h, PROJECTS[mid], AT, AT),
            )
            upsert_embeddings(conn, [(h, vec)], MODEL_ID, AT)

    db.write(fill)
    db.close()
    return path, vectors, unit(rng)


@pytest.fixture(scope="module")
def sidecar(store, tmp_path_factory):
    db_path, _, _ = store
    base = tmp_path_factory.mktemp("seed-shapes")
    client = SidecarClient(
        sidecar_command(db_path=db_path, model_dir=base / "predictor", embedding_model_id=MODEL_ID, native_dim=DIM),
        stderr_path=base / "sidecar.log",
    )
    assert client.wait_ready(START_TIMEOUT), (base / "sidecar.log").read_text()
    yield client
    client.close()


def signals(**over) -> dict:
    """The seed's example ``signals`` object for the store's six candidates."""
    return {
        "time_of_day": 0.25,
        "day_of_week": 2,
        "month_of_year": 1,
        "project": "alpha-proj",
        "session_gap_hours": 8.5,
        "is_superseded": list(SUPERSEDED),
        **over,
    }


def seed_score(store, **over) -> dict:
    """A seed-shaped score request (the seed's exact keys), ``return_features`` added."""
    _, vectors, ctx = store
    params = {
        "context_embedding": ctx.tolist(),
        "candidate_ids": IDS,
        "candidate_embeddings": [vectors[m].tolist() for m in IDS],
        "signals": signals(),
        "return_features": True,
    }
    params.update(over)
    return params


def seed_train(store, **over) -> dict:
    """The seed's single-session train request: no ids, no signals, no time."""
    _, vectors, ctx = store
    params = {
        "context_embedding": ctx.tolist(),
        "candidate_embeddings": [vectors[m].tolist() for m in IDS],
        "labels": list(LABELS),
        "continuity_score": 0.85,
    }
    params.update(over)
    return params


def columns(result: dict) -> dict[str, np.ndarray]:
    feats = result["features"]
    rows = np.asarray(feats["rows"], dtype=np.float64)
    assert rows.shape == (N, len(feats["names"]))
    return {name: rows[:, i] for i, name in enumerate(feats["names"])}


def cyc(fraction: float) -> tuple[float, float]:
    return math.sin(2 * math.pi * fraction), math.cos(2 * math.pi * fraction)


def assert_column(cols: dict[str, np.ndarray], name: str, value) -> None:
    np.testing.assert_allclose(
        cols[name], np.broadcast_to(np.asarray(value, dtype=np.float64), (N,)), atol=1e-6, err_msg=name
    )


# -- score: the signals object reaches the features ----------------------------------------------


def test_seed_score_signals_reach_the_feature_matrix(sidecar, store):
    result = sidecar.call("score", seed_score(store), timeout_s=BIG_TIMEOUT)
    assert [s["id"] for s in result["scores"]] == IDS
    cols = columns(result)
    tod, dow, moy = cyc(0.25), cyc(2 / 7), cyc(0 / 12)  # 06:00; Wednesday (Monday = 0); January
    assert_column(cols, "tod_sin", tod[0])
    assert_column(cols, "tod_cos", tod[1])
    assert_column(cols, "dow_sin", dow[0])
    assert_column(cols, "dow_cos", dow[1])
    assert_column(cols, "moy_sin", moy[0])
    assert_column(cols, "moy_cos", moy[1])
    assert_column(cols, "log_session_gap_hours", math.log1p(8.5))
    assert_column(cols, "is_superseded", [float(f) for f in SUPERSEDED])
    assert_column(cols, "is_embedded", 1.0)
    # The project reaches the session (its project slot) and the database-derived signal:
    # the candidates stored under beta-proj are the other project's.
    assert result["features"]["project"] == "alpha-proj"
    assert_column(cols, "names_other_project", [float(PROJECTS[m] == "beta-proj") for m in IDS])
    other = columns(
        sidecar.call("score", seed_score(store, signals=signals(project="beta-proj")), timeout_s=BIG_TIMEOUT)
    )
    assert_column(other, "names_other_project", [float(PROJECTS[m] == "alpha-proj") for m in IDS])
    no_project = sidecar.call("score", seed_score(store, signals=signals(project=None)), timeout_s=BIG_TIMEOUT)
    assert no_project["features"]["project"] is None
    assert_column(columns(no_project), "names_other_project", 0.0)


@pytest.mark.parametrize("month", [1, 4, 7, 12])
def test_month_of_year_reaches_the_model_through_the_score_request(sidecar, store, month):
    # Seed verification item 42: month_of_year is the calendar month (January = 1); the model
    # receives sin/cos of (month - 1) / 12, as for a session_time in that month.
    seed = columns(
        sidecar.call("score", seed_score(store, signals=signals(month_of_year=month)), timeout_s=BIG_TIMEOUT)
    )
    daemon = columns(
        sidecar.call(
            "score",
            {**seed_score(store), "signals": None, "session_time": f"2026-{month:02d}-15T06:00:00+01:00"},
            timeout_s=BIG_TIMEOUT,
        )
    )
    sin, cos = cyc((month - 1) / 12)
    for cols in (seed, daemon):
        assert_column(cols, "moy_sin", sin)
        assert_column(cols, "moy_cos", cos)


def test_time_of_day_and_day_of_week_follow_the_documented_conventions(sidecar, store):
    cols = columns(
        sidecar.call(
            "score", seed_score(store, signals=signals(time_of_day=0.75, day_of_week=6)), timeout_s=BIG_TIMEOUT
        )
    )
    assert_column(cols, "tod_sin", cyc(0.75)[0])  # 18:00
    assert_column(cols, "tod_cos", cyc(0.75)[1])
    assert_column(cols, "dow_sin", cyc(6 / 7)[0])  # Sunday
    assert_column(cols, "dow_cos", cyc(6 / 7)[1])


def test_seed_and_daemon_shapes_score_identically_on_a_trained_model(sidecar, store):
    trained = sidecar.call("train", seed_train(store, signals=signals(), epochs=50), timeout_s=TRAIN_TIMEOUT)
    assert trained["accepted"], trained
    seed = sidecar.call("score", seed_score(store), timeout_s=BIG_TIMEOUT)
    # The same session in the daemon's shape: 2026-01-07 is a Wednesday in January, 06:00 local.
    daemon_params = {
        **seed_score(store),
        "signals": None,
        "session_time": "2026-01-07T06:00:00+01:00",
        "session_gap_hours": 8.5,
        "project": "alpha-proj",
        "candidates": [{"is_superseded": f} for f in SUPERSEDED],
    }
    daemon = sidecar.call("score", daemon_params, timeout_s=BIG_TIMEOUT)
    assert seed["model_version"] == daemon["model_version"] == trained["model_version"]
    assert seed["features"] == daemon["features"]
    assert seed["scores"] == daemon["scores"]
    # Both shapes together, agreeing, are accepted and change nothing.
    both = sidecar.call("score", {**daemon_params, "session_time": None, "signals": signals()}, timeout_s=BIG_TIMEOUT)
    assert both["scores"] == seed["scores"]
    # is_superseded is not dropped: the trained model scores the superseded candidates differently.
    unflagged = sidecar.call(
        "score", seed_score(store, signals=signals(is_superseded=[False] * N)), timeout_s=BIG_TIMEOUT
    )
    assert unflagged["scores"] != seed["scores"]
    changed = [i for i in range(N) if unflagged["scores"][i]["score"] != seed["scores"][i]["score"]]
    assert changed and all(SUPERSEDED[i] for i in changed)


# -- train: the seed's single-session form ------------------------------------------------------


def test_seed_train_returns_loss_and_step(sidecar, store):
    before = sidecar.call("status", timeout_s=BIG_TIMEOUT)
    result = sidecar.call("train", seed_train(store), timeout_s=TRAIN_TIMEOUT)
    assert isinstance(result["loss"], float) and math.isfinite(result["loss"])
    assert isinstance(result["step"], int) and result["step"] > 0  # optimiser steps of accepted runs
    assert result["sample_count"] == 1 and result["error"] is None
    # A list of seed-shaped sessions ("sessions") trains too; step never goes back.
    again = sidecar.call(
        "train",
        {"sessions": [seed_train(store), seed_train(store, continuity_score=0.7)], "epochs": 2},
        timeout_s=TRAIN_TIMEOUT,
    )
    assert isinstance(again["loss"], float) and math.isfinite(again["loss"])
    assert isinstance(again["step"], int) and again["step"] >= result["step"]
    assert again["sample_count"] == 2
    assert sidecar.call("status", timeout_s=BIG_TIMEOUT)["pid"] == before["pid"]


# -- malformed seed-shaped requests ------------------------------------------------------------


BAD_SCORE = [
    (dict(signals=signals(month_of_year=0)), "signals.month_of_year"),
    (dict(signals=signals(month_of_year=13)), "signals.month_of_year"),
    (dict(signals=signals(month_of_year=1.5)), "signals.month_of_year"),
    (dict(signals=signals(day_of_week=7)), "signals.day_of_week"),
    (dict(signals=signals(day_of_week=True)), "signals.day_of_week"),
    (dict(signals=signals(time_of_day=1.0)), "signals.time_of_day"),
    (dict(signals=signals(time_of_day=6)), "signals.time_of_day"),
    (dict(signals=signals(time_of_day="06:00")), "signals.time_of_day"),
    (dict(signals={"time_of_day": 0.25, "day_of_week": 2}), "signals.month_of_year"),
    (dict(signals=signals(session_gap_hours=-1)), "signals.session_gap_hours"),
    (dict(signals=signals(session_gap_hours="8.5")), "signals.session_gap_hours"),
    (dict(signals=signals(project=7)), "signals.project"),
    (dict(signals=signals(is_superseded=[False, True])), "signals.is_superseded"),
    (dict(signals=signals(is_superseded=[0, 1, 0, 1, 0, 1])), "signals.is_superseded[0]"),
    (dict(signals=signals(is_superseded=True)), "signals.is_superseded"),
    (dict(signals=signals(weather="rain")), "signals.weather"),
    (dict(signals=[0.25, 2, 1]), "signals"),
    (dict(session_time="2026-01-07T06:00:00"), "session_time"),
    (dict(project="beta-proj"), "signals.project"),
    (dict(session_gap_hours=3.0), "signals.session_gap_hours"),
    (dict(candidates=[{"is_superseded": True}] * N), "signals.is_superseded[0]"),
    (dict(candidate_embeddings=[[0.1] * DIM] * (N - 1)), "candidate_embeddings"),
    (dict(candidate_embeddings=[[0.1] * (DIM - 1)] * N), "candidate_embeddings[0]"),
    (dict(context_embedding=[1e39] * DIM), "context_embedding"),  # overflows float32: not finite
    (dict(return_features="yes"), "return_features"),
]

BAD_TRAIN = [
    (dict(labels=[1.0, 0.0]), "labels"),
    (dict(labels=[2.0] * N), "labels"),
    (dict(labels=["1"] * N), "labels"),
    (dict(labels=[True] * N), "labels"),
    (dict(continuity_score=1.5), "continuity_score"),
    (dict(continuity_score="high"), "continuity_score"),
    (dict(candidate_embeddings=None), "candidate_ids"),
    (dict(candidate_embeddings=[None] + [[0.1] * DIM] * (N - 1)), "candidate_embeddings[0]"),
    (dict(candidate_embeddings=[[0.1] * DIM] * N + [[0.2] * DIM]), "labels"),
    (dict(context_embedding=[0.1] * (DIM + 1)), "context_embedding"),
    (dict(signals=signals(is_superseded=[True])), "signals.is_superseded"),
    (dict(signals=signals(day_of_week=-1)), "signals.day_of_week"),
]


def test_bad_train_epochs_is_32602(sidecar, store):
    for epochs in (0, 1001, 2.5, "3", True):
        with pytest.raises(PredictorRpcError) as err:
            sidecar.call("train", seed_train(store, epochs=epochs), timeout_s=BIG_TIMEOUT)
        assert err.value.details["code"] == -32602 and "epochs" in str(err.value)
    assert sidecar.alive


def assert_refused(sidecar, method: str, params: dict, field: str) -> None:
    """``method`` with ``params`` is refused with -32602 naming ``field``, and the same sidecar
    process keeps answering."""
    pid = sidecar.call("status", timeout_s=BIG_TIMEOUT)["pid"]
    with pytest.raises(PredictorRpcError) as err:
        sidecar.call(method, params, timeout_s=BIG_TIMEOUT)
    assert err.value.details["code"] == -32602
    assert field in str(err.value), str(err.value)
    assert sidecar.alive and sidecar.call("status", timeout_s=BIG_TIMEOUT)["pid"] == pid


@pytest.mark.parametrize(("over", "field"), BAD_SCORE, ids=[f for _, f in BAD_SCORE])
def test_bad_seed_score_requests_are_32602_and_the_sidecar_survives(sidecar, store, over, field):
    assert_refused(sidecar, "score", seed_score(store, **over), field)
    assert sidecar.call("score", seed_score(store), timeout_s=BIG_TIMEOUT)["scores"]


@pytest.mark.parametrize(("over", "field"), BAD_TRAIN, ids=[f for _, f in BAD_TRAIN])
def test_bad_seed_train_requests_are_32602_and_the_sidecar_survives(sidecar, store, over, field):
    assert_refused(sidecar, "train", seed_train(store, **over), field)
    # the same session inside "sessions" names its index
    assert_refused(sidecar, "train", {"sessions": [seed_train(store), seed_train(store, **over)]}, "sessions[1]")
