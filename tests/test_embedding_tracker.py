"""The embedding tracker with the real local embedder: missing vectors (memories stored while
no embedder ran), stale vectors (content changed), model switches, failures, the index kept
in step, and its wiring as a worker."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memlane.config import load_settings
from memlane.container import open_container
from memlane.errors import EmbeddingError
from memlane.normalize import normalize_and_hash
from memlane.pipeline.embedding_tracker import RETRY_AFTER_CYCLES, EmbeddingTracker
from memlane.services.inputs import RecallQuery, RememberInput

TEXTS = [
    "The billing service is written in Go.",
    "Deploys go through staging first.",
    "The user prefers tabs over spaces.",
    "Backups run nightly at 02:00 UTC.",
    "The poison pill memory that cannot be embedded.",
]


class Counting:
    """Delegates to a real embedder, counting texts and failing on the ones containing ``fail_on``."""

    def __init__(self, inner, fail_on: str | None = None) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.fail_on = fail_on
        self.texts: list[str] = []

    def embed(self, texts):
        for t in texts:
            if self.fail_on and self.fail_on in t:
                raise EmbeddingError("provider refused the text")
        self.texts.extend(texts)
        return self.inner.embed(texts)

    def close(self) -> None:
        pass


def seed_without_vectors(home: Path, texts: list[str], context_for: int | None = None) -> list[str]:
    c = open_container(load_settings(home=home, embedding={"provider": "none"}))
    try:
        return [
            c.memories.remember(
                RememberInput(content=t, context="from the ops channel" if i == context_for else None)
            ).id
            for i, t in enumerate(texts)
        ]
    finally:
        c.close()


def vectors(c, model: str) -> int:
    return c.db.read(
        lambda conn: conn.execute("SELECT count(*) FROM embeddings WHERE model = ?", (model,)).fetchone()[0]
    )


def test_missing_vectors_are_filled_in_batches_and_indexed(open_store, tmp_path, shared_embedder):
    home = tmp_path / "home"
    ids = seed_without_vectors(home, TEXTS[:4], context_for=1)
    c = open_store(home=home, embedding="local")
    model = shared_embedder.model_id
    assert len(c.memories.index) == 0
    emb = Counting(shared_embedder)
    t = EmbeddingTracker(c.db, emb, c.memories.index, batch_size=3)
    first = t.refresh()
    assert first == {"embedded": 3, "failed": 0, "remaining": 1}
    assert t.run_once() is True and t.queue_depth == 0
    assert t.refresh()["embedded"] == 0 and t.run_once() is False  # nothing left: idle
    assert len(emb.texts) == 5  # four contents and one context, one at a time
    assert vectors(c, model) == 5
    assert all(c.memories.get(i).embedding_model == model for i in ids)
    assert len(c.memories.index) == 4
    res = c.recall.recall(RecallQuery(query="which language is the billing service in", limit=2))
    assert "vector" in res.legs and res.hits[0].memory.id == ids[0] and res.hits[0].vector_score > 0.3
    tel = t.telemetry()
    assert tel["embedded"] == 4 and tel["queue_depth"] == 0 and tel["last_cycle_at"]


def test_changed_content_is_re_embedded_and_the_index_follows(open_store, shared_embedder):
    c = open_store(embedding="local")
    mid = c.memories.remember(RememberInput(content=TEXTS[0])).id
    new = normalize_and_hash("The billing service was rewritten in Rust.")
    # a content change whose vector was never stored (e.g. the embedder was down during the update)
    c.db.write(
        lambda conn: conn.execute(
            "UPDATE memories SET content = ?, normalized_content = ?, content_hash = ? WHERE id = ?",
            (new.storage_content, new.normalized_content, new.content_hash, mid),
        )
    )
    emb = Counting(shared_embedder)
    t = EmbeddingTracker(c.db, emb, c.memories.index)
    assert t.refresh()["embedded"] == 1 and emb.texts == [new.storage_content]
    seq = c.memories.get(mid).seq
    got, has = c.memories.index.vectors_of([seq])
    assert has[0] and np.allclose(got[0], shared_embedder.embed([new.storage_content])[0], atol=1e-5)


def test_a_model_switch_reuses_stored_vectors(open_store, shared_embedder):
    c = open_store(embedding="local")
    mid = c.memories.remember(RememberInput(content=TEXTS[2])).id
    c.db.write(lambda conn: conn.execute("UPDATE memories SET embedding_model = 'old-model' WHERE id = ?", (mid,)))
    emb = Counting(shared_embedder)
    t = EmbeddingTracker(c.db, emb, c.memories.index)
    assert t.refresh()["embedded"] == 1 and emb.texts == []  # the vector of this model already exists
    assert c.memories.get(mid).embedding_model == shared_embedder.model_id


def test_failures_are_counted_and_the_memory_waits(open_store, tmp_path, shared_embedder):
    home = tmp_path / "home"
    ids = seed_without_vectors(home, TEXTS)
    c = open_store(home=home, embedding="local")
    emb = Counting(shared_embedder, fail_on="poison")
    t = EmbeddingTracker(c.db, emb, c.memories.index, batch_size=20)
    r = t.refresh()
    assert r == {"embedded": 4, "failed": 1, "remaining": 1}
    assert c.memories.get(ids[4]).embedding_model is None
    emb.fail_on = None
    for _ in range(RETRY_AFTER_CYCLES):
        assert t.refresh()["embedded"] == 0  # left out for a while
    assert t.refresh()["embedded"] == 1 and t.queue_depth == 0
    assert t.failed == 1 and t.skipped_cycles == 0


def test_a_cycle_where_every_embedding_fails_is_skipped(open_store, tmp_path, shared_embedder):
    home = tmp_path / "home"
    seed_without_vectors(home, TEXTS[:2])
    c = open_store(home=home, embedding="local")
    t = EmbeddingTracker(c.db, Counting(shared_embedder, fail_on=" "), c.memories.index)
    assert t.run_once() is False
    assert t.skipped_cycles == 1 and t.failed == 2


def test_deleted_memories_are_left_alone(open_store, tmp_path, shared_embedder):
    home = tmp_path / "home"
    ids = seed_without_vectors(home, TEXTS[:2])
    c = open_store(home=home, embedding="local")
    c.memories.delete(ids[0])
    t = EmbeddingTracker(c.db, Counting(shared_embedder), c.memories.index)
    assert t.refresh() == {"embedded": 1, "failed": 0, "remaining": 0}
    assert c.memories.get(ids[0]).embedding_model is None


def test_the_container_worker(open_store, tmp_path, shared_embedder):
    c = open_store()  # no embedder: the tracker never ticks
    w = c.workers.get("embedding-tracker")
    assert w.run_once() is False and w.ticks == 0
    home = tmp_path / "other"
    seed_without_vectors(home, TEXTS[:1])
    v = open_store(home=home, embedding="local", memory={"pipeline_v2": {"embeddingTracker": {"batchSize": 1}}})
    w = v.workers.get("embedding-tracker")
    assert w.run_once() is True and w.telemetry()["queue_depth"] == 0
    assert v.memories.stats()["by_embedding_model"] == {shared_embedder.model_id: 1}
    v.settings.memory.pipeline_v2 = v.settings.memory.pipeline_v2.model_copy(
        update={
            "embedding_tracker": v.settings.memory.pipeline_v2.embedding_tracker.model_copy(update={"enabled": False})
        }
    )
    ticks = w.ticks
    w.run_once()
    assert w.ticks == ticks and w.next_delay_ms == 5000


@pytest.mark.parametrize("batch", [1, 20])
def test_reembed_repair_goes_through_the_tracker(open_store, tmp_path, batch):
    home = tmp_path / "home"
    seed_without_vectors(home, TEXTS[:3])
    c = open_store(home=home, embedding="local", memory={"pipeline_v2": {"embeddingTracker": {"batchSize": batch}}})
    out = c.repairs.run("reembed")  # the repair embeds up to its own batch, whatever the tracker's
    assert out.result == {"embedded": 3, "failed": 0, "remaining": 0}
    assert c.maintenance.diagnose()["report"]["counts"]["missing_vectors"] == 0
