"""0003: the predictor's tables (predictive-memory-scorer.md Phases 2, 3 and 5b).

* ``sessions.context_vector`` / ``context_model``: the session context embedding the
  candidates were scored against (float32 little-endian), so training sees what serving saw.
* ``sessions.signals``: the session-level scoring signals (local session time, gap in hours)
  and the predictor's decision for the session (alpha, state, model version, exploration).
* ``session_memories.features``: each candidate's raw scoring signals as JSON, logged at
  scoring time; training rebuilds the exact feature matrix from them (one feature schema).
* ``predictor_comparisons``: every column the seed lists, plus project and evaluation pool.
* ``predictor_training_log``: one row per training run, with the canary columns.
* ``predictor_canary``: the 25 canary sessions (seed "Canary Evaluation Set").
* ``predictor_state``: the daemon's success-rate EMA, alpha and phase (one JSON row).
"""

NAME = "0003_predictor"

SQL = """
ALTER TABLE sessions ADD COLUMN context_vector BLOB;
ALTER TABLE sessions ADD COLUMN context_model TEXT;
ALTER TABLE sessions ADD COLUMN signals TEXT;
ALTER TABLE session_memories ADD COLUMN features TEXT;

CREATE TABLE predictor_comparisons (
    id                TEXT PRIMARY KEY,
    session_key       TEXT NOT NULL,
    project           TEXT,
    predictor_ndcg    REAL NOT NULL,
    baseline_ndcg     REAL NOT NULL,
    predictor_won     INTEGER,            -- 1 or 0; NULL when excluded from the EMA
    margin            REAL NOT NULL,      -- predictor_ndcg - baseline_ndcg
    scorer_confidence REAL NOT NULL,
    ema_updated       INTEGER NOT NULL,
    success_rate      REAL NOT NULL,      -- running EMA after this session
    alpha             REAL NOT NULL,      -- baseline weight used this session
    predictor_top_ids TEXT NOT NULL,      -- JSON array, ordered
    baseline_top_ids  TEXT NOT NULL,      -- JSON array, ordered
    relevance_scores  TEXT NOT NULL,      -- JSON {memory_id: label}
    fts_overlap_score REAL,               -- share of injected memories matched by FTS
    model_version     INTEGER,
    predictor_state   TEXT,
    created_at        TEXT NOT NULL
);
CREATE UNIQUE INDEX idx_predictor_comparisons_session ON predictor_comparisons(session_key);
CREATE INDEX idx_predictor_comparisons_created ON predictor_comparisons(created_at);

CREATE TABLE predictor_training_log (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    model_version         INTEGER NOT NULL,   -- version serving after the run
    trigger               TEXT NOT NULL,      -- interval | drift | manual | startup
    accepted              INTEGER NOT NULL,
    loss                  REAL,
    steps                 INTEGER NOT NULL DEFAULT 0,
    sample_count          INTEGER NOT NULL DEFAULT 0,   -- sessions trained on
    duration_ms           REAL NOT NULL DEFAULT 0,
    stop_reason           TEXT,
    gates                 TEXT,               -- JSON gate report
    canary_ndcg           REAL,
    canary_ndcg_delta     REAL,
    canary_score_variance REAL,
    canary_topk_churn     REAL,
    drift_resets          INTEGER NOT NULL DEFAULT 0,
    error                 TEXT,
    created_at            TEXT NOT NULL
);

CREATE TABLE predictor_canary (
    session_key TEXT PRIMARY KEY,
    confidence  REAL NOT NULL,
    added_at    TEXT NOT NULL
);

CREATE TABLE predictor_state (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    state      TEXT NOT NULL,                 -- JSON, see memlane.predictor.policy.PolicyState
    updated_at TEXT NOT NULL
);
"""
