"""The learned ranker's features (memlane.ranker.features), each on hand-made pools, and the pool
recall hands the ranker on a real store."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memlane.ranker import features as F
from memlane.services.inputs import RecallQuery, RememberInput

NOW = 1_700_000_000.0
DAY = 86_400.0


def pool(
    contents: list[str],
    *,
    hybrid=None,
    final=None,
    vector=None,
    bm25=None,
    seqs=None,
    created=None,
    v_content=None,
    v_context=None,
) -> F.Pool:
    m = len(contents)
    arr = lambda v, d: np.asarray(v if v is not None else d, dtype=np.float64)  # noqa: E731
    return F.Pool(
        seqs=list(seqs if seqs is not None else range(1, m + 1)),
        contents=contents,
        hybrid=arr(hybrid, np.linspace(0.9, 0.1, m)),
        final=arr(final, np.linspace(0.9, 0.1, m)),
        vector=arr(vector, np.linspace(0.8, 0.2, m)),
        vector_content=arr(v_content, [np.nan] * m),
        vector_context=arr(v_context, [np.nan] * m),
        bm25=arr(bm25, [0.0] * m),
        created=arr(created, [NOW - DAY] * m),
        now=NOW,
    )


@pytest.fixture
def cache():
    c = F.TextCache()
    yield c
    c.close()


def col(x: np.ndarray, name: str) -> list[float]:
    return x[:, F.FEATURES.index(name)].tolist()


def test_schema_is_named_grouped_and_versioned() -> None:
    assert len(F.FEATURES) == len(set(F.FEATURES)) and F.SCHEMA_VERSION >= 1
    assert set(F.FEATURE_GROUPS.values()) == set(F.GROUPS)
    assert F.group_columns(["query"]) == [F.FEATURES.index("question_word"), F.FEATURES.index("query_words")]
    with pytest.raises(ValueError, match="unknown feature group"):
        F.group_columns(["nope"])


def test_retrieval_scores_ranks_and_gaps(cache) -> None:
    x = F.compute(
        "tea",
        pool(
            ["a", "b", "c"],
            hybrid=[0.5, 0.9, 0.7],
            final=[0.95, 0.9, 0.7],
            vector=[0.2, np.nan, 0.6],
            bm25=[0.0, 1.0, 0.5],
        ),
        cache,
    )
    assert col(x, "hybrid") == pytest.approx([0.5, 0.9, 0.7])
    assert col(x, "hybrid_rank") == [2, 0, 1]
    assert col(x, "hybrid_gap") == pytest.approx([0.4, 0.0, 0.2])
    z = (np.array([0.5, 0.9, 0.7]) - 0.7) / np.std([0.5, 0.9, 0.7])
    assert col(x, "hybrid_z") == pytest.approx(z.tolist(), rel=1e-5)
    assert col(x, "final_rank") == [0, 1, 2]  # the pool comes in heuristic order
    assert col(x, "final_gap") == pytest.approx([0.0, 0.05, 0.25])
    assert col(x, "vector_rank") == [1, 2, 0]  # the missing score ranks last
    assert math.isnan(col(x, "vector")[1]) and col(x, "vector_gap")[0] == pytest.approx(0.4)
    assert col(x, "bm25_rank")[1:] == [0, 1] and math.isnan(col(x, "bm25_rank")[0])  # no match: no rank
    assert col(x, "final") == pytest.approx([0.95, 0.9, 0.7])
    assert col(x, "bm25") == pytest.approx([0.0, 1.0, 0.5]) and col(x, "bm25_gap") == pytest.approx([1.0, 0.0, 0.5])


def test_content_and_context_cosines_pass_through(cache) -> None:
    x = F.compute("q", pool(["a", "b"], v_content=[0.3, 0.4], v_context=[np.nan, 0.9]), cache)
    assert col(x, "vector_content") == pytest.approx([0.3, 0.4])
    assert math.isnan(col(x, "vector_context")[0]) and col(x, "vector_context")[1] == pytest.approx(0.9)


def test_coverage_counts_stemmed_query_terms_in_the_memory_itself(cache) -> None:
    x = F.compute("painting sunsets lakes", pool(["I painted a sunset", "lakes", "nothing here"]), cache)
    assert col(x, "coverage") == pytest.approx([2 / 3, 1 / 3, 0.0])
    # rarer terms weigh more: "lake" is in one memory, as are "paint" and "sunset"
    idf = [col(x, "coverage_idf")[i] for i in range(3)]
    assert idf[0] == pytest.approx(2 / 3) and idf[2] == 0.0
    x = F.compute("paint lake", pool(["paint", "paint", "lake"]), cache)
    assert col(x, "coverage_idf")[2] > col(x, "coverage_idf")[0]  # "lake" rarer than "paint"
    assert col(x, "log_chars") == pytest.approx([math.log1p(5), math.log1p(5), math.log1p(4)])


def test_query_names_and_speaker_labels() -> None:
    assert F.query_names("What did Caroline tell Mel about the LGBTQ group?") == ["caroline", "mel", "lgbtq"]
    assert F.query_names("When did she go?") == []
    assert F.speaker_of("Caroline: hi there") == "caroline"
    assert F.speaker_of("Jean Luc: ok") == "jean luc"
    assert F.speaker_of("no label: here") is None and F.speaker_of("Caroline said hi") is None


def test_entity_overlap_speaker_and_body(cache) -> None:
    contents = ["Caroline: I went to the group", "Melanie: Caroline was there too", "a note without speaker"]
    x = F.compute("What did Caroline do at the group?", pool(contents), cache)
    assert col(x, "query_names") == [1, 1, 1]
    assert col(x, "speaker_match")[:2] == [1.0, 0.0] and math.isnan(col(x, "speaker_match")[2])
    assert col(x, "speaker_other")[:2] == [0.0, 1.0]
    assert col(x, "names_in_body") == [0.0, 1.0, 0.0]  # the label is not the body
    x = F.compute("what happened at the group?", pool(contents), cache)
    assert all(math.isnan(v) for v in col(x, "names_in_body") + col(x, "speaker_other"))


def test_time_expressions_in_query_and_memory(cache) -> None:
    contents = [
        "I went there yesterday",
        "We met last week at noon",
        "It was in May 2023",
        "I like tea",
        "in three months",
        "see you next weekend",
        "the market sells bread",
    ]
    x = F.compute("When did she go to the museum?", pool(contents), cache)
    assert col(x, "query_temporal") == [1.0] * 7
    assert col(x, "memory_time_expr") == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    for q in ("What year did he move?", "How long has she painted?", "which month was it"):
        assert col(F.compute(q, pool(["x"]), cache), "query_temporal") == [1.0]
    assert col(F.compute("What does she paint?", pool(["x"]), cache), "query_temporal") == [0.0]


def test_age_and_recency_rank(cache) -> None:
    x = F.compute("q", pool(["a", "b", "c"], created=[NOW - 10 * DAY, NOW, NOW + DAY]), cache)
    assert col(x, "log_age_days") == pytest.approx([math.log1p(10), 0.0, 0.0])  # future counts as now
    assert col(x, "recency_rank") == pytest.approx([2 / 3, 1 / 3, 0.0])


def test_cooccurrence_of_neighbours_in_seq_and_time(cache) -> None:
    x = F.compute(
        "q",
        pool(
            ["a", "b", "c", "d"],
            seqs=[10, 11, 13, 40],
            hybrid=[0.9, 0.5, 0.3, 0.2],
            created=[NOW, NOW + 60, NOW + 120, NOW + 10 * DAY],
        ),
        cache,
    )
    assert col(x, "prev_hybrid") == pytest.approx([0.0, 0.9, 0.0, 0.0])
    assert col(x, "next_hybrid") == pytest.approx([0.5, 0.0, 0.0, 0.0])
    assert col(x, "near2_max") == pytest.approx([0.5, 0.9, 0.5, 0.0])  # 13 is two after 11
    assert col(x, "hour_count") == [2, 2, 2, 0]
    assert col(x, "hour_sum") == pytest.approx([0.8, 1.2, 1.4, 0.0])


def test_query_form(cache) -> None:
    assert F.question_word("When did it happen?") == F.QUESTION_WORDS["when"]
    assert F.question_word("Did Mel paint?") == F.QUESTION_WORDS["did"]
    assert F.question_word("tea preferences") == 0
    x = F.compute("Where is the deploy script kept?", pool(["x"]), cache)
    assert col(x, "question_word") == [F.QUESTION_WORDS["where"]] and col(x, "query_words") == [6]


def test_empty_pool_and_any_query(cache) -> None:
    assert F.compute("q", pool([]), cache).shape == (0, len(F.FEATURES))
    for q in ("", '"; DROP TABLE x; --', "日本語のテキスト", "x" * 10_000):
        x = F.compute(q, pool(["Caroline: hi", "b"]), cache)
        assert x.shape == (2, len(F.FEATURES)) and x.dtype == np.float32


def test_recall_hands_the_ranker_its_pool_in_heuristic_order(vstore, cache) -> None:
    c = vstore
    for text in (
        "Caroline: I went to the LGBTQ support group yesterday",
        "Melanie: I painted a sunrise",
        "Caroline: the group was very welcoming",
        "Melanie: my kids love the beach",
    ):
        c.memories.remember(RememberInput(content=text, context="earlier talk about groups"))
    pools: list[F.Pool] = []
    res = c.recall.recall(
        RecallQuery(query="When did Caroline go to the support group?", limit=2, touch=False, ranker="heuristic"),
        pool_out=pools,
    )
    assert res.ranker == "heuristic" and len(pools) == 1
    p = pools[0]
    assert len(p) == 4 and p.seqs[:2] == [h.memory.seq for h in res.hits]  # heuristic order, whole pool
    assert list(p.final[:2]) == pytest.approx([h.score for h in res.hits])
    assert not np.isnan(p.vector_content).any() and not np.isnan(p.vector_context).any()
    assert p.contents[0] == res.hits[0].memory.content
    # the content vectors the second-hop features read: one a candidate, their cosines the pool's
    assert p.content_vectors is not None and p.content_vectors.shape == (4, c.recall.index.dimensions)
    x = F.compute("When did Caroline go to the support group?", p, cache)
    assert not np.isnan(x[:, F.FEATURES.index("feedback_cosine")]).any()


def test_question_turns_ranks_of_coverage_and_content_cosine(cache) -> None:
    x = F.compute(
        "painting sunsets",
        pool(
            ["Melanie: what did you paint?", "Caroline: I painted sunsets", "Caroline: ok"],
            v_content=[0.2, 0.9, np.nan],
        ),
        cache,
    )
    assert col(x, "is_question") == [1.0, 0.0, 0.0]
    assert col(x, "coverage_rank") == [1, 0, 2]
    assert col(x, "vector_content_rank") == [1, 0, 2]  # no content vector ranks last


def test_neighbours_coverage(cache) -> None:
    x = F.compute(
        "painting sunsets",
        pool(["Melanie: what did you paint?", "Caroline: I painted sunsets", "unrelated"], seqs=[5, 6, 9]),
        cache,
    )
    assert col(x, "prev_coverage") == pytest.approx([0.0, 0.5, 0.0])  # seq 6 follows the question
    assert col(x, "next_coverage") == pytest.approx([1.0, 0.0, 0.0])  # seq 5 is followed by the answer


def test_neighbours_question_cosine_and_speaker_and_relative_scores(cache) -> None:
    contents = ["Melanie: what did you paint?", "Caroline: I painted sunsets", "Caroline: nice", "far away"]
    x = F.compute(
        "What did Caroline paint?", pool(contents, seqs=[5, 6, 7, 20], v_content=[0.5, 0.8, np.nan, 0.1]), cache
    )
    assert col(x, "prev_is_question")[1:3] == [1.0, 0.0]
    assert math.isnan(col(x, "prev_is_question")[0]) and math.isnan(col(x, "prev_is_question")[3])
    assert col(x, "prev_vector_content")[1:3] == pytest.approx([0.5, 0.8])
    assert col(x, "next_vector_content")[:2] == pytest.approx([0.8, 0.0])  # seq 7 has no vector: 0
    assert col(x, "prev_speaker_match")[1:3] == [0.0, 1.0] and col(x, "next_speaker_match")[:2] == [1.0, 1.0]
    assert col(x, "vector_content_gap") == pytest.approx([-0.3, 0.0, -0.8, -0.7])
    # query terms {caroline, paint}: the best memory holds both, stemmed ("painted")
    assert col(x, "coverage_rel") == pytest.approx([0.5, 1.0, 0.5, 0.0])


def test_date_match_of_the_year_and_month_the_query_names(cache) -> None:
    may_2023, june_2023, may_2022 = 1_683_000_000.0, 1_686_000_000.0, 1_651_500_000.0  # 2 May, 5 Jun 2023, 2 May 2022
    p = pool(["a", "b", "c"], created=[may_2023, june_2023, may_2022])
    assert col(F.compute("What did she do in May 2023?", p, cache), "date_match") == [1.0, 0.0, 0.0]
    assert col(F.compute("what happened in 2023", p, cache), "date_match") == [1.0, 1.0, 0.0]
    assert col(F.compute("plans for june", p, cache), "date_match") == [0.0, 1.0, 0.0]
    # "may" uncapitalised is the verb: no date named
    assert all(math.isnan(v) for v in col(F.compute("what may she paint?", p, cache), "date_match"))


def test_near_coverage_joins_the_neighbours_terms(cache) -> None:
    x = F.compute(
        "painting sunsets at the lake",
        pool(["I paint a lot", "mostly sunsets", "at the lake", "lake house"], seqs=[5, 6, 7, 30]),
        cache,
    )
    # query terms {paint, sunset, lake}: seq 6 with 5 and 7 holds all three; 30 has no neighbour
    assert col(x, "near_coverage") == pytest.approx([2 / 3, 1.0, 2 / 3, 1 / 3])
    assert col(F.compute("the", pool(["a", "b"]), cache), "near_coverage") == [0.0, 0.0]  # no query term


def test_session_best_rank_coverage_and_count(cache) -> None:
    x = F.compute(
        "sunsets",
        pool(
            ["a", "sunsets", "c", "d"],
            hybrid=[0.9, 0.5, 0.3, 0.2],
            created=[NOW, NOW + 60, NOW + 120, NOW + 10 * DAY],
        ),
        cache,
    )
    assert col(x, "session_best") == pytest.approx([0.9, 0.9, 0.9, 0.2])
    assert col(x, "session_best_gap") == pytest.approx([0.0, 0.4, 0.6, 0.0])
    assert col(x, "session_rank") == [0, 1, 2, 0]
    assert col(x, "session_coverage_max") == [1.0, 1.0, 1.0, 0.0]
    assert col(x, "session_count") == [3, 3, 3, 1]


def test_feedback_cosine_to_the_best_candidates_centroid(cache) -> None:
    e = np.eye(4, dtype=np.float32)
    vectors = np.stack([e[0], e[0], e[1], e[0], e[0], e[2], np.zeros(4, np.float32)])
    p = pool(list("abcdefg"), hybrid=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
    p.content_vectors = vectors
    x = F.compute("q", p, cache)
    # centroid of the five best (4 x e0 + e1) / 5, normalised
    c = np.array([4.0, 1.0, 0.0, 0.0]) / math.sqrt(17.0)
    got = col(x, "feedback_cosine")
    assert got[:6] == pytest.approx([c[0], c[0], c[1], c[0], c[0], 0.0], abs=1e-6) and math.isnan(got[6])
    assert col(x, "feedback_cosine_rank")[:3] == [0, 1, 4] and math.isnan(col(x, "feedback_cosine_rank")[6])
    assert all(math.isnan(v) for v in col(F.compute("q", pool(list("ab")), cache), "feedback_cosine"))  # no vectors


def test_feedback_terms_shared_by_the_best_candidates(cache) -> None:
    contents = ["guitar lessons", "guitar concert", "lessons at school", "guitar", "piano", "tea", "guitar lessons"]
    x = F.compute("music", pool(contents, hybrid=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]), cache)
    # feedback terms: held by two or more of the five best, outside the query: {guitar, lesson}
    assert col(x, "feedback_terms") == pytest.approx([1.0, 0.5, 0.5, 0.5, 0.0, 0.0, 1.0])
    x = F.compute("q", pool(["a b", "c d"]), cache)
    assert all(math.isnan(v) for v in col(x, "feedback_terms"))  # no term shared: none


def _reference_set_features(query: str, p: F.Pool, cache: F.TextCache) -> dict[str, list[float]]:
    """The lexical, entity and near-coverage features by their set definitions, one candidate
    at a time (what compute() vectorises)."""
    q = cache.coverage.query_terms(query)
    derived = cache.derived(p.contents)
    held = [q & d.terms for d in derived]
    m = len(p)
    df = {t: sum(t in h for h in held) for t in q}
    w = {t: math.log((m + 1.0) / (df[t] + 0.5)) for t in q}
    total = sum(w.values())
    names = F.query_names(query)
    match = [None if d.speaker is None else (d.speaker.split()[0] in names or d.speaker in names) for d in derived]
    index = {s: i for i, s in enumerate(p.seqs)}
    near = []
    for i, s in enumerate(p.seqs):
        together = set(held[i])
        for j in (index.get(s - 1), index.get(s + 1)):
            if j is not None:
                together |= held[j]
        near.append(len(together) / len(q) if q else 0.0)
    nan = math.nan
    return {
        "coverage": [len(h) / len(q) if q else 0.0 for h in held],
        "coverage_idf": [sum(w[t] for t in h) / total if q and total > 0 else 0.0 for h in held],
        "speaker_match": [nan if x is None else float(x) for x in match],
        "speaker_other": [nan if x is None or not names else float(not x) for x in match],
        "near_coverage": near,
    }


@pytest.mark.parametrize(
    "query",
    ["When did Caroline go to the support group with Melanie?", "What does Jon like?", "?!", "pottery class"],
)
def test_vectorised_set_features_equal_their_definitions(cache, query) -> None:
    """compute() on a 60-candidate pool (chat turns with and without speaker labels, gaps in
    seq, repeated texts) equals the one-candidate-at-a-time definitions, and so do the shipped
    model's scores of both matrices."""
    rng = np.random.default_rng(7)
    words = [
        "support",
        "group",
        "pottery",
        "class",
        "painted",
        "Melanie",
        "Caroline",
        "went",
        "yesterday",
        "camping",
        "kids",
    ]
    speakers = ["Caroline: ", "Melanie: ", "Jon: ", ""]
    contents = [
        speakers[i % 4]
        + " ".join(rng.choice(words, size=int(rng.integers(1, 8))).tolist())
        + ("?" if i % 5 == 0 else "")
        for i in range(60)
    ]
    seqs = sorted(rng.choice(np.arange(1, 120), size=60, replace=False).tolist())
    p = pool(contents, seqs=seqs, hybrid=rng.random(60), created=NOW - rng.random(60) * 30 * DAY)
    x = F.compute(query, p, cache)
    for name, values in _reference_set_features(query, p, cache).items():
        np.testing.assert_array_equal(
            x[:, F.FEATURES.index(name)], np.asarray(values, dtype=np.float32), err_msg=name, strict=True
        )
    from memlane.ranker.model import SHIPPED_MODEL, load_cached

    model = load_cached(SHIPPED_MODEL)
    ref = x.copy()
    for name, values in _reference_set_features(query, p, cache).items():
        ref[:, F.FEATURES.index(name)] = values
    np.testing.assert_array_equal(model.predict(x), model.predict(ref))
