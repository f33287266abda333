"""Predictor configuration: the seed's eight exposed keys and its hard-coded constants.

predictive-memory-scorer.md "Phase 5: Config" exposes eight keys (``predictor:`` in
config.yaml, camelCase or snake_case; env ``MEMLANE_PREDICTOR__RRF_K=12``) and fixes the rest
as constants. memlane adds ``base_weights`` (Phase 6: start from a base checkpoint) and
``threads``. The seed ships the predictor disabled ("rollout: off by default"); memlane
enables it by default because it cannot change a ranking before it has earned influence
(alpha stays 1.0 until cold start exits), and a predictor that never runs by default never
collects the evidence that would let it help.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# -- hard-coded defaults (seed "Phase 5: Config", not user-configurable) ------------------
# The model's own constants live with the model: d = 64 (model.ScorerConfig.d_model), 16,384
# hash buckets (tokenizer.NUM_BUCKETS), ListNet T = 0.5 / 0.3 (losses/listnet.listnet_loss).
EMA_ALPHA = 0.1  # success-rate smoothing factor
DRIFT_RESET_THRESHOLD = 0.3  # success rate below which a drift reset counts
REPLAY_BUFFER_SIZE = 20  # top historical sessions mixed into training
REPLAY_SHARE = 0.2  # the replay buffer weighs ~20 % of every training step's loss (train._mixed_loss)
MIN_SCORER_CONFIDENCE = 0.6  # continuity-scorer confidence gate (training and EMA)
MAX_PROJECT_SLICES = 5  # per-project EMA slices kept
EARLY_ACTIVE_RAMP_SESSIONS = 20  # sessions after cold-start exit before the influence cap lifts
EARLY_ACTIVE_ALPHA_FLOORS = (0.8, 0.6)  # alpha floors for sessions 1-10 and 11-20 after exit
MARGIN_GUARD_MIN = 0.05  # margin EMA (NDCG@10) below which alpha is 1.0, until the window is full
MARGIN_WINDOW = 20  # eligible comparisons in the margin window (policy.alpha_for)
MARGIN_WINDOW_MIN = 0.0  # mean margin (NDCG@10) over that window below which alpha is 1.0
COLD_START_WINDOW = 10  # "success_rate > 0.4 over last 10 comparisons" (decisive ones: ties left out)
COLD_START_MIN_SUCCESS = 0.4
DRIFT_RESET_EMA = 0.5  # EMA after a drift reset
CANARY_SIZE = 25
CANARY_REFRESH_DAYS = 7
# Members the weekly refresh replaces at most (a fifth of CANARY_SIZE): once cold start has
# exited every canary member is held out of training, so replacing them all would hold out the
# week's newest sessions (docs/predictor.md, "The weekly refresh counts the week between
# sessions and replaces a fifth").
CANARY_REFRESH_MAX_REPLACED = 5
MAX_TRAINING_SESSIONS = 500  # newest training-grade sessions read per run
TRAINED_SESSIONS_KEPT = 2000  # trained-on session ids a checkpoint keeps (engine._remember_trained)
MAX_TRAINING_SECONDS = 30.0
MAX_EPOCHS = 50
EARLY_STOP_PATIENCE = 15  # epochs without validation gain (a few batches each at 100-500 sessions)
LEARNING_RATE = 1e-2  # Adam; with the zero-initialised residual (model.py), see docs/predictor.md
BATCH_SIZE = 32
LABEL_SCALE = 5.0  # ListNet target sharpening (losses/listnet.py explains why)
# Linear stage (docs/predictor.md): below FULL_MODEL_MIN_SESSIONS training sessions only the
# linear residual over the feature schema trains, full-batch (one step per epoch).
FULL_MODEL_MIN_SESSIONS = 300
LINEAR_STAGE_BATCH_SIZE = 512  # >= MAX_TRAINING_SESSIONS: one full batch
LINEAR_STAGE_MAX_EPOCHS = 400  # full-batch Adam steps, enough to reach the MAP (docs/predictor.md, "The linear stage fits its prior's optimum")
LINEAR_STAGE_PATIENCE = 80
PRIOR_STRENGTH = 1.0  # c of the linear weights' Gaussian prior: lambda = c / training sessions
# Features whose linear weight may only be <= 0 (train.fit's non_positive): being older never
# raises a memory's score. docs/predictor.md, "Age may only count against a memory".
NON_POSITIVE_FEATURES: tuple[str, ...] = ("log_age_days",)
BILINEAR_PRIOR_STRENGTH = 10.0  # c of the bilinear term's L2 (||W||^2): lambda = c / sessions ** p
BILINEAR_PRIOR_EXPONENT = 1.5  # p: the L2 falls faster than 1 / sessions (engine.bilinear_l2)
MIN_VALIDATION_SESSIONS = 4  # a validation split needs >= 4 sessions (>= 20 to train on)
NDCG_K = 10
CRASH_WINDOW_S = 3600.0  # crashes counted over one hour
CRASH_COOLDOWN_S = 3600.0  # disabled this long after the threshold is reached
START_TIMEOUT_S = 60.0  # sidecar start-up (torch import) budget
CHECKPOINT_NAME = "model.bin"  # the user's model in the model directory ($MEMLANE_HOME/predictor)
TRAIN_TIMEOUT_S = 120.0  # a training request's reply budget


class PredictorSettings(BaseModel):
    """The predictor's exposed configuration (seed "Phase 5: Config")."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    enabled: bool = Field(True, description="Run the predictor sidecar (it earns influence before it has any).")
    train_interval_sessions: int = Field(10, ge=1, le=10_000, description="Retrain every N training-grade sessions.")
    min_training_sessions: int = Field(
        10, ge=1, le=10_000, description="Sessions before the predictor may influence injection."
    )
    score_timeout_ms: float = Field(
        120.0, gt=0, le=60_000, description="A score reply later than this means the baseline ranking, ms."
    )
    crash_disable_threshold: int = Field(
        3, ge=1, le=1000, description="Crashes within an hour that disable the predictor until a cool-down."
    )
    rrf_k: float = Field(12.0, gt=0, le=1000, description="RRF constant k (tuned for ~50-100 candidates).")
    exploration_rate: float = Field(
        0.05, ge=0.0, le=1.0, description="Probability that a session's lowest injected slot explores."
    )
    drift_reset_window: int = Field(
        10, ge=1, le=1000, description="Consecutive sessions with success rate < 0.3 before a drift reset."
    )
    base_weights: str = Field(
        "", description="Phase 6: a base checkpoint to start from when no user checkpoint exists ('' = none)."
    )
    threads: int = Field(1, ge=1, le=64, description="torch threads in the sidecar.")
