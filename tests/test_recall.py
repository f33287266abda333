"""Hybrid recall with the real local model (all-MiniLM-L6-v2 int8): ranking, filters,
min_score, alpha, the BM25-only mode and query safety."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import row_snapshot
from memlane.errors import ValidationError
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.storage import fts

CORPUS = [
    ("The user prefers dark mode in every editor.", "preference", "ui", "2024-01-10T09:00:00Z"),
    ("Deployments happen every Tuesday afternoon.", "decision", "ops", "2024-02-10T09:00:00Z"),
    ("The production database is PostgreSQL 15.", "fact", "ops", "2024-03-10T09:00:00Z"),
    ("Alice is allergic to peanuts.", "fact", None, "2024-04-10T09:00:00Z"),
    ("The office coffee machine is broken.", "fact", None, "2024-05-10T09:00:00Z"),
    ("Our CI pipeline runs on GitHub Actions.", "fact", "ops", "2024-06-10T09:00:00Z"),
    ("Bob's favourite programming language is Rust.", "preference", None, "2024-07-10T09:00:00Z"),
    ("The quarterly report is due on March 31.", "constraint", "finance", "2024-08-10T09:00:00Z"),
]


def load(c) -> dict[str, str]:
    """Remember CORPUS; returns content -> id."""
    res = c.memories.remember_many([RememberInput(t, type=ty, project=p, created_at=at) for t, ty, p, at in CORPUS])
    return {t: r.id for (t, *_), r in zip(CORPUS, res)}


@pytest.fixture
def corpus(vstore):
    return vstore, load(vstore)


def recall(c, query: str, **kw):
    kw.setdefault("touch", False)
    return c.recall.recall(RecallQuery(query, **kw))


def contents(res) -> list[str]:
    return [h.memory.content for h in res.hits]


# -- ranking ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("nut allergy", "Alice is allergic to peanuts."),
        ("espresso maker out of order", "The office coffee machine is broken."),
        ("Which SQL engine powers our live system?", "The production database is PostgreSQL 15."),
    ],
)
def test_semantic_match_ranks_first(corpus, query, expected):
    c, _ = corpus
    # no word of the query is in the expected memory: only the vector leg can find it
    assert not set(fts.query_tokens(query)) & set(fts.query_tokens(expected))
    res = recall(c, query)
    assert res.legs == ("bm25", "vector")
    assert contents(res)[0] == expected
    top = res.hits[0]
    assert top.bm25_score == 0.0 and top.vector_score > res.hits[1].vector_score
    assert all(res.hits[i].score >= res.hits[i + 1].score for i in range(len(res.hits) - 1))


def test_lexical_match_ranks_first(corpus):
    c, _ = corpus
    res = recall(c, "GitHub Actions")
    assert contents(res)[0] == "Our CI pipeline runs on GitHub Actions."
    assert res.hits[0].bm25_score == 1.0


def test_context_is_searchable_by_both_legs(vstore):
    plain = vstore.memories.remember(
        RememberInput("It was decided to go with option B.", context="We compared vendors for the payment gateway.")
    )
    vstore.memories.remember(RememberInput("The cafeteria closes at 3pm."))
    res = recall(vstore, "payment gateway vendor")
    assert res.hits[0].memory.id == plain.id
    assert res.hits[0].bm25_score == 1.0


def test_limit(corpus):
    c, _ = corpus
    assert len(recall(c, "the", limit=3).hits) <= 3
    assert len(recall(c, "programming editor database coffee", limit=1).hits) == 1


# -- filters (both legs honour them) -----------------------------------------------------------------


def test_filter_project(corpus):
    c, _ = corpus
    res = recall(c, "database deployments pipeline peanuts", project="ops", limit=50)
    assert res.hits and {h.memory.project for h in res.hits} == {"ops"}
    assert recall(c, "database", project="nope").hits == []
    assert recall(c, "database", project="").hits == []


def test_filter_types(corpus):
    c, _ = corpus
    res = recall(
        c, "preferences and decisions about editors and deployments", types=("preference", "decision"), limit=50
    )
    assert res.hits and {h.memory.type for h in res.hits} <= {"preference", "decision"}
    assert "The user prefers dark mode in every editor." in contents(res)
    assert recall(c, "editor", types=("no-such-type",)).hits == []


def test_filter_since_until(corpus):
    c, _ = corpus
    res = recall(c, "anything about the team", since="2024-03-10T09:00:00Z", until="2024-06-10T09:00:00Z", limit=50)
    dates = {h.memory.created_at for h in res.hits}
    assert dates and dates <= {"2024-03-10T09:00:00.000Z", "2024-04-10T09:00:00.000Z", "2024-05-10T09:00:00.000Z"}
    # until is exclusive, since inclusive; offsets are converted to UTC
    res = recall(c, "CI pipeline GitHub Actions", since="2024-06-10T11:00:00+02:00")
    assert "Our CI pipeline runs on GitHub Actions." in contents(res)
    res = recall(c, "CI pipeline GitHub Actions", until="2024-06-10T11:00:00+02:00")
    assert "Our CI pipeline runs on GitHub Actions." not in contents(res)


def test_filter_include_deleted(corpus):
    c, ids = corpus
    target = "Alice is allergic to peanuts."
    c.memories.delete(ids[target])
    assert target not in contents(recall(c, "nut allergy", limit=50))
    assert target not in contents(recall(c, "Alice peanuts", limit=50))
    res = recall(c, "nut allergy", include_deleted=True)
    assert contents(res)[0] == target and res.hits[0].memory.is_deleted
    c.memories.recover(ids[target])
    assert contents(recall(c, "nut allergy"))[0] == target


def test_filters_after_update(corpus):
    c, ids = corpus
    target = "Alice is allergic to peanuts."
    c.memories.update(ids[target], {"project": "health", "type": "constraint"})
    res = recall(c, "nut allergy", project="health", types=("constraint",))
    assert contents(res) == [target]
    assert target not in contents(recall(c, "nut allergy", types=("fact",), limit=50))


# -- scores: min_score, alpha ------------------------------------------------------------------------


def test_min_score(corpus):
    c, _ = corpus
    everything = recall(c, "nut allergy", limit=50)
    assert len(everything.hits) > 1
    cut = everything.hits[0].score - 1e-6
    res = recall(c, "nut allergy", min_score=cut, limit=50)
    assert contents(res) == ["Alice is allergic to peanuts."]
    assert all(h.score >= cut for h in res.hits)
    assert recall(c, "nut allergy", min_score=1.0).hits == []


def test_alpha_changes_leg_influence(corpus):
    c, _ = corpus
    # The merge formula alone: no graph boost (pipeline v2's stages are tested in their own files).
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"graph": p.graph.model_copy(update={"enabled": False})})
    q = "coffee deployments"
    vec_only = recall(c, q, alpha=1.0, limit=50)
    bm25_only = recall(c, q, alpha=0.0, limit=50)
    for h in vec_only.hits:
        assert h.score == pytest.approx(h.vector_score)
    for h in bm25_only.hits:
        assert h.score == pytest.approx(h.bm25_score) and h.bm25_score > 0
    # alpha = 0 keeps only lexical matches; alpha = 1 also returns purely semantic ones
    assert set(contents(bm25_only)) == {
        "The office coffee machine is broken.",
        "Deployments happen every Tuesday afternoon.",
    }
    assert len(vec_only.hits) > len(bm25_only.hits)
    mid = recall(c, q, alpha=0.5, limit=50)
    for h in mid.hits:
        assert h.score == pytest.approx(0.5 * h.vector_score + 0.5 * h.bm25_score)


def test_alpha_flips_ranking(vstore):
    lexical = vstore.memories.remember(RememberInput("zebra zebra zebra crossing paint schedule"))
    semantic = vstore.memories.remember(RememberInput("A striped African horse-like animal."))
    q = "zebra"
    assert recall(vstore, q, alpha=0.0).hits[0].memory.id == lexical.id
    scores = {h.memory.id: h.vector_score for h in recall(vstore, q, alpha=1.0).hits}
    best = max(scores, key=scores.get)
    assert recall(vstore, q, alpha=1.0).hits[0].memory.id == best
    assert {lexical.id, semantic.id} <= set(scores)


def test_rehearsal_touch_bumps_access_count(open_store):
    c = open_store(embedding="local")
    r = c.memories.remember(RememberInput("rehearsed memory about zeppelins"))
    c.recall.recall(RecallQuery("zeppelins"))  # touch=True (default)
    c.db.write(lambda conn: None)  # the writer queue is FIFO: the touch has landed
    m = c.memories.get(r.id)
    assert m.access_count == 1 and m.last_accessed is not None
    recall(c, "zeppelins")  # touch=False
    c.db.write(lambda conn: None)
    assert c.memories.get(r.id).access_count == 1


def test_recency_boost(open_store):
    c = open_store(embedding="local", recall={"recency_weight": 1.0, "rehearsal_weight": 0.0})
    old = c.memories.remember(RememberInput("meeting notes one", created_at="2020-01-01T00:00:00Z"))
    new = c.memories.remember(RememberInput("meeting notes two", created_at="2024-01-01T00:00:00Z"))
    res = recall(c, "meeting notes", now="2024-01-02T00:00:00Z", alpha=0.0)
    assert [h.memory.id for h in res.hits] == [new.id, old.id]


# -- BM25-only mode -----------------------------------------------------------------------------------


def test_bm25_only_without_embedder(store):
    load(store)
    res = recall(store, "PostgreSQL production database")
    assert res.legs == ("bm25",)
    assert contents(res)[0] == "The production database is PostgreSQL 15."
    assert all(h.vector_score is None and h.bm25_score is not None for h in res.hits)
    assert recall(store, "nut allergy").hits == []  # no lexical overlap, no vector leg
    res = recall(store, "???")  # no word tokens: no leg can run
    assert res.legs == () and res.hits == []


def test_vector_only_for_a_query_without_words(corpus):
    c, _ = corpus
    res = recall(c, "☕ !!!")
    assert res.legs == ("vector",)
    assert all(h.bm25_score is None for h in res.hits)


def test_stop_words_only_query(store):
    r = store.memories.remember(RememberInput("to be or not to be"))
    assert [h.memory.id for h in recall(store, "to be").hits] == [r.id]


# -- validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"limit": 0},
        {"limit": 1001},
        {"limit": True},
        {"limit": 2.0},
        {"alpha": -0.1},
        {"alpha": 1.5},
        {"alpha": float("nan")},
        {"min_score": 2.0},
        {"since": "last week"},
        {"until": "2024-13-01"},
        {"now": "soon"},
        {"project": "\ud800"},
        {"types": ("",)},
        {"types": ("a\x00",)},
        {"since": "0001-01-01T00:00:00+01:00"},
    ],
)
def test_recall_validation(store, kw):
    with pytest.raises(ValidationError):
        store.recall.recall(RecallQuery("anything", **kw))


def test_recall_query_must_be_a_string(store):
    with pytest.raises(ValidationError):
        store.recall.recall(RecallQuery(b"bytes"))  # type: ignore[arg-type]


# -- query safety ------------------------------------------------------------------------------------

FRAGMENTS = [
    '"',
    "'",
    '""',
    "NEAR(",
    "NEAR/3",
    ")",
    "(",
    " AND ",
    " OR ",
    " NOT ",
    "*",
    "^",
    "-",
    "+",
    ":",
    "content:",
    "normalized_content:",
    "context:",
    "{normalized_content context}:",
    "memories_fts",
    "'; DROP TABLE memories; --",
    '" OR 1=1 --',
    "UNION SELECT * FROM embeddings",
    "%",
    "_",
    "\\",
    "\x00",
    "\ud800",
    "\udfff",
    "\U0001f600",
    "ß",
    "İ",
    "\u202e",
    "\ufeff",
    "\n",
    "\t",
    "peanuts",
    "coffee",
]
hostile = st.lists(
    st.one_of(st.text(st.characters(codec=None), max_size=20), st.sampled_from(FRAGMENTS)), max_size=12
).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=hostile, alpha=st.sampled_from([None, 0.0, 1.0]), touch=st.booleans())
@example(query='" OR 1=1; DROP TABLE memories; --', alpha=None, touch=True)
@example(query="NEAR(peanuts coffee, 2) AND content:x* ^y", alpha=None, touch=True)
@example(query="\x00\ud800", alpha=None, touch=False)
@example(query="", alpha=None, touch=True)
def test_any_query_is_safe(corpus, query, alpha, touch):
    c, _ = corpus
    before = row_snapshot(c)
    before_all = row_snapshot(c, exclude=())
    res = c.recall.recall(RecallQuery(query, alpha=alpha, touch=touch, limit=5))
    assert len(res.hits) <= 5
    assert all(h.score > 0.0 for h in res.hits)
    c.db.write(lambda conn: None)  # let any touch land
    assert row_snapshot(c) == before
    if not touch:
        assert row_snapshot(c, exclude=()) == before_all


def test_safe_queries_keep_fts_intact(corpus):
    c, _ = corpus
    for q in FRAGMENTS:
        c.recall.recall(RecallQuery(q))
    assert c.db.write(fts.integrity_ok)  # integrity-check is an INSERT: needs the writer
    assert c.memories.list()[1] == len(CORPUS)


@pytest.mark.parametrize("query", ["", " ", "\n\t ", "\x00", "\x00\x00 \x00"])
def test_empty_queries_return_nothing(corpus, query):
    c, _ = corpus
    res = c.recall.recall(RecallQuery(query))
    assert res.hits == [] and res.legs == ()


def test_huge_queries(corpus):
    c, _ = corpus
    rng = random.Random(7)
    words = [w for t, *_ in CORPUS for w in t.split()] + ["lorem", "ipsum", "dolor"]
    q100k = " ".join(rng.choice(words) for _ in range(20_000))[:100_000]
    assert len(q100k) == 100_000
    res = c.recall.recall(RecallQuery(q100k, touch=False))
    assert "bm25" in res.legs and "vector" in res.legs and res.hits
    # longer than max_query_chars: truncated, never rejected
    res = c.recall.recall(RecallQuery("peanuts " + "x" * 300_000, touch=False))
    assert contents(res)[0] == "Alice is allergic to peanuts."
    res = c.recall.recall(RecallQuery('"' * 100_000 + "NEAR(" * 10_000, touch=False))
    assert res.legs == ("vector",)


def test_update_reindexes_vectors(corpus):
    c, ids = corpus
    mid = ids["The office coffee machine is broken."]
    c.memories.update(mid, {"content": "The team offsite will be in Lisbon."})
    assert "The office coffee machine is broken." not in contents(recall(c, "espresso maker out of order", limit=50))
    res = recall(c, "company retreat in Portugal")
    assert res.hits[0].memory.id == mid and res.hits[0].bm25_score == 0.0
    assert c.memories.get(mid).embedding_model == c.embedder.model_id


def test_recall_after_reopen_uses_stored_vectors(open_store, tmp_path):
    home = tmp_path / "reopen"
    c = open_store(home=home, embedding="local")
    ids = load(c)
    c.memories.delete(ids["Alice is allergic to peanuts."])
    c.close()
    c2 = open_store(home=home, embedding="local")
    assert "Alice is allergic to peanuts." not in contents(recall(c2, "nut allergy", limit=50))
    assert contents(recall(c2, "espresso maker out of order"))[0] == "The office coffee machine is broken."
