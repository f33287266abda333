"""Synthetic sessions whose relevant candidates are identifiable, for tests and benchmarks.

Not training data for users: the generators plant a known signal so a learning test can
check that :func:`memlane.predictor.train.fit` finds it (NDCG@10 well above random).

* ``signal="embedding"``: relevant candidates' embeddings lie near the context embedding.
* ``signal="features"``: relevant candidates have high importance and a good baseline rank;
  superseded look-alikes are labelled -0.3 (seed "Negative Memory Signals").
* ``signal="text"``: relevant candidates share topic words with the context text.
* ``signal="topic"``: each session is about one of four topics; its relevant candidates are
  that topic's memories. A topic's contexts and its memories lie near two different random
  directions, so the cosine between a context and its relevant memories is ~0 (a similarity
  matcher cannot find them) while a bilinear map from context to memory directions can. The
  topic directions depend on ``native_dim`` only, so sessions of different seeds share them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from memlane.predictor.data import Session
from memlane.predictor.features import CandidateFeatures, build_feature_matrix

__all__ = ["make_sessions"]

_TOPICS = [[f"t{t}w{w}" for w in range(12)] for t in range(40)]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def make_sessions(
    n_sessions: int,
    *,
    signal: str = "embedding",
    n_candidates: int = 30,
    n_relevant: int = 5,
    native_dim: int = 32,
    seed: int = 0,
) -> list[Session]:
    """``n_sessions`` sessions of ``n_candidates`` candidates, ``n_relevant`` of them relevant.

    Labels: relevant 0.6..1.0, others 0.0 (``"features"`` also plants -0.3 superseded ones).
    Embeddings are ``[n_candidates, native_dim]`` unit vectors (text-only for ``"text"``).

    Raises:
        ValueError: an unknown ``signal``, or not ``1 <= n_relevant < n_candidates``.
    """
    if signal not in {"embedding", "features", "text", "topic"}:
        raise ValueError(f"unknown signal {signal!r}")
    if not 1 <= n_relevant < n_candidates:
        raise ValueError(f"need 1 <= n_relevant < n_candidates, got {n_relevant} and {n_candidates}")
    rng = np.random.default_rng(seed)
    start = datetime(2026, 1, 5, 9, 0)
    directions = np.random.default_rng(20_260_105 + native_dim)
    context_dirs = _unit(directions.normal(size=(4, native_dim)))  # [4 topics, E]
    memory_dirs = _unit(directions.normal(size=(4, native_dim)))
    sessions = []
    for s in range(n_sessions):
        relevant = np.zeros(n_candidates, dtype=bool)
        relevant[rng.choice(n_candidates, n_relevant, replace=False)] = True
        labels = np.where(relevant, rng.uniform(0.6, 1.0, n_candidates), 0.0).astype(np.float32)
        context = _unit(rng.normal(size=native_dim))
        emb = _unit(rng.normal(size=(n_candidates, native_dim)))
        if signal == "embedding":
            emb[relevant] = _unit(context + 0.7 * _unit(rng.normal(size=(n_relevant, native_dim))))
        if signal == "topic":
            topic = int(rng.integers(4))
            context = _unit(context_dirs[topic] + 0.5 * _unit(rng.normal(size=native_dim)))
            others = (topic + rng.integers(1, 4, n_candidates)) % 4
            topics = np.where(relevant, topic, others)
            emb = _unit(memory_dirs[topics] + 0.5 * _unit(rng.normal(size=(n_candidates, native_dim))))
        importance = rng.uniform(0.0, 0.6, n_candidates)
        ranks = rng.permutation(n_candidates) + 5
        superseded = np.zeros(n_candidates, dtype=bool)
        if signal == "features":
            importance[relevant] = rng.uniform(0.6, 1.0, n_relevant)
            ranks[relevant] = rng.permutation(n_relevant)
            decoys = rng.choice(np.flatnonzero(~relevant), min(2, n_candidates - n_relevant), replace=False)
            importance[decoys], ranks[decoys], superseded[decoys] = 0.9, 0, True
            labels[decoys] = -0.3
        texts: list[str] = []
        ctx_text = ""
        if signal == "text":
            topic = int(rng.integers(len(_TOPICS)))
            ctx_text = " ".join(rng.choice(_TOPICS[topic], 6))
            for j in range(n_candidates):
                t = topic if relevant[j] else int(rng.integers(len(_TOPICS)))
                t = (t + 1) % len(_TOPICS) if (not relevant[j] and t == topic) else t
                texts.append(" ".join(rng.choice(_TOPICS[t], 8)) + " the memory notes")
        rows = [
            CandidateFeatures(
                age_days=float(rng.uniform(0, 200)),
                importance=float(importance[j]),
                access_count=int(rng.integers(0, 20)),
                session_gap_hours=8.0,
                is_embedded=signal != "text",
                is_superseded=bool(superseded[j]),
                baseline_score=0.0,  # an uninformative baseline: only the planted signal can be learned
                baseline_rank=int(ranks[j]),
                context_similarity=None,  # keep the embedding signal out of the features
            )
            for j in range(n_candidates)
        ]
        sessions.append(
            Session(
                features=build_feature_matrix(rows, start + timedelta(hours=5 * s)),
                labels=labels,
                candidate_texts=texts,
                candidate_embeddings=None if signal == "text" else emb.astype(np.float32),
                context_embedding=None if signal == "text" else context.astype(np.float32),
                context_text=ctx_text,
                project=f"project-{s % 3}",
                session_id=f"{signal}-{seed}-{s}",
            )
        )
    return sessions
