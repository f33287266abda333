"""The continuity judge's prompt and reply parsing (``memlane.sessions.continuity``)."""

from __future__ import annotations

import json

import pytest

from memlane.sessions.continuity import (
    MIN_TRANSCRIPT_CHARS,
    PREVIEW_CHARS,
    TRANSCRIPT_TAIL_CHARS,
    JudgedMemory,
    build_prompt,
    parse_reply,
)

A = JudgedMemory("aaaa1111-0000-4000-8000-000000000001", "Deploys go through staging first.")
B = JudgedMemory("bbbb2222-0000-4000-8000-000000000002", "The user prefers tabs over spaces.")
C = JudgedMemory("cccc3333-0000-4000-8000-000000000003", 'A "quoted"\n  multi-line   memory.')
MEMS = [A, B, C]


def test_constants() -> None:
    assert (TRANSCRIPT_TAIL_CHARS, MIN_TRANSCRIPT_CHARS) == (4000, 500)


def test_build_prompt_uses_8_char_ids_numbered() -> None:
    p = build_prompt(MEMS, "user: hi\nassistant: hello")
    assert '1. [aaaa1111]: "Deploys go through staging first."' in p
    assert '2. [bbbb2222]: "The user prefers tabs over spaces."' in p
    # whitespace collapsed, double quotes turned into single quotes (the preview stays one string)
    assert "3. [cccc3333]: \"A 'quoted' multi-line memory.\"" in p
    for m in MEMS:
        assert m.id not in p  # never the full id


def test_build_prompt_reads_the_last_4000_chars() -> None:
    head = "H" * 10 + "<<DROPPED-MARKER>>"
    tail = "".join(chr(ord("a") + i % 26) for i in range(TRANSCRIPT_TAIL_CHARS - 12)) + "<<LAST-CHAR>"
    assert len(tail) == TRANSCRIPT_TAIL_CHARS
    p = build_prompt(MEMS, head + "x" * 5000 + tail)
    assert tail in p
    assert "<<DROPPED-MARKER>>" not in p
    assert "x" + tail not in p  # exactly 4,000 characters, not one more
    assert "<transcript>\n" + tail + "\n</transcript>" in p


def test_build_prompt_short_transcript_whole_and_no_memories() -> None:
    p = build_prompt([], "short transcript ü 🎉")
    assert "short transcript ü 🎉" in p
    assert "(none)" in p


def test_build_prompt_long_memory_is_previewed() -> None:
    m = JudgedMemory("dddd4444-0000", "word " * 200)
    p = build_prompt([m], "t")
    line = next(ln for ln in p.splitlines() if ln.startswith("1. [dddd4444]"))
    preview = line.split(": ", 1)[1].strip('"')
    assert len(preview) == PREVIEW_CHARS and preview.endswith("...")


def test_build_prompt_is_blind() -> None:
    p = build_prompt(MEMS, "neutral transcript").lower()
    for word in ("predictor", "baseline", "effective", "source", "rank", "exploration"):
        assert word not in p


# ------------------------------------------------------------------ parse_reply


def test_parse_shape_one_with_think_and_fence() -> None:
    body = {
        "score": 0.8,
        "confidence": 0.9,
        "memories_used": 2,
        "novel_context_count": 1,
        "reasoning": "A and B were used.",
        "per_memory": [{"id": "aaaa1111", "relevance": 0.9}, {"id": "bbbb2222", "relevance": 0.1}],
    }
    reply = "<think>let me think { not json</think>\n```json\n" + json.dumps(body) + "\n```"
    r = parse_reply(reply, MEMS)
    assert r is not None
    assert (r.score, r.confidence, r.memories_used, r.novel_context_count) == (0.8, 0.9, 2, 1)
    assert r.reasoning == "A and B were used."
    assert r.per_memory == {A.id: 0.9, B.id: 0.1}
    assert r.unresolved_ids == 0


def test_parse_shape_two_seed_overall_score_and_map() -> None:
    body = {
        "overall_score": 0.6,
        "confidence": 0.7,
        "per_memory_scores": {"aaaa1111": 0.85, "[cccc3333]": 0.2, C.id: 0.3},
        "missing_topics": ["x"],
        "novel_context_count": 3,
        "reasoning": "r",
    }
    r = parse_reply("Here you go: " + json.dumps(body) + " -- done", MEMS)
    assert r is not None
    assert r.score == 0.6 and r.confidence == 0.7 and r.novel_context_count == 3
    assert r.per_memory[A.id] == 0.85
    assert r.per_memory[C.id] == 0.3  # the later entry for the same memory wins
    assert r.memories_used == 0  # absent: 0


def test_parse_per_memory_as_map_and_score_alias() -> None:
    r = parse_reply(
        json.dumps({"score": 0.5, "per_memory": {"bbbb2222": 0.4}, "per_memory_scores": {"aaaa1111": 0.6}}), MEMS
    )
    assert r.per_memory == {B.id: 0.4, A.id: 0.6}
    r = parse_reply(json.dumps({"score": 0.5, "per_memory": [{"id": "aaaa1111", "score": 0.7}]}), MEMS)
    assert r.per_memory == {A.id: 0.7}


@pytest.mark.parametrize(
    "reply", ["", "no json here", "{broken", '<think>{"score": 1}', "[1, 2, 3]", "```json\n```", "null"]
)
def test_parse_garbage_is_none(reply: str) -> None:
    assert parse_reply(reply, MEMS) is None


def test_parse_missing_fields_default() -> None:
    r = parse_reply("{}", MEMS)
    assert r is not None
    assert (r.score, r.confidence, r.memories_used, r.novel_context_count, r.reasoning) == (0.0, 0.0, 0, 0, "")
    assert r.per_memory == {} and r.unresolved_ids == 0


def test_parse_clamps_and_sanitises_numbers() -> None:
    reply = (
        '{"score": 1.7, "confidence": -0.3, "memories_used": -2, "novel_context_count": NaN,'
        ' "reasoning": 42, "per_memory": [{"id": "aaaa1111", "relevance": 3},'
        ' {"id": "bbbb2222", "relevance": -1}, {"id": "cccc3333", "relevance": NaN}]}'
    )
    r = parse_reply(reply, MEMS)
    assert r is not None
    assert r.score == 1.0 and r.confidence == 0.0
    assert r.memories_used == 0 and r.novel_context_count == 0
    assert r.reasoning == ""
    assert r.per_memory == {A.id: 1.0, B.id: 0.0, C.id: 0.0}


def test_parse_nan_and_non_numeric_strings() -> None:
    r = parse_reply(
        '{"score": NaN, "confidence": "high", "memories_used": "3", "novel_context_count": 2.9,'
        ' "per_memory": [{"id": "aaaa1111", "relevance": "very"}, {"id": "bbbb2222"}]}',
        MEMS,
    )
    assert r.score == 0.0 and r.confidence == 0.0
    assert r.memories_used == 3 and r.novel_context_count == 2
    assert r.per_memory == {A.id: 0.0, B.id: 0.0}


def test_parse_negative_and_huge_counts() -> None:
    r = parse_reply('{"memories_used": -1, "novel_context_count": 1e12}', MEMS)
    assert r.memories_used == 0
    assert r.novel_context_count == 10_000


def test_parse_unresolvable_ids_are_counted() -> None:
    r = parse_reply(
        json.dumps(
            {
                "score": 0.5,
                "per_memory": [
                    {"id": "zzzz9999", "relevance": 1},
                    {"id": None, "relevance": 1},
                    {"relevance": 1},
                    {"id": "aaaa1111", "relevance": 0.5},
                    "not-an-object",
                ],
                "per_memory_scores": {"deadbeef": 0.3},
            }
        ),
        MEMS,
    )
    assert r.per_memory == {A.id: 0.5}
    assert r.unresolved_ids == 4  # zzzz9999, None, missing id, deadbeef (the string entry is skipped)


def test_parse_full_ids_resolve() -> None:
    r = parse_reply(json.dumps({"per_memory_scores": {A.id: 0.4, B.id.upper(): 0.9}}), MEMS)
    assert r.per_memory[A.id] == 0.4
    assert B.id not in r.per_memory  # ids are case-sensitive
    assert r.unresolved_ids == 1


def test_parse_integers_too_large_for_a_float() -> None:
    """A 400-digit integer once raised OverflowError out of parse_reply (the judge thread died)."""
    big = "9" * 400
    r = parse_reply(
        f'{{"score": {big}, "confidence": -{big}, "memories_used": {big}, "novel_context_count": -{big},'
        f' "per_memory": [{{"id": "aaaa1111", "relevance": {big}}}, {{"id": "bbbb2222", "relevance": -{big}}}]}}',
        MEMS,
    )
    assert r is not None
    assert (r.score, r.confidence, r.memories_used, r.novel_context_count) == (1.0, 0.0, 10_000, 0)
    assert r.per_memory == {A.id: 1.0, B.id: 0.0}
