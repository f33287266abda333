"""The LoCoMo bench's Phase 6 base (``benchmarks.predictor_locomo.train_base``).

Real stores written through the storage layer, the engine's own session loader and training,
and a real base checkpoint read back as the daemon reads ``--base-weights``. The base is a
linear-stage model whatever the number of sessions (docs/predictor.md, "Phase 6 bases are
linear-stage models").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.predictor_locomo import train_base
from memlane.config import predictor as C
from memlane.predictor import checkpoint as ckpt
from memlane.predictor.engine import PredictorEngine
from memlane.predictor.features import FEATURE_INDEX
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.storage.db import Database
from memlane.storage.migrations import migrate
from predictor_store_helpers import insert_memory, insert_scored_session

DIM = 8
MODEL_ID = "test-8"
AT = "2026-02-01T08:00:00.000Z"
N_CANDIDATES = 6


def _raw(rank: int) -> dict:
    # the labelled memory (rank 0) is the important one; the baseline's scores barely separate them
    return {
        "age_days": 1.0 + rank,
        "importance": 0.9 if rank == 0 else 0.1 * rank,
        "access_count": rank,
        "is_embedded": True,
        "baseline_score": 0.5 - 0.01 * rank,
        "baseline_rank": rank,
        "context_similarity": 0.3,
        "mentions_project": False,
    }


def _store(home: Path, n_sessions: int, seed: int) -> None:
    """``home/memories.db`` with ``n_sessions`` labelled, scored sessions of 6 candidates."""
    home.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    db = Database(home / "memories.db")
    migrate(db)

    def fill(conn) -> None:
        ids = [f"{home.name}-m{i}" for i in range(N_CANDIDATES * 4)]
        for i, mid in enumerate(ids):
            insert_memory(
                conn, mid, f"note {i} of {home.name}", rng.normal(size=DIM).astype(np.float32), model=MODEL_ID, at=AT
            )
        for k in range(n_sessions):
            pool = [ids[j] for j in rng.permutation(len(ids))[:N_CANDIDATES]]
            day = 2 + k // 24
            started = f"2026-02-{day:02d}T{k % 24:02d}:00:00.000Z"
            insert_scored_session(
                conn,
                f"{home.name}-s{k}",
                None,
                started,
                pool,
                local_time=f"2026-02-{day:02d}T{k % 24:02d}:00:00+00:00",
                ctx=rng.normal(size=DIM).astype(np.float32),
                model=MODEL_ID,
                raw=_raw,
            )

    db.write(fill)
    db.close()


@pytest.fixture()
def homes(tmp_path):
    out = [tmp_path / "user-a", tmp_path / "user-b"]
    for i, home in enumerate(out):
        _store(home, 24, seed=i)
    return out


def test_the_base_is_a_linear_stage_model_where_the_full_stage_would_train(homes, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "FULL_MODEL_MIN_SESSIONS", 20)  # 48 sessions would train the full stage
    out = tmp_path / "bases" / "base.bin"
    out.parent.mkdir()
    summary = train_base(homes, out, native_dim=DIM, model_id=MODEL_ID, max_seconds=60.0)
    assert summary["stage"] == "linear" and summary["accepted"] and summary["sessions"] == 48
    assert not (out.parent / "base-work").exists()

    loaded = ckpt.load_base_weights(out, embedding_model_id=MODEL_ID, native_dim=DIM)
    assert loaded.flags.is_pretrained_base and not loaded.flags.is_finetuned
    base, fresh = loaded.model, MemoryScorer(ScorerConfig(native_dim=DIM), seed=0)
    # the gate MLP and the text path stay untrained: its output layer is 0, no linear anchor
    assert torch.count_nonzero(base.gate_out.weight) == 0 and not base.has_anchor
    for name in ("text_embedding.weight", "down_projection.weight", "query.weight", "gate_out.bias"):
        assert torch.equal(base.state_dict()[name], fresh.state_dict()[name]), name
    # the feature weights learned the sessions: the labelled memory is the important one
    learned, start = base.feature_weights(), fresh.feature_weights()
    assert learned[FEATURE_INDEX["importance"]] > start[FEATURE_INDEX["importance"]]

    # a user starting from it: trained, scoring with it, its weights the prior's centre
    engine = PredictorEngine(tmp_path / "user", embedding_model_id=MODEL_ID, native_dim=DIM, base_weights=out)
    assert engine.trained and engine.base_digest == loaded.digest
    assert torch.equal(engine.feature_prior, learned)


def test_stores_without_training_grade_sessions_are_refused(tmp_path):
    home = tmp_path / "empty"
    _store(home, 0, seed=0)
    with pytest.raises(RuntimeError, match="no training-grade sessions"):
        train_base([home], tmp_path / "base.bin", native_dim=DIM, model_id=MODEL_ID, max_seconds=10.0)
