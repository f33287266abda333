"""The inline entity linker and decision auto-protection (memory-pipeline-v2.md "Inline Entity
Linker", "Decision Auto-Protection"): name rules, clauses and aspects, the 14 decision patterns
one by one, and the hook inside the remember transaction on a real store."""

from __future__ import annotations

from typing import Any

import pytest

from memlane.graph.linker import LINKER_CONFIDENCE, candidate_names, clauses, infer_aspect
from memlane.graph.protection import (
    DECISION_IMPORTANCE,
    DECISION_PATTERNS,
    DEFAULT_IMPORTANCE,
    decision_patterns,
    is_decision_content,
    protection_for,
)
from memlane.services.inputs import RememberInput


def set_graph(c, **values: Any) -> None:
    """Swap in graph settings the way POST /api/config applies hot keys (a validated copy)."""
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"graph": p.graph.model_copy(update=values)})


def rows(c, sql: str, *args: Any) -> list[dict]:
    return c.db.read(lambda conn: [dict(r) for r in conn.execute(sql, args)])


# ------------------------------------------------------------------------- name extraction
@pytest.mark.parametrize(
    "text, expected",
    [
        ("Alice Smith moved the service to Kubernetes.", ["Alice Smith", "Kubernetes"]),
        ("We use PostgreSQL, Redis and GitHub Actions.", ["PostgreSQL", "Redis", "GitHub Actions"]),
        ("The AWS bill and the API keys", ["AWS", "API"]),
        ("Node.js runs the `memlane-daemon` script", ["memlane-daemon", "Node.js"]),
        ("The user prefers tabs. However we decided nothing.", []),  # common words, sentence starts
        ("this is all lowercase text with no names", []),
    ],
)
def test_candidate_names(text: str, expected: list[str]) -> None:
    assert candidate_names(text) == expected


def test_candidate_names_are_distinct_by_canonical_name_and_capped() -> None:
    assert candidate_names("Redis is fast. REDIS is a name. Redis again.") == ["Redis"]
    many = " ".join(f"Name{i}x." for i in range(50))
    assert len(candidate_names(many)) == 20


def test_punctuation_ends_a_multi_word_name() -> None:
    assert candidate_names("Ask Bob, Carol and Dave Jones") == ["Ask Bob", "Carol", "Dave Jones"]


def test_clauses_take_the_first_name_and_infer_an_aspect() -> None:
    text = "Alice prefers dark mode in every editor. Bob works at Initech - Alice decided to use Vim."
    got = clauses(text, candidate_names(text))
    assert got == [
        ("Alice", "prefers dark mode in every editor", "preferences"),
        ("Bob", "works at Initech", "roles"),
        ("Alice", "decided to use Vim", "decisions"),
    ]


@pytest.mark.parametrize(
    "clause, aspect",
    [
        ("depends on the billing service", "dependencies"),
        ("must never be restarted on Fridays", "rules"),
        ("grew up in Lisbon", "background"),
        ("shipped version two last week", "events"),
        ("blue-green", "general"),
    ],
)
def test_infer_aspect(clause: str, aspect: str) -> None:
    assert infer_aspect(clause) == aspect


# ------------------------------------------------------------------- decision auto-protection
#: One sentence per pattern, in battery order (the seed's list).
DECISIONS = [
    ("chose_over", "We chose to use SQLite over Postgres for the cache."),
    ("decided", "The team decided against microservices."),
    ("switched", "We switched the build to Bazel."),
    ("migrated", "Billing migrated away from Stripe last year."),
    ("picked_over", "They picked Rust over Go for the agent."),
    ("went_with", "In the end we went with Terraform."),
    ("sticking_with", "We are sticking with Python 3.11 for now."),
    ("committed_to", "The project committed to semantic versioning."),
    ("settled_on", "We settled on four spaces."),
    ("will_use", "We'll go with the hosted runner."),
    ("prefers_over", "Maria prefers Vim over Emacs."),
    ("adopted", "The company adopted trunk-based development."),
    ("architecture_decision", "Architecture decision: events are immutable."),
    ("design_decision", "A key design decision is the single writer thread."),
]


def test_the_battery_has_the_seeds_fourteen_patterns() -> None:
    assert [n for n, _ in DECISION_PATTERNS] == [n for n, _ in DECISIONS]
    assert len(DECISION_PATTERNS) == 14


@pytest.mark.parametrize("name, text", DECISIONS, ids=[n for n, _ in DECISIONS])
def test_each_decision_pattern_alone(name: str, text: str) -> None:
    assert decision_patterns(text) == [name]
    assert is_decision_content(text)
    assert protection_for(text) == ("constraint", DECISION_IMPORTANCE)


@pytest.mark.parametrize(
    "text",
    [
        "The cache uses SQLite.",
        "I will be out on Monday.",  # "will" without use/go with/stick with
        "She prefers Vim.",  # prefers without over/instead/rather
        "Adoption of the tool is slow.",  # not "adopted"
        "The switch is on the left.",
        "We went to the conference.",  # not "went with"
        "Decisions are hard.",
    ],
)
def test_non_decisions_stay_attributes(text: str) -> None:
    assert not is_decision_content(text)
    assert protection_for(text) == ("attribute", DEFAULT_IMPORTANCE)


def test_patterns_ignore_case_and_stay_within_one_sentence() -> None:
    assert is_decision_content("WE WENT WITH REDIS")
    assert not is_decision_content("Maria prefers Vim. Over the years it grew on her.")


# ------------------------------------------------------------------------- the hook on a store
def test_linker_writes_entities_mentions_aspects_and_attributes_in_the_remember_txn(open_store) -> None:
    c = open_store()
    mid = c.memories.remember(RememberInput(content="Alice Smith prefers tabs in every Python file.")).id
    ents = {r["name"]: r for r in rows(c, "SELECT * FROM entities")}
    assert set(ents) == {"Alice Smith", "Python"}
    assert all(e["entity_type"] == "extracted" and e["mentions"] == 1 for e in ents.values())
    links = rows(c, "SELECT memory_id, mention_text, confidence FROM memory_entity_mentions")
    assert {(r["memory_id"], r["confidence"]) for r in links} == {(mid, LINKER_CONFIDENCE)}
    (attr,) = rows(
        c, "SELECT x.*, a.name AS aspect FROM entity_attributes x JOIN entity_aspects a ON a.id = x.aspect_id"
    )
    assert (attr["content"], attr["aspect"], attr["kind"], attr["importance"], attr["memory_id"]) == (
        "prefers tabs in every Python file",
        "preferences",
        "attribute",
        0.5,
        mid,
    )


def test_decision_memories_get_constraint_attributes_and_the_memory_row_is_unchanged(open_store) -> None:
    c = open_store()
    mid = c.memories.remember(
        RememberInput(content="Memlane chose to use SQLite over Postgres for storage.", type="fact")
    ).id
    attrs = rows(c, "SELECT kind, importance FROM entity_attributes")
    assert attrs and all(a == {"kind": "constraint", "importance": 0.85} for a in attrs)
    assert c.memories.get(mid).type == "fact"


def test_second_memory_reuses_entities_and_dedupes_attributes(open_store) -> None:
    c = open_store()
    c.memories.remember(RememberInput(content="Redis stores the session cache."))
    c.memories.remember(RememberInput(content="Note: Redis stores the session cache."))  # same fact
    (e,) = rows(c, "SELECT mentions FROM entities")
    assert e["mentions"] == 2
    assert len(rows(c, "SELECT * FROM entity_attributes")) == 1
    assert len(rows(c, "SELECT * FROM entity_aspects")) == 1


def test_linker_is_off_when_graph_disabled_and_follows_the_flag_hot(open_store) -> None:
    c = open_store(memory={"pipelineV2": {"graph": {"enabled": False}}})
    c.memories.remember(RememberInput(content="Kafka carries the events."))
    assert rows(c, "SELECT * FROM entities") == []
    set_graph(c, enabled=True)
    c.memories.remember(RememberInput(content="Kafka carries all the events."))
    assert [r["name"] for r in rows(c, "SELECT name FROM entities")] == ["Kafka"]


def test_a_linker_failure_never_loses_the_memory(open_store) -> None:
    c = open_store()

    def break_graph(conn) -> None:
        conn.execute("DROP TABLE entity_attributes")

    c.db.write(break_graph)
    res = c.memories.remember(RememberInput(content="Grafana shows the dashboards."))
    assert res.status == "created"
    assert c.memories.get(res.id).content == "Grafana shows the dashboards."
    assert rows(c, "SELECT * FROM entities") == []  # rolled back to the savepoint
