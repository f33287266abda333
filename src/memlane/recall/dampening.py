"""Post-fusion dampening (memory-pipeline-v2.md "Post-Fusion Dampening").

After the fused (hybrid + hints + graph + boosts) score list, three multiplicative corrections
break score bunching, each behind its flag in ``pipeline_v2.dampening``; results are then re-sorted
by the adjusted score. Every array here is one value per candidate, shape [m].

1. Gravity (``gravity_enabled``): a candidate that arrived by a semantic path only (no BM25 match
   on its content or a hint: vector or graph) with a score above :data:`GRAVITY_MIN_SCORE` (0.3)
   whose content shares zero tokens (lowercased, stop words removed) with the query is
   multiplied by ``gravity_penalty`` (0.5).
2. Hub (``hub_enabled``): entity mention counts (rows of ``memory_entity_mentions`` per entity)
   are sorted and the value at ``floor(n * hub_percentile)`` (P90) is the hub threshold; a
   candidate with at least one linked entity, every one of them above the threshold, is
   multiplied by ``hub_penalty`` (0.7).
3. Resolution (``resolution_enabled``): content under 50 characters gets nothing; type
   ``constraint`` or ``decision`` gets ``resolution_boost`` (1.2); other content with a temporal
   anchor (an ISO date or a month name) gets ``1 + (resolution_boost - 1) * 0.5`` (1.1).

A stage that fails (e.g. the graph tables are unreadable) is skipped: factors of 1.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from memlane.config.pipeline import DampeningSettings
from memlane.storage import hubs as hubs_sql
from memlane.storage.db import Database
from memlane.storage.fts import STOP_WORDS

log = logging.getLogger(__name__)

#: Gravity applies only above this fused score (seed: "a score above 0.3").
GRAVITY_MIN_SCORE = 0.3
#: Content shorter than this (chars) gets no resolution boost (seed: "under 50 characters").
RESOLUTION_MIN_CHARS = 50


class Candidate(Protocol):
    """What the dampening stages read of a candidate memory (a stored memory, a candidate row)."""

    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def content(self) -> str: ...


#: Memory types that get the full resolution boost.
RESOLUTION_TYPES = frozenset({"constraint", "decision"})
#: Seconds the entity degrees and the hub threshold are cached.
HUB_STATS_TTL_S = 60.0

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH = re.compile(r"\b(?:" + "|".join(_MONTH_NAMES) + r")\b")
# "may" is also a verb: the month only next to a number ("May 2024", "3 May", "May 3rd").
_MAY = re.compile(r"\b\d{1,4}(?:st|nd|rd|th)?\s+may\b|\bmay\s+\d{1,4}")


# ------------------------------------------------------------------------------ stage 1
def content_tokens(text: str) -> set[str]:
    """Lowercased word tokens of ``text`` without English stop words (seed: "tokenized
    (lowercase, stop-word stripped)")."""
    return {t for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS}


def gravity_factors(
    query_tokens: set[str], contents: Sequence[str], scores: np.ndarray, lexical: np.ndarray, penalty: float
) -> np.ndarray:
    """Stage 1 factors, float64 [m]: ``penalty`` where the candidate is not lexical, its score
    is above 0.3 and its content shares no token with ``query_tokens``; else 1.

    Args:
        query_tokens: the query's tokens (:func:`content_tokens`); empty: no penalty at all.
        contents: candidate contents, length m.
        scores: fused scores, [m].
        lexical: bool [m], True where the content or a hint matched the query in BM25.
        penalty: gravity_penalty in [0, 1].
    """
    m = len(contents)
    out = np.ones(m, dtype=np.float64)
    if not query_tokens or m == 0:
        return out
    check = ~np.asarray(lexical, dtype=bool) & (np.asarray(scores, dtype=np.float64) > GRAVITY_MIN_SCORE)
    for i in np.flatnonzero(check).tolist():
        if query_tokens.isdisjoint(content_tokens(contents[i])):
            out[i] = penalty
    return out


# ------------------------------------------------------------------------------ stage 2
def hub_threshold(degrees: np.ndarray, percentile: float) -> float:
    """The hub threshold: mention counts sorted ascending, the value at index
    ``min(floor(n * percentile), n - 1)``; +inf when there are no entities."""
    d = np.sort(np.asarray(degrees, dtype=np.float64))
    if d.size == 0:
        return math.inf
    return float(d[min(int(math.floor(d.size * percentile)), d.size - 1)])


def hub_factors(entities: Sequence[set[str]], degrees: dict[str, int], threshold: float, penalty: float) -> np.ndarray:
    """Stage 2 factors, float64 [m]: ``penalty`` where the candidate links at least one entity
    and every linked entity's mention count is above ``threshold``; else 1.

    Args:
        entities: per candidate, its linked entity ids (length m).
        degrees: entity id -> mention count (unknown entities count 0).
    """
    out = np.ones(len(entities), dtype=np.float64)
    for i, ents in enumerate(entities):
        if ents and all(degrees.get(e, 0) > threshold for e in ents):
            out[i] = penalty
    return out


class HubStats:
    """Entity mention counts and the hub threshold, cached :data:`HUB_STATS_TTL_S` seconds.

    Args:
        db: the database (reads ``memory_entity_mentions`` when it exists).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, db: Database, clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self._clock = clock
        self._lock = threading.Lock()
        self._at = -math.inf
        self._degrees: dict[str, int] = {}
        self._sorted = np.zeros(0)
        self._thresholds: dict[float, float] = {}
        self._hubs: dict[float, frozenset[str]] = {}

    def degrees(self) -> tuple[dict[str, int], np.ndarray]:
        """(entity id -> mention count, the counts sorted ascending [n_entities])."""
        with self._lock:
            if self._clock() - self._at > HUB_STATS_TTL_S:
                self._degrees = self.db.read(hubs_sql.entity_degrees)
                self._sorted = np.sort(np.fromiter(self._degrees.values(), dtype=np.float64, count=len(self._degrees)))
                self._thresholds = {}
                self._hubs = {}
                self._at = self._clock()
            return self._degrees, self._sorted

    def threshold(self, percentile: float) -> float:
        """The hub threshold at ``percentile`` (cached with the degrees)."""
        _, counts = self.degrees()
        with self._lock:
            t = self._thresholds.get(percentile)
            if t is None:
                t = self._thresholds[percentile] = hub_threshold(counts, percentile)
            return t

    def factors(
        self, memory_ids: Sequence[str], percentile: float, penalty: float, links: dict[str, set[str]] | None = None
    ) -> np.ndarray:
        """Stage 2 factors, float64 [m], for the given memories.

        Args:
            links: memory id -> linked entity ids, read by the caller for (at least) these
                memories (``hubs_sql.entities_of``); None: read here.
        """
        degrees, _ = self.degrees()
        if not degrees:
            return np.ones(len(memory_ids), dtype=np.float64)
        threshold = self.threshold(percentile)
        if links is None:
            links = self.db.read(lambda c: hubs_sql.entities_of(c, list(memory_ids)))
        if threshold < 0:  # (cannot happen with counts; an unknown entity's 0 would be above it)
            return hub_factors([links.get(i, set()) for i in memory_ids], degrees, threshold, penalty)
        # hub_factors' test as a subset test against the entities above the threshold (cached).
        with self._lock:
            hubs = self._hubs.get(percentile)
            if hubs is None:
                hubs = self._hubs[percentile] = frozenset(e for e, d in degrees.items() if d > threshold)
        out = np.ones(len(memory_ids), dtype=np.float64)
        empty: frozenset[str] = frozenset()
        for i, mid in enumerate(memory_ids):
            ents = links.get(mid, empty)
            if ents and ents <= hubs:
                out[i] = penalty
        return out


# ------------------------------------------------------------------------------ stage 3
def has_temporal_anchor(text: str) -> bool:
    """An ISO date (``2025-03-14``) or a month name (``May`` only next to a number)."""
    # Plain substring tests first (C speed); the regexes only confirm word boundaries.
    if "-" in text and _ISO_DATE.search(text):
        return True
    low = text.lower()
    if any(m in low for m in _MONTH_NAMES) and _MONTH.search(low):
        return True
    return "may" in low and _MAY.search(low) is not None


def resolution_factors(types: Sequence[str], contents: Sequence[str], boost: float) -> np.ndarray:
    """Stage 3 factors, float64 [m]: 1 for content under 50 chars; ``boost`` for types
    constraint/decision; ``1 + (boost - 1) * 0.5`` with a temporal anchor; else 1."""
    out = np.ones(len(contents), dtype=np.float64)
    half = 1.0 + (boost - 1.0) * 0.5
    for i, (t, text) in enumerate(zip(types, contents)):
        if len(text) < RESOLUTION_MIN_CHARS:
            continue
        if t in RESOLUTION_TYPES:
            out[i] = boost
        elif has_temporal_anchor(text):
            out[i] = half
    return out


# ------------------------------------------------------------------------------ pipeline
def max_gain(cfg: DampeningSettings) -> float:
    """The largest factor dampening can apply to one candidate (>= 1): bounds how far a candidate
    outside the dampened pool could rise."""
    return max(1.0, cfg.resolution_boost if cfg.resolution_enabled else 1.0)


def any_enabled(cfg: DampeningSettings) -> bool:
    """Whether any of the three stages is on."""
    return cfg.gravity_enabled or cfg.hub_enabled or cfg.resolution_enabled


#: Contents whose features are cached (cleared when full).
MAX_CACHED_CONTENTS = 100_000


class ContentFeatures:
    """What the stages read of a content, computed once per distinct content string: stage 3's
    ``(len >= RESOLUTION_MIN_CHARS, has_temporal_anchor)`` and stage 1's token set. Keyed by the
    text itself, so an edited memory never reuses its old features. Thread-safe (dict operations).

    Why cache the tokens: testing a candidate against the query's tokens is then one set
    intersection; the alternative, one regex of the query's tokens compiled per recall, cost
    ~0.7 ms per recall at 10,000 memories.
    """

    def __init__(self, max_entries: int = MAX_CACHED_CONTENTS) -> None:
        self.max_entries = max_entries
        self._d: dict[str, tuple[bool, bool]] = {}
        self._tokens: dict[str, frozenset[str]] = {}

    def tokens(self, content: str) -> frozenset[str]:
        """:func:`content_tokens` of ``content``."""
        t = self._tokens.get(content)
        if t is None:
            if len(self._tokens) >= self.max_entries:
                self._tokens.clear()
            t = self._tokens[content] = frozenset(content_tokens(content))
        return t

    def get(self, content: str) -> tuple[bool, bool]:
        """(long enough for the resolution boost, has a temporal anchor) of ``content``."""
        f = self._d.get(content)
        if f is None:
            if len(self._d) >= self.max_entries:
                self._d.clear()
            long = len(content) >= RESOLUTION_MIN_CHARS
            f = self._d[content] = (long, long and has_temporal_anchor(content))
        return f


class Dampener:
    """The three stages over one recall's candidate pool.

    Args:
        db: the database (hub stage reads the entity mentions).
    """

    def __init__(self, db: Database, hub_stats: HubStats | None = None) -> None:
        self.hubs = hub_stats or HubStats(db)
        self.features = ContentFeatures()

    def factors(
        self,
        query: str,
        memories: Sequence[Candidate],
        scores: np.ndarray,
        lexical: np.ndarray,
        cfg: DampeningSettings,
        links: dict[str, set[str]] | None = None,
    ) -> np.ndarray:
        """The product of the enabled stages' factors, float64 [m] (multiply the scores by it).
        Equal to :func:`gravity_factors` x :meth:`HubStats.factors` x :func:`resolution_factors`;
        stages 1 and 3 read :class:`ContentFeatures` (cached token sets and resolution features).

        Args:
            query: the recall query text.
            memories: the candidates (``.id``, ``.type``, ``.content``), length m.
            scores: their fused scores, [m].
            lexical: bool [m], True where the content or a hint matched in BM25.
            links: memory id -> linked entity ids for these memories, already read (hub stage);
                None: the hub stage reads them.
        """
        m = len(memories)
        total = np.ones(m, dtype=np.float64)

        def gravity() -> np.ndarray:
            out = np.ones(m, dtype=np.float64)
            q = content_tokens(query)
            if not q:
                return out
            check = ~np.asarray(lexical, dtype=bool) & (np.asarray(scores, dtype=np.float64) > GRAVITY_MIN_SCORE)
            tokens = self.features.tokens
            for i in np.flatnonzero(check).tolist():
                if q.isdisjoint(tokens(memories[i].content)):
                    out[i] = cfg.gravity_penalty
            return out

        def resolution() -> np.ndarray:
            out = np.ones(m, dtype=np.float64)
            boost = cfg.resolution_boost
            half = 1.0 + (boost - 1.0) * 0.5
            feats = self.features.get
            for i, x in enumerate(memories):
                long, anchored = feats(x.content)
                if long:
                    if x.type in RESOLUTION_TYPES:
                        out[i] = boost
                    elif anchored:
                        out[i] = half
            return out

        stages: list[tuple[str, bool, Callable[[], np.ndarray]]] = [
            ("gravity", cfg.gravity_enabled, gravity),
            (
                "hub",
                cfg.hub_enabled,
                lambda: self.hubs.factors([x.id for x in memories], cfg.hub_percentile, cfg.hub_penalty, links),
            ),
            ("resolution", cfg.resolution_enabled, resolution),
        ]
        for name, on, run in stages:
            if not on or m == 0:
                continue
            # Trigger: one stage raised (graph tables locked or malformed, a bad regex input).
            # Why: recall must never fail because of a correction stage.
            # Outcome: that stage contributes factors of 1; the others still apply.
            try:
                total *= run()
            except Exception as exc:
                log.warning("dampening stage %s skipped: %s", name, exc)
        return total
