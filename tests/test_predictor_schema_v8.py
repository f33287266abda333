"""Feature schema v8 (``phase_weight``, issue 42 item 6): the session phase's weight of each
candidate's type, logged with the candidate's signals and read back on both paths; a v7
checkpoint is refused naming both schemas and set aside (real checkpoint files, real store)."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from memlane.predictor import checkpoint as ckpt
from memlane.predictor.dataset import signals_to_features
from memlane.predictor.engine import CHECKPOINT_NAME, load_or_fresh
from memlane.predictor.errors import FeatureSchemaMismatchError
from memlane.predictor.features import (
    CURRENT_SCHEMA,
    FEATURE_INDEX,
    FEATURE_NAMES,
    FeatureSchema,
    build_feature_matrix,
    feature_matrix_from_signals,
)
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.services.inputs import RememberInput
from memlane.services.predictor_signals import candidate_signals
from memlane.services.predictor_types import PoolMember
from memlane.v3.methodology.phases import phase_weight

#: The schema memlane recorded before phases (5c8a61d): 24 names, this hash.
V7_SCHEMA = FeatureSchema("7", "eae3d8ca09167515", FEATURE_NAMES[:24])
MODEL_ID = "test-8"


def _v7_checkpoint(path):
    model = MemoryScorer(
        ScorerConfig(native_dim=8, d_model=8, d_value=4, gate_hidden=4, num_features=24, bilinear_rank=4), seed=1
    )
    ckpt.save(path, model, ckpt.CheckpointMeta(MODEL_ID, V7_SCHEMA, {"model_version": 3}))


def test_v8_appends_phase_weight_to_v7():
    assert CURRENT_SCHEMA.version == "8" and CURRENT_SCHEMA.names == (*V7_SCHEMA.names, "phase_weight")
    assert CURRENT_SCHEMA.hash != V7_SCHEMA.hash


def test_v7_checkpoint_is_refused_naming_both_schemas(tmp_path):
    path = tmp_path / "model.bin"
    _v7_checkpoint(path)
    assert ckpt.load(path, V7_SCHEMA, embedding_model_id=MODEL_ID, native_dim=8).model.config.num_features == 24
    with pytest.raises(FeatureSchemaMismatchError) as err:
        ckpt.load(path, CURRENT_SCHEMA, embedding_model_id=MODEL_ID, native_dim=8)
    msg = str(err.value)
    assert "v7" in msg and "v8" in msg and V7_SCHEMA.hash in msg and CURRENT_SCHEMA.hash in msg


def test_load_or_fresh_sets_the_v7_checkpoint_aside(tmp_path):
    model_dir = tmp_path / "predictor"
    model_dir.mkdir()
    _v7_checkpoint(model_dir / CHECKPOINT_NAME)
    original = (model_dir / CHECKPOINT_NAME).read_bytes()
    engine, error = load_or_fresh(model_dir, embedding_model_id=MODEL_ID, native_dim=8)
    assert error is not None and "v7" in error and "kept as model.bin.rejected-" in error
    assert not engine.trained and engine.model.config.num_features == len(FEATURE_NAMES) == 25
    aside = [p for p in model_dir.iterdir() if p.name.startswith(f"{CHECKPOINT_NAME}.rejected-")]
    assert len(aside) == 1 and aside[0].read_bytes() == original


@pytest.mark.parametrize("phase", [None, "define", "implement", "validate"])
def test_phase_weight_signal_on_both_paths(store, phase):
    types = ["gotcha", "requirement", "fact", "context_cost"]
    fields = {"context_cost": {"module": "billing", "average_tokens_per_session": 900.0}}
    mems = [
        store.memories.remember(RememberInput(content=f"billing note {t}", type=t, type_fields=fields.get(t, {})))
        for t in types
    ]
    pool = [PoolMember(m.id, store.memories.get(m.id).seq, 0.5, r + 1, None, None, None) for r, m in enumerate(mems)]
    sig = candidate_signals(store.memories.index, store.db, pool, datetime.now().timestamp(), work_phase=phase)
    raws = [sig[m.id] for m in mems]
    if phase is None:
        assert all("phase_weight" not in r for r in raws)  # nothing logged without a phase
    else:
        assert [r["phase_weight"] for r in raws] == [phase_weight(phase, t) for t in types]
    when = datetime(2026, 5, 1, 9, 0)
    fast = feature_matrix_from_signals(raws, is_embedded=[False] * 4, session_gap_hours=1.0, session_time=when)
    slow = build_feature_matrix([signals_to_features({**r, "is_embedded": False}, 1.0) for r in raws], when)
    np.testing.assert_array_equal(fast, slow)
    expected = [phase_weight(phase, t) for t in types]
    np.testing.assert_allclose(fast[:, FEATURE_INDEX["phase_weight"]], expected, rtol=1e-6)
