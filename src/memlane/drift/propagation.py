"""Confidence propagation along memory relations (memory-system-v3-design.md "Confidence
Propagation"; docs/drift.md).

When a memory's confidence changes from ``old`` to ``new`` (it is flagged wrong, superseded,
validated or marked stale), each memory related to it (either direction of a ``memory_relations``
edge) moves by ``factor(relation) * weight * (new - old)``, clipped to [0, 1]; a neighbour whose
change is larger than the floor (0.05) is updated and passes its own change on. A visited set
stops cycles; with every |factor| <= 0.8 a change shrinks at each hop, so it also dies out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: The seed's factors.
FACTORS: dict[str, float] = {
    "validates": 0.6,
    "required_with": 0.3,
    "conflicts_with": -0.4,
    "supersedes": 0.8,
    "derived_from": 0.5,
}


def propagate(
    start: str,
    old: float,
    new: float,
    *,
    neighbours: Callable[[str], Iterable[tuple[str, str, float]]],
    confidence: Callable[[str], float | None],
    floor: float = 0.05,
) -> dict[str, float]:
    """The new confidences of the memories a change of ``start`` from ``old`` to ``new`` reaches.

    Args:
        start: the memory whose confidence changed (not in the result).
        old, new: its confidence before and after, in [0, 1].
        neighbours: ``memory id -> [(other memory id, relation, weight)]`` (both directions).
        confidence: a memory's current confidence (None: not a live memory, skipped).
        floor: changes this small or smaller stop.

    Returns:
        ``memory id -> new confidence`` (depth-first order, each memory at most once).
    """
    out: dict[str, float] = {}
    visited = {start}

    def walk(node: str, delta: float) -> None:
        for other, relation, weight in neighbours(node):
            if other in visited:
                continue
            cur = out.get(other)
            if cur is None:
                cur = confidence(other)
            if cur is None:
                continue
            target = min(1.0, max(0.0, cur + FACTORS[relation] * weight * delta))
            if abs(target - cur) > floor:
                visited.add(other)
                out[other] = target
                walk(other, target - cur)

    walk(start, new - old)
    return out
