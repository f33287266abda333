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
"""

from __future__ import annotations

from memlane.predictor.checkpoint import CheckpointFlags, CheckpointMeta, LoadedCheckpoint, load, save
from memlane.predictor.data import Session, SessionBatch, batched, collate
from memlane.predictor.features import CURRENT_SCHEMA, CandidateFeatures, FeatureSchema, build_feature_matrix
from memlane.predictor.gates import GateReport, GateThresholds, evaluate_gates
from memlane.predictor.losses import listnet_loss
from memlane.predictor.metrics import ndcg_at_k, topk_overlap
from memlane.predictor.model import MemoryScorer, ScorerConfig, configure_threads
from memlane.predictor.padding import PADDED_Y_VALUE
from memlane.predictor.train import FitResult, fit

__all__ = [
    "CURRENT_SCHEMA",
    "PADDED_Y_VALUE",
    "CandidateFeatures",
    "CheckpointFlags",
    "CheckpointMeta",
    "FeatureSchema",
    "FitResult",
    "GateReport",
    "GateThresholds",
    "LoadedCheckpoint",
    "MemoryScorer",
    "ScorerConfig",
    "Session",
    "SessionBatch",
    "batched",
    "build_feature_matrix",
    "collate",
    "configure_threads",
    "evaluate_gates",
    "fit",
    "listnet_loss",
    "load",
    "ndcg_at_k",
    "save",
    "topk_overlap",
]
