"""Topic diversity after scoring (predictive-memory-scorer.md "Topic Diversity (post-scoring)").

Greedy, deterministic, no state: walk candidates by score; a candidate that overlaps
(cosine > 0.85) ``k`` already-walked candidates has its score multiplied once by
``(1 - floor) * decay ** k + floor`` (decay 0.5, floor 0.1). This is the reading that gives
the seed's own numbers: the first memory on a topic keeps its score (k = 0), the second gets
0.55x (k = 1), the third 0.325x (k = 2), never below 0.1x. (Multiplying once per overlap with
a running count, as the seed's pseudocode literally reads, would leave the second memory at
1.0x and contradict the seed's stated 0.55x.)
"""

from __future__ import annotations

import numpy as np

SIMILARITY_THRESHOLD = 0.85
DECAY = 0.5
FLOOR = 0.1


def apply_topic_diversity(
    scores: np.ndarray,
    vectors: np.ndarray | None,
    has_vector: np.ndarray | None = None,
    *,
    threshold: float = SIMILARITY_THRESHOLD,
    decay: float = DECAY,
    floor: float = FLOOR,
) -> tuple[np.ndarray, np.ndarray]:
    """Diversity-adjusted scores and the resulting order.

    Args:
        scores: fused scores, shape [n].
        vectors: L2-normalised embeddings, shape [n, d] (None = no adjustment possible).
        has_vector: bool [n], False where a candidate has no embedding (never penalised).
    Returns:
        (adjusted scores [n], order [n] = indices by adjusted score, best first).

    The walk takes candidates in descending original score; a candidate is compared with the
    candidates already taken (those earlier in the walk), exactly as the seed's pseudocode.
    """
    scores = np.asarray(scores, dtype=np.float64)
    n = scores.shape[0]
    adjusted = scores.copy()
    if n == 0 or vectors is None:
        return adjusted, np.argsort(-adjusted, kind="stable")
    has = np.ones(n, dtype=bool) if has_vector is None else np.asarray(has_vector, dtype=bool)
    walk = np.argsort(-scores, kind="stable")
    w_vecs = np.asarray(vectors, dtype=np.float32)[walk]
    w_has = has[walk]
    sims = w_vecs @ w_vecs.T  # in walk order: row i vs the candidates walked before it
    earlier = np.tril(np.ones((n, n), dtype=bool), k=-1)
    overlap = earlier & (sims > threshold) & w_has[None, :] & w_has[:, None]
    k = overlap.sum(axis=1)
    factor = np.where(k > 0, (1.0 - floor) * decay**k + floor, 1.0)
    adjusted[walk] = scores[walk] * factor
    return adjusted, np.argsort(-adjusted, kind="stable")
