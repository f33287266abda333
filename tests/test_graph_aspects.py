"""Aspect feedback (memory-pipeline-v2.md "Aspect Feedback"): FTS hits of an ended session
raise the weights of their memories' aspects (delta x confirmations, clamped), each session
counts once, and stale aspects decay every N sessions, floored at min_weight. Real sessions
through the sessions service on real SQLite files."""

from __future__ import annotations

from typing import Any

import pytest

from memlane.graph.aspects import (
    FEEDBACK_WORKER,
    AspectFeedbackConfig,
    AspectFeedbackWorker,
    apply_fts_overlap_feedback,
    decay_aspect_weights,
)
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import EndInput, PromptInput

NOW = "2026-03-01T00:00:00.000Z"


def rows(c, sql: str, *args: Any) -> list[dict]:
    return c.db.read(lambda conn: [dict(r) for r in conn.execute(sql, args)])


def weights(c) -> dict[str, float]:
    return {
        f"{r['entity']}/{r['aspect']}": round(r["weight"], 6)
        for r in rows(
            c,
            "SELECT e.name AS entity, a.name AS aspect, a.weight FROM entity_aspects a JOIN entities e "
            "ON e.id = a.entity_id",
        )
    }


@pytest.fixture
def store(open_store):
    c = open_store()
    c.memories.remember(RememberInput(content="Alice prefers tabs in every Python file."))
    c.memories.remember(RememberInput(content="Kafka depends on Zookeeper for leader election."))
    return c


def session(c, key: str, prompts: list[str]) -> None:
    for p in prompts:
        c.sessions.prompt(PromptInput(session_key=key, prompt=p))
    c.sessions.end(EndInput(session_key=key), wait=True)


def test_fts_hits_raise_their_aspects_weight(store) -> None:
    assert weights(store) == {"Alice/preferences": 0.5, "Kafka/dependencies": 0.5}
    session(store, "s1", ["tabs python", "which file uses tabs"])
    worker = AspectFeedbackWorker(store.db, AspectFeedbackConfig(delta=0.02), now=lambda: NOW)
    assert worker.tick() is True
    hits = rows(store, "SELECT fts_hit_count FROM session_memories WHERE session_key = 's1' AND fts_hit_count > 0")
    assert [h["fts_hit_count"] for h in hits] == [2]
    assert weights(store) == {"Alice/preferences": 0.54, "Kafka/dependencies": 0.5}  # ignored: no gain
    t = worker.telemetry()
    assert (t["feedbackAspectsUpdated"], t["feedbackFtsConfirmations"], t["sessions"]) == (1, 2, 1)


def test_each_session_counts_once_and_open_sessions_wait(store) -> None:
    store.sessions.prompt(PromptInput(session_key="open", prompt="kafka zookeeper"))
    worker = AspectFeedbackWorker(store.db, now=lambda: NOW)
    assert worker.tick() is False  # not ended yet
    store.sessions.end(EndInput(session_key="open"), wait=True)
    assert worker.tick() is True and worker.tick() is False
    assert weights(store)["Kafka/dependencies"] == 0.52
    assert rows(store, "SELECT session_key, confirmations, aspects FROM aspect_feedback_sessions") == [
        {"session_key": "open", "confirmations": 1, "aspects": 1}
    ]


def test_weights_are_clamped(store) -> None:
    session(store, "s", ["tabs python"] * 3)
    cfg = AspectFeedbackConfig(delta=0.5, max_weight=0.9)
    store.db.write(lambda c: apply_fts_overlap_feedback(c, "s", cfg, NOW))
    assert weights(store)["Alice/preferences"] == 0.9


def test_decay_hits_only_stale_aspects_and_floors_at_min_weight(store) -> None:
    store.db.write(
        lambda c: c.execute(
            "UPDATE entity_aspects SET updated_at = '2026-01-01T00:00:00.000Z', "
            "weight = 0.12 WHERE name = 'preferences'"
        )
    )
    cfg = AspectFeedbackConfig(stale_days=14, decay_rate=0.05, min_weight=0.1)
    # The Kafka aspect keeps its remember-time updated_at (today): not stale at NOW - 14 days.
    assert store.db.write(lambda c: decay_aspect_weights(c, cfg, NOW)) == 1
    assert weights(store)["Alice/preferences"] == 0.1
    assert store.db.write(lambda c: decay_aspect_weights(c, cfg, NOW)) == 0  # at the floor, and just updated


def test_decay_runs_every_n_sessions(store) -> None:
    store.db.write(lambda c: c.execute("UPDATE entity_aspects SET updated_at = '2000-01-01T00:00:00.000Z'"))
    worker = AspectFeedbackWorker(
        store.db, AspectFeedbackConfig(decay_every_sessions=3, decay_rate=0.1), now=lambda: NOW
    )
    decayed = []
    for i in range(3):
        session(store, f"n{i}", ["nothing relevant here"])
        decayed.append(worker.process(f"n{i}")["decayed"])
    assert decayed == [0, 0, 2]
    assert weights(store) == {"Alice/preferences": 0.4, "Kafka/dependencies": 0.4}


def test_the_worker_is_wired_and_follows_graph_enabled(store) -> None:
    worker = store.workers.get(FEEDBACK_WORKER)
    session(store, "w", ["tabs python"])
    p = store.settings.memory.pipeline_v2
    store.settings.memory.pipeline_v2 = p.model_copy(update={"graph": p.graph.model_copy(update={"enabled": False})})
    assert worker.run_once() is False
    store.settings.memory.pipeline_v2 = p
    assert worker.run_once() is True
    assert weights(store)["Alice/preferences"] > 0.5
