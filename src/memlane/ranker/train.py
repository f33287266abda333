"""Training the learned ranker from LoCoMo, and its leave-one-conversation-out evaluation.

The training set: every LoCoMo question recalled on its conversation's store (built as
``memlane bench retrieval`` builds it, :mod:`memlane.ranker.stores`) with the shipped recall
settings and the learned ranker off; the candidate pool recall hands the ranker
(``RecallService.recall(pool_out=...)``, the heuristic's best 100) becomes one query group,
features from :func:`memlane.ranker.features.compute`, label 1 for an evidence turn and 0
otherwise. Groups without an evidence turn in the pool carry no ranking signal and are left
out of training (they still count in every evaluation).

The model: LightGBM's lambdarank (gradient-boosted trees optimising NDCG), :data:`PARAMS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memlane.config.clock import to_iso
from memlane.embedding.base import Embedder
from memlane.ranker import features as F
from memlane.ranker.locomo import Conversation
from memlane.ranker.stores import build_store, open_store
from memlane.services.inputs import RecallQuery

#: LightGBM parameters of the shipped model (chosen by leave-one-conversation-out CV, docs/benchmarks.md).
PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "metric": "ndcg",
    "eval_at": [5, 10],
    "learning_rate": 0.1,
    "max_bin": 63,
    "num_leaves": 15,
    "min_data_in_leaf": 50,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "lambdarank_truncation_level": 30,
    "verbose": -1,
    "seed": 7,
    "deterministic": True,
    "force_row_wise": True,
}
#: Boosting rounds of the shipped model.
ROUNDS = 150
#: Questions are recalled with this k (as the retrieval bench).
RECALL_K = 50


@dataclass
class QuestionPool:
    """One question's candidate pool and what scoring needs."""

    conversation: str
    index: int
    category: int
    question: str
    evidence: tuple[str, ...]
    dia_ids: list[str]  # the pool in heuristic order
    x: np.ndarray  # features [len(dia_ids), len(FEATURES)]
    heuristic: list[str] = field(default_factory=list)  # the heuristic recall's top RECALL_K
    pool: F.Pool | None = None  # kept with ``collect(keep_pools=True)``: features can be recomputed

    @property
    def labels(self) -> np.ndarray:
        ev = set(self.evidence)
        return np.array([d in ev for d in self.dia_ids], dtype=np.float64)


def collect(
    convs: Sequence[Conversation],
    root: Path,
    embedder: Embedder | None,
    progress: Callable[[str, int, int], None] | None = None,
    settings_hook: Callable[[Any], None] | None = None,
    keep_pools: bool = False,
) -> list[QuestionPool]:
    """Recall every question of ``convs`` on its store (built or reused under ``root``) with
    the learned ranker off, keeping each candidate pool and its features.

    Args:
        settings_hook: called with each opened container before its questions (benchmarks
            turning stages on or off); default: the shipped settings.
    """
    out: list[QuestionPool] = []
    total = sum(len(c.questions) for c in convs)
    for conv in convs:
        info = build_store(conv, root, embedder)
        with open_store(info.home, embedder) as c:
            if settings_hook is not None:
                settings_hook(c)
            now = to_iso(conv.last_timestamp + timedelta(seconds=1))
            cache = c.recall.ranker.cache
            for q in conv.questions:
                pools: list[F.Pool] = []
                res = c.recall.recall(
                    RecallQuery(query=q.question, limit=RECALL_K, now=now, touch=False, ranker="heuristic"),
                    pool_out=pools,
                )
                pool = pools[0] if pools else None
                dia = [info.seq_to_dia[s] for s in pool.seqs] if pool else []
                x = F.compute(q.question, pool, cache) if pool else np.zeros((0, len(F.FEATURES)), np.float32)
                out.append(
                    QuestionPool(
                        conv.id,
                        q.index,
                        q.category,
                        q.question,
                        q.evidence,
                        dia,
                        x,
                        [info.id_to_dia[h.memory.id] for h in res.hits],
                        pool if keep_pools else None,
                    )
                )
                if progress:
                    progress(conv.id, len(out), total)
    return out


def train(
    pools: Sequence[QuestionPool],
    *,
    params: dict[str, Any] | None = None,
    rounds: int = ROUNDS,
    columns: Sequence[int] | None = None,
    threads: int = 1,
) -> Any:
    """A lambdarank booster trained on ``pools`` (groups without an evidence turn skipped).

    Args:
        columns: feature columns to keep (ablation); the others are set to NaN, so the booster
            still reads the full schema and the file format stays one.
        threads: LightGBM threads. One by default: on a loaded machine OpenMP's spinning
            threads slow training down many times over.
    Raises:
        ValueError: no pool has an evidence turn.
    """
    import lightgbm as lgb

    used = [p for p in pools if len(p.dia_ids) and p.labels.any()]
    if not used:
        raise ValueError("no training question has an evidence turn among its candidates")
    x = np.vstack([p.x for p in used])
    if columns is not None:
        x = mask_columns(x, columns)
    y = np.concatenate([p.labels for p in used])
    ds = lgb.Dataset(
        x,
        y,
        group=[len(p.dia_ids) for p in used],
        feature_name=list(F.FEATURES),
        categorical_feature=list(F.CATEGORICAL),
        free_raw_data=True,
    )
    p = {**PARAMS, **(params or {}), "num_threads": threads}
    return lgb.train(p, ds, num_boost_round=rounds)


def mask_columns(x: np.ndarray, columns: Sequence[int]) -> np.ndarray:
    """A copy of ``x`` with every column outside ``columns`` set to NaN."""
    out = np.full_like(x, np.nan)
    cols = list(columns)
    out[:, cols] = x[:, cols]
    return out


def rerank(pool: QuestionPool, scores: np.ndarray) -> list[str]:
    """The pool's dia ids ordered by ``scores`` (ties: heuristic order), the top RECALL_K."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [pool.dia_ids[i] for i in order.tolist()][:RECALL_K]


@dataclass
class Fold:
    """One leave-one-conversation-out fold: the conversation held out and those trained on."""

    test: str
    train: list[str]


def folds(conversation_ids: Sequence[str]) -> list[Fold]:
    """One fold per conversation: trained on all the others, tested on it.

    Raises:
        ValueError: fewer than two conversations, or a repeated id.
    """
    ids = list(conversation_ids)
    if len(ids) < 2 or len(set(ids)) != len(ids):
        raise ValueError("cross-validation needs two or more distinct conversations")
    return [Fold(test, [c for c in ids if c != test]) for test in ids]


def cross_validate(
    pools: Sequence[QuestionPool],
    *,
    columns: Sequence[int] | None = None,
    params: dict[str, Any] | None = None,
    rounds: int = ROUNDS,
    threads: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[dict[tuple[str, int], list[str]], list[Fold]]:
    """Leave-one-conversation-out: for each conversation a model trained on the other
    conversations' pools ranks its questions' pools.

    Returns:
        ((conversation, question index) -> learned ranking of dia ids, the folds). Every
        fold's training conversations exclude its test conversation (asserted).
    """
    ids = list(dict.fromkeys(p.conversation for p in pools))
    out: dict[tuple[str, int], list[str]] = {}
    done = []
    for i, fold in enumerate(folds(ids)):
        train_pools = [p for p in pools if p.conversation in fold.train]
        assert fold.test not in {p.conversation for p in train_pools}
        booster = train(train_pools, params=params, rounds=rounds, columns=columns, threads=threads)
        for p in pools:
            if p.conversation != fold.test:
                continue
            x = mask_columns(p.x, columns) if columns is not None else p.x
            scores = booster.predict(x, num_threads=1) if len(p.dia_ids) else np.zeros(0)
            out[(p.conversation, p.index)] = rerank(p, scores)
        done.append(fold)
        if progress:
            progress(f"fold {fold.test}", i + 1, len(ids))
    return out, done


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(fn(), seconds)."""
    t0 = time.perf_counter()
    return fn(), time.perf_counter() - t0
