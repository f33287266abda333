"""Checkpoint files: round trip, atomic writes, loud refusals, base-weights fine-tuning."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from memlane.predictor import checkpoint as ckpt
from memlane.predictor.checkpoint import CheckpointFlags, CheckpointMeta, load, load_base_weights, save
from memlane.predictor.data import batched, collate
from memlane.predictor.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointVersionError,
    EmbeddingMismatchError,
    FeatureSchemaMismatchError,
)
from memlane.predictor.features import CURRENT_SCHEMA, FeatureSchema
from memlane.predictor.losses import listnet_loss
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.predictor.synthetic import make_sessions
from memlane.predictor.train import FitConfig, fit

torch.set_num_threads(1)
DIM = 24
MODEL_ID = "test-embedder-v1"
META = CheckpointMeta(MODEL_ID, training={"steps": 12, "canary_ndcg": 0.71})


def _model(seed: int = 0) -> MemoryScorer:
    return MemoryScorer(ScorerConfig(native_dim=DIM), seed=seed)


def _load(path, **kw):
    kw.setdefault("embedding_model_id", MODEL_ID)
    kw.setdefault("native_dim", DIM)
    return load(path, **kw)


@pytest.fixture()
def saved(tmp_path):
    model = _model(3)
    path = tmp_path / "predictor" / "model.bin"
    digest = save(path, model, META, CheckpointFlags(is_finetuned=True))
    return model, path, digest


def test_round_trip(saved):
    model, path, digest = saved
    loaded = _load(path)
    assert loaded.digest == digest and loaded.flags == CheckpointFlags(is_finetuned=True)
    assert loaded.model.config == model.config
    assert loaded.meta.embedding_model_id == MODEL_ID and loaded.meta.feature_schema == CURRENT_SCHEMA
    assert loaded.meta.training == {"steps": 12, "canary_ndcg": 0.71} and loaded.saved_at
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.model.state_dict().items()):
        assert torch.equal(a, b), name
    batch = collate(make_sessions(2, native_dim=DIM), native_dim=DIM)
    assert torch.equal(model.score(batch), loaded.model.score(batch))


def test_layout_and_atomic_write(saved, tmp_path):
    _, path, _ = saved
    data = path.read_bytes()
    assert data.startswith(ckpt.MAGIC)
    version, flags, config_len = struct.unpack_from("<III", data, len(ckpt.MAGIC))
    assert (version, flags) == (ckpt.FORMAT_VERSION, 0b10)
    config = json.loads(data[len(ckpt.MAGIC) + 12 : len(ckpt.MAGIC) + 12 + config_len])
    assert config["feature_schema"]["hash"] == CURRENT_SCHEMA.hash
    assert config["embedding"] == {"model_id": MODEL_ID, "native_dim": DIM}
    assert config["model"]["d_model"] == 64 and config["model"]["num_buckets"] == 16_384
    assert path.stat().st_mode & 0o077 == 0  # private to the user
    save(path, _model(4), META)  # overwrite in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.bin"]  # no temp file left
    with pytest.raises(ValueError):
        save(path, _model(4), CheckpointMeta(MODEL_ID, training={"loss": float("nan")}))
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.bin"]


def test_feature_schema_mismatch_names_both_versions(saved):
    _, path, _ = saved
    newer = FeatureSchema("99", "0123456789abcdef", CURRENT_SCHEMA.names + ("new_feature",))
    with pytest.raises(FeatureSchemaMismatchError) as err:
        _load(path, expected_schema=newer)
    assert f"v{CURRENT_SCHEMA.version}" in str(err.value) and "v99" in str(err.value)
    assert err.value.details["found"]["version"] == CURRENT_SCHEMA.version
    assert err.value.details["expected"]["version"] == "99"
    same_version_other_hash = FeatureSchema(CURRENT_SCHEMA.version, "ffffffffffffffff", CURRENT_SCHEMA.names)
    with pytest.raises(FeatureSchemaMismatchError):
        _load(path, expected_schema=same_version_other_hash)


def test_embedding_mismatch(saved):
    _, path, _ = saved
    with pytest.raises(EmbeddingMismatchError, match="other-embedder"):
        _load(path, embedding_model_id="other-embedder")
    with pytest.raises(EmbeddingMismatchError, match="768"):
        _load(path, native_dim=768)
    assert _load(path, embedding_model_id=None, native_dim=None).model.config.native_dim == DIM


def test_bad_magic_version_and_missing_file(saved, tmp_path):
    _, path, _ = saved
    data = path.read_bytes()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"SGPT" + data[4:])
    with pytest.raises(CheckpointFormatError, match="magic"):
        _load(bad)
    bad.write_bytes(data[: len(ckpt.MAGIC)] + struct.pack("<I", 99) + data[len(ckpt.MAGIC) + 4 :])
    with pytest.raises(CheckpointVersionError, match="99"):
        _load(bad)
    with pytest.raises(CheckpointFormatError):
        _load(tmp_path / "missing.bin")


@pytest.mark.parametrize("cut", [0, 3, 10, 20, 200, -1000, -33, -1])
def test_truncated_files_are_refused(saved, tmp_path, cut):
    _, path, _ = saved
    data = path.read_bytes()
    short = tmp_path / "short.bin"
    short.write_bytes(data[:cut])
    with pytest.raises(CheckpointFormatError):
        _load(short)


@pytest.mark.parametrize("where", ["config", "params", "digest", "append"])
def test_corrupted_files_are_refused(saved, tmp_path, where):
    _, path, _ = saved
    data = bytearray(path.read_bytes())
    offset = {"config": len(ckpt.MAGIC) + 20, "params": len(data) // 2, "digest": len(data) - 5}.get(where)
    if offset is None:
        data += b"\x00"
    else:
        data[offset] ^= 0xFF
    broken = tmp_path / "broken.bin"
    broken.write_bytes(bytes(data))
    with pytest.raises(CheckpointFormatError):
        _load(broken)


def test_errors_are_memlane_errors():
    assert issubclass(FeatureSchemaMismatchError, CheckpointError)
    assert FeatureSchemaMismatchError("x").code == "predictor_feature_schema_mismatch"


def test_base_weights_fine_tune_flow(tmp_path):
    base_path, user_path = tmp_path / "predictor-base.bin", tmp_path / "model.bin"
    base_digest = save(
        base_path,
        _model(5),
        CheckpointMeta(MODEL_ID, training={"corpus": "synthetic"}),
        CheckpointFlags(is_pretrained_base=True),
    )
    base = load_base_weights(base_path, embedding_model_id=MODEL_ID, native_dim=DIM)
    assert base.flags.is_pretrained_base and not base.flags.is_finetuned
    train = batched(make_sessions(16, native_dim=DIM, seed=2), batch_size=8, native_dim=DIM)
    optimizer = torch.optim.Adam(base.model.parameters(), lr=3e-3, fused=True)
    result = fit(base.model, optimizer, listnet_loss, train, FitConfig(max_epochs=2, early_stop_patience=2))
    meta = CheckpointMeta(MODEL_ID, training={"base_sha256": base_digest, "steps": result.steps})
    save(user_path, result.model, meta, CheckpointFlags(is_finetuned=True))
    tuned = _load(user_path)
    assert tuned.flags == CheckpointFlags(is_pretrained_base=False, is_finetuned=True)
    assert tuned.meta.training["base_sha256"] == base_digest
    assert not torch.equal(tuned.model.gate_linear.weight, base.model.gate_linear.weight)
    with pytest.raises(CheckpointError, match="not a pre-trained base"):
        load_base_weights(user_path, embedding_model_id=MODEL_ID, native_dim=DIM)
