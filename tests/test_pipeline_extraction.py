"""Extraction and decision stages (memory-pipeline-v2.md "Extraction Stage", "Decision Stage",
"Semantic Contradiction Detection"): validation caps and coercion, think blocks and fences,
malformed replies, both HTTP protocols on a real loopback server, timeouts, hallucinated ids."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from benchmarks.scripted_llm import Reply, ScriptedLlmServer, prompt_input
from memlane.config import RecallSettings
from memlane.pipeline.contradiction import semantic_contradiction, syntactic_contradiction
from memlane.pipeline.decision import (
    NO_CANDIDATES_REASON,
    Candidate,
    find_candidates,
    parse_decision,
    run_shadow_decisions,
)
from memlane.pipeline.extraction import MAX_INPUT_CHARS, Fact, extract, parse_extraction
from memlane.pipeline.prompts import EXTRACTION_MARKER, extraction_prompt
from memlane.providers import LlmError, LlmTimeout, OllamaProvider, OpenAICompatProvider
from memlane.services.inputs import RememberInput
from pipeline_helpers import StageScript, facts

GOOD = json.dumps(
    facts(
        ("The billing service uses PostgreSQL 16.", "fact", 0.9),
        entities=[{"source": "billing", "relationship": "uses", "target": "PostgreSQL", "confidence": 0.8}],
    )
)


# ---------------------------------------------------------------- parse_extraction


def test_parse_valid_reply() -> None:
    r = parse_extraction(GOOD)
    assert r.facts == [Fact("The billing service uses PostgreSQL 16.", "fact", 0.9)]
    assert [e.as_dict() for e in r.entities] == [
        {"source": "billing", "relationship": "uses", "target": "PostgreSQL", "confidence": 0.8}
    ]
    assert r.warnings == [] and r.entity_names() == ["billing", "PostgreSQL"]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: f'<think>Let me list facts {{"facts": []}}</think>\n{s}',
        lambda s: f"```json\n{s}\n```",
        lambda s: f"<think>hmm</think>```json\n{s}\n```",
        lambda s: f"Sure! Here is the JSON:\n{s}\nHope this helps.",
    ],
)
def test_think_blocks_fences_and_prose_are_stripped(wrap) -> None:
    r = parse_extraction(wrap(GOOD))
    assert len(r.facts) == 1 and r.warnings == []


@pytest.mark.parametrize("raw", ["", "not json at all", '{"facts": [', "[1, 2, 3]", "<think>never closed {"])
def test_malformed_reply_gives_empty_result_with_a_warning(raw: str) -> None:
    r = parse_extraction(raw)
    assert r.facts == [] and r.entities == []
    assert len(r.warnings) == 1 and r.warnings[0].startswith("extraction:")


def test_caps_truncation_and_coercion() -> None:
    many = [
        {"content": f"Fact number {i} about the deploy pipeline.", "type": "fact", "confidence": 0.8} for i in range(25)
    ]
    r = parse_extraction(
        json.dumps(
            {
                "facts": many,
                "entities": [
                    {"source": f"s{i}", "relationship": "r", "target": "t", "confidence": 0.5} for i in range(60)
                ],
            }
        )
    )
    assert len(r.facts) == 20 and len(r.entities) == 50
    assert any("capped at 20" in w for w in r.warnings) and any("capped at 50" in w for w in r.warnings)

    r = parse_extraction(
        json.dumps(
            {
                "facts": [
                    {"content": "too short", "type": "fact", "confidence": 0.9},  # 9 chars: rejected
                    {"content": "x" * 2500, "type": "fact", "confidence": 0.9},  # truncated to 2000
                    {"content": "An unknown type is coerced.", "type": "opinion", "confidence": 0.9},
                    {"content": "Confidence given as a string.", "type": "Preference", "confidence": "0.75"},
                    {"content": "Confidence given in percent.", "type": "fact", "confidence": 95},
                    {"content": "Confidence missing entirely.", "type": "fact"},
                    {"content": "Confidence that is not a number.", "type": "fact", "confidence": "high"},
                    "A bare string fact is accepted.",
                    42,
                ],
                "entities": [
                    {"source": "a", "relationship": "", "target": "b"},
                    "x",
                    {"source": "a", "relationship": "knows", "target": "b", "confidence": True},
                ],
            }
        )
    )
    by = {f.content[:20]: f for f in r.facts}
    assert "too short" not in [f.content for f in r.facts]
    assert len(by["x" * 20].content) == 2000
    assert by["An unknown type is c"].type == "fact"
    assert by["Confidence given as "].type == "preference" and by["Confidence given as "].confidence == 0.75
    assert by["Confidence given in "].confidence == pytest.approx(0.95)
    assert by["Confidence missing e"].confidence == 0.5 and by["Confidence that is n"].confidence == 0.5
    assert by["A bare string fact i"].type == "fact"
    assert len(r.facts) == 7 and len(r.entities) == 1 and r.entities[0].confidence == 0.5
    for needle in (
        "shorter than 10",
        "truncated",
        "coerced to fact",
        "outside [0, 1]",
        "not a number",
        "not an object",
        "must be non-empty",
    ):
        assert any(needle in w for w in r.warnings), needle


def test_wrong_shapes_warn_and_never_raise() -> None:
    r = parse_extraction('{"facts": "nope", "entities": {"a": 1}}')
    assert r.facts == [] and len(r.warnings) == 2


# ---------------------------------------------------------------- extract over HTTP


@pytest.fixture
def script() -> StageScript:
    return StageScript()


@pytest.fixture
def server(script: StageScript) -> Iterator[ScriptedLlmServer]:
    with ScriptedLlmServer(script) as s:
        yield s


@pytest.fixture(params=["ollama", "openai"])
def provider(request: pytest.FixtureRequest, server: ScriptedLlmServer):
    p = (
        OllamaProvider("scripted", base_url=server.url, timeout_s=10)
        if request.param == "ollama"
        else OpenAICompatProvider("scripted", base_url=server.url + "/v1", timeout_s=10)
    )
    yield p
    p.close()


def test_extract_over_both_protocols(provider, server: ScriptedLlmServer, script: StageScript) -> None:
    script.add("extraction", f"<think>reasoning</think>\n```json\n{GOOD}\n```")
    r = extract(provider, "I moved billing to PostgreSQL 16.")
    assert [f.content for f in r.facts] == ["The billing service uses PostgreSQL 16."]
    assert server.prompts[0].startswith(EXTRACTION_MARKER)
    assert prompt_input(server.prompts[0]) == "I moved billing to PostgreSQL 16."


def test_input_is_truncated_to_12000_chars(provider, server: ScriptedLlmServer) -> None:
    r = extract(provider, "word " * 5000)
    assert r.input_truncated and "truncated to 12000" in r.warnings[0]
    assert len(prompt_input(server.prompts[0])) <= MAX_INPUT_CHARS
    assert server.prompts[0] == extraction_prompt(("word " * 5000)[:MAX_INPUT_CHARS])


def test_slow_answer_past_the_timeout_raises_llm_timeout(provider, script: StageScript) -> None:
    script.add("extraction", Reply(GOOD, delay_s=2.0))
    with pytest.raises(LlmTimeout):
        extract(provider, "anything at all here", timeout_s=0.2)


def test_http_error_raises_llm_error(provider, script: StageScript) -> None:
    script.add("extraction", Reply("boom", status=500))
    with pytest.raises(LlmError):
        extract(provider, "anything at all here")


# ---------------------------------------------------------------- decisions

CANDS = [Candidate("id-1", 1, "fact", "Billing uses MySQL.", 0.8), Candidate("id-2", 2, "fact", "Other.", 0.3)]
FACT = Fact("Billing uses PostgreSQL 16 now.", "fact", 0.9)


@pytest.mark.parametrize(
    "reply, action, target",
    [
        ({"action": "ADD", "confidence": 0.8, "reason": "new"}, "ADD", None),
        ({"action": "update", "targetId": "id-1", "confidence": 0.7, "reason": "replaces"}, "UPDATE", "id-1"),
        ({"action": "DELETE", "targetId": "id-2", "confidence": 2, "reason": "obsolete"}, "DELETE", "id-2"),
        ({"action": "NONE", "targetId": "made-up", "confidence": 0.9, "reason": "same"}, "NONE", None),
    ],
)
def test_parse_decision_valid(reply, action, target) -> None:
    p, warning = parse_decision(f"<think>x</think>```json\n{json.dumps(reply)}\n```", FACT, CANDS)
    assert warning is None and p is not None
    assert (p.action, p.target_id) == (action, target) and 0.0 <= p.confidence <= 1.0
    assert p.candidate_ids == ("id-1", "id-2")
    assert p.target_content == ({"id-1": "Billing uses MySQL.", "id-2": "Other."}.get(target))


@pytest.mark.parametrize(
    "reply, needle",
    [
        ({"action": "UPDATE", "targetId": "id-999", "confidence": 0.9, "reason": "x"}, "hallucinated"),
        ({"action": "DELETE", "confidence": 0.9, "reason": "x"}, "without targetId"),
        ({"action": "ADD", "confidence": 0.9, "reason": "  "}, "empty reason"),
        ({"action": "MERGE", "confidence": 0.9, "reason": "x"}, "unknown action"),
        ("not json", "not JSON"),
    ],
)
def test_parse_decision_rejects(reply, needle) -> None:
    p, warning = parse_decision(reply if isinstance(reply, str) else json.dumps(reply), FACT, CANDS)
    assert p is None and needle in warning


def test_run_decisions_candidates_and_no_candidate_add(
    open_store, server: ScriptedLlmServer, script: StageScript
) -> None:
    c = open_store()
    src = c.memories.remember(RememberInput(content="Billing moved from MySQL to PostgreSQL 16.")).id
    old = c.memories.remember(RememberInput(content="Billing uses MySQL 5.7 for invoices.")).id
    c.memories.remember(RememberInput(content="Unrelated: the office plant needs water on Fridays."))
    cands = find_candidates(
        c.memories, RecallSettings(), "Billing uses PostgreSQL for invoices", None, exclude_ids={src}
    )
    assert [x.id for x in cands][:1] == [old] and src not in [x.id for x in cands] and len(cands) <= 5
    llm = OllamaProvider("scripted", base_url=server.url, timeout_s=10)
    script.add("decision", {"action": "UPDATE", "targetId": "hallucinated-id", "confidence": 0.9, "reason": "x"})
    fs = [Fact("Billing uses PostgreSQL for invoices.", "fact", 0.9), Fact("Zebras quokkas xylophones.", "fact", 0.8)]
    res = run_shadow_decisions(llm, c.memories, RecallSettings(), fs, {}, exclude_ids={src})
    llm.close()
    assert res.llm_calls == 1  # the second fact had no candidates: ADD without a call
    assert [(p.fact.content, p.action, p.reason) for p in res.proposals] == [
        ("Zebras quokkas xylophones.", "ADD", NO_CANDIDATES_REASON)
    ]
    assert len(res.warnings) == 1 and "hallucinated" in res.warnings[0]
    assert old in server.prompts[-1] and src not in server.prompts[-1]


# ---------------------------------------------------------------- contradictions


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (
            "The deploy cache is enabled in staging.",
            "The deploy cache is disabled in staging.",
            "antonym:enabled/disabled",
        ),
        ("Alice does not own the billing scripts.", "Alice owns the billing scripts.", "negation_polarity"),
        (
            "Bob never reviews frontend pull requests.",
            "Bob always reviews frontend pull requests.",
            "negation_polarity",
        ),
        ("The deploy cache is enabled.", "Lunch is served at noon.", None),  # no lexical overlap
        ("Alice owns the billing scripts.", "Alice owns the billing scripts and docs.", None),
    ],
)
def test_syntactic_contradiction(a: str, b: str, expected: str | None) -> None:
    assert syntactic_contradiction(a, b) == expected


def test_semantic_contradiction_verdicts_and_timeout(server: ScriptedLlmServer, script: StageScript) -> None:
    llm = OllamaProvider("scripted", base_url=server.url, timeout_s=10)
    script.add(
        "contradiction",
        '<think>x</think>{"contradicts": true, "confidence": 0.8, "reasoning": "db changed"}',
        "garbage",
        Reply('{"contradicts": true}', delay_s=2.0),
    )
    v = semantic_contradiction(llm, "uses PostgreSQL", "migrated to MongoDB", timeout_ms=5_000)
    assert (v.contradicts, v.confidence, v.status) == (True, 0.8, "checked")
    v = semantic_contradiction(llm, "a", "b", timeout_ms=5_000)
    assert (v.contradicts, v.status) == (False, "unparsable")
    v = semantic_contradiction(llm, "a", "b", timeout_ms=200)  # advisory: a timeout is "no contradiction"
    assert (v.contradicts, v.status) == (False, "timeout")
    llm.close()
