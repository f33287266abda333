"""Feature schema, feature matrix scaling and the HashTrick tokenizer."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import datetime

import numpy as np
import pytest
import torch

from memlane.predictor import features as F
from memlane.predictor.features import CandidateFeatures, build_feature_matrix
from memlane.predictor.tokenizer import (
    NUM_BUCKETS,
    PAD_TOKEN_ID,
    PROJECT_SLOTS,
    encode_batch,
    fnv1a_64,
    project_slot,
    token_ids,
)


def test_schema_is_versioned_and_hashed():
    assert len(F.FEATURE_NAMES) == F.NUM_FEATURES == len(set(F.FEATURE_NAMES)) == 25
    assert F.CURRENT_SCHEMA.version == F.SCHEMA_VERSION
    assert len(F.SCHEMA_HASH) == 16
    # The hash follows the names and their order.
    assert F._schema_hash(F.SCHEMA_VERSION, tuple(reversed(F.FEATURE_NAMES))) != F.SCHEMA_HASH
    assert F._schema_hash(F.SCHEMA_VERSION + "x", F.FEATURE_NAMES) != F.SCHEMA_HASH
    assert F.FeatureSchema.from_dict(F.CURRENT_SCHEMA.to_dict()) == F.CURRENT_SCHEMA


def test_feature_matrix_hand_computed():
    # Wednesday 2026-03-04 18:00 -> tod 0.75 of a day, dow 2/7, month index 2/12.
    when = datetime(2026, 3, 4, 18, 0)
    cand = CandidateFeatures(
        age_days=math.e - 1,
        importance=0.8,
        access_count=0,
        session_gap_hours=math.e**2 - 1,
        is_embedded=True,
        is_superseded=True,
        baseline_score=0.42,
        baseline_rank=3,
        context_similarity=0.5,
        pinned=True,
        bm25_score=0.3,
        vector_score=None,
        query_coverage=0.75,
        content_chars=round(math.e**3 - 1),  # 19 chars: log(20) / 6
        phase_weight=1.3,
    )
    row = build_feature_matrix([cand], when)[0]
    got = dict(zip(F.FEATURE_NAMES, row.tolist()))
    expected = {
        "log_age_days": 1.0,
        "importance": 0.8,
        "log_access_count": 0.0,
        "tod_sin": -1.0,
        "tod_cos": 0.0,
        "dow_sin": math.sin(2 * math.pi * 2 / 7),
        "dow_cos": math.cos(2 * math.pi * 2 / 7),
        "moy_sin": math.sin(2 * math.pi * 2 / 12),
        "moy_cos": 0.5,
        "log_session_gap_hours": 2.0,
        "is_embedded": 1.0,
        "is_superseded": 1.0,
        "baseline_score": 0.42,
        "baseline_rank_inv": 0.25,
        "context_similarity": 0.5,
        "pinned": 1.0,
        "bm25_score": 0.3,
        "vector_score": 0.0,
        "query_coverage": 0.75,
        "log_content_chars": math.log(20) / 6,
        "phase_weight": 1.3,
    }
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-6), name


def test_feature_matrix_defaults_and_clamps():
    cand = CandidateFeatures(age_days=-3.0, importance=0.1, access_count=9, session_gap_hours=0.0, is_embedded=False)
    m = build_feature_matrix([cand, cand], datetime(2026, 1, 1))
    assert m.shape == (2, F.NUM_FEATURES) and m.dtype == np.float32
    i = F.FEATURE_INDEX
    assert m[0, i["log_age_days"]] == 0.0  # clock skew clamped
    assert m[0, i["log_access_count"]] == pytest.approx(math.log(10))
    assert m[0, i["baseline_rank_inv"]] == 0.0 and m[0, i["context_similarity"]] == 0.0
    assert m[0, i["query_coverage"]] == 0.0 and m[0, i["log_content_chars"]] == 0.0
    assert m[0, i["phase_weight"]] == 1.0  # no phase known
    assert build_feature_matrix([], datetime(2026, 1, 1)).shape == (0, F.NUM_FEATURES)


@pytest.mark.parametrize(
    "field",
    [
        "age_days",
        "importance",
        "session_gap_hours",
        "baseline_score",
        "context_similarity",
        "query_coverage",
        "content_chars",
        "phase_weight",
    ],
)
def test_feature_matrix_rejects_non_finite(field):
    base = dict(age_days=1.0, importance=0.5, access_count=1, session_gap_hours=1.0, is_embedded=True)
    base[field] = float("nan")
    with pytest.raises(ValueError, match=field):
        build_feature_matrix([CandidateFeatures(**base)], datetime(2026, 1, 1))


def test_fnv1a_known_vectors():
    # Reference values of the 64-bit FNV-1a test suite.
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_token_ids_lowercase_range_and_cap():
    ids = token_ids("Deploy the API; deploy_api v2 ÜBER")
    assert ids == token_ids("deploy THE api deploy_api V2 über")
    assert len(ids) == 6 and ids[0] != ids[3]  # deploy_api is one token, not deploy + api
    assert all(1 <= i <= NUM_BUCKETS for i in ids)
    assert len(token_ids("w " * 500)) == 128
    assert len(token_ids("a b c d", max_tokens=2)) == 2
    assert token_ids("  ,;  ") == []
    with pytest.raises(ValueError):
        token_ids("x", max_tokens=0)


def test_token_ids_are_stable_across_processes():
    # Python's own str hash is salted per process; FNV-1a must not be.
    code = (
        "from memlane.predictor.tokenizer import token_ids, project_slot; "
        "print(token_ids('stable hashing here'), project_slot('memlane'))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out == f"{token_ids('stable hashing here')} {project_slot('memlane')}\n"


def test_encode_batch_pads_and_masks():
    ids, mask = encode_batch(["one two three", "", "four"])
    assert ids.shape == mask.shape == (3, 3) and ids.dtype == torch.long
    assert mask.tolist() == [[True] * 3, [False] * 3, [True, False, False]]
    assert bool((ids[~mask] == PAD_TOKEN_ID).all())
    ids, mask = encode_batch(["", ""])
    assert ids.shape == (2, 1) and not bool(mask.any())


def test_project_slot():
    assert project_slot(None) == project_slot("") == 0
    assert project_slot("memlane") == project_slot("memlane")
    slots = {project_slot(f"p{i}") for i in range(200)}
    assert slots <= set(range(PROJECT_SLOTS)) and len(slots) > 20


def _random_candidate(rng: np.random.Generator) -> CandidateFeatures:
    def maybe(x: float) -> float | None:
        return None if rng.random() < 0.2 else x

    return CandidateFeatures(
        age_days=float(rng.uniform(-2, 400)),
        importance=float(rng.uniform(0, 1)),
        access_count=int(rng.integers(0, 50)),
        session_gap_hours=float(rng.uniform(-1, 500)),
        is_embedded=bool(rng.random() < 0.7),
        is_superseded=bool(rng.random() < 0.1),
        baseline_score=float(rng.uniform(0, 2)),
        baseline_rank=None if rng.random() < 0.1 else int(rng.integers(-1, 100)),
        context_similarity=maybe(float(rng.uniform(-1, 1))),
        pinned=bool(rng.random() < 0.1),
        bm25_score=maybe(float(rng.uniform(0, 1))),
        vector_score=maybe(float(rng.uniform(-1, 1))),
        mentions_project=bool(rng.random() < 0.3),
        names_other_project=bool(rng.random() < 0.3),
    )


def test_feature_matrix_names_the_bad_value_among_many():
    base = dict(age_days=1.0, importance=0.5, access_count=1, session_gap_hours=1.0, is_embedded=True)
    cands = [CandidateFeatures(**base) for _ in range(5)]
    cands[3] = CandidateFeatures(**{**base, "bm25_score": float("inf")})
    with pytest.raises(ValueError, match="candidate 3: bm25_score"):
        build_feature_matrix(cands, datetime(2026, 1, 1))


def test_feature_matrix_from_signals_equals_the_dataclass_path():
    """Logged signal dicts -> matrix directly gives exactly what signals_to_features +
    build_feature_matrix give, with missing optional keys, None and numbers given as ints."""
    from memlane.predictor.dataset import signals_to_features

    rng = np.random.default_rng(11)
    when = datetime(2026, 7, 2, 23, 59, 1)
    for n in (1, 3, 50, 100):
        raws, embedded = [], []
        for _ in range(n):
            c = _random_candidate(rng)
            raw = {k: getattr(c, k) for k in F.CandidateFeatures.__dataclass_fields__}
            for k in (
                "is_superseded",
                "pinned",
                "bm25_score",
                "mentions_project",
                "names_other_project",
                "phase_weight",
            ):
                if rng.random() < 0.3:
                    raw.pop(k)  # optional keys may be missing from older logs
            if rng.random() < 0.2:
                raw["access_count"] = float(raw["access_count"]) + 0.7  # int() truncates, as before
            raws.append(raw)
            embedded.append(bool(rng.random() < 0.5))
        fast = F.feature_matrix_from_signals(raws, is_embedded=embedded, session_gap_hours=7.5, session_time=when)
        slow = build_feature_matrix(
            [signals_to_features({**r, "is_embedded": e}, 7.5) for r, e in zip(raws, embedded)], when
        )
        assert fast is not None
        np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize(
    "bad",
    [{"age_days": float("nan")}, {"importance": "high"}, {"access_count": None}, {"baseline_score": float("inf")}],
)
def test_malformed_signals_take_the_checked_path_and_raise(bad):
    from memlane.predictor.dataset import build_session

    raw = {"age_days": 1.0, "importance": 0.5, "access_count": 1}
    assert (
        F.feature_matrix_from_signals(
            [{**raw, **bad}], is_embedded=[False], session_gap_hours=0.0, session_time=datetime(2026, 1, 1)
        )
        is None
    )
    with pytest.raises(ValueError):
        build_session(
            candidates=[raw, {**raw, **bad}],
            session_time=datetime(2026, 1, 1),
            session_gap_hours=0.0,
            candidate_vectors=[None, None],
            candidate_texts=["a", "b"],
            context_vector=None,
            context_text="x",
            project=None,
            native_dim=4,
        )
