"""Rerankers (memory-pipeline-v2.md "Optional Reranking", "Embedding-Based Reranker"): the
head/tail split, timeout / error / invalid output keep the original order, the embedding blend
against hand-computed values, and the reranker inside recall (real SQLite, real embedder)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memlane.recall.memory_index import IndexEntry, MemoryIndex
from memlane.recall.rerank import (
    EmbeddingReranker,
    NoopReranker,
    RerankCandidate,
    Reranker,
    build_reranker,
    cosine_blend,
    register_reranker,
    rerank,
)
from memlane.services.inputs import RecallQuery, RememberInput

AT = "2025-01-01T00:00:00.000Z"
NO_DAMPENING = {"gravity_enabled": False, "hub_enabled": False, "resolution_enabled": False}


def cands(n: int) -> list[RerankCandidate]:
    return [RerankCandidate(seq=i, memory_id=f"m{i}", content=f"memory {i}", score=1.0 - i / 10) for i in range(n)]


class Reverse(Reranker):
    """Reverses the head; scores rise so the order is consistent."""

    name = "reverse"

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def rerank(self, query, candidates, *, query_vector=None):
        self.seen.append([c.seq for c in candidates])
        return [RerankCandidate(c.seq, c.memory_id, c.content, float(i + 1)) for i, c in enumerate(candidates)][::-1]


class Blocking(Reranker):
    """Blocks until released: a reranker that exceeds any budget."""

    name = "blocking"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def rerank(self, query, candidates, *, query_vector=None):
        self.started.set()
        self.release.wait(30)
        return list(reversed(candidates))


class Raising(Reranker):
    name = "raising"

    def rerank(self, query, candidates, *, query_vector=None):
        raise RuntimeError("model crashed")


class Dropping(Reranker):
    name = "dropping"

    def rerank(self, query, candidates, *, query_vector=None):
        return candidates[1:]


class Duplicating(Reranker):
    name = "duplicating"

    def rerank(self, query, candidates, *, query_vector=None):
        return [candidates[0]] * len(candidates)


@pytest.fixture
def pool():
    p = ThreadPoolExecutor(max_workers=2)
    yield p
    p.shutdown(wait=False, cancel_futures=True)


def test_head_reranked_tail_appended(pool) -> None:
    r = Reverse()
    out, status = rerank("q", cands(6), r, top_n=3, timeout_ms=2000, pool=pool)
    assert status == "ok"
    assert r.seen == [[0, 1, 2]]
    assert [c.seq for c in out] == [2, 1, 0, 3, 4, 5]
    out, _ = rerank("q", cands(2), Reverse(), top_n=20, timeout_ms=2000, pool=pool)
    assert [c.seq for c in out] == [1, 0]
    assert rerank("q", [], Reverse(), top_n=5, timeout_ms=2000, pool=pool) == ([], "ok")


def test_noop_keeps_everything(pool) -> None:
    c = cands(4)
    assert rerank("q", c, NoopReranker(), top_n=2, timeout_ms=100, pool=pool) == (c, "ok")


def test_timeout_keeps_original_order(pool) -> None:
    b = Blocking()
    c = cands(5)
    out, status = rerank("q", c, b, top_n=3, timeout_ms=50, pool=pool)
    assert status == "timeout"
    assert out == c
    assert b.started.is_set()  # it did run, and was abandoned
    b.release.set()


@pytest.mark.parametrize(
    ("reranker", "status"), [(Raising(), "error"), (Dropping(), "invalid"), (Duplicating(), "invalid")]
)
def test_error_or_invalid_output_keeps_original_order(pool, reranker, status) -> None:
    c = cands(5)
    assert rerank("q", c, reranker, top_n=4, timeout_ms=2000, pool=pool) == (c, status)


def test_cosine_blend_hand_computed() -> None:
    vecs = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    has = np.array([True, True, True, False])
    q = np.array([2.0, 0.0], dtype=np.float32)  # not unit length: cosine normalises
    got = cosine_blend(np.array([0.5, 0.6, 0.1, 0.9]), vecs, has, q)
    # cos = [1, 0, 0.6, -]; 0.7 * s + 0.3 * cos; no vector keeps its score
    assert got.tolist() == pytest.approx([0.65, 0.42, 0.25, 0.9])


def test_embedding_reranker_uses_the_index_vectors(pool) -> None:
    index = MemoryIndex("m", 2)
    vec = {1: [1.0, 0.0], 2: [0.0, 1.0], 3: None}
    for seq, v in vec.items():
        index.upsert(
            IndexEntry(
                seq, f"id{seq}", None, "fact", AT, False, np.array(v, dtype=np.float32) if v is not None else None
            )
        )
    c = [RerankCandidate(2, "id2", "b", 0.6), RerankCandidate(1, "id1", "a", 0.5), RerankCandidate(3, "id3", "c", 0.55)]
    r = EmbeddingReranker(index)
    out, status = rerank("q", c, r, top_n=20, timeout_ms=100, pool=pool, query_vector=np.array([1.0, 0.0], np.float32))
    assert status == "ok"
    # seq 1: 0.7 * 0.5 + 0.3 * 1 = 0.65; seq 3 (no vector): 0.55; seq 2: 0.7 * 0.6 + 0 = 0.42
    assert [(x.seq, round(x.score, 6)) for x in out] == [(1, 0.65), (3, 0.55), (2, 0.42)]
    assert r.rerank("q", c, query_vector=None) == c  # no query vector: unchanged


def test_build_reranker_registry() -> None:
    index = MemoryIndex("m", 2)
    assert isinstance(build_reranker("", index), EmbeddingReranker)
    assert isinstance(build_reranker("embedding", index), EmbeddingReranker)
    assert build_reranker("no-such-model", index) is None
    register_reranker("reverse-test", lambda ix: Reverse())
    assert isinstance(build_reranker("reverse-test", index), Reverse)


# ------------------------------------------------------------------------------ in recall
TEXTS = [
    "The deploy pipeline runs on GitHub Actions every night.",
    "Our production database is Postgres 15 on a managed host.",
    "The team prefers tabs over spaces in Go code.",
    "Staging deploys need a manual approval step.",
    "Database backups run every six hours to object storage.",
    "Alice owns the billing service and its on-call rotation.",
]


def _store(open_store, **reranker):
    c = open_store(
        embedding="local",
        recall={"rehearsal_weight": 0.0, "recency_weight": 0.0},
        memory={"pipeline_v2": {"dampening": NO_DAMPENING, "reranker": reranker}},
    )
    c.memories.remember_many([RememberInput(t) for t in TEXTS])
    return c


def _ids(res) -> list[str]:
    return [h.memory.id for h in res.hits]


def _toggle(c, **reranker) -> None:
    p = c.settings.memory.pipeline_v2
    c.settings.memory.pipeline_v2 = p.model_copy(update={"reranker": p.reranker.model_copy(update=reranker)})


def test_recall_custom_reranker_reorders_top_n(open_store) -> None:
    c = _store(open_store, enabled=False)
    q = RecallQuery("database deploys", limit=6, touch=False)
    base = c.recall.recall(q)
    assert len(base.hits) >= 4
    c.recall.stages.reranker = Reverse()
    _toggle(c, enabled=True, top_n=3)
    got = c.recall.recall(q)
    assert _ids(got) == _ids(base)[:3][::-1] + _ids(base)[3:]


def test_recall_reranker_timeout_keeps_baseline_order(open_store) -> None:
    c = _store(open_store, enabled=False)
    q = RecallQuery("database deploys", limit=6, touch=False)
    base = c.recall.recall(q)
    b = Blocking()
    c.recall.stages.reranker = b
    _toggle(c, enabled=True, timeout_ms=100)
    try:
        got = c.recall.recall(q)
    finally:
        b.release.set()
    assert _ids(got) == _ids(base)
    assert [h.score for h in got.hits] == pytest.approx([h.score for h in base.hits])
    assert c.recall.stages.rerank_outcomes == {"timeout": 1}


def test_recall_raising_reranker_keeps_order(open_store) -> None:
    c = _store(open_store, enabled=False)
    q = RecallQuery("who owns billing", limit=6, touch=False)
    base = c.recall.recall(q)
    c.recall.stages.reranker = Raising()
    _toggle(c, enabled=True)
    assert _ids(c.recall.recall(q)) == _ids(base)


def test_recall_embedding_reranker_blends_stored_vectors(open_store) -> None:
    c = _store(open_store, enabled=False)
    q = RecallQuery("database deploys", limit=6, touch=False)
    base = c.recall.recall(q)
    _toggle(c, enabled=True, model="", top_n=20)
    got = c.recall.recall(q)
    qv = c.embedder.embed(["database deploys"])[0]
    base_score = {h.memory.id: h.score for h in base.hits}
    for h in got.hits:
        v, _ = c.recall.index.vectors_of([h.memory.seq])
        cos = float(v[0] @ qv / (np.linalg.norm(v[0]) * np.linalg.norm(qv)))
        assert h.score == pytest.approx(0.7 * base_score[h.memory.id] + 0.3 * cos, rel=1e-5)
    assert [h.score for h in got.hits] == sorted((h.score for h in got.hits), reverse=True)


def test_recall_survives_a_broken_stage_setting(open_store) -> None:
    c = _store(open_store, enabled=True)
    q = RecallQuery("database", limit=3, touch=False)

    def broken():
        raise RuntimeError("settings unavailable")

    c.recall.stages.pipeline = broken
    assert len(c.recall.recall(q).hits) == 3  # baseline ranking, no exception
