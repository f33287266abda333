"""Checkpoint files: the model's weights with the config they were trained under.

Layout (seed "Phase 6: Pre-Trained Model Path" -> "Checkpoint format"; little-endian)::

    magic          7 bytes   b"MLPRED\\0"
    version        u32       FORMAT_VERSION (1)
    flags          u32       bit 0 is_pretrained_base, bit 1 is_finetuned
    config_len     u32       then config_len bytes of UTF-8 JSON:
                             {"format_version", "model" (ScorerConfig), "embedding"
                              {"model_id", "native_dim"}, "feature_schema" {"version",
                              "hash", "names"}, "training" {...}, "saved_at"}
    params_len     u64       then params_len bytes: torch.save(state_dict) (read back with
                             weights_only=True: a checkpoint can never run code)
    sha256         32 bytes  over every byte before it (truncation and corruption check)

:func:`load` refuses, with a specific :mod:`~memlane.predictor.errors` exception, any file
whose magic, version, length, checksum, feature schema or embedding model does not match,
so a model is never served features or vectors it was not trained on.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from memlane.fileperms import private_dir
from memlane.fsutil import atomic_write
from memlane.predictor.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointVersionError,
    EmbeddingMismatchError,
    FeatureSchemaMismatchError,
)
from memlane.predictor.features import CURRENT_SCHEMA, FeatureSchema
from memlane.predictor.model import MemoryScorer, ScorerConfig

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CheckpointFlags",
    "CheckpointMeta",
    "LoadedCheckpoint",
    "load",
    "load_base_weights",
    "save",
]

MAGIC = b"MLPRED\x00"
FORMAT_VERSION = 1
#: State keys a checkpoint may lack (added after format version 1 was fixed; default: off).
_OPTIONAL_KEYS = frozenset({"anchor", "anchor_on", "memory_basis", "context_bilinear"})
_HEAD = struct.Struct("<III")  # version, flags, config_len
_PARAMS_LEN = struct.Struct("<Q")
_DIGEST = 32


@dataclass(frozen=True)
class CheckpointFlags:
    """Provenance bits: a shipped base model, or a user's model fine-tuned from one."""

    is_pretrained_base: bool = False
    is_finetuned: bool = False

    def to_bits(self) -> int:
        return int(self.is_pretrained_base) | (int(self.is_finetuned) << 1)

    @classmethod
    def from_bits(cls, bits: int) -> CheckpointFlags:
        return cls(is_pretrained_base=bool(bits & 1), is_finetuned=bool(bits & 2))


@dataclass(frozen=True)
class CheckpointMeta:
    """What a checkpoint records beside the model's hyper-parameters.

    Attributes:
        embedding_model_id: id of the embedding model whose vectors the model was trained on.
        feature_schema: the feature schema of the training feature matrices.
        training: free JSON-serialisable training metadata (steps, losses, canary NDCG,
            base checkpoint digest, ...).
    """

    embedding_model_id: str
    feature_schema: FeatureSchema = CURRENT_SCHEMA
    training: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A loaded, verified checkpoint; ``digest`` is the file's sha256 (hex), a stable model id."""

    model: MemoryScorer
    meta: CheckpointMeta
    flags: CheckpointFlags
    digest: str
    saved_at: str


def _encode(model: MemoryScorer, meta: CheckpointMeta, flags: CheckpointFlags) -> bytes:
    config = {
        "format_version": FORMAT_VERSION,
        "model": model.config.to_dict(),
        "embedding": {"model_id": meta.embedding_model_id, "native_dim": model.config.native_dim},
        "feature_schema": meta.feature_schema.to_dict(),
        "training": meta.training,
        "saved_at": datetime.now(UTC).isoformat(),
    }
    config_bytes = json.dumps(config, sort_keys=True, allow_nan=False).encode("utf-8")
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, buf)
    params = buf.getvalue()
    body = b"".join(
        [
            MAGIC,
            _HEAD.pack(FORMAT_VERSION, flags.to_bits(), len(config_bytes)),
            config_bytes,
            _PARAMS_LEN.pack(len(params)),
            params,
        ]
    )
    return body + hashlib.sha256(body).digest()


def save(
    path: str | Path, model: MemoryScorer, meta: CheckpointMeta, flags: CheckpointFlags = CheckpointFlags()
) -> str:
    """Write a checkpoint atomically (temp file in the same directory, fsync, rename, fsync dir).

    A reader sees the old file or the new one, never a torn write; the file is created with
    mode 0600 (it is derived from the user's memories).

    Args:
        path: destination file; its directory is created if missing.
        model: the model to save (weights and ``model.config``).
        meta: embedding model id, feature schema and training metadata.
        flags: provenance flags.

    Returns:
        the file's sha256 digest (hex).

    Raises:
        ValueError: ``meta.training`` is not JSON-serialisable (or holds NaN/Inf).
        OSError: the file could not be written.
    """
    path = Path(path)
    data = _encode(model, meta, flags)
    private_dir(path.parent)
    atomic_write(path, data, mode=0o600)
    return hashlib.sha256(data).hexdigest()


def _corrupt(path: Path, reason: str) -> CheckpointFormatError:
    return CheckpointFormatError(
        f"checkpoint {path} is unreadable: {reason}", details={"path": str(path), "reason": reason}
    )


def _split(path: Path, data: bytes) -> tuple[int, bytes, bytes]:
    """Check magic, version, lengths and checksum; return (flags, config bytes, params bytes)."""
    if len(data) < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
        raise _corrupt(path, "bad magic bytes (not a memlane predictor checkpoint)")
    pos = len(MAGIC)
    if len(data) < pos + _HEAD.size:
        raise _corrupt(path, "truncated header")
    version, flags, config_len = _HEAD.unpack_from(data, pos)
    if version != FORMAT_VERSION:
        raise CheckpointVersionError(
            f"checkpoint {path} has format version {version}; this build reads version {FORMAT_VERSION}",
            details={"path": str(path), "found": version, "supported": FORMAT_VERSION},
        )
    pos += _HEAD.size
    if len(data) < pos + config_len + _PARAMS_LEN.size:
        raise _corrupt(path, "truncated config")
    config = data[pos : pos + config_len]
    pos += config_len
    (params_len,) = _PARAMS_LEN.unpack_from(data, pos)
    pos += _PARAMS_LEN.size
    if len(data) != pos + params_len + _DIGEST:
        raise _corrupt(path, f"expected {pos + params_len + _DIGEST} bytes, found {len(data)} (truncated or padded)")
    if hashlib.sha256(data[:-_DIGEST]).digest() != data[-_DIGEST:]:
        raise _corrupt(path, "sha256 checksum mismatch (corrupted)")
    return flags, config, data[pos : pos + params_len]


def load(
    path: str | Path,
    expected_schema: FeatureSchema = CURRENT_SCHEMA,
    *,
    embedding_model_id: str | None,
    native_dim: int | None,
) -> LoadedCheckpoint:
    """Read and verify a checkpoint and rebuild its model.

    Args:
        path: the checkpoint file.
        expected_schema: the feature schema the caller will build features with.
        embedding_model_id: the serving embedder's model id; ``None`` skips the check
            (only for text-only use).
        native_dim: the serving embedder's vector width; ``None`` skips the check.

    Returns:
        a :class:`LoadedCheckpoint` with the model in eval mode.

    Raises:
        CheckpointFormatError: missing file, bad magic, truncated, checksum mismatch,
            unreadable config or parameters.
        CheckpointVersionError: a format version other than :data:`FORMAT_VERSION`.
        FeatureSchemaMismatchError: schema version or hash differs (message names both).
        EmbeddingMismatchError: embedding model id or native dimension differs.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _corrupt(path, f"cannot read file: {exc}") from exc
    flag_bits, config_bytes, params = _split(path, data)
    try:
        config = json.loads(config_bytes.decode("utf-8"))
        schema = FeatureSchema.from_dict(config["feature_schema"])
        model_config = ScorerConfig.from_dict(config["model"])
        emb = config["embedding"]
    except (ValueError, KeyError, TypeError) as exc:
        raise _corrupt(path, f"bad config JSON: {exc}") from exc
    details = {"path": str(path)}
    if (schema.version, schema.hash) != (expected_schema.version, expected_schema.hash):
        raise FeatureSchemaMismatchError(
            f"checkpoint {path} was trained on feature schema {schema.describe()}, "
            f"but this build scores with feature schema {expected_schema.describe()}; retrain or migrate",
            details={**details, "found": schema.to_dict(), "expected": expected_schema.to_dict()},
        )
    if embedding_model_id is not None and emb.get("model_id") != embedding_model_id:
        raise EmbeddingMismatchError(
            f"checkpoint {path} was trained on embedding model {emb.get('model_id')!r}, "
            f"the embedder is {embedding_model_id!r}",
            details={**details, "found": emb.get("model_id"), "expected": embedding_model_id},
        )
    if native_dim is not None and model_config.native_dim != native_dim:
        raise EmbeddingMismatchError(
            f"checkpoint {path} expects {model_config.native_dim}-dim embeddings, the embedder gives {native_dim}",
            details={**details, "found": model_config.native_dim, "expected": native_dim},
        )
    try:
        state = torch.load(io.BytesIO(params), map_location="cpu", weights_only=True)
        model = MemoryScorer(model_config)
        missing, unexpected = model.load_state_dict(state, strict=False)
        # Checkpoints written before the full stage's linear anchor lack its two buffers, and
        # those written before the bilinear term lack its basis and W: they load with the
        # anchor off and the term at 0, i.e. score exactly as they did.
        if unexpected or set(missing) - _OPTIONAL_KEYS:
            raise ValueError(
                f"missing keys {sorted(set(missing) - _OPTIONAL_KEYS)}, unexpected keys {sorted(unexpected)}"
            )
    except Exception as exc:  # unpickling or shape errors all mean the same to a caller
        raise _corrupt(path, f"bad parameters: {exc}") from exc
    model.eval()
    meta = CheckpointMeta(str(emb.get("model_id", "")), schema, dict(config.get("training") or {}))
    return LoadedCheckpoint(
        model=model,
        meta=meta,
        flags=CheckpointFlags.from_bits(flag_bits),
        digest=hashlib.sha256(data).hexdigest(),
        saved_at=str(config.get("saved_at", "")),
    )


def load_base_weights(path: str | Path, *, embedding_model_id: str | None, native_dim: int | None) -> LoadedCheckpoint:
    """Load a shipped base model to fine-tune from (seed "Phase 6", ``--base-weights``).

    Raises:
        CheckpointError: the file is not flagged ``is_pretrained_base``; and all of :func:`load`.
    """
    loaded = load(path, embedding_model_id=embedding_model_id, native_dim=native_dim)
    if not loaded.flags.is_pretrained_base:
        raise CheckpointError(f"checkpoint {path} is not a pre-trained base model", details={"path": str(path)})
    return loaded
