"""Maintenance: diagnostics and recommendations on real database states (dead jobs, stale
leases, FTS out of sync, tombstones), execute vs observe, cooldowns and hourly budgets on an
injected clock, the halt tracker, semantic dedup, and the repair endpoints."""

from __future__ import annotations

import pytest

from conftest import api_client
from memlane.errors import Conflict, NotFound
from memlane.pipeline import diagnostics as dg
from memlane.pipeline.maintenance import MaintenanceWorker
from memlane.pipeline.repairs import RepairRateLimited, Repairs
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.storage import jobs as J
from memlane.storage.maintenance import fts_row_count

T0 = "2026-01-01T00:00:00.000Z"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> str:
        return self.t

    def advance(self, ms: float) -> None:
        self.t = J.add_ms(self.t, ms)


def wire(c, clock: Clock) -> tuple[Repairs, MaintenanceWorker]:
    pipeline = lambda: c.settings.memory.pipeline_v2  # noqa: E731
    repairs = Repairs(c.memories, pipeline, tracker=None, now=clock)
    return repairs, MaintenanceWorker(repairs, pipeline, now=clock)


def add_jobs(c, n: int, status: str, *, at: str = T0, leased_until: str | None = None) -> list[int]:
    def job(conn):
        ids = []
        for _ in range(n):
            jid = J.enqueue(conn, "test", at=at)
            conn.execute(
                "UPDATE memory_jobs SET status = ?, leased_until = ?, attempts = 3, updated_at = ? WHERE id = ?",
                (status, leased_until, at, jid),
            )
            ids.append(jid)
        return ids

    return c.db.write(job)


def statuses(c) -> dict[str, int]:
    return c.db.read(lambda conn: J.counts_by_status(conn, ["test"])).get("test", {})


def remember(c, text: str, **kw) -> str:
    return c.memories.remember(RememberInput(content=text, **kw)).id


def test_a_healthy_store_scores_one_and_a_cycle_does_nothing(store):
    c = store
    remember(c, "a healthy memory")
    add_jobs(c, 5, "completed")
    _, worker = wire(c, Clock())
    rep = dg.get_diagnostics(c.db, now=T0, model=None)
    assert rep.score == 1.0 and rep.fts_in_sync and dg.build_recommendations(rep) == []
    out = worker.run_cycle()
    assert out["recommendations"] == [] and out["actions"] == {}


def test_dead_jobs_are_recommended_and_requeued_in_execute_mode(store):
    c = store
    add_jobs(c, 97, "completed")
    dead = add_jobs(c, 3, "dead")
    _, worker = wire(c, Clock())
    rep = dg.get_diagnostics(c.db, now=T0, model=None)
    assert rep.dead_rate == 0.03 and rep.queue_score < 1
    assert [r.action for r in dg.build_recommendations(rep)] == [dg.REQUEUE_DEAD_JOBS]
    out = worker.run_cycle()
    assert out["mode"] == "execute" and out["actions"][dg.REQUEUE_DEAD_JOBS] == {
        "status": "done",
        "result": {"requeued": 3},
    }
    assert out["score_after"] == 1.0 and out["delta"] > 0
    j = c.db.read(lambda conn: J.get(conn, dead[0]))
    assert j.status == "pending" and j.attempts == 0 and j.error.startswith("requeued by maintenance")
    assert statuses(c) == {"completed": 97, "pending": 3}


def test_one_dead_job_in_a_hundred_is_below_the_threshold(store):
    c = store
    add_jobs(c, 99, "completed")
    add_jobs(c, 1, "dead")
    assert dg.build_recommendations(dg.get_diagnostics(c.db, now=T0, model=None)) == []


def test_stale_leases_are_released(store):
    c = store
    clock = Clock()
    add_jobs(c, 2, "leased", leased_until=J.add_ms(T0, -1000))
    add_jobs(c, 1, "leased", leased_until=J.add_ms(T0, 60_000))
    _, worker = wire(c, clock)
    rep = dg.get_diagnostics(c.db, now=T0, model=None)
    assert rep.counts.stale_leases == 2
    assert dg.RELEASE_STALE_LEASES in [r.action for r in dg.build_recommendations(rep)]
    out = worker.run_cycle()
    assert out["actions"][dg.RELEASE_STALE_LEASES]["result"] == {"released": 2}
    assert statuses(c) == {"pending": 2, "leased": 1}


def _unindex_one(c, mid: str) -> None:
    m = c.memories.get(mid)
    c.db.write(
        lambda conn: conn.execute(
            "INSERT INTO memories_fts(memories_fts, rowid, normalized_content, context) VALUES ('delete', ?, ?, '')",
            (m.seq, m.normalized_content),
        )
    )


def test_fts_out_of_sync_is_detected_and_rebuilt(store):
    c = store
    ids = [remember(c, f"searchable memory about topic {i}") for i in range(4)]
    _unindex_one(c, ids[2])
    assert c.db.read(fts_row_count) == 3
    rep = dg.get_diagnostics(c.db, now=T0, model=None)
    assert not rep.fts_in_sync and rep.index_score < 1
    assert [r.action for r in dg.build_recommendations(rep)] == [dg.CHECK_FTS]
    repairs, worker = wire(c, Clock())
    out = worker.run_cycle()
    res = out["actions"][dg.CHECK_FTS]["result"]
    assert res["rebuilt"] is True and res["in_sync"] is True and res["fts_rows_before"] == 3
    assert c.db.read(fts_row_count) == 4 and out["score_after"] == 1.0
    hits = c.recall.recall(RecallQuery(query="topic 2", limit=4)).hits
    assert ids[2] in {h.memory.id for h in hits}


def test_observe_mode_only_recommends(open_store):
    c = open_store(memory={"pipeline_v2": {"autonomous": {"maintenanceMode": "observe"}}})
    add_jobs(c, 1, "dead")
    _, worker = wire(c, Clock())
    out = worker.run_cycle()
    assert out["mode"] == "observe" and out["recommendations"][0]["action"] == dg.REQUEUE_DEAD_JOBS
    assert out["actions"] == {} and "score_after" not in out
    assert statuses(c) == {"dead": 1}
    assert worker.run_cycle(execute=True)["actions"][dg.REQUEUE_DEAD_JOBS]["status"] == "done"


def test_shadow_mode_never_executes(open_store):
    c = open_store(memory={"pipeline_v2": {"shadowMode": True}})
    add_jobs(c, 1, "dead")
    _, worker = wire(c, Clock())
    assert worker.run_cycle()["mode"] == "observe" and statuses(c) == {"dead": 1}


def test_cooldown_and_hourly_budget_on_an_injected_clock(open_store):
    c = open_store(memory={"pipeline_v2": {"repair": {"requeueCooldownMs": 5000, "requeueHourlyBudget": 2}}})
    clock = Clock()
    repairs, _ = wire(c, clock)
    assert repairs.run(dg.REQUEUE_DEAD_JOBS).result == {"requeued": 0}
    with pytest.raises(RepairRateLimited) as e:
        repairs.run(dg.REQUEUE_DEAD_JOBS)
    assert e.value.details["blocked_by"] == "cooldown" and e.value.details["retry_after_ms"] == 5000
    clock.advance(4999)
    with pytest.raises(RepairRateLimited):
        repairs.run(dg.REQUEUE_DEAD_JOBS)
    clock.advance(1)
    repairs.run(dg.REQUEUE_DEAD_JOBS)  # second run this hour
    clock.advance(10_000)
    with pytest.raises(RepairRateLimited) as e:
        repairs.run(dg.REQUEUE_DEAD_JOBS)
    assert e.value.details["blocked_by"] == "hourly_budget"
    assert e.value.details["retry_after_ms"] == 3_600_000 - 15_000  # the first run leaves the window
    assert repairs.limits()[dg.REQUEUE_DEAD_JOBS]["runs_last_hour"] == 2
    # the same budget covers stale-lease releases; other actions have their own
    assert repairs.run(dg.RELEASE_STALE_LEASES).result == {"released": 0}
    clock.advance(3_600_000 - 15_000)
    repairs.run(dg.REQUEUE_DEAD_JOBS)


def test_rate_limited_actions_are_reported_by_the_cycle(open_store):
    c = open_store()
    clock = Clock()
    repairs, worker = wire(c, clock)
    repairs.run(dg.REQUEUE_DEAD_JOBS)
    add_jobs(c, 1, "dead")
    out = worker.run_cycle()
    assert out["actions"][dg.REQUEUE_DEAD_JOBS]["status"] == "rate_limited"
    assert statuses(c) == {"dead": 1}


def test_halt_tracker_stops_an_ineffective_repair_and_resets_when_healthy(store):
    c = store
    clock = Clock()
    ids = [remember(c, f"memory number {i}") for i in range(4)]
    for i in ids[:2]:
        c.memories.delete(i)  # 50 % tombstones, too fresh for the sweep to purge
    _, worker = wire(c, clock)
    for _ in range(3):
        out = worker.run_cycle()
        assert out["actions"][dg.RETENTION_SWEEP]["status"] == "done" and out["delta"] == 0
        clock.advance(11 * 60_000)  # past the sweep's cooldown
    assert worker.halt.halted == {dg.RETENTION_SWEEP}
    out = worker.run_cycle()
    assert out["actions"][dg.RETENTION_SWEEP] == {"status": "halted"} and out["halted"] == [dg.RETENTION_SWEEP]
    c.memories.recover(ids[0])  # 25 %: healthy, no recommendation
    assert worker.run_cycle()["recommendations"] == [] and worker.halt.halted == set()


def test_the_worker_runs_only_while_scheduled(open_store):
    c = open_store(memory={"pipeline_v2": {"autonomous": {"frozen": True}}})
    _, worker = wire(c, Clock())
    assert worker.run_once() is False and worker.cycles == 0
    c.settings.memory.pipeline_v2 = c.settings.memory.pipeline_v2.model_copy(
        update={"autonomous": c.settings.memory.pipeline_v2.autonomous.model_copy(update={"frozen": False})}
    )
    worker.run_once()
    assert worker.cycles == 1 and worker.next_delay_ms == 1_800_000


def test_semantic_dedup_keeps_the_better_memory(open_store):
    c = open_store(embedding="local", memory={"pipeline_v2": {"repair": {"dedupSemanticThreshold": 0.9}}})
    keep = remember(c, "The user prefers dark mode in the code editor.", importance=0.9)
    drop = remember(c, "The user prefers dark mode in their code editor.", importance=0.4)
    other = remember(c, "Deploys go through the staging cluster first.")
    pinned_a = remember(c, "Team standup happens every day at 9:30 in room B.", pinned=True)
    pinned_b = remember(c, "Team standup happens each day at 9:30 in room B.", pinned=True)
    clock = Clock()
    repairs, _ = wire(c, clock)
    dry = repairs.run(dg.DEDUP, dry_run=True).result
    assert dry["dry_run"] and dry["deleted"] == 0 and dry["examined"] == 5
    assert [(p["keep"], p["delete"]) for p in dry["pairs"]] == [(keep, drop)]  # pinned pairs are never touched
    assert dry["pairs"][0]["cosine"] >= 0.9
    assert not c.memories.get(drop).is_deleted
    clock.advance(600_000)
    res = repairs.run(dg.DEDUP).result
    assert res["deleted"] == 1 and c.memories.get(drop).is_deleted
    assert not any(c.memories.get(i).is_deleted for i in (keep, other, pinned_a, pinned_b))
    hist = c.memories.history(drop)[-1]
    assert hist.who == "maintenance" and keep in hist.why


def test_dedup_needs_destructive_writes_allowed(open_store):
    c = open_store(memory={"pipeline_v2": {"mutationsFrozen": True}})
    repairs, _ = wire(c, Clock())
    with pytest.raises(Conflict):
        repairs.run(dg.DEDUP)
    assert repairs.run(dg.DEDUP, dry_run=True).result["deleted"] == 0  # a dry run is fine
    with pytest.raises(NotFound):
        repairs.run("defragment")


def test_repair_endpoints(store):
    c = store
    add_jobs(c, 1, "dead")
    with api_client(c) as client:
        d = client.get("/api/diagnostics").json()
        assert d["recommendations"][0]["action"] == dg.REQUEUE_DEAD_JOBS and d["report"]["dead_rate"] == 1.0
        assert set(d["limits"]) == set(dg.ACTIONS)
        r = client.post("/api/repair/requeue-dead-jobs")
        assert r.status_code == 200 and r.json()["result"] == {"requeued": 1}
        again = client.post("/api/repair/requeue-dead-jobs")
        assert again.status_code == 429 and again.json()["error"]["code"] == "rate_limited"
        assert again.json()["error"]["details"]["retry_after_ms"] > 0
        assert client.post("/api/repair/defragment").status_code == 404
        bad = client.post("/api/repair/reembed", json={"dry_run": True})
        assert bad.status_code == 422
        assert client.post("/api/repair/dedup", json={"dry_run": "yes"}).status_code == 422
        assert client.post("/api/repair/dedup", json={"dry_run": True}).json()["result"]["pairs"] == []
        assert client.post("/api/repair/reembed").json()["result"]["note"] == "no embedder configured"
        fts = client.post("/api/repair/check-fts-consistency").json()["result"]
        assert fts["in_sync"] is True and fts["rebuilt"] is False
        assert client.post("/api/repair/trigger_retention_sweep").json()["result"]["tombstones"] == 0
        run = client.post("/api/maintenance/run?execute=false").json()
        assert run["mode"] == "observe"
