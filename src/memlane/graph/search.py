"""Graph-augmented search (memory-pipeline-v2.md "Graph-Augmented Search").

At recall time the query's entities are found and expanded one hop, and the candidates linked
to any of them get ``+ graph.boost_weight`` (default 0.15) on their hybrid score, after the
BM25 + vector merge and before any other boost or dampening. Three steps, each one indexed SQL:

1. query n-grams (1-3 tokens of 2+ alphanumerics, lowercased, plus punctuated words such as
   ``node.js``) matched exactly against ``entities.canonical_name`` (the UNIQUE index), most
   mentioned first, at most :data:`MAX_ENTITY_HITS` (20) entities;
2. one hop through ``relations`` in both directions: at most :data:`MAX_NEIGHBOURS` (50) more;
3. the candidates linked to any of those entities in ``memory_entity_mentions`` (rowid, then
   primary-key probes: the cost follows the pool size, never a hub entity's fan-out), at most
   :data:`MAX_MEMORIES` (200) live memories. Only candidates are looked at: the boost is added
   to hybrid scores, so a memory outside the pool has nothing to add it to.

A monotonic-clock deadline (``graph.boost_timeout_ms``) is checked before the first step and
after each one; past it, what was accumulated so far is used (``timed_out``). Any exception
gives an empty result: the boost is additive only, so recall is never worse than unboosted.
A query naming no known entity stops after step 1 (one indexed IN query).

Only specific entities boost: one linked to more than ``graph.boost_max_share`` (5 %) of the
store's memories (and to more than 5) is left out at step 1: a name most memories mention,
such as a chat's speaker label, says nothing about which memory answers, and boosting it
buries the memories of everyone else (docs/benchmarks.md, "Graph boost").
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from memlane.config.pipeline import GraphSettings
from memlane.graph import names
from memlane.storage import graph as graph_sql
from memlane.storage.db import Database

log = logging.getLogger(__name__)

MAX_ENTITY_HITS = 20
MAX_NEIGHBOURS = 50
MAX_MEMORIES = 200
#: An entity linked to this many memories or fewer always boosts (small stores).
MIN_SPECIFIC_MENTIONS = 5
#: Candidates per step-3 query in ``storage.graph.linked_seqs`` (its output order, chunk by chunk).
SQL_CHUNK = 500


@dataclass
class GraphLookup:
    """One graph lookup: matched entity ids, their one-hop neighbours, the linked memory seqs."""

    entity_ids: list[str] = field(default_factory=list)
    neighbour_ids: list[str] = field(default_factory=list)
    seqs: set[int] = field(default_factory=set)
    timed_out: bool = False
    error: str | None = None


def query_entities(conn: sqlite3.Connection, query: str, max_mentions: int | None = None) -> list[str]:
    """Step 1: ids of the entities the query names, most mentioned first, at most
    :data:`MAX_ENTITY_HITS`; with ``max_mentions``, only entities linked to at most that many
    memories (a name most of the store mentions, such as a conversation's speaker, says
    nothing about which memory answers)."""
    hits = graph_sql.entities_by_canonical(conn, names.query_ngrams(query), MAX_ENTITY_HITS)
    return [eid for eid, n in hits if max_mentions is None or n <= max_mentions]


def specific_mentions(memories: int, max_share: float) -> int | None:
    """The most memories an entity may be linked to and still boost: ``max_share`` of the
    store's ``memories``, at least :data:`MIN_SPECIFIC_MENTIONS`; None (no limit) when
    ``max_share`` is 1."""
    if max_share >= 1.0:
        return None
    return max(MIN_SPECIFIC_MENTIONS, int(max_share * memories))


def graph_entities(
    conn: sqlite3.Connection,
    query: str,
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    max_mentions: int | None = None,
) -> GraphLookup:
    """Steps 1 and 2 of :func:`graph_linked_seqs` (they do not need the candidates): the query's
    entities (:func:`query_entities`) and their one-hop neighbours. Never raises (an error sets
    ``error``)."""
    out = GraphLookup()
    try:
        if clock() >= deadline:
            out.timed_out = True
            return out
        out.entity_ids = query_entities(conn, query, max_mentions)
        if not out.entity_ids:
            return out
        if clock() >= deadline:
            out.timed_out = True
            return out
        out.neighbour_ids = graph_sql.neighbours(conn, out.entity_ids, MAX_NEIGHBOURS)
        if clock() >= deadline:
            out.timed_out = True
        return out
    except Exception as exc:  # additive only: an error means no boost
        log.warning("graph lookup failed: %s", exc)
        return GraphLookup(error=f"{type(exc).__name__}: {exc}"[:300])


def graph_linked_seqs(
    conn: sqlite3.Connection,
    query: str,
    candidate_seqs: Sequence[int],
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    entities: GraphLookup | None = None,
    max_mentions: int | None = None,
) -> GraphLookup:
    """The candidates (memory seqs) linked to the query's entities or their neighbours.

    Args:
        conn: a read connection.
        query: the recall query text.
        candidate_seqs: the merged candidate pool (memory seqs).
        deadline: ``clock()`` value (seconds) after which the lookup stops.
        clock: monotonic clock, seconds (tests pass a fake one).
        entities: steps 1 and 2 already done (:func:`graph_entities`, e.g. while the query was
            embedded); only step 3 runs here.
        max_mentions: see :func:`query_entities`.
    Returns:
        a :class:`GraphLookup`; never raises (an error gives an empty ``seqs`` and ``error``).
    """
    if entities is not None and (entities.error is not None or entities.timed_out or not entities.entity_ids):
        return entities
    out = GraphLookup()
    try:
        if entities is not None:
            out.entity_ids, out.neighbour_ids = list(entities.entity_ids), list(entities.neighbour_ids)
            if not candidate_seqs:
                return out
        else:
            if clock() >= deadline:
                out.timed_out = True
                return out
            out.entity_ids = query_entities(conn, query, max_mentions)
            if not out.entity_ids or not candidate_seqs:
                return out
            if clock() >= deadline:
                out.timed_out = True
                return out
            out.neighbour_ids = graph_sql.neighbours(conn, out.entity_ids, MAX_NEIGHBOURS)
        if clock() >= deadline:
            out.timed_out = True
            return out
        out.seqs = set(graph_sql.linked_seqs(conn, candidate_seqs, out.entity_ids + out.neighbour_ids)[:MAX_MEMORIES])
        if clock() >= deadline:
            # Trigger: step 3 finished past the deadline. Why: the seed returns what it has
            # accumulated with timedOut set. Outcome: the links found are still used.
            out.timed_out = True
        return out
    except Exception as exc:  # additive only: an error means no boost
        log.warning("graph lookup failed: %s", exc)
        return GraphLookup(error=f"{type(exc).__name__}: {exc}"[:300])


def linked_from(
    entities: GraphLookup,
    candidate_seqs: Sequence[int],
    links: dict[int, set[str]],
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> GraphLookup:
    """Step 3 of :func:`graph_linked_seqs` from links already read: the live candidates linked to
    any of ``entities``' entity or neighbour ids, in the order the SQL gives them (ascending seq
    within each chunk of 500 candidates), at most :data:`MAX_MEMORIES`.

    Args:
        entities: steps 1 and 2 (:func:`graph_entities`).
        links: seq -> linked entity ids, for every live candidate (deleted ones absent).
    """
    if entities.error is not None or entities.timed_out or not entities.entity_ids:
        return entities
    out = GraphLookup(list(entities.entity_ids), list(entities.neighbour_ids))
    if not candidate_seqs:
        return out
    if clock() >= deadline:
        out.timed_out = True
        return out
    wanted = set(out.entity_ids) | set(out.neighbour_ids)
    found: list[int] = []
    for start in range(0, len(candidate_seqs), SQL_CHUNK):
        found.extend(
            s for s in sorted(candidate_seqs[start : start + SQL_CHUNK]) if not wanted.isdisjoint(links.get(s, ()))
        )
    out.seqs = set(found[:MAX_MEMORIES])
    return out


def apply_boost(merged: dict[int, tuple[float, Any]], seqs: set[int], weight: float) -> dict[int, tuple[float, Any]]:
    """A copy of ``merged`` (seq -> (hybrid score, leg scores)) with ``weight`` added to the
    score of every seq in ``seqs`` (seed: "IDs in the graph-linked set receive a score
    increment of graphBoostWeight")."""
    if not seqs or weight <= 0:
        return merged
    return {s: ((v[0] + weight, v[1]) if s in seqs else v) for s, v in merged.items()}


class GraphBooster:
    """The recall hook: ``booster(query, merged) -> merged`` (see the module docstring).

    Args:
        db: the database (reads only).
        settings: returns the current ``pipeline_v2.graph`` settings (read per call: hot flags).
        clock: monotonic clock, seconds.
        memory_count: returns the store's memory count, for ``graph.boost_max_share``
            (:func:`specific_mentions`); None: no limit.

    Never raises; disabled, a zero weight, a timeout with nothing found, or an error return
    ``merged`` unchanged. Telemetry: ``calls``, ``boosted`` (calls that boosted something),
    ``timeouts``, ``errors``.
    """

    def __init__(
        self,
        db: Database,
        settings: Callable[[], GraphSettings],
        clock: Callable[[], float] = time.monotonic,
        memory_count: Callable[[], int] | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.memory_count = memory_count
        self._lock = threading.Lock()
        self.counters = {"calls": 0, "boosted": 0, "timeouts": 0, "errors": 0}

    def __call__(self, query: str, merged: dict[int, tuple[float, Any]]) -> dict[int, tuple[float, Any]]:
        return self.boost(query, merged)

    def submit(self, pool: Executor, query: str) -> Future | None:
        """Start steps 1 and 2 (the query's entities and neighbours) on ``pool`` and return the
        future to hand to :meth:`boost` as ``prepared``; None when the boost is off. The deadline
        starts now. Never raises."""
        try:
            g = self.settings()
            if not g.enabled or g.boost_weight <= 0:
                return None
            deadline = self.clock() + g.boost_timeout_ms / 1000.0
            cap = self._max_mentions(g)
            return pool.submit(
                lambda: (
                    deadline,
                    self.db.read(
                        lambda c: graph_entities(c, query, deadline=deadline, clock=self.clock, max_mentions=cap)
                    ),
                )
            )
        except Exception as exc:
            log.warning("graph lookup not started: %s", exc)
            return None

    def boost(
        self,
        query: str,
        merged: dict[int, tuple[float, Any]],
        *,
        timeout_ms: float | None = None,
        prepared: Future | None = None,
        links: dict[int, set[str]] | None = None,
    ) -> dict[int, tuple[float, Any]]:
        """``merged`` with graph-linked candidates boosted.

        Args:
            query: the recall query.
            merged: seq -> (hybrid score, leg scores), from ``recall.hybrid.merge``.
            timeout_ms: the deadline, ms (default ``graph.boost_timeout_ms``); ignored with
                ``prepared`` (its deadline started at :meth:`submit`).
            prepared: the future of :meth:`submit` for this query: only step 3 runs here.
            links: with ``prepared``, seq -> linked entity ids of every live candidate in
                ``merged`` (deleted ones absent), already read: step 3 is
                :func:`linked_from` instead of SQL.
        """
        try:
            g = self.settings()
            if not g.enabled or g.boost_weight <= 0 or not merged:
                return merged
            entities = None
            if prepared is not None:
                deadline, entities = prepared.result()
            else:
                budget_ms = g.boost_timeout_ms if timeout_ms is None else timeout_ms
                deadline = self.clock() + budget_ms / 1000.0
            if entities is not None and links is not None:
                found = linked_from(entities, list(merged), links, deadline=deadline, clock=self.clock)
            else:
                cap = self._max_mentions(g)
                found = self.db.read(
                    lambda c: graph_linked_seqs(
                        c, query, list(merged), deadline=deadline, clock=self.clock, entities=entities, max_mentions=cap
                    )
                )
            self._count(found)
            return apply_boost(merged, found.seqs, g.boost_weight)
        except Exception as exc:  # recall must never fail because of the graph
            log.warning("graph boost skipped: %s", exc)
            with self._lock:
                self.counters["errors"] += 1
            return merged

    def _max_mentions(self, g: GraphSettings) -> int | None:
        if self.memory_count is None:
            return None
        return specific_mentions(self.memory_count(), g.boost_max_share)

    def _count(self, found: GraphLookup) -> None:
        with self._lock:
            self.counters["calls"] += 1
            self.counters["boosted"] += bool(found.seqs)
            self.counters["timeouts"] += found.timed_out
            self.counters["errors"] += found.error is not None

    def telemetry(self) -> dict[str, int]:
        """A copy of the counters."""
        with self._lock:
            return dict(self.counters)


def expand(
    conn: sqlite3.Connection, *, query: str | None = None, entity_id: str | None = None, memory_limit: int = 50
) -> dict[str, Any]:
    """One-hop expansion for the API: the query's entities (or one entity), their neighbours and
    the live memories linked to any of them (newest first, at most ``memory_limit``).

    Returns:
        ``{"entities": [entity dicts], "neighbours": [entity dicts], "memory_ids": [str]}``.
    """
    if entity_id is not None:
        seeds = [entity_id] if graph_sql.get_entity(conn, entity_id) is not None else []
    else:
        seeds = [
            eid for eid, _ in graph_sql.entities_by_canonical(conn, names.query_ngrams(query or ""), MAX_ENTITY_HITS)
        ]
    hop = graph_sql.neighbours(conn, seeds, MAX_NEIGHBOURS) if seeds else []
    by_id = graph_sql.entities_of_ids(conn, seeds + hop)
    mids = graph_sql.memory_ids_of_entities(conn, seeds + hop, memory_limit) if seeds else []
    return {
        "entities": [entity_dict(by_id[i]) for i in seeds if i in by_id],
        "neighbours": [entity_dict(by_id[i]) for i in hop if i in by_id],
        "memory_ids": mids,
    }


def entity_dict(e: graph_sql.Entity) -> dict[str, Any]:
    """JSON view of an entity."""
    return {
        "id": e.id,
        "name": e.name,
        "canonical_name": e.canonical_name,
        "entity_type": e.entity_type,
        "description": e.description,
        "mentions": e.mentions,
        "created_at": e.created_at,
        "updated_at": e.updated_at,
    }
