"""Topic diversity (``memlane.sessions.diversity``): the seed's numbers, the no-vector cases and
a comparison with a straightforward reference implementation on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memlane.sessions.diversity import DECAY, FLOOR, SIMILARITY_THRESHOLD, apply_topic_diversity


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


def reference(scores, vectors, has, threshold=0.85, decay=0.5, floor=0.1):
    """Plain-Python reading of the seed: walk by score (ties: lower index first); a candidate
    overlapping k earlier-walked candidates (both with vectors, cosine > threshold) is
    multiplied once by (1 - floor) * decay**k + floor. Order: by adjusted score, ties by index."""
    n = len(scores)
    walk = sorted(range(n), key=lambda i: (-scores[i], i))
    adjusted = list(scores)
    done: list[int] = []
    for i in walk:
        k = 0
        if vectors is not None and has[i]:
            for j in done:
                if has[j] and sum(float(a) * float(b) for a, b in zip(vectors[i], vectors[j])) > threshold:
                    k += 1
        if k:
            adjusted[i] = scores[i] * ((1 - floor) * decay**k + floor)
        done.append(i)
    order = sorted(range(n), key=lambda i: (-adjusted[i], i))
    return adjusted, order


def test_constants_are_the_seeds() -> None:
    assert (SIMILARITY_THRESHOLD, DECAY, FLOOR) == (0.85, 0.5, 0.1)


def test_seed_numbers_second_and_third_on_a_topic() -> None:
    v = unit([1, 0, 0])
    scores = np.array([1.0, 1.0, 1.0, 1.0])
    vecs = np.stack([v, v, v, unit([0, 1, 0])])
    adjusted, order = apply_topic_diversity(scores, vecs)
    assert adjusted[0] == pytest.approx(1.0)  # first on the topic: full score
    assert adjusted[1] == pytest.approx(0.55)  # second: 0.9 * 0.5 + 0.1
    assert adjusted[2] == pytest.approx(0.325)  # third: 0.9 * 0.25 + 0.1
    assert adjusted[3] == pytest.approx(1.0)  # another topic
    assert list(order) == [0, 3, 1, 2]


def test_relative_factors_on_unequal_scores() -> None:
    v = unit([0.2, 0.9, 0.1])
    scores = np.array([0.9, 0.8, 0.5])
    adjusted, _ = apply_topic_diversity(scores, np.stack([v, v, v]))
    assert adjusted / scores == pytest.approx([1.0, 0.55, 0.325])


def test_floor_never_fully_suppresses() -> None:
    n = 12
    v = unit(np.arange(1, 9))
    scores = np.linspace(1.0, 0.5, n)
    adjusted, _ = apply_topic_diversity(scores, np.tile(v, (n, 1)))
    factors = adjusted / scores
    for k in range(n):
        assert factors[k] == pytest.approx(0.9 * 0.5**k + 0.1)
        assert factors[k] >= 0.1
    assert factors[-1] == pytest.approx(0.1, abs=1e-3)


def test_threshold_is_strict_and_distinct_topics_untouched() -> None:
    a = unit([1, 0])
    b = unit([0.85, math.sqrt(1 - 0.85**2)])  # cosine exactly 0.85: not "> 0.85"
    c = unit([0.9, math.sqrt(1 - 0.81)])  # cosine 0.9 with a
    adjusted, _ = apply_topic_diversity(np.array([1.0, 0.9]), np.stack([a, b]))
    assert adjusted == pytest.approx([1.0, 0.9])
    adjusted, _ = apply_topic_diversity(np.array([1.0, 0.9]), np.stack([a, c]))
    assert adjusted == pytest.approx([1.0, 0.9 * 0.55])


def test_no_vectors_no_change() -> None:
    scores = np.array([0.3, 0.9, 0.5, 0.9])
    adjusted, order = apply_topic_diversity(scores, None)
    assert adjusted.tolist() == scores.tolist()
    assert list(order) == [1, 3, 2, 0]  # by score, ties stable


def test_empty_input() -> None:
    adjusted, order = apply_topic_diversity(np.array([]), np.zeros((0, 4), dtype=np.float32))
    assert adjusted.size == 0 and order.size == 0


def test_candidates_without_vectors_are_never_penalised_nor_penalise() -> None:
    v = unit([1, 1, 0])
    vecs = np.stack([v, v, v, v])
    has = np.array([True, False, True, False])
    scores = np.array([1.0, 0.9, 0.8, 0.7])
    adjusted, order = apply_topic_diversity(scores, vecs, has)
    # 1 and 3 have no vector: untouched; 2 overlaps only 0 (1 does not count): 0.55x
    assert adjusted == pytest.approx([1.0, 0.9, 0.8 * 0.55, 0.7])
    assert list(order) == [0, 1, 3, 2]


def test_order_output_reflects_the_adjusted_scores() -> None:
    dup = unit([0, 0, 1])
    other = unit([1, 0, 0])
    scores = np.array([0.95, 0.9, 0.6])
    adjusted, order = apply_topic_diversity(scores, np.stack([dup, dup, other]))
    # the near-duplicate drops to 0.495, below the distinct 0.6
    assert list(order) == [0, 2, 1]
    assert adjusted[1] == pytest.approx(0.9 * 0.55)


@st.composite
def inputs(draw):
    n = draw(st.integers(1, 12))
    d = draw(st.integers(2, 5))
    # a few topic centres plus small noise makes overlaps (cosine > 0.85) common
    centres = draw(hnp.arrays(np.float64, (3, d), elements=st.floats(-1, 1)))
    pick = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    noise = draw(hnp.arrays(np.float64, (n, d), elements=st.floats(-0.4, 0.4)))
    raw = centres[pick] + noise
    norms = np.linalg.norm(raw, axis=1)
    assume(bool(np.all(norms > 1e-3)))
    vecs = (raw / norms[:, None]).astype(np.float32)
    scores = draw(hnp.arrays(np.float64, (n,), elements=st.floats(0, 1) | st.sampled_from([0.5, 0.25])))
    has = draw(hnp.arrays(np.bool_, (n,)))
    with_vectors = draw(st.booleans())
    return scores, (vecs if with_vectors else None), has


@settings(max_examples=300, deadline=None)
@given(inputs())
def test_matches_reference_implementation(data) -> None:
    scores, vecs, has = data
    if vecs is not None:  # keep clear of the threshold, where float32 rounding could differ
        sims = vecs.astype(np.float64) @ vecs.astype(np.float64).T
        assume(not np.any(np.abs(sims - 0.85) < 1e-4))
    adjusted, order = apply_topic_diversity(scores, vecs, has)
    ref_adjusted, ref_order = reference(list(scores), vecs, has)
    assert adjusted == pytest.approx(ref_adjusted, rel=1e-9, abs=1e-12)
    # the order is by adjusted score; among exact ties the implementation keeps index order
    assert [ref_adjusted[i] for i in order] == pytest.approx([ref_adjusted[i] for i in ref_order])
    assert sorted(order.tolist()) == list(range(len(scores)))
    # never raises a score, never below the floor
    assert np.all(adjusted <= scores + 1e-12)
    assert np.all(adjusted >= scores * 0.1 - 1e-12)
