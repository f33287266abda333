"""Features of the learned ranker, computed at recall time for a pool of candidates.

One row per candidate, one column per name in :data:`FEATURES` (float32). The same function,
:func:`compute`, serves the daemon's recall and the training set (``memlane train ranker``),
so a model never sees features computed differently from the ones it was trained on. The
schema's identity is :data:`SCHEMA_VERSION` plus the ordered names; a model file carrying
another schema is refused (:mod:`memlane.ranker.model`).

Groups (used by the ablation in ``memlane bench retrieval --ranker learned --ablate``):

* ``retrieval``: each leg's score, its rank in the pool and its gap to the pool's best: the
  hybrid merge, the heuristic final score (after the graph boost, rehearsal/recency boosts and
  dampening), the vector leg as recall merges it, its content-only and context-only cosines,
  the normalised BM25 leg.
* ``lexical``: the share of the query's stemmed terms the memory's own text holds (plain,
  weighted by the terms' rarity among the candidates, and its rank in the pool), the content
  length, and whether the memory asks a question (a chat turn asking is rarely the answer).
* ``entity``: names in the query (capitalised words that do not start it, the inline entity
  linker's notion of a name) against the memory's leading speaker label (``"Name: ..."``, a chat
  turn) and its body. (The graph boost's links are not a feature: off by default, see
  docs/benchmarks.md, and on LoCoMo they are the same capitalised names.)
* ``time``: whether the query asks for a time (``when``, ``what year``...), whether the memory
  holds a time expression (``yesterday``, ``last week``, a month, a year...), its age at ``now``
  and its recency rank in the pool.
* ``cooccurrence``: the candidates written next to this one (seq +- 1, +- 2) and within an hour
  of it: how many there are, how well they score, how much of the query the previous and next
  one hold, their content cosine and speaker match, whether the previous one asks a question
  (a turn's neighbours in a conversation: an answer follows its question).
* ``query``: the question word and the query's length in words.

Memory type, importance, access counts and feedback are not features: the public training data
(LoCoMo) holds none of them, so a model trained on it could not learn what they mean.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memlane.lru import LRUCache
from memlane.predictor.coverage import QueryCoverage

#: Version of the feature schema (bump when a feature's meaning changes).
SCHEMA_VERSION = 2

#: Feature name -> group, in column order.
FEATURE_GROUPS: dict[str, str] = {
    "hybrid": "retrieval",
    "hybrid_rank": "retrieval",
    "hybrid_gap": "retrieval",
    "hybrid_z": "retrieval",
    "final": "retrieval",
    "final_rank": "retrieval",
    "final_gap": "retrieval",
    "vector": "retrieval",
    "vector_rank": "retrieval",
    "vector_gap": "retrieval",
    "vector_content": "retrieval",
    "vector_content_rank": "retrieval",
    "vector_content_gap": "retrieval",
    "vector_context": "retrieval",
    "bm25": "retrieval",
    "bm25_rank": "retrieval",
    "bm25_gap": "retrieval",
    "coverage": "lexical",
    "coverage_idf": "lexical",
    "coverage_rank": "lexical",
    "coverage_rel": "lexical",
    "log_chars": "lexical",
    "is_question": "lexical",
    "query_names": "entity",
    "speaker_match": "entity",
    "speaker_other": "entity",
    "names_in_body": "entity",
    "query_temporal": "time",
    "memory_time_expr": "time",
    "log_age_days": "time",
    "recency_rank": "time",
    "prev_hybrid": "cooccurrence",
    "next_hybrid": "cooccurrence",
    "near2_max": "cooccurrence",
    "prev_coverage": "cooccurrence",
    "next_coverage": "cooccurrence",
    "prev_is_question": "cooccurrence",
    "prev_vector_content": "cooccurrence",
    "next_vector_content": "cooccurrence",
    "prev_speaker_match": "cooccurrence",
    "next_speaker_match": "cooccurrence",
    "hour_count": "cooccurrence",
    "hour_sum": "cooccurrence",
    "question_word": "query",
    "query_words": "query",
}
#: Column names, in order.
FEATURES: tuple[str, ...] = tuple(FEATURE_GROUPS)
#: Columns LightGBM treats as categorical.
CATEGORICAL: tuple[str, ...] = ("question_word",)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(FEATURE_GROUPS.values()))

#: question_word codes (first matching word of the query).
QUESTION_WORDS: dict[str, int] = {
    "what": 1,
    "when": 2,
    "where": 3,
    "who": 4,
    "whom": 4,
    "whose": 4,
    "why": 5,
    "how": 6,
    "which": 7,
    "did": 8,
    "does": 8,
    "do": 8,
    "is": 8,
    "are": 8,
    "was": 8,
    "were": 8,
    "has": 8,
    "have": 8,
    "had": 8,
    "can": 8,
    "could": 8,
    "would": 8,
    "will": 8,
    "should": 8,
}

#: Memory texts whose derived fields are cached (least recently used dropped first).
MAX_CACHED = 20_000
#: Seconds within which two candidates count as written together (``hour_*``).
WINDOW_S = 3600.0

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")
_SPEAKER = re.compile(r"^\s*([A-Z][\w'.\-]*(?: [A-Z][\w'.\-]*){0,2}):\s")
_TEMPORAL_QUERY = re.compile(
    r"\b(?:when|what (?:year|month|day|date|time|week)|which (?:year|month|day|date|week)|how long|"
    r"how many (?:years|months|weeks|days)|since when|what age|date)\b",
    re.IGNORECASE,
)
_MONTHS = (
    "january|february|march|april|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_TIME_EXPR = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|recently|ago|last (?:night|week|month|year|weekend|time|summer|"
    r"winter|spring|fall|friday|saturday|sunday|monday|tuesday|wednesday|thursday)|next (?:week|month|year|"
    r"weekend)|this (?:week|month|year|weekend|morning|afternoon|evening|summer|winter|spring|fall)|"
    r"(?:a|one|two|three|few|couple of) (?:days?|weeks?|months?|years?)|weekend|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"(?:19|20)\d\d|" + _MONTHS + r")\b",
    re.IGNORECASE,
)
#: Capitalised words that are not names when they appear in a query.
_NOT_NAMES = frozenset(
    [
        "i",
        "what",
        "when",
        "where",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "which",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "can",
        "could",
        "would",
        "will",
        "should",
        "the",
        "a",
        "an",
        "in",
        "on",
        "at",
        "of",
        "for",
        "to",
        "and",
        "or",
        "but",
        "if",
        "this",
        "that",
        "these",
        "those",
        "my",
        "your",
        "his",
        "her",
        "their",
        "our",
        "its",
        "it",
        "he",
        "she",
        "they",
        "we",
        "you",
        "me",
        "him",
        "them",
        "us",
    ]
)


def query_names(query: str) -> list[str]:
    """Lowercased names in ``query``: capitalised words other than the first word and common
    function words, in order, distinct (``"What did Caroline tell Mel?" -> ["caroline", "mel"]``)."""
    words = _WORD.findall(query)
    out: dict[str, None] = {}
    for i, w in enumerate(words):
        base = w.split("'")[0]
        if i == 0 or not base or not base[0].isupper() or base.lower() in _NOT_NAMES or len(base) < 2:
            continue
        out.setdefault(base.lower(), None)
    return list(out)


def speaker_of(content: str) -> str | None:
    """The leading speaker label of a chat turn (``"Caroline: hi" -> "caroline"``), lowercased;
    None without one."""
    m = _SPEAKER.match(content)
    return m.group(1).lower() if m else None


def question_word(query: str) -> int:
    """The :data:`QUESTION_WORDS` code of the query's first question word (0: none)."""
    for w in _WORD.findall(query.lower())[:6]:
        code = QUESTION_WORDS.get(w)
        if code is not None:
            return code
    return 0


@dataclass(frozen=True, slots=True)
class _Derived:
    """What the features need of a memory's text, computed once per text."""

    speaker: str | None
    body_words: frozenset[str]
    time_expr: bool
    log_chars: float
    question: bool


class TextCache:
    """Derived fields of memory texts, bounded LRU, thread-safe; the stemmed term sets come
    from the predictor's :class:`~memlane.predictor.coverage.QueryCoverage` (SQLite's FTS5
    tokenizer, the one the BM25 leg indexes with)."""

    def __init__(self, max_cached: int = MAX_CACHED) -> None:
        self.coverage = QueryCoverage(max_cached)
        self._items: LRUCache[str, _Derived] = LRUCache(max(1, int(max_cached)))

    def derived(self, texts: Sequence[str]) -> list[_Derived]:
        """The derived fields of each text, in order."""
        out: list[_Derived] = []
        for t in texts:
            d = self._items.get(t)
            if d is None:
                speaker = speaker_of(t)
                body = t[t.index(":") + 1 :] if speaker is not None else t
                d = _Derived(
                    speaker,
                    frozenset(w.lower() for w in _WORD.findall(body)),
                    _TIME_EXPR.search(t) is not None,
                    math.log1p(len(t)),
                    "?" in body,
                )
                self._items.put(t, d)
            out.append(d)
        return out

    def close(self) -> None:
        """Release the tokenizer's in-memory database."""
        self.coverage.close()


@dataclass
class Pool:
    """A recall's candidate pool, in the heuristic order (best first), one entry per candidate.

    Attributes:
        seqs: memory seqs [m].
        contents: their texts [m].
        hybrid: the merged leg score before any boost [m].
        final: the heuristic final score (graph boost, rehearsal/recency boosts, dampening) [m].
        vector: the vector leg as merged (content and context mixed), NaN where it did not run [m].
        vector_content, vector_context: content-only and context-only cosines, NaN where missing [m].
        bm25: the normalised BM25 leg, 0 where it did not match, NaN where it did not run [m].
        created: creation times, epoch seconds [m].
        now: the recall's reference time, epoch seconds.
    """

    seqs: list[int]
    contents: list[str]
    hybrid: np.ndarray
    final: np.ndarray
    vector: np.ndarray
    vector_content: np.ndarray
    vector_context: np.ndarray
    bm25: np.ndarray
    created: np.ndarray
    now: float

    def __len__(self) -> int:
        return len(self.seqs)


def _rank(values: np.ndarray) -> np.ndarray:
    """0-based rank of each value, highest first (NaN last), ties by position; float32."""
    v = np.where(np.isnan(values), -np.inf, values)
    order = np.argsort(-v, kind="stable")
    r = np.empty(len(v), dtype=np.float32)
    r[order] = np.arange(len(v), dtype=np.float32)
    return r


def _gap(values: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(values)
    if not ok.any():
        return np.full(len(values), np.nan, dtype=np.float32)
    return (np.nanmax(values) - values).astype(np.float32)


def compute(query: str, pool: Pool, cache: TextCache) -> np.ndarray:
    """Feature matrix float32 [len(pool), len(FEATURES)] (columns in :data:`FEATURES` order).

    Missing values are NaN (LightGBM routes them). Raises nothing for any query text.
    """
    m = len(pool)
    out = np.full((m, len(FEATURES)), np.nan, dtype=np.float32)
    if m == 0:
        return out
    col = {name: i for i, name in enumerate(FEATURES)}

    def put(name: str, values: npt.ArrayLike) -> None:
        out[:, col[name]] = values

    hybrid = np.asarray(pool.hybrid, dtype=np.float64)
    final = np.asarray(pool.final, dtype=np.float64)
    vector = np.asarray(pool.vector, dtype=np.float64)
    bm25 = np.asarray(pool.bm25, dtype=np.float64)
    # retrieval
    put("hybrid", hybrid)
    put("hybrid_rank", _rank(hybrid))
    put("hybrid_gap", _gap(hybrid))
    sd = float(np.std(hybrid))
    put("hybrid_z", (hybrid - hybrid.mean()) / sd if sd > 0 else 0.0)
    put("final", final)
    put("final_rank", np.arange(m, dtype=np.float32))
    put("final_gap", _gap(final))
    put("vector", vector)
    put("vector_rank", _rank(vector))
    put("vector_gap", _gap(vector))
    put("vector_content", pool.vector_content)
    v_content = np.nan_to_num(np.asarray(pool.vector_content, dtype=np.float64))  # no vector: 0
    put("vector_content_rank", _rank(np.asarray(pool.vector_content, dtype=np.float64)))
    put("vector_content_gap", v_content - v_content.max())
    put("vector_context", pool.vector_context)
    put("bm25", bm25)
    matched = np.where(np.isnan(bm25), 0.0, bm25) > 0
    bm_rank = _rank(np.where(matched, bm25, np.nan))
    put("bm25_rank", np.where(matched, bm_rank, np.nan))
    put("bm25_gap", _gap(bm25))
    # lexical
    cov = cache.coverage
    q_terms = cov.query_terms(query)
    terms = cov.terms(pool.contents)
    derived = cache.derived(pool.contents)
    coverage = np.zeros(m)
    if q_terms:
        held = [q_terms & s for s in terms]  # the query terms each memory holds
        df = dict.fromkeys(q_terms, 0)
        for h in held:
            for t in h:
                df[t] += 1
        w = {t: math.log((m + 1.0) / (df[t] + 0.5)) for t in q_terms}
        total = sum(w.values())
        coverage = np.array([len(h) / len(q_terms) for h in held])
        put("coverage_idf", [sum(w[t] for t in h) / total if total > 0 else 0.0 for h in held])
    else:
        put("coverage_idf", 0.0)
    put("coverage", coverage)
    put("coverage_rank", _rank(coverage))
    put("coverage_rel", coverage / (coverage.max() if coverage.max() > 0 else 1.0))
    put("log_chars", [d.log_chars for d in derived])
    put("is_question", [float(d.question) for d in derived])
    # entity
    names = query_names(query)
    name_set = set(names)
    put("query_names", len(names))
    speaker_match = np.array(
        [
            np.nan if d.speaker is None else float(d.speaker.split()[0] in name_set or d.speaker in name_set)
            for d in derived
        ]
    )
    put("speaker_match", speaker_match)
    put(
        "speaker_other",
        [
            np.nan
            if d.speaker is None or not names
            else float(not (d.speaker.split()[0] in name_set or d.speaker in name_set))
            for d in derived
        ],
    )
    put("names_in_body", [len(name_set & d.body_words) / len(names) if names else np.nan for d in derived])
    # time
    put("query_temporal", float(_TEMPORAL_QUERY.search(query) is not None))
    put("memory_time_expr", [float(d.time_expr) for d in derived])
    created = np.asarray(pool.created, dtype=np.float64)
    put("log_age_days", np.log1p(np.maximum(pool.now - created, 0.0) / 86400.0))
    put("recency_rank", _rank(created) / m)
    # co-occurrence: candidates written next to each other (seq) or within an hour
    seq = np.asarray(pool.seqs, dtype=np.int64)
    order = np.argsort(seq, kind="stable")
    sorted_seq, sorted_h = seq[order], hybrid[order]

    sorted_cov = coverage[order]

    def at(offset: int, values: np.ndarray) -> np.ndarray:  # value of the candidate with seq + offset, 0 if none
        i = np.minimum(np.searchsorted(sorted_seq, seq + offset), m - 1)
        return np.where(sorted_seq[i] == seq + offset, values[i], 0.0)

    near = {d: at(d, sorted_h) for d in (-2, -1, 1, 2)}
    put("prev_hybrid", near[-1])
    put("next_hybrid", near[1])
    put("near2_max", np.maximum.reduce(list(near.values())))
    put("prev_coverage", at(-1, sorted_cov))
    put("next_coverage", at(1, sorted_cov))

    def nb(offset: int, values: np.ndarray) -> np.ndarray:  # as at(), NaN when no such candidate
        i = np.minimum(np.searchsorted(sorted_seq, seq + offset), m - 1)
        return np.where(sorted_seq[i] == seq + offset, values[order][i], np.nan)

    put("prev_is_question", nb(-1, np.array([float(d.question) for d in derived])))
    put("prev_vector_content", nb(-1, v_content))
    put("next_vector_content", nb(1, v_content))
    put("prev_speaker_match", nb(-1, speaker_match))
    put("next_speaker_match", nb(1, speaker_match))
    close = np.abs(created[:, None] - created[None, :]) <= WINDOW_S
    np.fill_diagonal(close, False)
    put("hour_count", close.sum(axis=1))
    put("hour_sum", close @ hybrid)
    # query form
    put("question_word", question_word(query))
    put("query_words", len(_WORD.findall(query)))
    return out


def group_columns(groups: Sequence[str]) -> list[int]:
    """Column indices of the features in ``groups`` (names from :data:`GROUPS`).

    Raises:
        ValueError: an unknown group name.
    """
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown feature group(s) {unknown}; known: {list(GROUPS)}")
    return [i for i, name in enumerate(FEATURES) if FEATURE_GROUPS[name] in groups]
