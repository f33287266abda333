"""Errors of the predictor package; all derive from :class:`memlane.errors.MemlaneError`."""

from __future__ import annotations

from memlane.errors import MemlaneError

__all__ = [
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointVersionError",
    "EmbeddingMismatchError",
    "FeatureSchemaMismatchError",
    "PredictorError",
]


class PredictorError(MemlaneError):
    """Root of the predictor's errors (the predictor is unavailable; recall falls back)."""

    status = 503
    code = "predictor_unavailable"


class CheckpointError(PredictorError):
    """A checkpoint file that cannot be served; ``details`` carries ``path`` and the reason."""

    code = "predictor_checkpoint_invalid"


class CheckpointFormatError(CheckpointError):
    """Bad magic bytes, a truncated file, a checksum mismatch or unreadable config JSON."""

    code = "predictor_checkpoint_corrupt"


class CheckpointVersionError(CheckpointError):
    """A checkpoint format version this code cannot read."""

    code = "predictor_checkpoint_version"


class FeatureSchemaMismatchError(CheckpointError):
    """The checkpoint was trained on another feature schema; ``details`` names both versions."""

    code = "predictor_feature_schema_mismatch"


class EmbeddingMismatchError(CheckpointError):
    """The checkpoint expects another embedding model id or native embedding dimension."""

    code = "predictor_embedding_mismatch"
