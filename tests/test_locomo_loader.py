"""Tests for memlane.ranker.locomo: evidence normalization, synthetic files, real data."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from memlane.ranker.locomo import (
    Turn,
    load_locomo,
    normalize_evidence,
    parse_session_datetime,
    summary,
)

DATA = Path("/work/shared/bench-data/locomo/locomo10.json")
needs_data = pytest.mark.skipif(
    not DATA.is_file(), reason=f"LoCoMo data file not present at {DATA} (see bench-data MANIFEST.md)"
)
DIA_ID = re.compile(r"\bD\d+:\d+\b")
VALID = {"D8:6", "D9:17", "D11:26", "D30:5", "D1:1", "D1:2"}


# ------------------------------------------------------ normalize_evidence


def test_normalize_semicolon_pair():
    assert normalize_evidence(["D8:6; D9:17"], VALID) == (["D8:6", "D9:17"], 0)


def test_normalize_extra_colon():
    assert normalize_evidence(["D:11:26"], VALID) == (["D11:26"], 0)


def test_normalize_leading_zero():
    assert normalize_evidence(["D30:05"], VALID) == (["D30:5"], 0)
    assert normalize_evidence(["D01:002"], VALID) == (["D1:2"], 0)


def test_normalize_bare_d_dropped():
    assert normalize_evidence(["D"], VALID) == ([], 1)


def test_normalize_whitespace_comma_and_unresolvable():
    ids, dropped = normalize_evidence(["D1:1 D8:6", "D9:17,D1:2", "D99:1", " "], VALID)
    assert ids == ["D1:1", "D8:6", "D9:17", "D1:2"]
    assert dropped == 1  # D99:1 names no turn; the blank entry is not an id


def test_normalize_dedupes_without_counting():
    assert normalize_evidence(["D1:1", "D1:1", "D01:01"], VALID) == (["D1:1"], 0)
    assert normalize_evidence([], VALID) == ([], 0)


def test_parse_session_datetime():
    assert parse_session_datetime("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)
    assert parse_session_datetime("12:09 am on 1 January, 2022") == datetime(2022, 1, 1, 0, 9)
    assert parse_session_datetime("12:30 pm on 31 December, 2023") == datetime(2023, 12, 31, 12, 30)
    with pytest.raises(ValueError):
        parse_session_datetime("yesterday")


# ---------------------------------------------------------- synthetic file


def _sample(sid="conv-x"):
    return {
        "sample_id": sid,
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_10_date_time": "9:00 am on 3 March, 2023",
            "session_10": [{"speaker": "Ann", "dia_id": "D10:1", "text": "late"}],
            "session_2_date_time": "1:56 pm on 8 May, 2022",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "hi"},
                {
                    "speaker": "Bob",
                    "dia_id": "D2:2",
                    "text": "look",
                    "img_url": ["u"],
                    "blip_caption": "a photo of a dog",
                },
            ],
            "session_3_date_time": "2:00 pm on 9 May, 2022",  # date without turns: ignored
        },
        "qa": [
            {"question": "q0", "answer": "a", "evidence": ["D2:2; D10:01", "D"], "category": 2},
            {"question": "q1", "adversarial_answer": "a", "evidence": [], "category": 5},
        ],
        "observation": {"ignored": True},
        "session_summary": {"ignored": True},
    }


def test_load_synthetic(tmp_path):
    path = tmp_path / "mini.json"
    path.write_text(json.dumps([_sample()]))
    (conv,) = load_locomo(path)
    assert [t.dia_id for t in conv.turns] == ["D2:1", "D2:2", "D10:1"]  # numeric session order
    assert conv.turns[0] == Turn("conv-x", "D2:1", 2, 0, "Ann", "Ann: hi", datetime(2022, 5, 8, 13, 56))
    assert conv.turns[1].text == "Bob: look [image: a photo of a dog]"
    assert conv.turns[1].timestamp == datetime(2022, 5, 8, 13, 56, 1)
    assert conv.last_timestamp == datetime(2023, 3, 3, 9, 0)
    assert conv.sessions == [2, 10]
    q0, q1 = conv.questions
    assert (q0.index, q0.category, q0.evidence, q0.dropped_evidence) == (0, 2, ("D2:2", "D10:1"), 1)
    assert (q1.evidence, q1.dropped_evidence) == ((), 0)
    s = summary([conv])
    assert s == {
        "conversations": 1,
        "sessions": 2,
        "turns": 3,
        "questions": 2,
        "questions_per_category": {2: 1, 5: 1},
        "questions_without_evidence": 1,
        "dropped_evidence": 1,
    }
    with pytest.raises(AttributeError):
        conv.turns[0].text = "x"  # frozen


@pytest.mark.parametrize(
    "payload",
    [
        "not json at all",
        "{}",
        "[]",
        "[1]",
        json.dumps([{"sample_id": "a", "qa": []}]),
        json.dumps([{"sample_id": "a", "qa": [], "conversation": {"speaker_a": "x"}}]),
    ],
)
def test_not_locomo_shaped(tmp_path, payload):
    path = tmp_path / "bad.json"
    path.write_text(payload)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        load_locomo(path)


def test_missing_date_and_bad_turn(tmp_path):
    bad = _sample()
    del bad["conversation"]["session_2_date_time"]
    path = tmp_path / "nodate.json"
    path.write_text(json.dumps([bad]))
    with pytest.raises(ValueError, match="session_2_date_time"):
        load_locomo(path)
    bad = _sample()
    bad["conversation"]["session_2"][0].pop("text")
    path.write_text(json.dumps([bad]))
    with pytest.raises(ValueError, match=r"nodate\.json.*session_2\[0\]"):
        load_locomo(path)


# ------------------------------------------------------------ real LoCoMo


@pytest.fixture(scope="module")
def convs():
    return load_locomo(DATA)


@needs_data
def test_summary_counts_match_manifest(convs):
    s = summary(convs)
    assert s["conversations"] == 10
    assert s["sessions"] == 272
    assert s["turns"] == 5882
    assert s["questions"] == 1986
    assert s["questions_per_category"] == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    assert s["questions_without_evidence"] == 4
    # "D" (conv-42), "D10:19" (conv-42) and "D4:36" (conv-47) name no turn
    assert s["dropped_evidence"] == 3
    assert [c.id for c in convs][:2] == ["conv-26", "conv-30"]


@needs_data
def test_evidence_resolves(convs):
    for c in convs:
        ids = {t.dia_id for t in c.turns}
        for q in c.questions:
            assert set(q.evidence) <= ids
            assert all(re.fullmatch(r"D[1-9]\d*:[1-9]\d*", e) for e in q.evidence)
    by_id = {c.id: c for c in convs}
    flat = [(c.id, e) for c in convs for q in c.questions for e in q.evidence]
    for fixed in [("conv-26", "D8:6"), ("conv-26", "D9:17"), ("conv-43", "D11:26"), ("conv-50", "D30:5")]:
        assert fixed in flat
    assert by_id["conv-26"].questions[0].conversation_id == "conv-26"


@needs_data
def test_turn_text_has_no_dia_id(convs):
    for c in convs:
        for t in c.turns:
            assert not DIA_ID.search(t.text), t
            assert t.text.startswith(f"{t.speaker}: ")


@needs_data
def test_image_caption_form(convs):
    raw = json.loads(DATA.read_text())
    turns = {(c.id, t.dia_id): t for c in convs for t in c.turns}
    n_captions = 0
    for sample in raw:
        for value in sample["conversation"].values():
            if not isinstance(value, list):
                continue
            for r in value:
                t = turns[(sample["sample_id"], r["dia_id"])]
                if r.get("blip_caption"):
                    n_captions += 1
                    assert t.text == f"{r['speaker']}: {r['text']} [image: {r['blip_caption']}]"
                else:
                    assert t.text == f"{r['speaker']}: {r['text']}"
    assert n_captions > 1000  # 1,226 turns carry a caption


@needs_data
def test_timestamps_increase(convs):
    for c in convs:
        assert c.last_timestamp == c.turns[-1].timestamp
        for prev, cur in zip(c.turns, c.turns[1:]):
            if prev.session == cur.session:
                assert cur.timestamp - prev.timestamp == timedelta(seconds=1)
                assert cur.index == prev.index + 1
            else:
                assert cur.session > prev.session and cur.index == 0
            assert cur.timestamp > prev.timestamp
            assert cur.timestamp.tzinfo is None
