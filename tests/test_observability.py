"""Observability behind the dashboard (issue 40, part 1): latency histograms, the error ring,
health domains, timelines and /metrics, tested against real events.

Each test states the event and checks what the daemon reports afterwards; none of these
reports existed before (no /api/analytics/*, /api/timeline, /api/diagnostics/{domain},
/metrics), so each fails on the old code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.scripted_llm import Reply, ScriptedLlmServer
from conftest import api_client
from memlane.observability.errors import ErrorRing
from memlane.observability.latency import BUCKETS_MS, LatencyHistogram, percentile
from pipeline_helpers import drain, llm_settings


class FakeClock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_histogram_percentiles_buckets_and_minutes_are_exact():
    clock = FakeClock()
    h = LatencyHistogram(clock=clock)
    for ms in range(1, 101):  # 1..100 ms in the first minute
        h.observe(float(ms))
    clock.t += 60
    h.observe(1000.0)
    h.observe(float("nan"))  # ignored
    h.observe(-1.0)  # ignored
    s = h.summary()
    assert s["count"] == 101 and s["max_ms"] == 1000.0 and s["last_ms"] == 1000.0
    assert (s["p50"], s["p95"], s["p99"]) == (51.0, 96.0, 100.0)  # nearest rank over 101 values
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    buckets, n, total = h.cumulative_buckets()
    assert n == 101 and total == pytest.approx(sum(range(1, 101)) + 1000)
    assert dict(buckets)[10] == 10 and dict(buckets)[100] == 100 and buckets[-1][1] == 101
    assert len(buckets) == len(BUCKETS_MS) + 1
    minutes = h.minutes()
    assert [m["count"] for m in minutes] == [100, 1]
    assert minutes[0]["p95"] == 95.0 and minutes[1]["p50"] == 1000.0
    assert h.count_since(30) == 101  # the window [t+30, t+60] overlaps the first minute too
    clock.t += 45
    assert h.count_since(30) == 1  # [t+75, t+105] overlaps only the second minute


def test_error_ring_keeps_the_last_500_newest_first_with_filters():
    clock = FakeClock()
    ring = ErrorRing(clock=clock)
    for i in range(600):
        ring.add("predictor" if i % 2 else "extraction", "predictor_crash" if i % 2 else "job_dead", f"e{i}")
        clock.t += 1
    assert len(ring) == 500 and ring.totals == {"predictor": 300, "extraction": 300}
    newest = ring.recent(limit=3)
    assert [e["message"] for e in newest] == ["e599", "e598", "e597"]
    assert [e["id"] for e in newest] == [600, 599, 598]
    assert all(e["stage"] == "predictor" for e in ring.recent(stage="predictor", limit=50))
    assert [e["id"] for e in ring.recent(after_id=597)] == [600, 599, 598]
    assert ring.count_since(10.5) == 10 and ring.count_since(10.5, stage="extraction") == 5
    assert ring.by_stage() == {"predictor": 250, "extraction": 250}


def test_http_operations_are_timed_and_answer_server_timing(store):
    c = api_client(store)
    mid = c.post("/api/memory/remember", json={"content": "The deploy script lives in ops/deploy.sh"}).json()["id"]
    r = c.post("/api/memory/recall", json={"query": "deploy"})
    assert r.headers["server-timing"].startswith("app;dur=")
    c.patch(f"/api/memory/{mid}", json={"importance": 0.9})
    c.delete(f"/api/memory/{mid}")
    c.post(f"/api/memory/{mid}/recover", json={})
    c.post("/api/hooks/session-start", json={"session_key": "s1", "project": "p"})
    c.post("/api/hooks/user-prompt-submit", json={"session_key": "s1", "prompt": "where is the deploy script?"})
    c.post("/api/hooks/session-end", json={"session_key": "s1", "wait": True})
    ops = c.get("/api/analytics/latency").json()["operations"]
    counts = {
        k: ops[k]["count"] for k in ("remember", "recall", "mutate", "session_start", "prompt_submit", "session_end")
    }
    assert counts == {"remember": 1, "recall": 1, "mutate": 3, "session_start": 1, "prompt_submit": 1, "session_end": 1}
    assert ops["recall"]["p50"] is not None and ops["recall"]["minutes"][-1]["count"] == 1
    one = c.get("/api/analytics/latency", params={"operation": "recall"}).json()["operations"]
    assert list(one) == ["recall"]
    assert c.get("/api/analytics/latency", params={"operation": "nope"}).status_code == 404


def test_a_connector_sending_bad_hooks_shows_in_the_ring_and_the_connector_domain(store):
    c = api_client(store)
    assert c.get("/api/diagnostics/connector").json()["status"] == "healthy"
    for _ in range(3):
        assert c.post("/api/hooks/session-start", json={"session_key": 42}).status_code == 422
    errs = c.get("/api/analytics/errors", params={"stage": "connector"}).json()
    assert len(errs["errors"]) == 3 and errs["errors"][0]["code"] == "validation_error"
    assert errs["errors"][0]["details"]["path"] == "/api/hooks/session-start"
    dom = c.get("/api/diagnostics/connector").json()
    assert dom["errors_last_hour"] == 3 and dom["status"] == "unhealthy" and dom["score"] == 0.0
    full = c.get("/api/diagnostics").json()
    assert "report" in full and full["domains"]["connector"]["status"] == "unhealthy"
    assert set(full["domains"]) == {"storage", "index", "queue", "provider", "predictor", "workers", "connector"}
    assert c.get("/api/diagnostics/nope").json()["error"]["code"] == "not_found"


def test_failing_extraction_jobs_are_timed_and_land_in_the_ring(open_store):
    with ScriptedLlmServer(lambda prompt: Reply("model exploded", status=500)) as llm:
        s = open_store(llm=llm_settings(llm), memory={"pipelineV2": {"enabled": True, "worker": {"maxRetries": 1}}})
        c = api_client(s)
        c.post("/api/memory/remember", json={"content": "Alice moved the standup to 10am on Mondays."})
        drain(s, limit=3)
        errs = c.get("/api/analytics/errors", params={"stage": "extraction"}).json()["errors"]
        assert errs and errs[0]["code"] in ("job_dead", "job_retried")
        assert errs[0]["details"]["job_type"] == "extract"
        assert c.get("/api/analytics/latency").json()["operations"]["jobs"]["count"] >= 1
        queue = c.get("/api/diagnostics/queue").json()
        assert queue["jobs_dead"] == 1 and queue["status"] == "unhealthy"


def test_session_timeline_interleaves_start_injection_hits_end_and_score(store):
    c = api_client(store)
    ids = [
        c.post("/api/memory/remember", json={"content": t, "project": "p"}).json()["id"]
        for t in ("The CI runs on GitHub Actions", "Deploys need a green staging build")
    ]
    c.post("/api/hooks/session-start", json={"session_key": "sess/1", "project": "p"})
    c.post("/api/hooks/user-prompt-submit", json={"session_key": "sess/1", "prompt": "is the staging build green?"})
    c.post("/api/hooks/session-end", json={"session_key": "sess/1", "wait": True})
    tl = c.get("/api/timeline/sess/1").json()
    assert tl["kind"] == "session"
    names = [(e["source"], e["event"]) for e in tl["events"]]
    assert names[0] == ("session", "started") and ("session", "injected") in names
    assert names.index(("session", "ended")) < names.index(("session", "scored"))
    ats = [e["at"] for e in tl["events"]]
    assert ats == sorted(ats)
    mt = c.get(f"/api/timeline/{ids[1]}").json()
    assert mt["kind"] == "memory"
    events = [(e["source"], e["event"]) for e in mt["events"]]
    assert events[0] == ("memory", "created")
    assert ("session", "injected") in events or ("session", "candidate") in events
    assert c.get("/api/timeline/no-such-thing").status_code == 404


def test_metrics_expose_histograms_errors_and_health(store):
    c = api_client(store)
    c.post("/api/memory/remember", json={"content": "metrics are scraped by Prometheus"})
    for _ in range(2):
        c.post("/api/memory/recall", json={"query": "prometheus"})
    c.post("/api/hooks/session-start", json={"session_key": 1})
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    hist = fams["memlane_operation_duration_seconds"]
    count = [s.value for s in hist.samples if s.name.endswith("_count") and s.labels["operation"] == "recall"]
    assert count == [2.0]
    errs = {s.labels["stage"]: s.value for s in fams["memlane_errors"].samples if s.name == "memlane_errors_total"}
    assert errs == {"connector": 1.0}
    health = {s.labels["domain"]: s.value for s in fams["memlane_health_score"].samples}
    assert health["storage"] == 1.0 and "predictor" not in health  # the predictor does not run here
    assert {s.labels["state"]: s.value for s in fams["memlane_memories"].samples}["live"] == 1.0


def test_metrics_and_analytics_need_the_token(store):
    c = api_client(store)
    for path in (
        "/metrics",
        "/api/analytics/latency",
        "/api/analytics/errors",
        "/api/diagnostics/storage",
        "/api/timeline/x",
    ):
        r = c.get(path, headers={"Authorization": ""})
        assert r.status_code == 401, path


def _wait_for(fn, timeout_s: float = 60.0, every_s: float = 0.2):
    """Poll ``fn`` until it returns something truthy (or fail after ``timeout_s``: a guard against
    hanging, not a measurement)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every_s)
    pytest.fail(f"condition not met within {timeout_s} s")


def test_a_killed_sidecar_is_a_predictor_crash_and_an_unhealthy_predictor_domain(start_daemon, tmp_path):
    # The sidecar runs only with a model to serve (issue 43): give the home an untrained one.
    home = tmp_path / "home"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from memlane.predictor.engine import PredictorEngine; "
            "PredictorEngine(sys.argv[1], embedding_model_id='none', native_dim=1).save_checkpoint()",
            str(home / "predictor"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    d = start_daemon(home, provider="none")
    with d.client() as c:

        def alive():
            dom = c.get("/api/diagnostics/predictor").json()
            return dom if dom["sidecar_alive"] and dom["sidecar_pid"] else None

        dom = _wait_for(alive, timeout_s=120)
        assert dom["status"] == "cold_start" and dom["score"] == 0.6
        os.kill(dom["sidecar_pid"], signal.SIGKILL)
        crash = _wait_for(lambda: c.get("/api/analytics/errors", params={"code": "predictor_crash"}).json()["errors"])
        assert crash[0]["stage"] == "predictor" and "exited" in crash[0]["message"]
        dom = c.get("/api/diagnostics/predictor").json()
        assert dom["sidecar_alive"] is False and dom["status"] == "unhealthy" and dom["score"] == 0.0
        assert c.get("/api/diagnostics").json()["domains"]["predictor"]["status"] == "unhealthy"
        metrics = c.get("/metrics").text
        assert 'memlane_errors_total{stage="predictor"}' in metrics
        assert "memlane_predictor_sidecar_up 0.0" in metrics


def test_no_model_yet_is_a_cold_start_not_a_dead_sidecar(start_daemon):
    """Without a model the sidecar is not started (issue 43): a cold start at 0.6, not a fault."""
    d = start_daemon(provider="none")
    with d.client() as c:
        dom = c.get("/api/diagnostics/predictor").json()
    assert dom["sidecar_alive"] is False and dom["sidecar_pid"] is None
    assert dom["status"] == "cold_start" and dom["score"] == 0.6
    assert any("no model yet" in n for n in dom["notes"])
