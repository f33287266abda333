"""The one NDCG@k (memlane.ndcg): hand-computed values, its rules, and proof that each caller
that used to carry its own NDCG gets exactly what its own function gave.

The ``former_*`` functions below are the four implementations as they stood before the
unification, copied verbatim; each caller now passes parameters to :func:`memlane.ndcg.ndcg_at_k`
and must agree with its former function on every hand-made case.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest
import torch

from benchmarks import metrics as bench_metrics
from benchmarks.predictor_locomo import ndcg_binary
from benchmarks.predictor_simulated import _ndcg as simulated_ndcg
from memlane.ndcg import dcg, ndcg_at_k
from memlane.predictor import metrics as tensor_metrics
from memlane.predictor.policy import ndcg_of_ranking

L2, L3, L4 = math.log2(2), math.log2(3), math.log2(4)


# -------------------------------------------------------- the former variants, verbatim


def former_policy(ranking: Sequence[str], relevance: Mapping[str, float], k: int = 10) -> float | None:
    gains = sorted((max(float(v), 0.0) for v in relevance.values()), reverse=True)
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(gains[:k]))
    if ideal <= 0:
        return None
    dcg = sum(max(float(relevance.get(m, 0.0)), 0.0) / math.log2(i + 2) for i, m in enumerate(ranking[:k]))
    return dcg / ideal


def former_simulated(order: Sequence[str], relevance: dict[str, float], k: int = 10) -> float:
    dcg = sum(relevance.get(m, 0.0) / math.log2(i + 2) for i, m in enumerate(order[:k]))
    gains = sorted(relevance.values(), reverse=True)[:k]
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    return dcg / ideal if ideal > 0 else 0.0


def _former_hits(ranked: Sequence[str], relevant: set[str], k: int) -> list[bool]:
    seen: set[str] = set()
    out = []
    for item in list(ranked)[:k]:
        out.append(item in relevant and item not in seen)
        seen.add(item)
    return out


def former_bench_metrics(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    if not relevant:
        raise ValueError("relevant set is empty; exclude this question and count it")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    dcg = sum(1.0 / math.log2(i + 2) for i, hit in enumerate(_former_hits(ranked, relevant, k)) if hit)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / idcg


def former_locomo(order: Sequence[str], relevant: set[str], n_relevant: int, k: int = 10) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, m in enumerate(order[:k]) if m in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(n_relevant, k)))
    return dcg / ideal if ideal > 0 else 0.0


# ------------------------------------------------------------------- hand-made cases

GRADED: list[tuple[list[str], dict[str, float], int]] = [
    (["a", "b", "c"], {"a": 1.0, "b": 0.5, "c": 0.0}, 10),  # ideal order
    (["c", "b", "a"], {"a": 1.0, "b": 0.5, "c": 0.0}, 10),  # reversed
    (["c", "b", "a"], {"a": 1.0, "b": 0.5, "c": 0.0}, 2),  # cut before the best
    (["x", "a"], {"a": 1.0, "z": 1.0}, 10),  # a relevant item outside the ranking
    (["a", "b"], {"a": -0.5, "b": 1.0}, 10),  # a negative label first
    (["b", "a"], {"a": -0.3, "b": 0.6, "c": 0.2}, 1),
    (["a", "b"], {"a": -0.5, "b": -0.3}, 10),  # nothing positive
    (["a", "b"], {}, 10),  # no labels at all
    ([], {"a": 1.0}, 10),  # empty ranking
    ([str(i) for i in range(15)], {str(i): 1.0 / (i + 1) for i in range(15)}, 10),  # longer than k
    ([str(i) for i in reversed(range(15))], {str(i): 1.0 / (i + 1) for i in range(15)}, 10),
    (["a", "a", "b"], {"a": 1.0, "b": 1.0}, 10),  # a repeated id
]

BINARY: list[tuple[list[str], set[str], int, int]] = [
    (["a", "b", "c"], {"a"}, 1, 10),
    (["b", "a", "c"], {"a"}, 1, 10),
    (["b", "c", "a"], {"a", "c"}, 2, 2),
    (["b", "c", "a"], {"a", "c"}, 3, 10),  # one evidence item missed by the pool
    (["x", "y"], {"a"}, 1, 10),
    (["a", "a", "b"], {"a", "b"}, 2, 10),  # a repeated id
    (["a", "b"], set(), 0, 10),  # no evidence
    ([str(i) for i in range(20)], {"3", "12"}, 2, 10),
]


def test_hand_computed_values():
    assert ndcg_at_k(["a", "b", "c"], {"a": 1.0, "b": 0.5}, 10) == pytest.approx(1.0)
    # DCG = 0.5/log2(2) + 1/log2(3); IDCG = 1/log2(2) + 0.5/log2(3)
    assert ndcg_at_k(["b", "a"], {"a": 1.0, "b": 0.5}, 10) == pytest.approx((0.5 / L2 + 1 / L3) / (1 / L2 + 0.5 / L3))
    # the relevant item the ranking missed stays in the ideal
    assert ndcg_at_k(["x", "a"], {"a": 1.0, "z": 1.0}, 10) == pytest.approx((1 / L3) / (1 / L2 + 1 / L3))
    assert dcg([1.0, 1.0, 1.0], 2) == pytest.approx(1 / L2 + 1 / L3)


def test_rules_are_parameters():
    gains = {"a": -0.5, "b": 1.0}
    # clipped: the harmful first item counts 0
    assert ndcg_at_k(["a", "b"], gains, 10) == pytest.approx((1 / L3) / 1.0)
    # unclipped: it subtracts, in the ranking and the ideal
    assert ndcg_at_k(["a", "b"], gains, 10, clip_negative=False) == pytest.approx((-0.5 + 1 / L3) / (1.0 - 0.5 / L3))
    # the ideal given explicitly: two evidence items exist, one is named
    assert ndcg_at_k(["a"], {"a": 1.0}, 10, ideal_gains=[1.0, 1.0]) == pytest.approx(1.0 / (1 + 1 / L3))
    # repeats earn nothing after their first position only when asked
    assert ndcg_at_k(["a", "a"], {"a": 1.0, "b": 1.0}, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "a"], {"a": 1.0, "b": 1.0}, 10, first_occurrence_only=True) == pytest.approx(
        1.0 / (1 + 1 / L3)
    )
    # undefined
    assert ndcg_at_k(["a"], {"a": 0.0}, 10) is None
    assert ndcg_at_k(["a"], {"a": 0.0}, 10, undefined=0.0) == 0.0
    with pytest.raises(ValueError, match="k must be >= 1"):
        ndcg_at_k(["a"], {"a": 1.0}, 0)


@pytest.mark.parametrize(("ranking", "relevance", "k"), GRADED)
def test_policy_equals_its_former_function(ranking, relevance, k):
    assert ndcg_of_ranking(ranking, relevance, k) == former_policy(ranking, relevance, k)


@pytest.mark.parametrize(("ranking", "relevance", "k"), GRADED)
def test_simulated_bench_equals_its_former_function(ranking, relevance, k):
    assert simulated_ndcg(ranking, relevance, k) == pytest.approx(former_simulated(ranking, relevance, k), abs=1e-12)


@pytest.mark.parametrize(("ranking", "relevant", "n_relevant", "k"), BINARY)
def test_locomo_bench_equals_its_former_function(ranking, relevant, n_relevant, k):
    assert ndcg_binary(ranking, relevant, n_relevant, k) == pytest.approx(
        former_locomo(ranking, relevant, n_relevant, k), abs=1e-12
    )


@pytest.mark.parametrize(("ranking", "relevant", "n_relevant", "k"), BINARY)
def test_retrieval_bench_equals_its_former_function(ranking, relevant, n_relevant, k):
    if not relevant:
        with pytest.raises(ValueError, match="relevant set is empty"):
            bench_metrics.ndcg_at_k(ranking, relevant, k)
        return
    assert bench_metrics.ndcg_at_k(ranking, relevant, k) == pytest.approx(
        former_bench_metrics(ranking, relevant, k), abs=1e-12
    )


@pytest.mark.parametrize(("ranking", "relevance", "k"), [c for c in GRADED if len(set(c[0])) == len(c[0]) and c[0]])
def test_tensor_form_computes_the_same_quantity(ranking, relevance, k):
    """The training metric (batched torch) agrees with the definition when every labelled
    item is in the slate, the ranking is the score order, and something is relevant."""
    slate = list(dict.fromkeys([*ranking, *relevance]))
    scores = torch.tensor([[float(len(slate) - slate.index(m)) for m in slate]])
    labels = torch.tensor([[float(relevance.get(m, 0.0)) for m in slate]])
    expected = ndcg_at_k(slate, relevance, k)
    got = float(tensor_metrics.ndcg_at_k(scores, labels, k)[0])
    assert got == pytest.approx(1.0 if expected is None else expected, abs=1e-6)  # filler 1.0 when undefined
