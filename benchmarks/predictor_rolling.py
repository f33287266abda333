"""``memlane bench predictor-rolling``: how the predictor would rank a store's own past sessions.

A rolling-origin evaluation (the forecasting literature's standard for time-ordered data: fit
on everything before a cut-off, test on what follows, move the cut-off) over the training-grade
sessions a store has logged, oldest first, read-only. For each block of ``block`` sessions
after the first ``min_train``:

* **engine**: a :class:`~memlane.predictor.engine.PredictorEngine` (the sidecar's own code, in
  its stage for that many sessions, validation split and early stop included; no canary,
  nothing saved) retrained from its previous weights, as the live model is (or from scratch
  with ``fresh``), on what ``train_from_db`` would read (:func:`training_window`: the earlier
  sessions, newest first, at most ``MAX_TRAINING_SESSIONS``), then scoring the block;
* **ceiling**: :func:`~benchmarks.predictor_offline.fit_listwise_linear`, a listwise linear
  model over the same standardised features with the same baseline prior, trained on the same
  sessions: what the feature schema can carry for a linear ranker;
* **baseline**: the logged baseline order (``baseline_rank``).

Metric: NDCG@10 over the session's logged pool with its stored labels as graded gains (negative
labels count 0; ideal over the pool; sessions with no positive label are skipped), i.e. what
the engine trains on, not the ground truth a benchmark may know. Each session is tested once,
by the model trained on everything before its block, so the per-session differences pool into
one paired bootstrap 95 % interval.

It works on any store: a ``memlane bench predictor --dataset simulated`` run's, or a user's own
(``$MEMLANE_HOME/memories.db``, while the daemon runs: the connection is read-only). The
numbers of docs/predictor.md, "What limits the simulated users", come from it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bootstrap import paired_bootstrap
from benchmarks.predictor_offline import fit_listwise_linear, store_embedding_model
from memlane.config import predictor as C
from memlane.predictor.data import Session
from memlane.predictor.dataset import load_sessions
from memlane.predictor.engine import PredictorEngine
from memlane.predictor.features import FEATURE_INDEX
from memlane.predictor.policy import ndcg_of_ranking
from memlane.storage.db import open_readonly

__all__ = ["graded_ndcg", "rolling_blocks", "run", "training_window"]

Progress = Callable[[str, int, int], None]


def graded_ndcg(order: Sequence[int] | np.ndarray, labels: np.ndarray, k: int = 10) -> float | None:
    """NDCG@k of ``order`` (candidate indices, best first) with ``max(label, 0)`` as the gain:
    :func:`memlane.predictor.policy.ndcg_of_ranking` (the daemon's comparison metric) over
    candidate indices.

    Args:
        order: a permutation of ``range(n)``.
        labels: ``[n]`` stored labels in [-1, 1].

    Returns:
        NDCG@k in [0, 1] (ideal over the pool), or None when no label is positive.
    """
    gains = np.asarray(labels, dtype=np.float64).tolist()
    # candidate indices, as strings, stand in for memory ids
    return ndcg_of_ranking([str(int(j)) for j in order], {str(i): g for i, g in enumerate(gains)}, k)


def rolling_blocks(n_sessions: int, *, min_train: int, block: int) -> list[tuple[int, int]]:
    """Test blocks ``[(start, end)]`` of a rolling-origin evaluation over ``n_sessions``.

    Block ``(s, e)`` is tested by a model trained on sessions ``[0, s)``; the blocks cover
    ``[min_train, n_sessions)`` once, the last one possibly shorter.

    Raises:
        ValueError: ``min_train`` or ``block`` < 1.
    """
    if min_train < 1 or block < 1:
        raise ValueError("min_train and block must be >= 1")
    return [(s, min(s + block, n_sessions)) for s in range(min_train, n_sessions, block)]


def training_window(sessions: Sequence[Session], start: int) -> list[Session]:
    """What the sidecar's ``train_from_db`` would train on before session ``start``.

    The sessions before ``start``, newest first, at most
    :data:`~memlane.config.predictor.MAX_TRAINING_SESSIONS` of them. The order matters: the
    full stage validates on the first fifth it is given, which is meant to be the newest
    sessions.

    Args:
        sessions: the store's sessions, oldest first.
        start: index of the first session of the test block.

    Returns:
        ``sessions[start - 1], sessions[start - 2], ...``.
    """
    return list(sessions[:start][::-1][: C.MAX_TRAINING_SESSIONS])


def _baseline_order(s: Session) -> np.ndarray:
    return np.argsort(-s.features[:, FEATURE_INDEX["baseline_rank_inv"]], kind="stable")


def _block(
    test: Sequence[Session], engine_scores: Sequence[np.ndarray], train: Sequence[Session]
) -> tuple[list[float], list[float], list[float]] | None:
    """Per tested session with a positive label: baseline, engine and ceiling NDCG@10."""
    ceiling = fit_listwise_linear(
        [(s.features.astype(np.float64), s.labels.astype(np.float64)) for s in train if s.labels is not None]
    )
    got: list[tuple[float, float, float]] = []
    for s, e_scores in zip(test, engine_scores):
        assert s.labels is not None
        base = graded_ndcg(_baseline_order(s), s.labels)
        if base is None:
            continue
        # the same labels: both are defined wherever the baseline's is
        eng = graded_ndcg(np.argsort(-e_scores, kind="stable"), s.labels)
        ceil = graded_ndcg(np.argsort(-ceiling.score(s.features.astype(np.float64)), kind="stable"), s.labels)
        if eng is None or ceil is None:
            continue
        got.append((base, eng, ceil))
    if not got:
        return None
    bs, es, cs = (list(x) for x in zip(*got))
    return bs, es, cs


def run(
    db_path: Path,
    *,
    embedding_model: str | None = None,
    native_dim: int = 0,
    min_train: int = 20,
    block: int = 20,
    limit: int = 2000,
    seed: int = 0,
    fresh: bool = False,
    early: int = 50,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Rolling-origin evaluation of the engine and the linear ceiling on ``db_path``'s sessions.

    Args:
        db_path: a memlane store (opened read-only).
        embedding_model / native_dim: the embedder whose stored vectors the engine reads; None:
            the model most of the store's vectors come from (the daemon's). Candidates without a
            vector of that model take the text path, as in the sidecar.
        min_train: sessions before the first test block.
        block: sessions per test block (the model is retrained before each).
        limit: newest training-grade sessions read (confidence >= the training minimum).
        seed: the engine's initialisation and the bootstrap's seed.
        fresh: start every block from an untrained engine; by default one engine retrains
            from its previous weights before each block, as the sidecar's live model does (a
            run the engine does not accept leaves the previous weights serving).
        early: the ``engine_vs_baseline_early`` summary covers the tested sessions of the blocks
            trained on fewer than ``early`` sessions: the first models, the ones that decide when
            cold start exits (docs/predictor.md, "The bilinear term's L2 falls as n^-1.5").

    Returns:
        ``{"sessions", "tested", "accepted_trainings", "blocks": [{"trained", "tested", "stage",
        "accepted", "baseline", "engine", "ceiling", "train_s"}], "engine_vs_baseline",
        "ceiling_vs_baseline", "engine_vs_ceiling", "early", "engine_vs_baseline_early"}`` (the
        comparisons are paired bootstraps over the tested sessions: ``mean_a`` / ``mean_b`` /
        ``diff`` / ``lo`` / ``hi``; the early one is None when no block was trained on fewer
        than ``early`` sessions).

    Raises:
        FileNotFoundError: no file at ``db_path``.
        ValueError: fewer than ``min_train`` + 1 usable sessions; no embedding to name the model by;
            ``native_dim`` < 1 with a named model.
    """
    if not Path(db_path).is_file():
        raise FileNotFoundError(f"no memlane store at {db_path}")
    if embedding_model is not None and native_dim < 1:
        raise ValueError("native_dim must be >= 1 with a named embedding model")
    conn = open_readonly(db_path)
    try:
        if embedding_model is None:
            embedding_model, native_dim = store_embedding_model(conn)
            if embedding_model is None:
                raise ValueError(f"{db_path} holds no embedding: name the model with --embedding-model")
        sessions = load_sessions(
            conn,
            embedding_model=embedding_model,
            native_dim=native_dim,
            min_confidence=C.MIN_SCORER_CONFIDENCE,
            limit=limit,
        )[::-1]  # oldest first
    finally:
        conn.close()
    if len(sessions) <= min_train:
        raise ValueError(
            f"{len(sessions)} training-grade sessions with varying labels in {db_path}: "
            f"need more than --min-train {min_train}"
        )
    blocks = rolling_blocks(len(sessions), min_train=min_train, block=block)
    base_all: list[float] = []
    engine_all: list[float] = []
    ceiling_all: list[float] = []
    early_base: list[float] = []
    early_engine: list[float] = []
    rows: list[dict[str, Any]] = []
    accepted = 0
    with tempfile.TemporaryDirectory(prefix="memlane-rolling-") as tmp:
        engine = PredictorEngine(tmp, embedding_model_id=embedding_model, native_dim=native_dim, seed=seed)
        for b, (start, end) in enumerate(blocks):
            train = training_window(sessions, start)
            t0 = time.perf_counter()
            if fresh:
                engine = PredictorEngine(
                    Path(tmp) / f"block-{b}", embedding_model_id=embedding_model, native_dim=native_dim, seed=seed
                )
            report = engine.train(train, save=False, influential=False)
            accepted += int(report.accepted)
            engine_scores = [engine.score(s) for s in sessions[start:end]]
            train_s = time.perf_counter() - t0
            rows_b = _block(sessions[start:end], engine_scores, train)
            if rows_b:
                bs, es, cs = rows_b
                base_all += bs
                engine_all += es
                ceiling_all += cs
                if start < early:
                    early_base += bs
                    early_engine += es
                rows.append(
                    {
                        "trained": start,
                        "tested": len(bs),
                        "stage": PredictorEngine.stage_for(start),
                        "accepted": bool(report.accepted),
                        "baseline": float(np.mean(bs)),
                        "engine": float(np.mean(es)),
                        "ceiling": float(np.mean(cs)),
                        "train_s": round(train_s, 2),
                    }
                )
            if progress:
                progress("rolling", b + 1, len(blocks))
    if not base_all:
        raise ValueError("no tested session has a positive label")
    return {
        "store": str(db_path),
        "embedding_model": embedding_model,
        "sessions": len(sessions),
        "min_train": min_train,
        "block": block,
        "fresh": fresh,
        "accepted_trainings": accepted,
        "tested": len(base_all),
        "blocks": rows,
        "engine_vs_baseline": paired_bootstrap(engine_all, base_all, seed=seed),
        "ceiling_vs_baseline": paired_bootstrap(ceiling_all, base_all, seed=seed),
        "engine_vs_ceiling": paired_bootstrap(engine_all, ceiling_all, seed=seed),
        "early": early,
        "engine_vs_baseline_early": paired_bootstrap(early_engine, early_base, seed=seed) if early_base else None,
    }
