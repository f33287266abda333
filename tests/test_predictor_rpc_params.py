"""The sidecar's request models (memlane.predictor.rpc_params / rpc_shapes), called directly:
strict types, ranges, unknown keys, and messages that name the field. The sidecar tests
(test_predictor_sidecar*.py) send the same requests over its JSON-RPC pipe."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from memlane.predictor.rpc_params import (
    MAX_CANDIDATES,
    parse_score_params,
    parse_train_from_db_params,
    parse_train_params,
)
from memlane.predictor.rpc_shapes import InvalidParams, parse_signals

DIM = 4


def no_rows(ids: list[str]) -> dict[str, tuple[str, bytes | None]]:
    return {}


def score(**over: object) -> tuple[list[str], object]:
    return parse_score_params(
        {"candidate_ids": ["a", "b"], "session_time": "2026-01-07T06:00:00", **over}, native_dim=DIM, lookup=no_rows
    )


def test_train_from_db_defaults_and_the_daemons_extra_keys() -> None:
    p = parse_train_from_db_params({"trigger": "interval", "influential": False, "hold_out_canary": True})
    assert (p.limit, p.max_seconds, p.epochs, p.early_stop_patience, p.influential, p.hold_out_canary) == (
        500,
        30.0,
        None,
        None,
        False,
        True,
    )
    assert parse_train_from_db_params("not an object") == parse_train_from_db_params({})
    assert parse_train_from_db_params({"epochs": 3, "early_stop_patience": 4, "max_seconds": 5}).epochs == 3


@pytest.mark.parametrize(
    "params, message",
    [
        ({"limit": 0}, "limit must be an integer in [1, 100000], got 0"),
        ({"limit": "10"}, "limit must be an integer in [1, 100000], got '10'"),  # no conversion
        ({"epochs": 2.5}, "epochs must be an integer in [1, 1000], got 2.5"),
        ({"max_seconds": 0}, "max_seconds must be a number in (0, 3600], got 0"),
        ({"early_stop_patience": 1002}, "early_stop_patience must be an integer in [1, 1001]"),
        ({"influential": "yes"}, "influential must be a boolean, got 'yes'"),
        ({"hold_out_canary": 0}, "hold_out_canary must be a boolean, got 0"),
    ],
)
def test_train_from_db_refusals_name_the_field(params: dict, message: str) -> None:
    with pytest.raises(InvalidParams) as err:
        parse_train_from_db_params(params)
    assert message in str(err.value)


def test_train_params_forms() -> None:
    assert parse_train_params({"candidate_ids": ["a"]}) == ([{"candidate_ids": ["a"]}], None)
    assert parse_train_params({"sessions": [{}, {}], "epochs": 7}) == ([{}, {}], 7)
    for bad, field in (
        ({"sessions": []}, "sessions"),
        ({"sessions": "x"}, "sessions"),
        ({"sessions": [{}], "epochs": True}, "epochs"),
        ([1], "params"),
    ):
        with pytest.raises(InvalidParams, match=field):
            parse_train_params(bad)


@pytest.mark.parametrize(
    "over, message",
    [
        ({"candidate_ids": []}, "candidate_ids must be a non-empty array of strings"),
        ({"candidate_ids": ["a", ""]}, "candidate_ids must be a non-empty array of strings"),
        ({"candidate_ids": ["a", "a"]}, f"candidate_ids must be unique and at most {MAX_CANDIDATES}"),
        ({"candidate_ids": ["a", 3]}, "candidate_ids[1] must be a non-empty string, got 3"),
        ({"session_time": 5}, "session_time must be an ISO-8601 time (string), got 5"),
        ({"session_time": "tomorrow"}, "session_time must be an ISO-8601 time"),
        ({"session_gap_hours": "3"}, "session_gap_hours must be a finite number (hours), got '3'"),
        ({"project": 7}, "project must be a string or null, got 7"),
        ({"candidates": [{}]}, "candidates must be 2 objects"),
        ({"candidates": [{}, 5]}, "candidates[1] must be an object, got 5"),
        ({"candidate_texts": ["x", 1]}, "candidate_texts[1] must be a string, got 1"),
        ({"candidate_texts": ["x"]}, "candidate_texts must be 2 strings"),
        (
            {"candidate_is_embedded": [True, 1], "candidate_embeddings_b64": ""},
            "candidate_is_embedded[1] must be a boolean",
        ),
        ({"candidate_embeddings_b64": "!!"}, "candidate_embeddings_b64 is not valid base64"),
        ({"candidate_embeddings": [[0.1] * DIM]}, "candidate_embeddings must be 2 arrays"),
        ({"candidate_embeddings": [[0.1] * DIM, ["x"] * DIM]}, "candidate_embeddings[1] must be an array of numbers"),
        ({"context_embedding": [1e39] * DIM}, "context_embedding must be 4 finite numbers"),
        ({"continuity_score": 1.5}, "continuity_score must be a number in [0, 1], got 1.5"),
        ({"continuity_score": "high"}, "continuity_score must be a number in [0, 1], got 'high'"),
        ({"signals": {"day_of_week": 1}}, "signals.time_of_day is missing"),
    ],
)
def test_score_refusals_name_the_field(over: dict, message: str) -> None:
    with pytest.raises(InvalidParams) as err:
        score(**over)
    assert message in str(err.value)


def test_score_accepts_both_embedding_forms_and_ignores_unknown_keys() -> None:
    rows = np.arange(2 * DIM, dtype="<f4").reshape(2, DIM) + 1
    ids, a = score(
        candidate_embeddings_b64=base64.b64encode(rows.tobytes()).decode(),
        candidate_is_embedded=[True, False],
        return_features=True,
        trigger="x",
    )
    ids2, b = score(candidate_embeddings=[rows[0].tolist(), None])
    assert ids == ids2 == ["a", "b"]
    assert np.array_equal(a.candidate_embeddings, b.candidate_embeddings)
    assert score(continuity_score=None)[1].confidence == 1.0
    assert score(confidence=0.25)[1].confidence == 0.25


def test_signals_model() -> None:
    s = parse_signals(
        {
            "time_of_day": 0.25,
            "day_of_week": 2,
            "month_of_year": 1,
            "project": None,
            "session_gap_hours": 8,
            "is_superseded": [False, True],
        },
        2,
    )
    assert (s.session_time.hour, s.session_time.weekday(), s.session_time.month) == (6, 2, 1)
    assert (s.project, s.has_project, s.session_gap_hours, s.is_superseded) == (None, True, 8.0, [False, True])
    assert parse_signals({}, 3).has_project is False
    for raw, message in (
        ({"day_of_week": True, "time_of_day": 0.1, "month_of_year": 1}, "signals.day_of_week must be an integer 0..6"),
        ({"time_of_day": 1.0, "day_of_week": 0, "month_of_year": 1}, "signals.time_of_day must be a fraction"),
        ({"month_of_year": 0, "time_of_day": 0.1, "day_of_week": 0}, "signals.month_of_year must be an integer 1..12"),
        ({"is_superseded": [0, 1]}, "signals.is_superseded[0] must be a boolean, got 0"),
        ({"is_superseded": [True]}, "signals.is_superseded must be 2 booleans (one per candidate), got 1 entries"),
        ({"is_superseded": None}, "signals.is_superseded must be an array of booleans"),
        ({"session_gap_hours": None}, "signals.session_gap_hours must be a finite number >= 0 (hours), got None"),
        ({"time_of_day": None, "day_of_week": 0, "month_of_year": 1}, "signals.time_of_day must be a fraction"),
        ({"session_gap_hours": float("inf")}, "signals.session_gap_hours must be a finite number >= 0"),
        ({"weather": "rain"}, "signals.weather is not a known signal"),
        ([0.25], "signals must be an object, got list"),
    ):
        with pytest.raises(InvalidParams) as err:
            parse_signals(raw, 2)
        assert message in str(err.value)
