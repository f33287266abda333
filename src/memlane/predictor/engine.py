"""The predictor engine: the live model, scoring, gated training and checkpoints.

One :class:`PredictorEngine` lives in the sidecar process (``memlane predictor serve``) and,
for benchmarks, may live in process. Scoring reads the live model, which is never modified:
training fits a deep copy (:func:`memlane.predictor.train.fit`) and the live reference is
replaced in one assignment only when every gate passes, then written to ``model.bin``
atomically (predictive-memory-scorer.md "Training schedule", "Phase 6").
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from memlane.config import predictor as C
from memlane.predictor import checkpoint as ckpt
from memlane.predictor.anchor import fit_linear_anchor
from memlane.predictor.data import Session, batched, collate, memory_basis, session_constant_columns
from memlane.predictor.errors import CheckpointError
from memlane.predictor.features import CURRENT_SCHEMA, FEATURE_INDEX, NUM_FEATURES
from memlane.predictor.gates import GateReport
from memlane.predictor.losses import listnet_loss
from memlane.predictor.metrics import topk_overlap
from memlane.predictor.model import MemoryScorer, ScorerConfig, baseline_prior_weights
from memlane.predictor.train import Constraints, FitConfig, fit

__all__ = ["PredictorEngine", "TrainReport"]

log = logging.getLogger(__name__)

CHECKPOINT_NAME = C.CHECKPOINT_NAME


@dataclass
class TrainReport:
    """The outcome of one training run (what ``predictor_training_log`` stores).

    Attributes:
        accepted: the candidate passed every gate and now serves.
        model_version: the version serving after the run.
        loss: mean loss of the last finished epoch (nats), or None.
        steps: optimiser steps.
        sample_count: sessions trained on (replayed ones excluded).
        duration_ms: training and gates, ms.
        stop_reason: see :class:`memlane.predictor.train.FitResult`.
        gates: the gate report as a dict.
        canary_ndcg: candidate's mean NDCG@10 over the canary sessions the live model did not
            train on (the NDCG gate's comparison, gates.py), or None.
        canary_ndcg_delta: candidate minus live model over those sessions, or None.
        canary_score_variance: mean per-session canary score variance, or None.
        canary_topk_churn: share of canary sessions whose top-5 changed, or None.
        error: why nothing was trained (no data), else None.
        validation_ndcg: validation NDCG@10 before training and after each epoch.
        best_epoch: the epoch whose weights were kept (0 = the starting weights), or None.
        stage: ``"linear"`` or ``"full"`` (:meth:`PredictorEngine.stage_for`).
    """

    accepted: bool
    model_version: int
    loss: float | None = None
    steps: int = 0
    sample_count: int = 0
    duration_ms: float = 0.0
    stop_reason: str = ""
    gates: dict[str, Any] = field(default_factory=dict)
    canary_ndcg: float | None = None
    canary_ndcg_delta: float | None = None
    canary_score_variance: float | None = None
    canary_topk_churn: float | None = None
    error: str | None = None
    validation_ndcg: list[float] = field(default_factory=list)
    best_epoch: int | None = None
    stage: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class PredictorEngine:
    """Holds the live :class:`MemoryScorer` of one user and trains it.

    Args:
        model_dir: directory of ``model.bin`` (created on first save).
        embedding_model_id: the serving embedder's model id (checked against checkpoints).
        native_dim: the embedder's vector width E.
        base_weights: Phase 6 base checkpoint used when ``model.bin`` does not exist.
        seed: initialisation and batch-order seed.

    Raises:
        CheckpointError: ``model.bin`` exists but cannot be served (corrupt, other feature
            schema, other embedder): refused loudly rather than silently retrained over; or
            ``base_weights`` is used and is not a checkpoint flagged ``is_pretrained_base``
            (a user's own ``model.bin`` is not a base model).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        embedding_model_id: str,
        native_dim: int,
        base_weights: str | Path | None = None,
        seed: int = 0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.embedding_model_id = embedding_model_id
        self.native_dim = int(native_dim)
        self.seed = seed
        self._train_lock = threading.Lock()
        self.trained = False
        self.model_version = 0
        self.last_trained: str | None = None
        self.training_pairs = 0
        self.steps_total = 0
        self.is_finetuned_from_base = False
        self.base_digest: str | None = None
        # Ids of the sessions the live model and the models it was trained from learned from
        # (training, validation and replay sets): the canary NDCG gate leaves them out
        # (gates.py). An ordered set (dict keys), the most recently trained last, capped at
        # TRAINED_SESSIONS_KEPT (:meth:`_remember_trained`). Kept in the checkpoint; empty for a
        # fresh model or a Phase 6 base, whose sessions were another store's.
        self.trained_on: dict[str, None] = {}
        # The centre of the linear weights' prior: the weights this user's model started from
        # (the baseline prior, or a Phase 6 base's); None: unknown (no prior term).
        self.feature_prior: torch.Tensor | None = None
        path = self.checkpoint_path
        if path.exists():
            loaded = ckpt.load(path, CURRENT_SCHEMA, embedding_model_id=embedding_model_id, native_dim=native_dim)
            self.model = loaded.model
            t = loaded.meta.training
            self.trained = bool(t.get("trained", True))
            self.model_version = int(t.get("model_version", 1))
            self.last_trained = t.get("last_trained")
            self.training_pairs = int(t.get("training_pairs", 0))
            self.steps_total = int(t.get("steps_total", 0))
            self.is_finetuned_from_base = loaded.flags.is_finetuned
            self.feature_prior = _stored_prior(t.get("feature_prior"), loaded.flags.is_finetuned)
            raw_ids = t.get("trained_sessions")
            self._remember_trained([str(x) for x in raw_ids if x] if isinstance(raw_ids, list) else [])
        elif base_weights:
            loaded = ckpt.load_base_weights(
                Path(base_weights), embedding_model_id=embedding_model_id, native_dim=native_dim
            )
            self.model = loaded.model
            self.base_digest = loaded.digest
            self.feature_prior = self.model.feature_weights()
            # A base model ranks, but it has not learned this user: it still earns alpha.
            self.trained = True
            self.model_version = 1
        else:
            self.model = MemoryScorer(ScorerConfig(native_dim=self.native_dim), seed=seed)
            self.feature_prior = baseline_prior_weights()
        self.model.eval()
        self.stage = "full"
        self.optimizer = self._new_optimizer(self.model)

    @property
    def checkpoint_path(self) -> Path:
        return self.model_dir / CHECKPOINT_NAME

    @staticmethod
    def _new_optimizer(model: MemoryScorer, stage: str = "full") -> torch.optim.Optimizer:
        # fused=True: one kernel for the whole update; the hash table's embedding dominates the
        # step, so this roughly halves it (docs/decisions.md, "Training").
        if stage == "linear":
            masks = model.feature_residual_masks()
            named = dict(model.named_parameters())
            return torch.optim.Adam([named[n] for n in masks], lr=C.LEARNING_RATE, fused=True)
        return torch.optim.Adam(model.parameters(), lr=C.LEARNING_RATE, fused=True)

    @staticmethod
    def stage_for(n_sessions: int) -> str:
        """The training stage for a run on ``n_sessions`` labelled sessions (validation included).

        ``"linear"`` below :data:`~memlane.config.predictor.FULL_MODEL_MIN_SESSIONS`: only the
        linear residual over the feature schema trains (:meth:`MemoryScorer.feature_residual_masks`),
        full-batch; ``"full"`` from there on: every parameter, mini-batches. Why: on few sessions
        the full model ranks below the baseline, the linear stage above it (docs/predictor.md,
        "Linear stage").
        """
        return "linear" if n_sessions < C.FULL_MODEL_MIN_SESSIONS else "full"

    # -- scoring ------------------------------------------------------------------------
    def score(self, session: Session) -> np.ndarray:
        """Scores of one session's candidates, float64 ``[n]`` (higher = more useful).

        Raises:
            ValueError: inconsistent shapes (an embedding width other than ``native_dim``).
        """
        model = self.model  # one read: a concurrent swap never mixes two models
        batch = collate([session], native_dim=self.native_dim)
        return model.score(batch)[0, : session.num_candidates].double().numpy()

    # -- training -------------------------------------------------------------------------
    def train(
        self,
        sessions: Sequence[Session],
        *,
        canary: Sequence[Session] = (),
        replay: Sequence[Session] = (),
        max_seconds: float = C.MAX_TRAINING_SECONDS,
        max_epochs: int | None = None,
        save: bool = True,
        influential: bool = True,
        early_stop_patience: int | None = None,
        stage: str | None = None,
    ) -> TrainReport:
        """Fit a copy on ``sessions`` (+ ~20 % replay), gate it on ``canary``, swap if it passes.

        Only one training runs at a time; scoring continues on the live model meanwhile.

        Args:
            sessions: labelled training sessions.
            canary: labelled canary sessions for the gates.
            replay: replay-buffer sessions (seed "Phase 5b").
            max_seconds: training wall-clock cap (s).
            max_epochs: epoch cap; None = the stage's default (``MAX_EPOCHS`` full,
                ``LINEAR_STAGE_MAX_EPOCHS`` linear; see :meth:`stage_for`).
            early_stop_patience: epochs without improvement before stopping; None = the
                stage's default (``EARLY_STOP_PATIENCE`` / ``LINEAR_STAGE_PATIENCE``).
            save: write ``model.bin`` after an accepted run.
            influential: the live model currently influences rankings (alpha < 1); only then
                is the top-5 overlap gate enforced.
            stage: ``"linear"`` or ``"full"``; None = :meth:`stage_for` the number of labelled
                sessions. A Phase 6 base is trained in the linear stage on any number of
                sessions (:func:`benchmarks.predictor_locomo.train_base`).

        Returns:
            a :class:`TrainReport`.

        Raises:
            ValueError: ``stage`` is neither None, ``"linear"`` nor ``"full"``.
        """
        if stage not in (None, "linear", "full"):
            raise ValueError(f"stage must be 'linear', 'full' or None, got {stage!r}")
        with self._train_lock:
            t0 = time.perf_counter()
            labelled = [s for s in sessions if s.labels is not None]
            if not labelled:
                return TrainReport(
                    False,
                    self.model_version,
                    error="no labelled sessions",
                    duration_ms=(time.perf_counter() - t0) * 1000,
                )
            nd = self.native_dim
            seen_now = {s.session_id for s in [*labelled, *replay] if s.session_id}
            stage = stage or self.stage_for(len(labelled))
            linear = stage == "linear"
            if stage != self.stage:
                self.stage, self.optimizer = stage, self._new_optimizer(self.model, stage)
            if max_epochs is None:
                max_epochs = C.LINEAR_STAGE_MAX_EPOCHS if linear else C.MAX_EPOCHS
            if early_stop_patience is None:
                early_stop_patience = C.LINEAR_STAGE_PATIENCE if linear else C.EARLY_STOP_PATIENCE
            bs = C.LINEAR_STAGE_BATCH_SIZE if linear else C.BATCH_SIZE
            # Full stage: the newest fifth (callers pass newest first) validates: it picks the
            # epoch whose weights are kept and stops training when held-out NDCG stops improving.
            # Linear stage: no split. Its few weights barely overfit, while a fifth of 20-100
            # sessions is too few to pick an epoch (docs/predictor.md, "Linear stage").
            n_val = len(labelled) // 5 if not linear and len(labelled) >= C.MIN_VALIDATION_SESSIONS * 5 else 0
            validation = batched(labelled[:n_val], batch_size=bs, native_dim=nd) if n_val else []
            labelled = labelled[n_val:]
            train_batches = batched(labelled, batch_size=bs, native_dim=nd)
            replay_batches = (
                batched([s for s in replay if s.labels is not None], batch_size=bs, native_dim=nd) if replay else []
            )
            canary_batches = (
                batched([s for s in canary if s.labels is not None], batch_size=C.BATCH_SIZE, native_dim=nd)
                if canary
                else []
            )
            live = self.model
            loss_fn = partial(listnet_loss, label_scale=C.LABEL_SCALE)
            # A Gaussian prior on the linear weights, centred where this user's model started,
            # as strong as PRIOR_STRENGTH sessions of evidence (docs/predictor.md, "Prior").
            prior = (
                (self.feature_prior, C.PRIOR_STRENGTH / max(1, len(labelled)))
                if self.feature_prior is not None
                else None
            )
            # Linear weights on columns that never vary within a training session cannot be
            # learned; they are held at 0 in both stages (the linear gate's output is added to
            # the score), and in the anchor (data.session_constant_columns, train.fit).
            constant = session_constant_columns([*train_batches, *replay_batches])
            # Sign constraints (docs/predictor.md, "Age may only count against a memory").
            non_positive = non_positive_columns()
            # The bilinear term's subspace: the principal directions of this run's candidates'
            # vectors, refreshed by every linear-stage run (W carried over), kept by the full
            # stage unless it has none yet (docs/predictor.md, "Bilinear term").
            basis = None
            if linear or not bool(live.memory_basis.any()):
                basis = memory_basis([*train_batches, *replay_batches], live.config.bilinear_rank, nd)
            l2 = bilinear_l2(len(labelled))
            anchor = None
            if not linear:
                # The linear anchor (anchor.py): what the linear stage would learn on the same
                # training sessions, continued from the previous anchor (or from the linear
                # stage's weights at the switch); it shares the run's time cap.
                t_anchor = time.monotonic()
                init = live.anchor if live.has_anchor else live.feature_weights()
                anchor = fit_linear_anchor(
                    train_batches,
                    init,
                    loss_fn,
                    lr=C.LEARNING_RATE,
                    max_epochs=C.LINEAR_STAGE_MAX_EPOCHS,
                    early_stop_patience=C.LINEAR_STAGE_PATIENCE,
                    max_seconds=max_seconds,
                    held_at_zero=constant,
                    non_positive=non_positive,
                    prior=prior,
                )
                max_seconds = max(1.0, max_seconds - (time.monotonic() - t_anchor))
            config = FitConfig(
                max_seconds=max_seconds,
                max_epochs=max_epochs,
                early_stop_patience=early_stop_patience,
                replay_share=C.REPLAY_SHARE,
                seed=self.seed + self.model_version,
                previous_is_trained=self.trained,
                check_overlap=influential,
            )
            constraints = Constraints(
                anchor=anchor,
                memory_basis=basis,
                grad_masks=live.feature_residual_masks() if linear else None,
                held_at_zero=_held_at_zero(live, constant, non_positive),
                non_positive=live.feature_column_mask(non_positive),
                prior=prior if linear else None,
                bilinear_l2=l2,
            )
            result = fit(
                live,
                self.optimizer,
                loss_fn,
                train_batches,
                config,
                constraints,
                canary=canary_batches or None,
                replay_batches=replay_batches or None,
                validation=validation or None,
                previous_trained_on=self.trained_on,
            )
            variance, churn = _canary_stats(result.model, live, canary_batches, result.gates)
            report = TrainReport(
                accepted=result.accepted,
                model_version=self.model_version,
                loss=next((x for x in reversed(result.epoch_losses or result.step_losses) if math.isfinite(x)), None),
                steps=result.steps,
                sample_count=len(labelled),
                stop_reason=result.stop_reason,
                gates=result.gates.to_dict(),
                canary_ndcg=result.gates.canary_ndcg,
                canary_ndcg_delta=(result.gates.canary_ndcg - result.gates.previous_canary_ndcg)
                if result.gates.canary_ndcg is not None
                and result.gates.previous_canary_ndcg is not None
                and self.trained
                else None,
                canary_score_variance=variance,
                canary_topk_churn=churn,
            )
            if not result.improved:
                report.accepted = False
                report.error = (
                    f"no validation gain: held-out NDCG@10 {result.validation_ndcg[0]:.3f} "
                    f"before training was never beaten"
                )
            elif result.accepted:
                result.model.eval()
                self.model = result.model  # the atomic swap
                self.optimizer = result.optimizer
                self.trained = True
                self.model_version += 1
                self.last_trained = datetime.now(UTC).isoformat()
                self.training_pairs = len(labelled)
                self.steps_total += result.steps
                self._remember_trained(sorted(seen_now))
                if self.base_digest is not None:
                    self.is_finetuned_from_base = True
                report.model_version = self.model_version
                if save:
                    self.save_checkpoint()
            else:
                log.warning("predictor training rejected by gates %s", result.gates.failed)
            report.validation_ndcg = result.validation_ndcg
            report.best_epoch = result.best_epoch
            report.stage = stage
            report.duration_ms = (time.perf_counter() - t0) * 1000
            return report

    def _remember_trained(self, ids: Sequence[str]) -> None:
        """Add ``ids`` to :attr:`trained_on` as the most recently trained, then drop the
        longest-ago trained beyond ``TRAINED_SESSIONS_KEPT`` (2,000, ~80 KB of the checkpoint's
        config JSON at ~40 bytes per id; the checkpoint is ~4.5 MB).

        A dropped session was last trained on about 1,500 or more training-grade sessions before
        the newest (a run reads the newest 500): the NDCG gate then counts it as held out if it ever
        re-enters the canary, which only a canary refill from every past session can do.
        """
        for k in ids:
            self.trained_on.pop(k, None)
            self.trained_on[k] = None
        excess = len(self.trained_on) - C.TRAINED_SESSIONS_KEPT
        if excess > 0:
            for k in list(itertools.islice(self.trained_on, excess)):
                del self.trained_on[k]

    def save_checkpoint(self) -> str:
        """Write the live model to ``model.bin`` atomically; returns its sha256 (hex).

        Raises:
            OSError: the file could not be written.
        """
        meta = ckpt.CheckpointMeta(
            self.embedding_model_id,
            CURRENT_SCHEMA,
            {
                "trained": self.trained,
                "model_version": self.model_version,
                "last_trained": self.last_trained,
                "training_pairs": self.training_pairs,
                "steps_total": self.steps_total,
                "base_digest": self.base_digest,
                "trained_sessions": list(self.trained_on),
                "feature_prior": None if self.feature_prior is None else [float(x) for x in self.feature_prior],
            },
        )
        flags = ckpt.CheckpointFlags(is_pretrained_base=False, is_finetuned=self.is_finetuned_from_base)
        return ckpt.save(self.checkpoint_path, self.model, meta, flags)

    def save_base(self, path: str | Path) -> str:
        """Write the live model as a Phase 6 base checkpoint (flag is_pretrained_base)."""
        meta = ckpt.CheckpointMeta(
            self.embedding_model_id,
            CURRENT_SCHEMA,
            {"trained": True, "model_version": self.model_version, "training_pairs": self.training_pairs},
        )
        return ckpt.save(path, self.model, meta, ckpt.CheckpointFlags(is_pretrained_base=True, is_finetuned=False))

    def status(self) -> dict[str, Any]:
        """The seed's status reply: trained, training_pairs, model_version, last_trained, and more."""
        return {
            "trained": self.trained,
            "model_ready": self.trained,
            "training_pairs": self.training_pairs,
            "model_version": self.model_version,
            "last_trained": self.last_trained,
            "steps_total": self.steps_total,
            "parameters": self.model.count_parameters(),
            "feature_schema": CURRENT_SCHEMA.to_dict(),
            "embedding_model_id": self.embedding_model_id,
            "native_dim": self.native_dim,
            "checkpoint": str(self.checkpoint_path),
            "finetuned_from_base": self.is_finetuned_from_base,
            # the full stage ranks by the ensemble with its linear anchor (anchor.py)
            "linear_anchor": self.model.has_anchor,
        }


def bilinear_l2(training_sessions: int) -> float:
    """The bilinear term's L2 weight for a run on ``training_sessions`` sessions (unitless).

    ``lam = BILINEAR_PRIOR_STRENGTH / n ** BILINEAR_PRIOR_EXPONENT`` (10 / n^1.5, n >= 1): the
    Gaussian prior (centred at 0) on the 64 x 64 map ``W`` of the bilinear term. It falls
    faster than ``1 / n``: W's 4,096 weights must not move far on the little evidence of a
    user's first sessions. The exponent was chosen on the rolling-origin replay of simulated
    users' stores (``memlane bench predictor-rolling --min-train 10 --block 10``;
    docs/predictor.md, "The bilinear term's L2 falls as n^-1.5"), c on the LoCoMo validation
    split (docs/predictor.md, "A stronger bilinear L2, c = 10").
    """
    return C.BILINEAR_PRIOR_STRENGTH / max(1, training_sessions) ** C.BILINEAR_PRIOR_EXPONENT


def _held_at_zero(live: MemoryScorer, constant: torch.Tensor, non_positive: torch.Tensor) -> dict[str, torch.Tensor]:
    """``train.fit``'s ``held_at_zero`` for a run: the linear gate's weights of the
    session-constant columns, and the gate MLP's input weights of the sign-bounded features
    (``constant`` and ``non_positive``: bool ``[NUM_FEATURES]``).

    The MLP cannot be held to a sign, so a bounded feature reaches the score only through its
    linear weight. It matters for a model whose MLP trained: the full stage, and a full-stage
    Phase 6 base or checkpoint written before the bound, whose MLP had learned "older is
    better" and which a linear-stage fine-tune does not retrain. On such bases (the bench's,
    before they became linear-stage models) holding the age inputs at 0 took Phase 6's
    predictor alone from 0.461 to 0.510 (docs/predictor.md, "Age may only count against a
    memory"). In the linear stage of a new model the MLP's output layer is 0, so this changes
    nothing there.
    """
    return {**live.feature_column_mask(constant), **live.mlp_feature_mask(non_positive)}


def non_positive_columns() -> torch.Tensor:
    """Bool ``[NUM_FEATURES]``: True at the features of
    :data:`~memlane.config.predictor.NON_POSITIVE_FEATURES`, whose linear weights training
    keeps at or below 0 (``train.fit``'s ``non_positive``).

    ``log_age_days`` is one: a memory does not become more useful by growing older, so a
    positive weight can only stand for something else that age happened to track in the
    sessions trained on (on LoCoMo, whose questions follow the order of their evidence, "older
    is better" is learned and wrong for later questions; docs/predictor.md, "Age may only
    count against a memory").

    Raises:
        KeyError: a name in ``NON_POSITIVE_FEATURES`` is not a feature of the schema.
    """
    mask = torch.zeros(NUM_FEATURES, dtype=torch.bool)
    for name in C.NON_POSITIVE_FEATURES:
        mask[FEATURE_INDEX[name]] = True
    return mask


def _stored_prior(raw: Any, finetuned: bool) -> torch.Tensor | None:
    """The prior's centre recorded in a checkpoint; for one written before it was recorded, the
    baseline prior unless the model was fine-tuned from a Phase 6 base (then None: unknown)."""
    if isinstance(raw, list) and len(raw) == NUM_FEATURES:
        try:
            w = torch.tensor([float(x) for x in raw])
        except (TypeError, ValueError):
            w = None
        if w is not None and bool(torch.isfinite(w).all()):
            return w
    return None if finetuned else baseline_prior_weights()


def _canary_stats(
    candidate: MemoryScorer, previous: MemoryScorer, canary: Sequence[Any], gates: GateReport
) -> tuple[float | None, float | None]:
    """(score variance, top-5 churn) on the canary set; churn = share of sessions whose top-5 changed."""
    if not canary:
        return None, None
    variance = next((g.value for g in gates.gates if g.name == "score_variance" and not g.skipped), None)
    changed, total = 0, 0
    for b in canary:
        overlap = topk_overlap(candidate.score(b), previous.score(b), b.mask, 5)
        changed += int((overlap < 1.0).sum())
        total += int(overlap.numel())
    return variance, (changed / total if total else None)


def load_or_fresh(
    model_dir: str | Path, *, embedding_model_id: str, native_dim: int, base_weights: str | None = None
) -> tuple[PredictorEngine, str | None]:
    """Build an engine; a checkpoint that cannot be served is moved aside and reported.

    Returns:
        ``(engine, error)``: ``error`` says why a stored checkpoint was set aside (renamed to
        ``model.bin.rejected-<time>``), else None.
    """
    try:
        return PredictorEngine(
            model_dir, embedding_model_id=embedding_model_id, native_dim=native_dim, base_weights=base_weights or None
        ), None
    except CheckpointError as exc:
        path = Path(model_dir) / CHECKPOINT_NAME
        aside = path.with_name(f"{CHECKPOINT_NAME}.rejected-{int(time.time())}")
        if path.exists():
            path.rename(aside)
        log.error("predictor checkpoint refused (%s); kept as %s, starting untrained", exc, aside)
        engine = PredictorEngine(model_dir, embedding_model_id=embedding_model_id, native_dim=native_dim)
        return engine, f"{exc} (kept as {aside.name})"
