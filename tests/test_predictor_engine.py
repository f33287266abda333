"""PredictorEngine (gated training, swap, checkpoints, refusal) and dataset.load_sessions round trips."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import torch

from memlane.config import predictor as C
from memlane.predictor import checkpoint as ckpt
from memlane.predictor.checkpoint import CheckpointMeta
from memlane.predictor.coverage import query_coverage
from memlane.predictor.data import collate
from memlane.predictor.dataset import build_session, load_sessions
from memlane.predictor.engine import CHECKPOINT_NAME, PredictorEngine, load_or_fresh, non_positive_columns
from memlane.predictor.errors import (
    CheckpointError,
    CheckpointFormatError,
    EmbeddingMismatchError,
    FeatureSchemaMismatchError,
)
from memlane.predictor.features import (
    CURRENT_SCHEMA,
    FEATURE_INDEX,
    NUM_FEATURES,
    CandidateFeatures,
    FeatureSchema,
    build_feature_matrix,
)
from memlane.predictor.metrics import ndcg_at_k
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.predictor.rpc_params import parse_score_params
from memlane.predictor.synthetic import make_sessions
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database, open_readonly
from memlane.storage.embeddings import upsert as upsert_embeddings
from memlane.storage.migrations import migrate

torch.set_num_threads(1)
DIM = 8
MODEL_ID = "test-8"


def new_engine(model_dir: Path, **kw) -> PredictorEngine:
    kw.setdefault("embedding_model_id", MODEL_ID)
    kw.setdefault("native_dim", DIM)
    return PredictorEngine(model_dir, **kw)


def synthetic(n: int = 12, seed: int = 0):
    return make_sessions(n, native_dim=DIM, n_candidates=12, n_relevant=3, seed=seed)


def scores_of(engine: PredictorEngine, sessions) -> list[np.ndarray]:
    return [engine.score(s) for s in sessions]


def assert_same_scores(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.fixture()
def trained(tmp_path):
    engine = new_engine(tmp_path / "predictor")
    report = engine.train(synthetic(12), canary=synthetic(4, seed=9), max_epochs=2)
    return engine, report


# -- training, swap, checkpoint ------------------------------------------------------------------


def test_fresh_engine_is_untrained_and_scores(tmp_path):
    engine = new_engine(tmp_path / "predictor")
    assert not engine.trained and engine.model_version == 0
    status = engine.status()
    assert status["trained"] is False and status["model_ready"] is False and status["model_version"] == 0
    assert status["embedding_model_id"] == MODEL_ID and status["native_dim"] == DIM
    assert status["feature_schema"]["hash"] == CURRENT_SCHEMA.hash
    s = synthetic(1)[0]
    scores = engine.score(s)
    assert scores.shape == (s.num_candidates,) and scores.dtype == np.float64 and np.isfinite(scores).all()
    assert not engine.checkpoint_path.exists()


def test_accepted_training_bumps_version_and_writes_checkpoint(trained):
    engine, report = trained
    assert report.accepted, report.gates
    assert report.model_version == engine.model_version == 1
    assert report.sample_count == 12 and report.steps > 0 and report.error is None
    assert report.loss is not None and np.isfinite(report.loss)
    assert report.gates["passed"] is True
    assert {g["name"] for g in report.gates["gates"]} >= {"losses_finite", "parameters_finite", "score_variance"}
    assert report.canary_ndcg is not None and report.canary_score_variance is not None
    assert engine.trained and engine.training_pairs == 12 and engine.last_trained
    assert engine.checkpoint_path == engine.model_dir / CHECKPOINT_NAME
    assert engine.checkpoint_path.is_file()
    json.dumps(report.to_dict(), allow_nan=False)


def test_reloaded_engine_serves_identical_scores(trained):
    engine, _ = trained
    probe = synthetic(3, seed=5)
    again = new_engine(engine.model_dir)
    assert again.trained and again.model_version == 1
    assert again.training_pairs == engine.training_pairs and again.steps_total == engine.steps_total
    assert again.last_trained == engine.last_trained
    assert_same_scores(scores_of(engine, probe), scores_of(again, probe))
    for (name, a), (_, b) in zip(engine.model.state_dict().items(), again.model.state_dict().items()):
        assert torch.equal(a, b), name


def test_training_changes_the_served_model(tmp_path):
    engine = new_engine(tmp_path / "predictor")
    probe = synthetic(2, seed=5)
    before = scores_of(engine, probe)
    old_model = engine.model
    report = engine.train(synthetic(12), max_epochs=2)
    assert report.accepted
    assert engine.model is not old_model  # swapped, not modified in place
    assert not all(np.array_equal(a, b) for a, b in zip(before, scores_of(engine, probe)))
    assert_same_scores(before, [old_model.score(collate([s], native_dim=DIM))[0].double().numpy() for s in probe])


def test_save_false_does_not_write(tmp_path):
    engine = new_engine(tmp_path / "predictor")
    assert engine.train(synthetic(8), max_epochs=1, save=False).accepted
    assert engine.model_version == 1 and not engine.checkpoint_path.exists()
    digest = engine.save_checkpoint()
    assert hashlib.sha256(engine.checkpoint_path.read_bytes()).hexdigest() == digest


def test_nan_labels_trip_losses_finite_and_keep_the_live_model(trained):
    engine, _ = trained
    probe = synthetic(3, seed=5)
    before = scores_of(engine, probe)
    live = engine.model
    file_before = engine.checkpoint_path.read_bytes()
    corrupt = [dataclasses.replace(s, labels=np.full_like(s.labels, np.nan)) for s in synthetic(6, seed=2)]
    report = engine.train(corrupt, canary=synthetic(4, seed=9), max_epochs=2)
    assert not report.accepted
    assert report.stop_reason == "non_finite_loss"
    failed = [g["name"] for g in report.gates["gates"] if not g["passed"]]
    assert "losses_finite" in failed
    assert report.model_version == engine.model_version == 1
    assert engine.model is live
    assert_same_scores(before, scores_of(engine, probe))
    assert engine.checkpoint_path.read_bytes() == file_before


def test_the_engine_remembers_what_its_models_trained_on(tmp_path):
    """The ids of every session an accepted run trained, validated or replayed on accumulate
    over the model's lineage, survive a restart, and are what the canary NDCG gate leaves out;
    a rejected run adds none, and a base model starts with none."""
    engine = new_engine(tmp_path / "predictor")
    first, replay = synthetic(8, seed=1), synthetic(2, seed=2)
    assert engine.train(first, replay=replay, max_epochs=2).accepted
    ids = {s.session_id for s in [*first, *replay]}
    assert len(ids) == 10 and set(engine.trained_on) == ids
    second = synthetic(6, seed=3)
    canary = [*first[:2], *synthetic(3, seed=4)]  # two members the live model has seen
    report = engine.train(second, canary=canary, max_epochs=2)
    assert report.accepted and set(engine.trained_on) == ids | {s.session_id for s in second}

    def mean_ndcg(sessions) -> float:
        batch = collate(sessions, native_dim=DIM)
        return float(ndcg_at_k(engine.model.score(batch), batch.labels, 10).mean())

    # the candidate (now live) was compared on the three canary members the old model never saw
    assert report.canary_ndcg == pytest.approx(mean_ndcg(canary[2:]), abs=1e-6)
    assert report.canary_ndcg != pytest.approx(mean_ndcg(canary), abs=1e-6)
    bad = [dataclasses.replace(s, labels=np.full_like(s.labels, np.nan)) for s in synthetic(4, seed=5)]
    assert not engine.train(bad, max_epochs=1).accepted
    assert set(engine.trained_on) == ids | {s.session_id for s in second}
    again = new_engine(engine.model_dir)
    assert again.trained_on == engine.trained_on
    base = tmp_path / "base.bin"
    engine.save_base(base)
    assert not new_engine(tmp_path / "other", base_weights=base).trained_on


def test_the_trained_session_ids_are_capped_dropping_the_longest_ago_trained(tmp_path, monkeypatch):
    """The checkpoint keeps at most TRAINED_SESSIONS_KEPT ids: a session trained on again
    moves to the newest end, and the ids trained on longest ago are the ones dropped, in
    memory and across a restart."""
    monkeypatch.setattr(C, "TRAINED_SESSIONS_KEPT", 12)
    engine = new_engine(tmp_path / "predictor")
    first = synthetic(8, seed=1)
    assert engine.train(first, max_epochs=2).accepted
    second = [*first[:2], *synthetic(6, seed=3)]  # two sessions trained on again
    assert engine.train(second, max_epochs=2).accepted
    kept = list(engine.trained_on)
    assert len(kept) == 12
    dropped = {s.session_id for s in first[2:]} - set(kept)
    assert len(dropped) == 2 and set(kept[-8:]) == {s.session_id for s in second}
    assert list(new_engine(engine.model_dir).trained_on) == kept


def test_rejected_report_is_json_serialisable(tmp_path):
    # The sidecar sends TrainReport.to_dict() with json.dumps(allow_nan=False): a NaN loss in
    # a rejected run must not make the reply unserialisable (it would never be answered).
    engine = new_engine(tmp_path / "predictor")
    corrupt = [dataclasses.replace(s, labels=np.full_like(s.labels, np.nan)) for s in synthetic(4)]
    report = engine.train(corrupt, max_epochs=1)
    assert not report.accepted
    json.dumps(report.to_dict(), allow_nan=False)


def test_no_labelled_sessions_is_reported_not_raised(tmp_path):
    engine = new_engine(tmp_path / "predictor")
    unlabelled = [dataclasses.replace(s, labels=None) for s in synthetic(3)]
    report = engine.train(unlabelled)
    assert not report.accepted and report.error == "no labelled sessions" and report.model_version == 0
    assert not engine.checkpoint_path.exists()


def test_score_rejects_wrong_embedding_width(tmp_path):
    engine = new_engine(tmp_path / "predictor")
    wide = make_sessions(1, native_dim=DIM + 1, n_candidates=5, n_relevant=1)[0]
    with pytest.raises(ValueError):
        engine.score(wide)


# -- checkpoint refusal --------------------------------------------------------------------------


def write_foreign_checkpoint(
    model_dir: Path, *, model_id: str = MODEL_ID, native_dim: int = DIM, schema: FeatureSchema = CURRENT_SCHEMA
) -> Path:
    path = model_dir / CHECKPOINT_NAME
    ckpt.save(
        path,
        MemoryScorer(ScorerConfig(native_dim=native_dim), seed=3),
        CheckpointMeta(model_id, feature_schema=schema, training={"trained": True, "model_version": 7}),
    )
    return path


OTHER_SCHEMA = FeatureSchema("2", "0123456789abcdef", CURRENT_SCHEMA.names + ("new_feature",))


@pytest.mark.parametrize(
    "kind,error",
    [
        ("embedding_model", EmbeddingMismatchError),
        ("native_dim", EmbeddingMismatchError),
        ("feature_schema", FeatureSchemaMismatchError),
        ("garbage", CheckpointFormatError),
    ],
)
def test_foreign_checkpoint_is_refused(tmp_path, kind, error):
    model_dir = tmp_path / "predictor"
    if kind == "embedding_model":
        write_foreign_checkpoint(model_dir, model_id="other-embedder")
    elif kind == "native_dim":
        write_foreign_checkpoint(model_dir, native_dim=DIM * 2)
    elif kind == "feature_schema":
        write_foreign_checkpoint(model_dir, schema=OTHER_SCHEMA)
    else:
        model_dir.mkdir(parents=True)
        (model_dir / CHECKPOINT_NAME).write_bytes(b"not a checkpoint at all")
    with pytest.raises(error) as err:
        new_engine(model_dir)
    assert isinstance(err.value, CheckpointError)


@pytest.mark.parametrize("kind", ["embedding_model", "feature_schema"])
def test_load_or_fresh_sets_a_refused_checkpoint_aside(tmp_path, kind):
    model_dir = tmp_path / "predictor"
    if kind == "embedding_model":
        path = write_foreign_checkpoint(model_dir, model_id="other-embedder")
    else:
        path = write_foreign_checkpoint(model_dir, schema=OTHER_SCHEMA)
    original = path.read_bytes()
    engine, error = load_or_fresh(model_dir, embedding_model_id=MODEL_ID, native_dim=DIM)
    assert error is not None and "kept as model.bin.rejected-" in error
    assert ("other-embedder" in error) if kind == "embedding_model" else ("v2" in error)
    assert not engine.trained and engine.model_version == 0
    assert not path.exists()
    aside = [p for p in model_dir.iterdir() if p.name.startswith(f"{CHECKPOINT_NAME}.rejected-")]
    assert len(aside) == 1 and aside[0].read_bytes() == original
    # The fresh engine trains and saves over the empty slot; the set-aside file is kept.
    assert engine.train(synthetic(6), max_epochs=1).accepted
    assert new_engine(model_dir).model_version == 1 and aside[0].exists()


def test_load_or_fresh_without_problem_reports_none(trained):
    engine, _ = trained
    again, error = load_or_fresh(engine.model_dir, embedding_model_id=MODEL_ID, native_dim=DIM)
    assert error is None and again.model_version == 1


def test_load_or_fresh_with_unusable_base_weights_starts_fresh(tmp_path):
    base = tmp_path / "base.bin"
    ckpt.save(base, MemoryScorer(ScorerConfig(native_dim=DIM)), CheckpointMeta("other-embedder"))
    base_bytes = base.read_bytes()
    engine, error = load_or_fresh(
        tmp_path / "predictor", embedding_model_id=MODEL_ID, native_dim=DIM, base_weights=str(base)
    )
    assert error is not None and "other-embedder" in error
    assert not engine.trained and engine.base_digest is None
    assert base.read_bytes() == base_bytes


def test_base_weights_start_trained_and_finetune(tmp_path):
    donor = new_engine(tmp_path / "donor")
    assert donor.train(synthetic(8), max_epochs=1).accepted
    base = tmp_path / "base.bin"
    donor.save_base(base)
    engine = new_engine(tmp_path / "predictor", base_weights=base)
    assert engine.trained and engine.model_version == 1 and engine.base_digest
    probe = synthetic(2, seed=5)
    assert_same_scores(scores_of(donor, probe), scores_of(engine, probe))
    report = engine.train(synthetic(8, seed=1), max_epochs=3)
    assert report.accepted and report.model_version == 2
    saved = ckpt.load(engine.checkpoint_path, embedding_model_id=MODEL_ID, native_dim=DIM)
    assert saved.flags.is_finetuned and not saved.flags.is_pretrained_base
    reloaded = new_engine(tmp_path / "predictor", base_weights=base)  # model.bin now wins over the base
    assert reloaded.model_version == 2 and reloaded.is_finetuned_from_base


def test_base_weights_must_be_a_base_model(tmp_path):
    """Seed verification item 11: ``--base-weights`` loads a checkpoint flagged
    is_pretrained_base; a user's own model.bin named there is refused loudly, and the engine
    starts untrained rather than serving it as a base."""
    donor = new_engine(tmp_path / "donor")
    assert donor.train(synthetic(8), max_epochs=1).accepted
    assert donor.checkpoint_path.exists()
    engine, error = load_or_fresh(
        tmp_path / "predictor", embedding_model_id=MODEL_ID, native_dim=DIM, base_weights=str(donor.checkpoint_path)
    )
    assert error is not None and "not a pre-trained base model" in error
    assert not engine.trained and engine.base_digest is None
    assert donor.checkpoint_path.exists()  # the donor's own model is never moved aside


# -- dataset.load_sessions round trip ------------------------------------------------------------


AT = "2026-02-03T10:00:00.000Z"


def unit(rng: np.random.Generator, n: int = DIM) -> np.ndarray:
    v = rng.normal(size=n).astype(np.float32)
    return v / np.linalg.norm(v)


def insert_memory(
    conn: sqlite3.Connection, mid: str, content: str, vector: np.ndarray | None, model: str = MODEL_ID
) -> None:
    h = hashlib.sha256(content.encode()).hexdigest()
    conn.execute(
        """INSERT INTO memories (id, content, normalized_content, content_hash, created_at, updated_at)
                    VALUES (?,?,?,?,?,?)""",
        (mid, content, content.lower(), h, AT, AT),
    )
    if vector is not None:
        upsert_embeddings(conn, [(h, vector)], model, AT)


def seed_session(
    conn: sqlite3.Connection,
    key: str,
    *,
    started_at: str,
    rows: list[tuple],
    confidence: float,
    context_vector: np.ndarray | None,
    context_model: str | None = MODEL_ID,
    signals: dict | None = None,
    project: str | None = "proj",
    context: str = "context text",
) -> None:
    """rows: (memory_id, features dict or None, label or None)."""
    sess_sql.insert_session(
        conn,
        key=key,
        project=project,
        harness="test",
        cwd=None,
        context=context,
        started_at=started_at,
        predictor_state="collecting",
    )
    sess_sql.record_candidates(
        conn,
        key,
        [
            sess_sql.CandidateRow(
                memory_id=m,
                source="effective" if f is not None else "fts_only",
                final_score=1.0 / (i + 1),
                rank=i,
                was_injected=i < 3,
            )
            for i, (m, f, _) in enumerate(rows)
        ],
        started_at,
    )
    if signals is not None:
        pred_sql.set_session_inputs(
            conn, key, context_vector=context_vector, context_model=context_model, signals=signals
        )
    pred_sql.set_candidate_features(conn, key, {m: f for m, f, _ in rows if f is not None})
    ids = dict(conn.execute("SELECT memory_id, id FROM session_memories WHERE session_key = ?", (key,)).fetchall())
    sess_sql.write_labels(conn, [(ids[m], lab, lab, ["test"]) for m, _, lab in rows if lab is not None])
    sess_sql.write_score(
        conn,
        key,
        score=0.8,
        confidence=confidence,
        memories_recalled=3,
        memories_used=1,
        novel_context_count=0,
        reasoning=None,
        scorer="llm",
        model=None,
        at=started_at,
    )


def feats(i: int, **over) -> dict:
    base = {
        "age_days": 2.0 + i,
        "importance": 0.1 * (i % 10),
        "access_count": i,
        "is_embedded": True,
        "baseline_score": 1.0 / (i + 1),
        "baseline_rank": i,
        "context_similarity": 0.05 * i,
        "is_superseded": i == 4,
        "pinned": i == 0,
    }
    return {**base, **over}


@pytest.fixture()
def seeded_db(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "memlane.db"
    db = Database(path)
    migrate(db)
    vectors = {f"m{i}": unit(rng) for i in range(8)}
    ctx = unit(rng)

    def fill(conn: sqlite3.Connection) -> None:
        for i in range(8):
            # m5 has only a vector of another embedder; m6 has none: both take the text path.
            if i == 5:
                insert_memory(conn, f"m{i}", "memory five text", vectors[f"m{i}"], model="other-embedder")
            elif i == 6:
                insert_memory(conn, f"m{i}", "memory six text", None)
            else:
                insert_memory(conn, f"m{i}", f"memory {i} text", vectors[f"m{i}"])
        good_rows = [(f"m{i}", feats(i), lab) for i, lab in enumerate([1.0, 0.0, 0.5, -0.3, 0.0, 0.8, 0.2])]
        good_rows.append(("m7", None, 1.0))  # an fts_only hit without logged features
        seed_session(
            conn,
            "good",
            started_at="2026-02-03T09:30:00.000Z",
            rows=good_rows,
            confidence=0.9,
            context_vector=ctx,
            signals={"session_time": "2026-02-03T09:30:00+01:00", "session_gap_hours": 6.5},
        )
        seed_session(
            conn,
            "other-ctx-model",
            started_at="2026-02-02T09:00:00.000Z",
            rows=[("m0", feats(0), 0.0), ("m1", feats(1), 1.0), ("m2", feats(2), None)],
            confidence=0.6,
            context_vector=unit(rng),
            context_model="other-embedder",
            signals={"session_time": "2026-02-02T21:15:00", "session_gap_hours": 1.0},
            project=None,
        )
        seed_session(
            conn,
            "low-confidence",
            started_at="2026-02-04T09:00:00.000Z",
            rows=[("m0", feats(0), 1.0), ("m1", feats(1), 0.0)],
            confidence=0.59,
            context_vector=ctx,
            signals={"session_gap_hours": 1.0},
        )
        seed_session(
            conn,
            "constant-labels",
            started_at="2026-02-05T09:00:00.000Z",
            rows=[("m0", feats(0), 0.3), ("m1", feats(1), 0.3), ("m2", feats(2), 0.3)],
            confidence=0.9,
            context_vector=ctx,
            signals={"session_gap_hours": 1.0},
        )
        seed_session(
            conn,
            "no-labels",
            started_at="2026-02-05T10:00:00.000Z",
            rows=[("m0", feats(0), None), ("m1", feats(1), None)],
            confidence=0.9,
            context_vector=ctx,
            signals={"session_gap_hours": 1.0},
        )
        seed_session(
            conn,
            "one-candidate",
            started_at="2026-02-05T11:00:00.000Z",
            rows=[("m0", feats(0), 1.0), ("m1", None, 0.0)],
            confidence=0.9,
            context_vector=ctx,
            signals={"session_gap_hours": 1.0},
        )
        seed_session(
            conn,
            "no-signals",
            started_at="2026-02-05T12:00:00.000Z",
            rows=[("m0", feats(0), 1.0), ("m1", feats(1), 0.0)],
            confidence=0.9,
            context_vector=ctx,
            signals=None,
        )
        seed_session(
            conn,
            "malformed-features",
            started_at="2026-02-05T13:00:00.000Z",
            rows=[("m0", {"age_days": 1.0}, 1.0), ("m1", feats(1), 0.0)],
            confidence=0.9,
            context_vector=ctx,
            signals={"session_gap_hours": 1.0},
        )

    db.write(fill)
    db.close()
    return path, vectors, ctx


def test_load_sessions_round_trip(seeded_db):
    path, vectors, ctx = seeded_db
    conn = open_readonly(path)
    sessions = load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM, min_confidence=0.6)
    assert [s.session_id for s in sessions] == ["good", "other-ctx-model"]  # newest first
    good = sessions[0]
    assert good.features.shape == (7, NUM_FEATURES) and good.num_candidates == 7
    np.testing.assert_allclose(good.labels, [1.0, 0.0, 0.5, -0.3, 0.0, 0.8, 0.2], rtol=1e-6)
    assert good.labels.dtype == np.float32
    assert good.confidence == pytest.approx(0.9) and good.project == "proj"
    assert good.is_embedded().tolist() == [True, True, True, True, True, False, False]
    assert good.candidate_embeddings.shape == (7, DIM)
    for i in (0, 1, 2, 3, 4):
        np.testing.assert_array_equal(good.candidate_embeddings[i], vectors[f"m{i}"])
    assert list(good.candidate_texts) == ["", "", "", "", "", "memory five text", "memory six text"]
    np.testing.assert_array_equal(good.context_embedding, ctx)
    assert good.context_text == ""
    # The exact feature matrix serving would build: local session time and the logged gap. The
    # rows were logged without query_coverage (before schema v6): training computes it from the
    # session's context "context text" and each memory's text ("memory 3 text"): 1 of 2 terms.
    # content_chars (schema v7) is the length of each memory's text, read with it.
    texts = [
        "memory 0 text",
        "memory 1 text",
        "memory 2 text",
        "memory 3 text",
        "memory 4 text",
        "memory five text",
        "memory six text",
    ]
    when = datetime.fromisoformat("2026-02-03T09:30:00+01:00")
    expected = build_feature_matrix(
        [
            CandidateFeatures(
                age_days=2.0 + i,
                importance=0.1 * i,
                access_count=i,
                session_gap_hours=6.5,
                is_embedded=i < 5,
                is_superseded=i == 4,
                baseline_score=1.0 / (i + 1),
                baseline_rank=i,
                context_similarity=0.05 * i,
                pinned=i == 0,
                query_coverage=0.5,
                content_chars=len(texts[i]),
            )
            for i in range(7)
        ],
        when,
    )
    np.testing.assert_array_equal(good.features, expected)

    other = sessions[1]
    assert other.num_candidates == 3 and other.project is None
    np.testing.assert_array_equal(other.labels, [0.0, 1.0, 0.0])  # a missing label counts as 0
    assert other.context_embedding is None and other.context_text == "context text"
    assert other.confidence == pytest.approx(0.6)


def test_load_sessions_confidence_filter_keys_and_limit(seeded_db):
    path, _, _ = seeded_db
    conn = open_readonly(path)
    kw = dict(embedding_model=MODEL_ID, native_dim=DIM)
    assert "low-confidence" in [s.session_id for s in load_sessions(conn, min_confidence=0.5, **kw)]
    assert "low-confidence" not in [s.session_id for s in load_sessions(conn, min_confidence=0.6, **kw)]
    assert [s.session_id for s in load_sessions(conn, min_confidence=0.6, keys=["good"], **kw)] == ["good"]
    assert load_sessions(conn, min_confidence=0.6, keys=[], **kw) == []
    assert load_sessions(conn, min_confidence=0.6, keys=["constant-labels", "no-labels"], **kw) == []
    # limit counts stored sessions, newest first; the skipped ones use up slots.
    assert load_sessions(conn, min_confidence=0.6, limit=1, **kw) == []


def test_load_sessions_with_another_native_dim_takes_the_text_path(seeded_db):
    path, _, _ = seeded_db
    conn = open_readonly(path)
    sessions = load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM * 2, min_confidence=0.6)
    good = sessions[0]
    assert not good.is_embedded().any() and good.candidate_embeddings is None
    assert good.candidate_texts[0] == "memory 0 text" and good.context_text == "context text"


def test_scoring_path_builds_the_same_session_as_training(seeded_db):
    path, _, _ = seeded_db
    conn = open_readonly(path)
    stored = load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM, min_confidence=0.6, keys=["good"])[0]
    ctx = conn.execute("SELECT context_vector FROM sessions WHERE session_key = 'good'").fetchone()[0]
    ids = [f"m{i}" for i in range(7)]
    # a v6 daemon logs and sends query_coverage for its context (what training backfills here)
    texts = [conn.execute("SELECT content FROM memories WHERE id = ?", (m,)).fetchone()[0] for m in ids]
    cov = query_coverage("context text", texts)
    params = {
        "candidate_ids": ids,
        "candidates": [{**feats(i), "query_coverage": cov[i]} for i in range(7)],
        "session_time": "2026-02-03T09:30:00+01:00",
        "session_gap_hours": 6.5,
        "project": "proj",
        "context_embedding": np.frombuffer(ctx, dtype="<f4").tolist(),
    }
    got_ids, served = parse_score_params(
        params,
        native_dim=DIM,
        lookup=lambda m: {k: (c, b) for k, (c, b, _) in pred_sql.memory_rows(conn, m, MODEL_ID).items()},
    )
    assert got_ids == ids
    np.testing.assert_array_equal(served.features, stored.features)
    lengths = served.features[:, FEATURE_INDEX["log_content_chars"]]  # schema v7, from the texts on both paths
    np.testing.assert_allclose(lengths, [np.log1p(len(t)) / 6.0 for t in texts], rtol=1e-6)
    assert lengths.min() > 0
    np.testing.assert_array_equal(served.candidate_embeddings, stored.candidate_embeddings)
    assert list(served.candidate_texts) == list(stored.candidate_texts)
    np.testing.assert_array_equal(served.context_embedding, stored.context_embedding)
    engine = PredictorEngine(path.parent / "predictor", embedding_model_id=MODEL_ID, native_dim=DIM)
    np.testing.assert_array_equal(engine.score(served), engine.score(stored))


def test_engine_trains_on_loaded_sessions(seeded_db, tmp_path):
    path, _, _ = seeded_db
    conn = open_readonly(path)
    sessions = load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM, min_confidence=0.6)
    engine = new_engine(tmp_path / "predictor")
    report = engine.train(sessions, max_epochs=2)
    assert report.accepted and report.sample_count == 2 and engine.model_version == 1


def test_a_run_asked_for_the_linear_stage_keeps_it_on_any_number_of_sessions(tmp_path, monkeypatch):
    """``train(stage="linear")`` (Phase 6 bases): only the feature residual and the bilinear term
    train even where :meth:`PredictorEngine.stage_for` would pick the full stage."""
    monkeypatch.setattr(C, "FULL_MODEL_MIN_SESSIONS", 20)
    sessions = synthetic(30)
    assert PredictorEngine.stage_for(len(sessions)) == "full"
    engine = new_engine(tmp_path)
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    report = engine.train(sessions, save=False, max_epochs=5, stage="linear")
    assert report.accepted and report.stage == "linear" and report.best_epoch is None
    after = engine.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert "gate_linear.weight" in changed
    assert changed <= {"gate_linear.weight", "context_bilinear", "memory_basis", "gate_hidden.weight"}
    assert not engine.model.has_anchor and torch.count_nonzero(after["gate_out.weight"]) == 0
    # the same sessions without the argument train the full stage
    full = new_engine(tmp_path / "full").train(sessions, save=False, max_epochs=2)
    assert full.stage == "full"


@pytest.mark.parametrize("stage", ["Linear", "mlp", ""])
def test_an_unknown_stage_is_refused(tmp_path, stage):
    engine = new_engine(tmp_path)
    with pytest.raises(ValueError, match="stage must be"):
        engine.train(synthetic(4), save=False, stage=stage)
    assert not engine.trained


def test_build_session_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        build_session(
            candidates=[feats(0), feats(1)],
            session_time=datetime(2026, 1, 1),
            session_gap_hours=0,
            candidate_vectors=[None],
            candidate_texts=["a", "b"],
            context_vector=None,
            context_text="",
            project=None,
            native_dim=DIM,
        )


def test_training_stage_follows_the_number_of_sessions(tmp_path):
    """Below FULL_MODEL_MIN_SESSIONS only the feature residual trains, without a validation split."""
    from memlane.config import predictor as C

    assert PredictorEngine.stage_for(C.FULL_MODEL_MIN_SESSIONS - 1) == "linear"
    assert PredictorEngine.stage_for(C.FULL_MODEL_MIN_SESSIONS) == "full"
    engine = new_engine(tmp_path)
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    report = engine.train(synthetic(30), save=False, max_epochs=5)
    assert report.stage == "linear" and report.best_epoch is None  # no validation split
    after = engine.model.state_dict()
    assert {k for k in before if not torch.equal(before[k], after[k])} <= {
        "gate_linear.weight",
        "context_bilinear",
        "memory_basis",
        "gate_hidden.weight",
    }
    # the gate MLP does not train; only its inputs of the sign-bounded features are set to 0
    # (engine._held_at_zero; its output layer is 0, so the score does not change)
    bounded = engine.model.mlp_feature_mask(non_positive_columns())["gate_hidden.weight"]
    assert torch.equal(after["gate_hidden.weight"][~bounded], before["gate_hidden.weight"][~bounded])
    assert torch.count_nonzero(after["gate_hidden.weight"][bounded]) == 0
