"""Feature schema v4 (``names_other_project``): one feature path, and the upgrade from v3.

* The signal is derived from the database (:func:`memlane.predictor.dataset.derived_signals`)
  with the same cut-off when the sidecar scores and when a session is loaded for training:
  both paths build the same feature matrix (real SQLite store, real sidecar code path).
* ``tests/data/predictor_v3.bin`` is a real checkpoint written by memlane 5e83cc3 (feature
  schema v3, 19 features; a small model config so the file is 22 KB). It is refused loudly
  (naming both schemas), set aside, and a daemon whose predictor home holds it serves the
  baseline and trains a model of the current schema (v8) over it (real sidecar subprocess,
  real local embedder).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from memlane.config import load_settings
from memlane.container import open_container
from memlane.predictor import checkpoint as ckpt
from memlane.predictor.dataset import derived_signals, load_sessions
from memlane.predictor.engine import CHECKPOINT_NAME, load_or_fresh
from memlane.predictor.errors import FeatureSchemaMismatchError
from memlane.predictor.features import CURRENT_SCHEMA, FEATURE_INDEX, FEATURE_NAMES, FeatureSchema
from memlane.predictor.rpc_params import parse_score_params
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import EndInput, StartInput
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database, open_readonly
from memlane.storage.migrations import migrate
from predictor_store_helpers import insert_memory, insert_scored_session

V3_FILE = Path(__file__).parent / "data" / "predictor_v3.bin"
V3_NAMES = FEATURE_NAMES[:19]
V3_SCHEMA = FeatureSchema("3", "17d358d139a3beee", V3_NAMES)  # as memlane 5e83cc3 recorded it
LOCAL_MODEL = "all-MiniLM-L6-v2-onnx-int8"
DIM = 8
MODEL_ID = "test-8"
AT = "2026-02-01T08:00:00.000Z"


# -- the v3 checkpoint --------------------------------------------------------------------------


def test_v4_to_v8_append_to_the_v3_names():
    assert CURRENT_SCHEMA.version == "8" and CURRENT_SCHEMA.names == (
        *V3_NAMES,
        "names_other_project",
        "shares_project_vocabulary",
        "shares_other_project_vocabulary",
        "query_coverage",
        "log_content_chars",
        "phase_weight",
    )
    assert CURRENT_SCHEMA.hash != V3_SCHEMA.hash


def test_real_v3_checkpoint_is_refused_naming_both_schemas():
    # the file is a valid v3 checkpoint: it loads when v3 is expected ...
    loaded = ckpt.load(V3_FILE, V3_SCHEMA, embedding_model_id=LOCAL_MODEL, native_dim=384)
    assert loaded.model.config.num_features == 19 and loaded.meta.training["model_version"] == 12
    # ... and this build refuses it
    with pytest.raises(FeatureSchemaMismatchError) as err:
        ckpt.load(V3_FILE, CURRENT_SCHEMA, embedding_model_id=LOCAL_MODEL, native_dim=384)
    msg = str(err.value)
    assert "v3" in msg and "v8" in msg and V3_SCHEMA.hash in msg and CURRENT_SCHEMA.hash in msg


def test_load_or_fresh_sets_the_v3_checkpoint_aside(tmp_path):
    model_dir = tmp_path / "predictor"
    model_dir.mkdir()
    shutil.copy(V3_FILE, model_dir / CHECKPOINT_NAME)
    engine, error = load_or_fresh(model_dir, embedding_model_id=LOCAL_MODEL, native_dim=384)
    assert error is not None and "v3" in error and "kept as model.bin.rejected-" in error
    assert not engine.trained and engine.model_version == 0
    assert engine.model.config.num_features == len(FEATURE_NAMES) == 25
    aside = [p for p in model_dir.iterdir() if p.name.startswith(f"{CHECKPOINT_NAME}.rejected-")]
    assert len(aside) == 1 and aside[0].read_bytes() == V3_FILE.read_bytes()


@pytest.fixture()
def v3_home(tmp_path, monkeypatch):
    for k in list(os.environ):
        if k.startswith("MEMLANE_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("MEMLANE_CONFIG", str(tmp_path / "no-such-config.yaml"))
    home = tmp_path / "home"
    (home / "predictor").mkdir(parents=True)
    shutil.copy(V3_FILE, home / "predictor" / CHECKPOINT_NAME)
    return home


def test_daemon_with_a_v3_checkpoint_serves_the_baseline_and_trains_a_current_model(v3_home, shared_embedder):
    settings = load_settings(
        home=v3_home,
        sessions={"inject_limit": 3},
        predictor={"score_timeout_ms": 30_000, "min_training_sessions": 1, "train_interval_sessions": 1},
    )
    c = open_container(settings, embedder=shared_embedder, predictor=True)
    try:
        assert c.predictor is not None and c.predictor.backend.wait_ready(120)
        c.memories.remember_many(
            [
                RememberInput(content=f"The {comp} service {fact}.", project="atlas")
                for comp in ("billing", "search", "auth")
                for fact in ("deploys with make release", "logs to Loki", "keeps its migrations under db/migrations")
            ]
        )
        status = c.predictor.backend.call("status", {}, timeout_s=30)  # the sidecar's own status
        assert "v3" in str(status["checkpoint_error"]) and "v8" in str(status["checkpoint_error"]), status
        assert status["model_version"] == 0 and not status["trained"]
        assert c.predictor.phase() == "collecting"
        accepted = False
        for i in range(4):
            key = f"s-{i}"
            res = c.sessions.start(StartInput(key, project="atlas", context="deploying the billing service"))
            rows = c.db.read(lambda conn: sess_sql.session_memories(conn, key))
            # the baseline is served: fused = baseline order; the fresh v4 model scored every candidate
            assert res.status == "new" and res.candidate_count == len(rows) == 9
            sig = c.db.read(lambda conn: pred_sql.session_signals(conn, key))
            assert sig["alpha"] == 1.0 and sig["phase"] in ("collecting", "warming") and "predictor_error" not in sig
            assert all(r.predictor_score is not None for r in rows)
            c.sessions.feedback(key, {m["id"]: 1.0 if j == 0 else 0.0 for j, m in enumerate(res.injected)})
            c.sessions.end(EndInput(key, project="atlas"), wait=True)
            c.predictor.wait_training(300)
            log = c.db.read(lambda conn: pred_sql.training_log(conn, limit=10))
            if any(r["accepted"] for r in log):
                accepted = True
                break
        assert accepted, c.db.read(lambda conn: pred_sql.training_log(conn, limit=10))
    finally:
        c.predictor.wait_training(300)
        c.close()
    model = ckpt.load(
        v3_home / "predictor" / CHECKPOINT_NAME, CURRENT_SCHEMA, embedding_model_id=LOCAL_MODEL, native_dim=384
    )
    assert model.meta.feature_schema == CURRENT_SCHEMA and model.model.config.num_features == 25
    aside = [p for p in (v3_home / "predictor").iterdir() if p.name.startswith(f"{CHECKPOINT_NAME}.rejected-")]
    assert len(aside) == 1 and aside[0].read_bytes() == V3_FILE.read_bytes()


# -- one feature path for the derived signal ------------------------------------------------------


def _memory(conn: sqlite3.Connection, mid: str, content: str, vector: np.ndarray, project: str | None = None) -> None:
    insert_memory(conn, mid, content, vector, model=MODEL_ID, at=AT, project=project)


def _session(
    conn: sqlite3.Connection,
    key: str,
    project: str | None,
    started_at: str,
    ids: list[str],
    local_time: str,
    ctx: np.ndarray,
) -> None:
    insert_scored_session(conn, key, project, started_at, ids, local_time=local_time, ctx=ctx, model=MODEL_ID, raw=_raw)


def _raw(i: int) -> dict:
    return {
        "age_days": 1.0 + i,
        "importance": 0.5,
        "access_count": 0,
        "is_embedded": True,
        "baseline_score": 1.0 / (i + 1),
        "baseline_rank": i,
        "context_similarity": 0.1 * i,
        "mentions_project": i == 0,
    }


@pytest.fixture()
def projects_db(tmp_path):
    """Sessions in ``/src/ledger`` (day 1), ``/src/acme-api`` (day 2), ``/src/orbit-web`` (day 3)."""
    rng = np.random.default_rng(1)
    path = tmp_path / "memlane.db"
    db = Database(path)
    migrate(db)
    vec = lambda: rng.normal(size=DIM).astype(np.float32)  # noqa: E731
    ctx = vec()
    mems = {
        "general": ("Run the linters before pushing.", None),
        "ledger-note": ("ledger: deploys go through Argo CD.", None),
        "orbit-note": ("Orbit-Web onboarding: ask for the ECS role.", None),
        "acme-note": ("acme-api deploys with make release.", None),
        "scoped-ledger": ("Deploys go through Argo CD.", "/src/ledger"),
    }
    ids = list(mems)

    def fill(conn: sqlite3.Connection) -> None:
        for mid, (text, project) in mems.items():
            _memory(conn, mid, text, vec(), project)
        _session(conn, "d1-ledger", "/src/ledger", "2026-02-01T09:00:00.000Z", ids, "2026-02-01T10:00:00+01:00", ctx)
        _session(conn, "d2-acme", "/src/acme-api", "2026-02-02T09:00:00.000Z", ids, "2026-02-02T10:00:00+01:00", ctx)
        _session(conn, "d3-orbit", "/src/orbit-web", "2026-02-03T09:00:00.000Z", ids, "2026-02-03T10:00:00+01:00", ctx)

    db.write(fill)
    db.close()
    return path, ids, ctx


def test_names_other_project_counts_only_projects_started_before(projects_db):
    path, ids, _ = projects_db
    conn = open_readonly(path)
    flags = lambda project, when: {  # noqa: E731
        m: d["names_other_project"] for m, d in derived_signals(conn, ids, project=project, session_time=when).items()
    }
    day2 = datetime(2026, 2, 2, 9, 0, tzinfo=UTC)
    # acme-api on day 2: ledger had a session before, orbit-web not yet
    assert flags("/src/acme-api", day2) == {
        "general": False,
        "ledger-note": True,
        "orbit-note": False,
        "acme-note": False,
        "scoped-ledger": True,
    }
    # on day 4 orbit-web counts too (case-insensitive)
    day4 = datetime(2026, 2, 4, tzinfo=UTC)
    assert flags("/src/acme-api", day4)["orbit-note"] is True
    # the session's own project never counts; a memory stored under it is not "another project"
    assert flags("/src/ledger", day4) == {
        "general": False,
        "ledger-note": False,
        "orbit-note": True,
        "acme-note": True,
        "scoped-ledger": False,
    }
    # without a project every flag is False
    assert not any(flags(None, day4).values())


def test_scoring_and_training_build_the_same_v4_matrix(projects_db):
    path, ids, ctx = projects_db
    conn = open_readonly(path)
    stored = {
        s.session_id: s for s in load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM, min_confidence=0.6)
    }
    assert set(stored) == {"d1-ledger", "d2-acme", "d3-orbit"}
    col = FEATURE_INDEX["names_other_project"]
    # training: each session sees only the projects started before it
    assert stored["d1-ledger"].features[:, col].tolist() == [0, 0, 0, 0, 0]  # nothing started before it
    derive = lambda m, project, when: derived_signals(conn, m, project=project, session_time=when)  # noqa: E731
    lookup = lambda m: {k: (c, b) for k, (c, b, _) in pred_sql.memory_rows(conn, m, MODEL_ID).items()}  # noqa: E731
    for key, project, local in (
        ("d1-ledger", "/src/ledger", "2026-02-01T10:00:00+01:00"),
        ("d2-acme", "/src/acme-api", "2026-02-02T10:00:00+01:00"),
        ("d3-orbit", "/src/orbit-web", "2026-02-03T10:00:00+01:00"),
    ):
        params = {
            "candidate_ids": ids,
            "candidates": [_raw(i) for i in range(len(ids))],
            "session_time": local,
            "session_gap_hours": 2.0,
            "project": project,
            "context_embedding": np.asarray(ctx, dtype=np.float32).tolist(),
        }
        _, served = parse_score_params(params, native_dim=DIM, lookup=lookup, derive=derive)
        np.testing.assert_array_equal(served.features, stored[key].features)
    assert stored["d3-orbit"].features[:, col].tolist() == [0, 1, 0, 1, 1]
