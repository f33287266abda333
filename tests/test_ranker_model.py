"""The learned ranker's model file and its recall stage: round trip, schema refusal, the shipped
model, cross-validation folds, recall with the ranker off equal to recall without the stage,
and recall with it on equal to the offline reranking the benchmark scores. Real SQLite stores,
the real embedding model, real LightGBM boosters trained on real recall pools."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from memlane.ranker import features as F
from memlane.ranker.model import SHIPPED_MODEL, RankerSchemaError, header_for, load, read_header, save
from memlane.ranker.stage import MIN_POOL
from memlane.ranker.train import QuestionPool, folds, rerank, train
from memlane.services.inputs import RecallQuery, RememberInput

TURNS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was powerful",
    "Melanie: that sounds amazing, I painted a sunrise over the lake last week",
    "Caroline: I am researching adoption agencies for my future family",
    "Melanie: my kids loved the pottery workshop we did on Saturday",
    "Caroline: the transgender stories at the meetup were so inspiring",
    "Melanie: we went camping in the mountains in June",
    "Caroline: I want to become a counselor for trans youth",
    "Melanie: I run to clear my head, it really helps",
    "Caroline: my friends gave me a necklace from Sweden, my home country",
    "Melanie: playing the violin is my favourite way to relax",
    "Caroline: I started a painting of a rainbow flag at the art class",
    "Melanie: the kids and I made clay pots last summer",
]
QUESTIONS = [
    "When did Caroline go to the support group?",
    "What did Melanie paint?",
    "What is Caroline researching?",
    "Where did Melanie camp?",
    "What career does Caroline want?",
    "What instrument does Melanie play?",
    "Where is Caroline from?",
    "What did the kids make?",
]


#: Everyday turns around the ones above: the learned stage reorders pools of at least
#: MIN_POOL (50) candidates, the scale it was trained on.
FILLER = [
    f"{who}: {what} on day {i}"
    for i in range(12)
    for who, what in (
        ("Caroline", "groceries and the weather were fine"),
        ("Melanie", "the kids had school and a nap"),
        ("Caroline", "I read a book about gardens"),
        ("Melanie", "we cooked pasta for dinner"),
    )
]


@pytest.fixture
def chat(vstore):
    c = vstore
    turns = TURNS + FILLER
    c.memories.remember_many(
        [
            RememberInput(
                content=t,
                created_at=f"2023-05-{1 + i // 10:02d}T10:00:{i % 10:02d}.000Z",
                context=turns[i - 1] if i else None,
            )
            for i, t in enumerate(turns)
        ]
    )
    return c


def capture(c) -> list[tuple[str, F.Pool]]:
    out = []
    for q in QUESTIONS:
        pools: list[F.Pool] = []
        c.recall.recall(RecallQuery(query=q, limit=5, touch=False, ranker="heuristic"), pool_out=pools)
        assert len(pools[0]) >= MIN_POOL
        out.append((q, pools[0]))
    return out


def small_model(c, captured) -> object:
    """A real booster trained on these pools, labelled by which memory shares a rare word with
    the question (enough signal for trees to split; what it learns does not matter here)."""
    qp = []
    for i, (q, p) in enumerate(captured):
        x = F.compute(q, p, c.recall.ranker.cache)
        words = {w.lower().strip("?") for w in q.split() if len(w) > 5}
        labels = [str(s) for s, text in zip(p.seqs, p.contents) if words & {w.lower() for w in text.split()}]
        qp.append(QuestionPool("conv-t", i, 4, q, tuple(labels), [str(s) for s in p.seqs], x))
    return train(qp, params={"min_data_in_leaf": 5}, rounds=20, threads=1)


def test_model_file_round_trip_and_schema_refusal(chat, tmp_path: Path) -> None:
    captured = capture(chat)
    booster = small_model(chat, captured)
    path = save(tmp_path / "m.lgb.gz", booster, header_for(trained_on=["conv-t"], embedding_model="m", params={}))
    model = load(path)
    x = F.compute(captured[0][0], captured[0][1], chat.recall.ranker.cache)
    assert np.array_equal(model.predict(x), booster.predict(x))
    assert read_header(path)["features"] == list(F.FEATURES) and model.embedding_model == "m"
    assert save(tmp_path / "again.lgb.gz", booster, read_header(path)).read_bytes() == path.read_bytes()

    def rewrite(name: str, **change) -> Path:
        header, _, body = gzip.decompress(path.read_bytes()).decode().partition("\n")
        h = {**json.loads(header), **change}
        out = tmp_path / name
        out.write_bytes(gzip.compress((json.dumps(h) + "\n" + body).encode()))
        return out

    with pytest.raises(RankerSchemaError, match="feature schema v"):
        load(rewrite("old.lgb.gz", schema_version=F.SCHEMA_VERSION - 1))
    with pytest.raises(RankerSchemaError, match="feature names differ"):
        load(rewrite("renamed.lgb.gz", features=[*F.FEATURES[:-1], "something_else"]))
    with pytest.raises(RankerSchemaError, match="file format"):
        load(rewrite("format.lgb.gz", format=99))
    junk = tmp_path / "junk.lgb.gz"
    junk.write_bytes(gzip.compress(b"not json\nnot a model"))
    with pytest.raises(RankerSchemaError, match="not a ranker model"):
        load(junk)


def test_a_refused_model_leaves_recall_heuristic_and_says_why(chat, tmp_path: Path) -> None:
    captured = capture(chat)
    booster = small_model(chat, captured)
    path = save(tmp_path / "m.lgb.gz", booster, header_for(trained_on=[], embedding_model=None, params={}))
    header, _, body = gzip.decompress(path.read_bytes()).decode().partition("\n")
    old = tmp_path / "old.lgb.gz"
    old.write_bytes(gzip.compress((json.dumps({**json.loads(header), "schema_version": 0}) + "\n" + body).encode()))
    chat.settings.recall.ranker_model = str(old)
    chat.settings.recall.ranker = "learned"
    res = chat.recall.recall(RecallQuery(query=QUESTIONS[0], limit=3, touch=False))
    assert res.ranker == "heuristic" and all(h.rank_score is None for h in res.hits)
    assert "feature schema v0" in chat.recall.ranker.reason_off(None, chat.recall.index.model_id, True)


def test_recall_with_the_ranker_off_equals_recall_without_the_stage(chat) -> None:
    queries = QUESTIONS + ["", "tea", '"quoted" OR painting', "Caroline Melanie"]
    for limit in (1, 3, 10):
        off = [chat.recall.recall(RecallQuery(query=q, limit=limit, touch=False, ranker="heuristic")) for q in queries]
        stage, chat.recall.ranker = chat.recall.ranker, None
        try:
            bare = [chat.recall.recall(RecallQuery(query=q, limit=limit, touch=False)) for q in queries]
        finally:
            chat.recall.ranker = stage
        for a, b in zip(off, bare):
            assert [(h.memory.id, h.score, h.vector_score, h.bm25_score, h.rank_score) for h in a.hits] == [
                (h.memory.id, h.score, h.vector_score, h.bm25_score, h.rank_score) for h in b.hits
            ]
            assert a.ranker == b.ranker == "heuristic"


def test_learned_recall_is_the_pool_reordered_by_the_model(chat, tmp_path: Path) -> None:
    captured = capture(chat)
    booster = small_model(chat, captured)
    model_id = chat.recall.index.model_id
    path = save(tmp_path / "m.lgb.gz", booster, header_for(trained_on=["conv-t"], embedding_model=model_id, params={}))
    chat.settings.recall.ranker_model = str(path)
    model = load(path)
    for q, p in captured:
        res = chat.recall.recall(RecallQuery(query=q, limit=5, touch=False, ranker="learned"))
        assert res.ranker == "learned"
        scores = model.predict(F.compute(q, p, chat.recall.ranker.cache))
        qp = QuestionPool("conv-t", 0, 4, q, (), [str(s) for s in p.seqs], np.zeros((len(p), 0)))
        assert [str(h.memory.seq) for h in res.hits] == rerank(qp, scores)[:5]
        assert [h.rank_score for h in res.hits] == sorted((h.rank_score for h in res.hits), reverse=True)
    # the embedding model must be the model's: another one's scores mean something else
    other = save(tmp_path / "other.lgb.gz", booster, header_for(trained_on=[], embedding_model="x", params={}))
    chat.settings.recall.ranker_model = str(other)
    assert (
        chat.recall.recall(RecallQuery(query=QUESTIONS[0], limit=3, touch=False, ranker="learned")).ranker
        == "heuristic"
    )


def test_the_request_chooses_the_ranker_and_bad_values_are_refused(chat) -> None:
    from memlane.errors import ValidationError

    with pytest.raises(ValidationError, match="ranker"):
        chat.recall.recall(RecallQuery(query="x", ranker="magic"))


def test_folds_never_train_on_their_test_conversation() -> None:
    ids = [f"conv-{i}" for i in range(10)]
    fs = folds(ids)
    assert [f.test for f in fs] == ids
    for f in fs:
        assert f.test not in f.train and sorted(f.train + [f.test]) == sorted(ids)
    with pytest.raises(ValueError):
        folds(["conv-1"])
    with pytest.raises(ValueError):
        folds(["conv-1", "conv-1"])


@pytest.mark.skipif(not SHIPPED_MODEL.is_file(), reason="the shipped model is built by `memlane train ranker`")
def test_the_shipped_model_loads_offline_and_is_small() -> None:
    model = load(SHIPPED_MODEL)
    assert SHIPPED_MODEL.stat().st_size < 1_000_000
    assert model.header["features"] == list(F.FEATURES)
    assert sorted(model.header["trained_on"]) == sorted(
        ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47", "conv-48", "conv-49", "conv-50"]
    )
    assert model.embedding_model  # trained on the embedded default's scores


def test_cross_validation_ranks_each_conversation_with_a_model_not_trained_on_it(chat) -> None:
    from memlane.ranker.train import cross_validate

    captured = capture(chat)
    qp = []
    for i, (q, p) in enumerate(captured):
        x = F.compute(q, p, chat.recall.ranker.cache)
        labels = (str(p.seqs[i % len(p)]),)  # any label: what is learned does not matter here
        qp.append(QuestionPool(f"conv-{i % 3}", i, 4, q, labels, [str(s) for s in p.seqs], x))
    seen: list[set[str]] = []
    import memlane.ranker.train as T

    real_train = T.train

    def spy(pools, **kw):  # records which conversations each fold trained on, then trains for real
        seen.append({p.conversation for p in pools})
        return real_train(pools, **kw)

    T.train = spy
    try:
        rankings, fs = cross_validate(qp, params={"min_data_in_leaf": 3}, rounds=5)
    finally:
        T.train = real_train
    assert [f.test for f in fs] == ["conv-0", "conv-1", "conv-2"]
    assert seen == [{"conv-1", "conv-2"}, {"conv-0", "conv-2"}, {"conv-0", "conv-1"}]
    assert set(rankings) == {(p.conversation, p.index) for p in qp}
    for p in qp:
        got = rankings[(p.conversation, p.index)]
        assert len(got) == min(50, len(p.dia_ids)) and set(got) <= set(p.dia_ids)


@pytest.mark.skipif(not SHIPPED_MODEL.is_file(), reason="the shipped model is built by `memlane train ranker`")
def test_http_recall_says_which_ranker_answered(chat) -> None:
    from conftest import api_client

    client = api_client(chat)
    body = {"query": "What did Melanie paint?", "limit": 5, "touch": False}
    out = client.post("/api/memory/recall", json=body).json()
    assert out["ranker"] == "learned"  # the default: the shipped model, its features available
    assert all(h["rank_score"] is not None for h in out["results"])
    assert [h["score"] for h in out["results"]] == sorted((h["score"] for h in out["results"]), reverse=True)
    out = client.post("/api/memory/recall", json={**body, "ranker": "heuristic"}).json()
    assert out["ranker"] == "heuristic" and all(h["rank_score"] is None for h in out["results"])
    out = client.post("/api/memory/recall", json={**body, "alpha": 0.5}).json()
    assert out["ranker"] == "heuristic"  # an explicit blend is served as asked
    chat.settings.recall.ranker = "heuristic"  # the setting turns it off
    assert client.post("/api/memory/recall", json=body).json()["ranker"] == "heuristic"
    r = client.post("/api/memory/recall", json={**body, "ranker": "magic"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
