"""Issue 39, the regression: the graph boost favoured every turn of the person a question names.

The inline linker links each chat turn's ``"{speaker}:"`` label, so on a conversation store the
speaker's entity is linked to about half the memories; a question naming that speaker gave all
of them +0.15, burying the answer when it was said by the other person (LoCoMo's adversarial
questions). Only entities linked to at most ``graph.boost_max_share`` of the store (and always
those linked to 5 or fewer) boost now. Real SQLite stores, BM25 only, the real linker."""

from __future__ import annotations

from typing import Any

import pytest

from memlane.graph.search import MIN_SPECIFIC_MENTIONS, specific_mentions
from memlane.services.inputs import RecallQuery, RememberInput

#: The boost at the seed's weight (memlane ships it at 0: see test_the_shipped_boost_is_off).
QUIET = {
    "recall": {"recency_weight": 0.0, "rehearsal_weight": 0.0},
    "memory": {
        "pipelineV2": {
            "graph": {"boost_weight": 0.15},
            "dampening": {"gravity_enabled": False, "hub_enabled": False, "resolution_enabled": False},
        }
    },
}


def set_graph(c, **values: Any) -> None:
    """Swap in graph settings the way POST /api/config applies hot keys (a validated copy)."""
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"graph": p.graph.model_copy(update=values)})


def chat(c) -> dict[str, str]:
    """A two-person chat: Caroline speaks 24 turns about everyday things, Melanie 16; the
    answer to "what did Caroline paint?" is a turn of Melanie's (an adversarial question: it
    names the wrong person). Both speakers are linked to far more than 5 % of the store."""
    ids = {}
    for i in range(24):
        c.memories.remember(RememberInput(content=f"Caroline: I went to the market on day {i} and bought bread"))
    for i in range(15):
        c.memories.remember(RememberInput(content=f"Melanie: the weather on day {i} was fine for a walk"))
    ids["answer"] = c.memories.remember(RememberInput(content="Melanie: I painted a lake sunrise last week")).id
    ids["caroline_paint"] = c.memories.remember(
        RememberInput(content="Caroline: my cousin says painted furniture and painted walls are cheap")
    ).id
    return ids


def test_a_query_naming_a_chat_speaker_does_not_boost_all_her_turns(open_store) -> None:
    c = open_store(**QUIET)
    ids = chat(c)
    q = RecallQuery(query="What did Caroline paint?", limit=5, touch=False, ranker="heuristic")
    hits = c.recall.recall(q).hits
    # No boost: every score is the hybrid score itself, and the answer (the turn about painting
    # a sunrise, said by Melanie) is not pushed under Caroline's turn by 0.15.
    assert all(h.score == pytest.approx(h.bm25_score) for h in hits)
    assert c.recall.graph_boost.telemetry()["boosted"] == 0
    # The old behaviour (every entity boosts) gives each Caroline turn +0.15 over its BM25 score.
    set_graph(c, boost_max_share=1.0)
    old = {h.memory.id: h for h in c.recall.recall(q).hits}
    assert old[ids["caroline_paint"]].score == pytest.approx(old[ids["caroline_paint"]].bm25_score + 0.15)
    assert old[ids["answer"]].score == pytest.approx(old[ids["answer"]].bm25_score)


def test_a_specific_entity_still_boosts(open_store) -> None:
    c = open_store(**QUIET)
    chat(c)
    linked = c.memories.remember(RememberInput(content="Melanie: Kilimanjaro trip photos are on my laptop")).id
    q = RecallQuery(query="Kilimanjaro laptop photos trip", limit=5, touch=False, ranker="heuristic")
    hit = {h.memory.id: h for h in c.recall.recall(q).hits}[linked]
    assert hit.score == pytest.approx(hit.bm25_score + 0.15)  # one memory names Kilimanjaro


def test_specific_mentions_threshold() -> None:
    assert specific_mentions(10_000, 0.05) == 500
    assert specific_mentions(20, 0.05) == MIN_SPECIFIC_MENTIONS  # small stores: 5 or fewer always boost
    assert specific_mentions(10_000, 1.0) is None


def test_boost_max_share_is_validated() -> None:
    from memlane.config.pipeline import GraphSettings

    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            GraphSettings(boost_max_share=bad)
    assert GraphSettings().boost_max_share == 0.05
    assert GraphSettings(boostMaxShare=1.0).boost_max_share == 1.0


def test_the_shipped_boost_is_off_and_the_graph_still_built(open_store) -> None:
    """The shipped defaults are the best the LoCoMo bench finds: every boost weight tried lowered
    R@5 (docs/benchmarks.md), so the boost ships at 0 while the linker still writes the graph."""
    c = open_store()
    g = c.settings.memory.pipeline_v2.graph
    assert g.enabled and g.boost_weight == 0.0
    chat(c)
    q = RecallQuery(query="What did Caroline paint?", limit=5, touch=False, ranker="heuristic")
    assert all(h.score == pytest.approx(h.bm25_score) for h in c.recall.recall(q).hits)
    linked = c.db.read(lambda conn: conn.execute("SELECT count(*) FROM memory_entity_mentions").fetchone()[0])
    assert linked >= 41  # every turn's speaker label at least
