"""Confidence propagation along memory relations (memory-system-v3-design.md "Confidence
Propagation"): the seed's factors, a cycle that terminates, the 0.05 floor, and propagation when a
memory is flagged, on a real store."""

from __future__ import annotations

import pytest

from memlane.drift.propagation import FACTORS, propagate
from memlane.errors import NotFound, ValidationError
from memlane.services.inputs import RememberInput
from memlane.storage import relations

AT = "2026-01-01T00:00:00.000Z"


def _graph(edges):
    def neighbours(node):
        out = []
        for s, t, rel, w in edges:
            if s == node:
                out.append((t, rel, w))
            elif t == node:
                out.append((s, rel, w))
        return out

    return neighbours


def test_factors_are_the_seeds():
    assert FACTORS == {
        "validates": 0.6,
        "required_with": 0.3,
        "conflicts_with": -0.4,
        "supersedes": 0.8,
        "derived_from": 0.5,
    }


def test_a_cycle_terminates_and_each_memory_changes_once():
    conf = {"a": 1.0, "b": 0.9, "c": 0.8}
    edges = [("a", "b", "validates", 1.0), ("b", "c", "derived_from", 1.0), ("c", "a", "validates", 1.0)]
    out = propagate("a", 1.0, 0.2, neighbours=_graph(edges), confidence=conf.get)
    # a -> b: 0.9 + 0.6 * -0.8 = 0.42; b -> c: 0.8 + 0.5 * -0.48 = 0.56; c -> a: a is visited
    assert out == pytest.approx({"b": 0.42, "c": 0.56})


def test_conflicts_move_the_other_way_and_the_floor_stops_small_changes():
    conf = {"a": 0.9, "x": 0.3, "y": 0.5}
    edges = [("a", "x", "conflicts_with", 1.0), ("x", "y", "required_with", 1.0)]
    out = propagate("a", 0.9, 0.4, neighbours=_graph(edges), confidence=conf.get)
    # a drops 0.5: x rises 0.2; x -> y: 0.3 * 0.2 = 0.06 > 0.05
    assert out == pytest.approx({"x": 0.5, "y": 0.56})
    out = propagate("a", 0.9, 0.8, neighbours=_graph(edges), confidence=conf.get)
    assert out == {}  # 0.4 * 0.1 = 0.04: below the floor, nothing moves


def test_store_propagation_and_flag_trigger(store):
    c = store
    ids = [
        c.memories.remember(RememberInput(content=f"memory number {i} about deploys", confidence=0.9)).id
        for i in range(3)
    ]
    a, b, d = ids
    c.db.write(
        lambda conn: (
            relations.add(conn, a, b, "validates", at=AT),
            relations.add(conn, b, d, "derived_from", at=AT),
            relations.add(conn, d, a, "supersedes", at=AT),
        )
    )
    changed = c.drift.propagate(a, 0.3)
    assert changed[a] == 0.3 and changed[b] == pytest.approx(0.9 - 0.6 * 0.6)
    assert c.memories.get(b).confidence == pytest.approx(0.54)
    assert set(changed) == {a, b, d}
    with pytest.raises(ValidationError):
        c.drift.propagate(a, 1.5)
    with pytest.raises(NotFound):
        c.drift.propagate("nope", 0.5)

    # a new flag (an external signal) lowers the neighbours by the retrieval penalty's change
    before = c.memories.get(b).confidence
    c.drift.record_signal(a, source="manual", evidence={"why": "wrong"})
    after = c.memories.get(b).confidence
    assert after == pytest.approx(before + 0.6 * (0.3 * 0.5 - 0.3))
    assert c.memories.get(a).confidence == 0.3  # the flagged memory's own row is unchanged
