"""A daemon that is light to keep running (issue 43, item 5): the predictor sidecar runs only
while there is a model to serve or a training run to do, and never while the predictor is off.

Real stores, real sidecar processes (``memlane predictor serve``) and a real daemon process:

* a store without a model never spawns the sidecar, and its session-starts still record the
  untrained model's ranking, computed in the daemon: the same scores and ranks as a real
  untrained sidecar gives for the same session (memlane.predictor.prior);
* a training run starts the sidecar and stops it again when it leaves no model;
* a store with a model starts it; turning ``predictor.enabled`` off over ``POST /api/config``
  stops it, turning it on starts it again;
* the daemon process maps no PyTorch, has no child on an empty store, and reports its own
  and the sidecar's resident memory in ``GET /health`` and ``memlane status``.

On the old code the sidecar was spawned by every daemon and container at start-up (the first
assertion of each test fails there), and ``/health`` had no ``processes``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import api_client
from memlane.config import load_settings
from memlane.container import Container, open_container
from memlane.predictor.prior import BASELINE_PRIOR, untrained_reply, untrained_scores
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import StartInput

READY_S = 180
PROJECT = "atlas"
NOTES = [
    f"The {comp} service {fact}."
    for comp in ("billing", "search", "auth", "gateway")
    for fact in (
        "deploys from the main branch every Tuesday",
        "logs to Loki with a 14 day retention",
        "keeps its migrations under db/migrations",
        "pages on-call when p99 latency is over budget",
    )
]
NOW = "2026-11-20T09:00:00.000Z"


def _open(home: Path, embedder, **predictor) -> Container:
    settings = load_settings(
        home=home, sessions={"inject_limit": 5}, predictor={"score_timeout_ms": 60_000, **predictor}
    )
    return open_container(settings, embedder=embedder, predictor=True)


def _close(c: Container) -> None:
    c.predictor.wait_training(300)
    c.close()


def _rows(c: Container, key: str) -> dict[str, dict]:
    return c.db.read(
        lambda conn: {
            r["memory_id"]: dict(r)
            for r in conn.execute("SELECT * FROM session_memories WHERE session_key = ?", (key,))
        }
    )


def _wait(cond, timeout_s: float = READY_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_untrained_formula_is_the_baseline_prior_in_float32():
    got = untrained_scores(
        [
            {"baseline_score": 0.75, "baseline_rank": 0},
            {"baseline_score": 0.5, "baseline_rank": 3},
            {"baseline_score": 0.0},
        ]
    )
    assert BASELINE_PRIOR == {"baseline_score": 1.0, "baseline_rank_inv": 0.4}
    assert got == pytest.approx([0.75 + 0.4, 0.5 + 0.4 / 4, 0.0], abs=1e-7)
    with pytest.raises(ValueError, match="baseline_score must be a finite number"):
        untrained_scores([{"baseline_score": float("nan"), "baseline_rank": 0}])
    with pytest.raises(ValueError, match="2 candidate_ids but 1 candidates"):
        untrained_reply({"candidate_ids": ["a", "b"], "candidates": [{"baseline_score": 1.0}]})


def test_no_model_no_sidecar_and_the_same_ranking_as_an_untrained_sidecar(tmp_path, shared_embedder):
    c = _open(tmp_path / "home", shared_embedder)
    try:
        backend, life = c.predictor.backend, c.predictor.lifecycle
        assert not backend.alive and backend.status()["pid"] is None  # old code: spawned at open
        assert life.status()["state"] == "dormant" and not life.model_available()
        c.memories.remember_many(
            [RememberInput(content=t, project=PROJECT, importance=0.3 + 0.02 * i) for i, t in enumerate(NOTES)]
        )
        ctx = "deploying the billing service on Tuesday"
        c.sessions.start(StartInput("local", project=PROJECT, context=ctx, now=NOW))
        assert c.predictor.channel.scored_untrained == 1 and not backend.alive
        local = _rows(c, "local")
        assert len(local) == len(NOTES)
        assert sorted(r["predictor_rank"] for r in local.values()) == list(range(1, len(NOTES) + 1))
        # The untrained model ranks as the baseline does (the prior is monotone in both signals).
        assert all(r["predictor_rank"] == r["baseline_rank"] for r in local.values())

        # The same session against a real, untrained sidecar process.
        assert backend.wait_ready(READY_S)
        c.sessions.start(StartInput("sidecar", project=PROJECT, context=ctx, now=NOW))
        assert c.predictor.channel.scored_untrained == 1 and c.predictor.channel.scored == 2
        remote = _rows(c, "sidecar")
        assert set(remote) == set(local)
        for mid, r in remote.items():
            assert r["baseline_rank"] == local[mid]["baseline_rank"]
            assert r["predictor_rank"] == local[mid]["predictor_rank"]
            assert r["predictor_score"] == pytest.approx(local[mid]["predictor_score"], rel=1e-6, abs=1e-7)
    finally:
        _close(c)


def test_a_training_run_starts_the_sidecar_and_stops_it_without_a_model(tmp_path, shared_embedder):
    c = _open(tmp_path / "home", shared_embedder)
    try:
        backend, life = c.predictor.backend, c.predictor.lifecycle
        assert not backend.alive
        row = c.predictor.retrain("manual")  # nothing labelled yet: the sidecar runs, trains nothing
        assert row["accepted"] == 0 and row["error"], row
        assert "did not start" not in str(row["error"]) and "disabled" not in str(row["error"])
        assert not backend.alive and life.stops == 1 and life.status()["state"] == "dormant"
        assert backend.status()["crashes_last_hour"] == 0 and backend.restarts == 0  # a stop is not a crash
        assert not (tmp_path / "home" / "predictor" / "model.bin").exists()
    finally:
        _close(c)


def _save_untrained_model(home: Path, embedder) -> Path:
    """A model.bin of the sidecar's own format, written as the sidecar would write it."""
    code = (
        "import sys; from memlane.predictor.engine import PredictorEngine\n"
        "e = PredictorEngine(sys.argv[1], embedding_model_id=sys.argv[2], native_dim=int(sys.argv[3]))\n"
        "print(e.save_checkpoint())\n"
    )
    path = home / "predictor"
    subprocess.run(
        [sys.executable, "-c", code, str(path), embedder.model_id, str(embedder.dimensions)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return path / "model.bin"


def test_a_model_starts_the_sidecar_and_enabled_false_stops_it(tmp_path, shared_embedder):
    home = tmp_path / "home"
    assert _save_untrained_model(home, shared_embedder).is_file()
    c = _open(home, shared_embedder)
    try:
        backend, life = c.predictor.backend, c.predictor.lifecycle
        assert backend.alive and life.wanted()  # started at open: there is a model to serve
        assert backend.wait_ready(READY_S)
        first_pid = backend.status()["pid"]
        client = api_client(c)
        r = client.post("/api/config", json={"predictor": {"enabled": False}})
        assert r.status_code == 200 and "predictor.enabled" in r.json()["applied"], r.text
        assert not backend.alive and life.status()["state"] == "stopped"
        assert c.predictor.phase() == "disabled" and c.predictor.alpha() == 1.0
        assert client.get("/health").json()["processes"]["predictor_sidecar"] == {
            "state": "stopped",
            "pid": None,
            "rss_bytes": None,
            "peak_rss_bytes": None,
        }
        # Disabled: no score request at all, and no retrain scheduled.
        c.memories.remember_many([RememberInput(content=t, project=PROJECT) for t in NOTES[:6]])
        res = c.sessions.start(StartInput("off", project=PROJECT, context="billing deploys", now=NOW))
        assert res.status == "new" and not backend.alive
        assert all(r["predictor_rank"] is None for r in _rows(c, "off").values())
        assert c.predictor.schedule_retrain("manual") is None
        r = client.post("/api/config", json={"predictor": {"enabled": True}})
        assert r.status_code == 200 and "predictor.enabled" in r.json()["applied"], r.text
        assert backend.alive and backend.wait_ready(READY_S) and backend.status()["pid"] != first_pid
        assert backend.status()["crashes_last_hour"] == 0 and backend.restarts == 0
    finally:
        _close(c)


def test_enabling_on_a_daemon_started_without_the_predictor_needs_a_restart(tmp_path):
    settings = load_settings(home=tmp_path / "home", embedding={"provider": "none"}, predictor={"enabled": False})
    c = open_container(settings, predictor=True)
    try:
        assert c.predictor is None
        r = api_client(c).post("/api/config", json={"predictor": {"enabled": True}})
        assert r.status_code == 200
        assert r.json()["restart_required"] == ["predictor.enabled"] and r.json()["applied"] == []
    finally:
        c.close()


def test_the_daemon_loads_no_pytorch_and_reports_what_it_costs(start_daemon, tmp_path):
    d = start_daemon(tmp_path / "home")  # local embedder, predictor enabled (the defaults)
    with d.client() as http:
        for path, body in (
            ("/api/memory/remember", {"content": "The deploy script lives in ops/deploy.sh"}),
            ("/api/hooks/session-start", {"session_key": "s1", "cwd": str(tmp_path)}),
            ("/api/hooks/user-prompt-submit", {"session_key": "s1", "prompt": "where is deploy.sh?"}),
        ):
            r = http.post(path, json=body)
            assert r.status_code == 200, (path, r.text)
        health = http.get("/health").json()
    children = subprocess.run(["pgrep", "-P", str(d.proc.pid)], capture_output=True, text=True).stdout.split()
    assert children == []  # old code: the predictor sidecar
    maps = Path(f"/proc/{d.proc.pid}/maps").read_text()
    assert "libtorch" not in maps and "/torch/" not in maps
    procs = health["processes"]
    assert procs["daemon"]["pid"] == d.proc.pid and procs["daemon"]["rss_bytes"] > 10 * 2**20
    assert procs["daemon"]["peak_rss_bytes"] >= procs["daemon"]["rss_bytes"]
    assert procs["predictor_sidecar"] == {"state": "dormant", "pid": None, "rss_bytes": None, "peak_rss_bytes": None}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(MEMLANE_HOME=str(d.home), MEMLANE_DAEMON_URL=d.url, MEMLANE_CONFIG=os.environ["MEMLANE_CONFIG"])
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "status"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "resident memory: daemon" in text and f"pid {d.proc.pid}" in text
    assert "predictor sidecar not running (no model yet)" in text
