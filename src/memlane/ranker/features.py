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
  holds a time expression (``yesterday``, ``last week``, a month, a year...), its age at ``now``,
  its recency rank in the pool, and whether its creation date falls in the year / month the
  query names (``"in May 2023"``; NaN when the query names none).
* ``cooccurrence``: the candidates written next to this one (seq +- 1, +- 2) and within an hour
  of it: how many there are, how well they score, how much of the query the previous and next
  one hold, their content cosine and speaker match, whether the previous one asks a question
  (a turn's neighbours in a conversation: an answer follows its question), and how much of
  the query the memory and its neighbours in the pool hold together (an answer spans turns).
* ``session``: the candidates written within an hour of this one (a chat session's turns):
  their best merged score and this one's gap to it, its rank among them, their best query
  coverage and how many there are (the session's evidence lifts its turns).
* ``second_hop``: pseudo-relevance feedback for questions whose evidence shares few words with
  the question: the content cosine to the centroid of the pool's five best (merged score)
  content vectors and its rank, and the share of the feedback terms (stemmed terms two or more
  of those five hold, outside the query) the memory holds.
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
SCHEMA_VERSION = 3

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
    "date_match": "time",
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
    "near_coverage": "cooccurrence",
    "session_best": "session",
    "session_best_gap": "session",
    "session_rank": "session",
    "session_coverage_max": "session",
    "session_count": "session",
    "feedback_cosine": "second_hop",
    "feedback_cosine_rank": "second_hop",
    "feedback_terms": "second_hop",
    "question_word": "query",
    "query_words": "query",
}
#: Column names, in order.
FEATURES: tuple[str, ...] = tuple(FEATURE_GROUPS)
_COLUMN = {name: i for i, name in enumerate(FEATURES)}
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
#: Seconds within which two candidates count as written together (``hour_*``, ``session_*``).
WINDOW_S = 3600.0
#: The pool's best candidates (merged score) whose content vectors and terms are the
#: pseudo-relevance feedback of ``second_hop``.
FEEDBACK_TOP = 5
#: A stemmed term is a feedback term when this many of the FEEDBACK_TOP hold it.
FEEDBACK_MIN_DOCS = 2

_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
#: English month names, January first (the LoCoMo session dates and the queries' months).
MONTH_NAMES: tuple[str, ...] = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_NUMBER = {name: i for i, name in enumerate(MONTH_NAMES, start=1)}
# "may" is a month only capitalised ("in May"; "what may ..." is not)
_QUERY_MONTH = re.compile(r"\b(" + "|".join(m for m in _MONTH_NUMBER if m != "may") + r"|(?-i:May))\b", re.IGNORECASE)

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")
_SPEAKER = re.compile(r"^\s*([A-Z][\w'.\-]*(?: [A-Z][\w'.\-]*){0,2}):\s")
_TEMPORAL_QUERY = re.compile(
    r"\b(?:when|what (?:year|month|day|date|time|week)|which (?:year|month|day|date|week)|how long|"
    r"how many (?:years|months|weeks|days)|since when|what age|date)\b",
    re.IGNORECASE,
)
# "may" is left out of time expressions: as a word it is mostly the verb.
_MONTHS = "|".join([m for m in MONTH_NAMES if m != "may"] + [m[:3] for m in MONTH_NAMES if m != "may"] + ["sept"])
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
    terms: frozenset[str]  # stemmed, as QueryCoverage.terms


class TextCache:
    """Derived fields of memory texts, bounded LRU, thread-safe; the stemmed term sets come
    from the predictor's :class:`~memlane.predictor.coverage.QueryCoverage` (SQLite's FTS5
    tokenizer, the one the BM25 leg indexes with)."""

    def __init__(self, max_cached: int = MAX_CACHED) -> None:
        self.coverage = QueryCoverage(max_cached)
        self._items: LRUCache[str, _Derived] = LRUCache(max(1, int(max_cached)))

    def derived(self, texts: Sequence[str]) -> list[_Derived]:
        """The derived fields of each text, in order (the texts not cached tokenised in one batch)."""
        out = [self._items.get(t) for t in texts]
        missing = [t for t, d in zip(texts, out) if d is None]
        if not missing:
            return out  # type: ignore[return-value]
        made: dict[str, _Derived] = {}
        unique = list(dict.fromkeys(missing))
        for t, terms in zip(unique, self.coverage.terms(unique)):
            speaker = speaker_of(t)
            body = t[t.index(":") + 1 :] if speaker is not None else t
            made[t] = _Derived(
                speaker,
                frozenset(w.lower() for w in _WORD.findall(body)),
                _TIME_EXPR.search(t) is not None,
                math.log1p(len(t)),
                "?" in body,
                terms,
            )
            self._items.put(t, made[t])
        return [d if d is not None else made[t] for d, t in zip(out, texts)]

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
        content_vectors: content embeddings float32 [m, d], zero rows where a memory has none
            (None: no vectors; the ``second_hop`` cosines are then NaN).
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
    content_vectors: np.ndarray | None = None

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

    def put(name: str, values: npt.ArrayLike) -> None:
        out[:, _COLUMN[name]] = values

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
    derived = cache.derived(pool.contents)
    terms = [d.terms for d in derived]
    # hold[i, j]: memory i holds the query's j-th term (the set's iteration order)
    q_list = list(q_terms)
    n_q = len(q_list)
    hold = np.array([[t in s for t in q_list] for s in terms], dtype=bool).reshape(m, n_q)
    held_count = hold.sum(axis=1)
    coverage = np.zeros(m)
    if q_terms:
        df = hold.sum(axis=0).tolist()
        w = [math.log((m + 1.0) / (df[j] + 0.5)) for j in range(n_q)]
        total = sum(w)
        coverage = held_count / n_q
        put("coverage_idf", hold @ np.array(w) / total if total > 0 else 0.0)
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
    # a speaker label naming none of the query's names (NaN without a label or without names)
    put("speaker_other", 1.0 - speaker_match if names else np.nan)
    put("names_in_body", [len(name_set & d.body_words) / len(names) if names else np.nan for d in derived])
    # time
    put("query_temporal", float(_TEMPORAL_QUERY.search(query) is not None))
    put("memory_time_expr", [float(d.time_expr) for d in derived])
    created = np.asarray(pool.created, dtype=np.float64)
    put("log_age_days", np.log1p(np.maximum(pool.now - created, 0.0) / 86400.0))
    put("recency_rank", _rank(created) / m)
    put("date_match", _date_match(query, created))
    # co-occurrence: candidates written next to each other (seq) or within an hour
    seq = np.asarray(pool.seqs, dtype=np.int64)
    order = np.argsort(seq, kind="stable")
    sorted_seq = seq[order]
    # for each offset: where the candidate with seq + offset sits in the pool (original order)
    # and whether there is one
    hit: dict[int, np.ndarray] = {}
    where: dict[int, np.ndarray] = {}
    for d in (-2, -1, 1, 2):
        i = np.minimum(np.searchsorted(sorted_seq, seq + d), m - 1)
        hit[d] = sorted_seq[i] == seq + d
        where[d] = order[i]

    def at(offset: int, values: np.ndarray) -> np.ndarray:  # value of the candidate with seq + offset, 0 if none
        return np.where(hit[offset], values[where[offset]], 0.0)

    def nb(offset: int, values: np.ndarray) -> np.ndarray:  # as at(), NaN when no such candidate
        return np.where(hit[offset], values[where[offset]], np.nan)

    near = {d: at(d, hybrid) for d in (-2, -1, 1, 2)}
    put("prev_hybrid", near[-1])
    put("next_hybrid", near[1])
    put("near2_max", np.maximum.reduce(list(near.values())))
    put("prev_coverage", at(-1, coverage))
    put("next_coverage", at(1, coverage))
    put("prev_is_question", nb(-1, np.array([float(d.question) for d in derived])))
    put("prev_vector_content", nb(-1, v_content))
    put("next_vector_content", nb(1, v_content))
    put("prev_speaker_match", nb(-1, speaker_match))
    put("next_speaker_match", nb(1, speaker_match))
    close = np.abs(created[:, None] - created[None, :]) <= WINDOW_S
    np.fill_diagonal(close, False)
    put("hour_count", close.sum(axis=1))
    put("hour_sum", close @ hybrid)
    put("near_coverage", _near_coverage(hold, hit, where))
    # session: the candidates within the hour, this one included
    np.fill_diagonal(close, True)
    best = np.where(close, hybrid[None, :], -np.inf).max(axis=1)
    put("session_best", best)
    put("session_best_gap", best - hybrid)
    put("session_rank", (close & (hybrid[None, :] > hybrid[:, None])).sum(axis=1))
    put("session_coverage_max", np.where(close, coverage[None, :], 0.0).max(axis=1))
    put("session_count", close.sum(axis=1))
    # second hop: pseudo-relevance feedback from the pool's best candidates
    top = np.argsort(-hybrid, kind="stable")[:FEEDBACK_TOP]
    if pool.content_vectors is not None and len(pool.content_vectors) == m:
        cosine = _feedback_cosine(np.asarray(pool.content_vectors, dtype=np.float32), top)
        put("feedback_cosine", cosine)
        put("feedback_cosine_rank", np.where(np.isnan(cosine), np.nan, _rank(cosine)))
    put("feedback_terms", _feedback_terms(q_terms, terms, top))
    # query form
    put("question_word", question_word(query))
    put("query_words", len(_WORD.findall(query)))
    return out


def _date_match(query: str, created: np.ndarray) -> np.ndarray | float:
    """1.0 where the creation date (UTC) falls in a year and a month the query names (either
    alone when it names only one), 0.0 elsewhere; NaN when it names neither."""
    years = {int(y) for y in _YEAR.findall(query)}
    months = {_MONTH_NUMBER[x.lower()] for x in _QUERY_MONTH.findall(query)}
    if not years and not months:
        return math.nan
    dates = created.astype("datetime64[s]")
    year = dates.astype("datetime64[Y]").astype(np.int64) + 1970
    month = dates.astype("datetime64[M]").astype(np.int64) % 12 + 1
    ok = np.ones(len(created), dtype=bool)
    if years:
        ok &= np.isin(year, list(years))
    if months:
        ok &= np.isin(month, list(months))
    return ok.astype(np.float32)


def _near_coverage(hold: np.ndarray, hit: dict[int, np.ndarray], where: dict[int, np.ndarray]) -> np.ndarray:
    """Share of the query's terms the memory and the pool's candidates at seq - 1 and seq + 1
    hold together, float64 [m] (``hold``: bool [m, query terms], which query terms each
    candidate holds; ``hit[d]`` / ``where[d]``: whether the candidate at seq + d is in the pool
    and its index; 0 without terms)."""
    m, n_q = hold.shape
    if not n_q:
        return np.zeros(m)
    together = hold | (hold[where[-1]] & hit[-1][:, None]) | (hold[where[1]] & hit[1][:, None])
    return together.sum(axis=1) / n_q


def _feedback_cosine(vectors: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Cosine of each content vector [m, d] with the normalised centroid of the ``top`` rows
    that have one; NaN for rows without a vector, all NaN when no top row has one."""
    has = np.abs(vectors).sum(axis=1) > 0
    picked = [i for i in top.tolist() if has[i]]
    out = np.full(len(vectors), np.nan)
    if not picked:
        return out
    centroid = vectors[picked].astype(np.float64).mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    if norm == 0.0:
        return out
    out[has] = vectors[has].astype(np.float64) @ (centroid / norm)
    return out


def _feedback_terms(
    q_terms: frozenset[str] | set[str], terms: Sequence[frozenset[str]], top: np.ndarray
) -> list[float] | float:
    """Share of the feedback terms (held by FEEDBACK_MIN_DOCS or more of the ``top`` memories,
    not in the query) each memory holds; NaN when there are none."""
    counts: dict[str, int] = {}
    for i in top.tolist():
        for t in terms[i] - q_terms:
            counts[t] = counts.get(t, 0) + 1
    feedback = {t for t, n in counts.items() if n >= FEEDBACK_MIN_DOCS}
    if not feedback:
        return math.nan
    return [len(feedback & t) / len(feedback) for t in terms]


def group_columns(groups: Sequence[str]) -> list[int]:
    """Column indices of the features in ``groups`` (names from :data:`GROUPS`).

    Raises:
        ValueError: an unknown group name.
    """
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown feature group(s) {unknown}; known: {list(GROUPS)}")
    return [i for i, name in enumerate(FEATURES) if FEATURE_GROUPS[name] in groups]
