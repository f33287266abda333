"""The predictive memory scorer: a small per-user model that ranks candidate memories.

Seed: ``shared/seeds/predictive-memory-scorer.md``. Pure core (no database, no daemon):

* :mod:`.features` -- the versioned feature schema and ``build_feature_matrix``.
* :mod:`.tokenizer` -- HashTrick tokenizer (FNV-1a, 16,384 buckets) and project slots.
* :mod:`.padding` -- ``PADDED_Y_VALUE``, shared by losses, metrics and loaders.
* :mod:`.data` -- ``Session`` examples, ``collate`` into a padded ``SessionBatch``.
* :mod:`.model` -- ``MemoryScorer`` (cross-attention after ACAN) and ``configure_threads``.
* :mod:`.losses` -- listwise losses, one file each (ListNet).
* :mod:`.metrics` -- NDCG@k and top-k overlap, one file each.
* :mod:`.gates` -- validation gates of a retrained model against the live one.
* :mod:`.train` -- ``fit()``: train a clone, then gate it.
* :mod:`.checkpoint` -- atomic, versioned, schema-checked checkpoint files.
* :mod:`.synthetic` -- sessions with a planted signal, for tests and benchmarks.
* :mod:`.errors` -- the package's exceptions.

Importing the package loads none of them: the names below are resolved on first access
(PEP 562 ``__getattr__``), so ``memlane.config.predictor`` and ``.policy`` (the daemon's
side, the settings class) come without PyTorch, which only ``.model``, ``.train``,
``.checkpoint``, ``.losses``, ``.data`` and ``.gates`` import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Exported name -> the submodule that defines it, imported on first access.
_EXPORTS: dict[str, str] = {
    "CheckpointFlags": "checkpoint",
    "CheckpointMeta": "checkpoint",
    "LoadedCheckpoint": "checkpoint",
    "load": "checkpoint",
    "save": "checkpoint",
    "Session": "data",
    "SessionBatch": "data",
    "batched": "data",
    "collate": "data",
    "CURRENT_SCHEMA": "features",
    "CandidateFeatures": "features",
    "FeatureSchema": "features",
    "build_feature_matrix": "features",
    "GateReport": "gates",
    "GateThresholds": "gates",
    "evaluate_gates": "gates",
    "listnet_loss": "losses",
    "ndcg_at_k": "metrics",
    "topk_overlap": "metrics",
    "MemoryScorer": "model",
    "ScorerConfig": "model",
    "configure_threads": "model",
    "PADDED_Y_VALUE": "padding",
    "FitResult": "train",
    "fit": "train",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from memlane.predictor.checkpoint import CheckpointFlags, CheckpointMeta, LoadedCheckpoint, load, save
    from memlane.predictor.data import Session, SessionBatch, batched, collate
    from memlane.predictor.features import CURRENT_SCHEMA, CandidateFeatures, FeatureSchema, build_feature_matrix
    from memlane.predictor.gates import GateReport, GateThresholds, evaluate_gates
    from memlane.predictor.losses import listnet_loss
    from memlane.predictor.metrics import ndcg_at_k, topk_overlap
    from memlane.predictor.model import MemoryScorer, ScorerConfig, configure_threads
    from memlane.predictor.padding import PADDED_Y_VALUE
    from memlane.predictor.train import FitResult, fit


def __getattr__(name: str) -> Any:
    """Resolve an exported name by importing its submodule (PEP 562).

    Raises:
        AttributeError: ``name`` is neither an export nor a submodule.
    """
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's globals plus every lazily exported name."""
    return sorted(set(globals()) | set(_EXPORTS))
