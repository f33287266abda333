"""``memlane bench dashboard``: the server time of every page and data endpoint the dashboard
calls, on a store of 10,000 memories and 1,000 sessions replayed through the session lifecycle.

1. A real daemon on a fresh home, with a scripted loopback LLM (:mod:`benchmarks.dashboard_llm`)
   as extraction model and continuity judge, so the pipeline's jobs, the knowledge graph, the
   judge's scores, the predictor's comparisons and training runs all exist.
2. Fill, over HTTP: every LoCoMo turn as a memory (with its two preceding turns as context,
   project ``locomo/{conversation}``, source the LoCoMo session), topped up to ``memories`` with
   short project notes; then ``sessions`` sessions through the hooks, each one a LoCoMo question:
   session-start with the question as context, the question as the prompt, agent feedback rating
   what was shown (1 for an evidence turn, 0 otherwise), session-end with a transcript. The
   extraction queue is drained and the predictor's last retrain finished before anything is
   measured.
3. Every URL of :func:`urls` is fetched ``repeats`` times after one warm-up, signed in with the
   dashboard's cookie as a browser is; the server time is the daemon's own ``Server-Timing``
   (first byte in to the response's start, rendering included), the client time is the round
   trip. p50 / p95 per URL.
4. With Debian's chromium present (and ``browser``): each page is loaded ``browser_repeats``
   times by Playwright, and its navigation timing kept (``domContentLoaded`` and ``load``,
   ms): "usable within 1 s of navigation".

Targets (issue 40): each page and endpoint <= 100 ms p95 server time, the first page of the
memory list <= 50 ms, every page usable within 1 s in the browser.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from benchmarks.daemon import free_port, start_daemon
from benchmarks.metrics import latency_summary
from memlane.auth import auth_headers
from memlane.config.clock import to_iso
from memlane.dashboard.auth import COOKIE_NAME
from memlane.ranker.locomo import load_locomo

#: Memories per remember request during the fill.
BATCH = 256
#: p95 server-time targets, ms.
TARGET_MS = 100.0
LIST_TARGET_MS = 50.0
#: The browser target: a page usable (DOMContentLoaded) within this many ms of navigation.
BROWSER_TARGET_MS = 1000.0
CHROMIUM = Path("/usr/bin/chromium")
_TIMING = re.compile(r"app;dur=([0-9.]+)")


def fill(
    http: httpx.Client,
    data: Path,
    *,
    memories: int,
    sessions: int,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Fill the daemon behind ``http`` (see the module docstring); returns counts.

    Raises:
        RuntimeError: the daemon refused a request.
    """
    rng = random.Random(seed)
    convs = load_locomo(data)
    items: list[dict[str, Any]] = []
    dia_of: dict[str, str] = {}
    for conv in convs:
        by_session: dict[int, list[Any]] = {}
        for t in conv.turns:
            by_session.setdefault(t.session, []).append(t)
        for n, turns in by_session.items():
            for i, t in enumerate(turns):
                items.append(
                    {
                        "content": t.text,
                        "project": f"locomo/{conv.id}",
                        "type": "dialogue",
                        "created_at": to_iso(t.timestamp),
                        "source_type": "session",
                        "source_id": f"{conv.id}-s{n}",
                        "who": "bench",
                        "metadata": {"dia_id": t.dia_id},
                        "context": " ".join(p.text for p in turns[max(0, i - 2) : i]) or None,
                    }
                )
    topics = ("deploys", "the CI", "code review", "the database", "on-call", "releases", "the API", "tests")
    i = 0
    while len(items) < memories:
        items.append(
            {
                "content": f"Project note {i}: for {rng.choice(topics)} the team agreed to step {rng.randint(1, 9)} "
                f"of the {rng.choice(topics)} checklist (item {rng.randint(100, 999)}).",
                "project": f"proj-{i % 7}",
                "type": rng.choice(("fact", "decision", "preference")),
                "who": "bench",
                "pinned": i % 97 == 0,
            }
        )
        i += 1
    items = items[:memories]

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = http.post(path, json=body)
        if r.status_code >= 400:
            raise RuntimeError(f"{path} answered {r.status_code}: {r.text[:300]}")
        return r.json()

    for start in range(0, len(items), BATCH):
        chunk = items[start : start + BATCH]
        res = post("/api/memory/remember", {"memories": chunk})
        for item, r in zip(chunk, res["results"]):
            if "metadata" in item:
                dia_of[r["id"]] = item["metadata"]["dia_id"]
        if progress:
            progress("memories", min(start + BATCH, len(items)), len(items))
    questions = [(conv, q) for conv in convs for q in conv.questions]
    rng.shuffle(questions)
    for n in range(sessions):
        conv, q = questions[n % len(questions)]
        key = f"bench-{n:04d}"
        project = f"locomo/{conv.id}"
        now = to_iso(conv.last_timestamp)
        start_out = post(
            "/api/hooks/session-start",
            {"session_key": key, "project": project, "harness": "bench", "now": now, "context": q.question},
        )
        prompt = post(
            "/api/hooks/user-prompt-submit", {"session_key": key, "project": project, "prompt": q.question, "now": now}
        )
        shown = [m["id"] for m in start_out["injected"]] + prompt["injected"]
        evidence = set(q.evidence)
        rating = {mid: (1.0 if dia_of.get(mid) in evidence else 0.0) for mid in dict.fromkeys(shown)}
        if rating:
            post("/api/sessions/feedback", {"session_key": key, "memory_feedback": rating})
        post(
            "/api/hooks/session-end",
            {
                "session_key": key,
                "project": project,
                "now": now,
                "wait": True,
                "transcript": (f"user: {q.question}\nassistant: {q.answer or ''}\n") * 8,
            },
        )
        if progress and (n + 1) % 50 == 0:
            progress("sessions", n + 1, sessions)
    return {"memories": len(items), "sessions": sessions}


def wait_drained(http: httpx.Client, timeout_s: float = 1800.0) -> float:
    """Wait until no job is pending or leased and no predictor retrain is running (the fill's
    last sessions queue one; measured beside it, the first URLs timed the retrain); returns the
    seconds waited.

    Raises:
        RuntimeError: still busy after ``timeout_s`` seconds.
    """
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        jobs = http.get("/api/pipeline/status").json()["jobs"]
        pred = http.get("/api/predictor/status")
        training = pred.status_code == 200 and bool(pred.json().get("training"))
        if not training and not any(
            n for counts in jobs.values() for s, n in counts.items() if s in ("pending", "leased")
        ):
            return time.monotonic() - t0
        time.sleep(1.0)
    raise RuntimeError(f"the job queue was not drained (or a retrain still ran) after {timeout_s:.0f} s")


def urls(http: httpx.Client) -> dict[str, str]:
    """Every page and data endpoint the dashboard calls, with real ids from the store."""
    mem = http.get("/api/memories", params={"limit": 1}).json()["items"][0]["id"]
    session = http.get("/api/predictor/comparisons", params={"limit": 1}).json()
    key = session[0]["session_key"] if session else "bench-0000"
    ents = http.get("/api/knowledge/entities", params={"limit": 1}).json()["entities"]
    out = {
        "page /": "/",
        "page /memories (first page)": "/memories",
        "page /memories?page=100": "/memories?page=100",
        "page /memories search": "/memories?q=adoption+agency+support+group",
        "page /memories filtered": "/memories?state=all&source=session&project=locomo%2Fconv-26",
        "page /memories/{id}": f"/memories/{mem}",
        "page /sessions": "/sessions",
        "page /sessions?page=30": "/sessions?page=30",
        "page /sessions/{key}": f"/sessions/{quote(key)}",
        "page /predictor": "/predictor",
        "page /knowledge": "/knowledge",
        "api /api/diagnostics": "/api/diagnostics",
        "api /api/diagnostics/predictor": "/api/diagnostics/predictor",
        "api /api/analytics/latency": "/api/analytics/latency",
        "api /api/analytics/errors": "/api/analytics/errors",
        "api /api/timeline/{session}": f"/api/timeline/{quote(key)}",
        "api /api/timeline/{memory}": f"/api/timeline/{mem}",
        "api /metrics": "/metrics",
    }
    if ents:
        out["page /knowledge/entities/{id}"] = f"/knowledge/entities/{quote(ents[0]['id'])}"
    return out


def sign_in(url: str, home: Path) -> httpx.Client:
    """A client with the dashboard's session cookie (as a browser has after the login link)."""
    code = httpx.post(url + "/api/dashboard/login-code", json={}, headers=auth_headers(home), timeout=30).json()
    r = httpx.get(code["url"], follow_redirects=False, timeout=30)
    return httpx.Client(base_url=url, cookies={COOKIE_NAME: r.cookies[COOKIE_NAME]}, timeout=60)


def measure(client: httpx.Client, targets: dict[str, str], *, repeats: int) -> dict[str, dict[str, Any]]:
    """p50 / p95 server and client time (ms) of each URL over ``repeats`` requests after a warm-up.

    Raises:
        RuntimeError: a URL did not answer 200.
    """
    out = {}
    for name, path in targets.items():
        server, client_ms = [], []
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            r = client.get(path)
            took = (time.perf_counter() - t0) * 1000
            if r.status_code != 200:
                raise RuntimeError(f"{path} answered {r.status_code}: {r.text[:200]}")
            if i == 0:
                continue  # warm-up
            m = _TIMING.search(r.headers.get("server-timing", ""))
            server.append(float(m.group(1)) if m else took)
            client_ms.append(took)
        s, c = latency_summary(server), latency_summary(client_ms)
        target = LIST_TARGET_MS if name == "page /memories (first page)" else TARGET_MS
        out[name] = {
            "path": path,
            "server_p50": s["p50"],
            "server_p95": s["p95"],
            "client_p50": c["p50"],
            "client_p95": c["p95"],
            "target_ms": target,
            "ok": s["p95"] <= target,
        }
    return out


def browser_timings(url: str, home: Path, pages: dict[str, str], *, repeats: int) -> dict[str, dict[str, Any]]:
    """Playwright + Debian's chromium: each page's DOMContentLoaded and load (ms), median and max
    over ``repeats`` navigations; {} without chromium or playwright."""
    if not CHROMIUM.exists():
        return {}
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {}
    code = httpx.post(url + "/api/dashboard/login-code", json={}, headers=auth_headers(home), timeout=30).json()
    out: dict[str, dict[str, Any]] = {}
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        try:
            page = b.new_page(viewport={"width": 1280, "height": 900})
            page.goto(code["url"])
            for name, path in pages.items():
                ready, load = [], []
                for _ in range(repeats):
                    page.goto(url + path)
                    page.wait_for_load_state("load")
                    t = page.evaluate("""() => { const n = performance.getEntriesByType('navigation')[0];
                        return [n.domContentLoadedEventEnd - n.startTime, n.loadEventEnd - n.startTime]; }""")
                    ready.append(t[0])
                    load.append(t[1])
                ready.sort()
                load.sort()
                out[name] = {
                    "ready_p50": ready[len(ready) // 2],
                    "ready_max": ready[-1],
                    "load_p50": load[len(load) // 2],
                    "load_max": load[-1],
                    "ok": ready[-1] <= BROWSER_TARGET_MS,
                }
        finally:
            b.close()
    return out


def run_dashboard_bench(
    data: Path,
    *,
    memories: int = 10_000,
    sessions: int = 1_000,
    repeats: int = 30,
    embedding: str = "none",
    browser: bool = True,
    browser_repeats: int = 3,
    keep: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Run the whole benchmark (module docstring); returns the report.

    Raises:
        ValueError: ``data`` is not LoCoMo-shaped. RuntimeError: the daemon failed.
    """
    from benchmarks.dashboard_llm import fill_reply
    from benchmarks.scripted_llm import ScriptedLlmServer

    tmp = None if keep else tempfile.TemporaryDirectory(prefix="memlane-bench-dashboard-")
    home = keep or Path(tmp.name)  # type: ignore[union-attr]
    home.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"memories": memories, "sessions": sessions, "repeats": repeats, "embedding": embedding}
    with ScriptedLlmServer(fill_reply) as llm:
        port = free_port()
        env = {
            "MEMLANE_EMBEDDING__PROVIDER": embedding,
            "MEMLANE_LLM__PROVIDER": "ollama",
            "MEMLANE_LLM__BASE_URL": llm.url,
            "MEMLANE_LLM__MODEL": "scripted",
            "MEMLANE_MEMORY__PIPELINE_V2__WORKER__POLL_MS": "200",
            # one retrain per 100 sessions instead of per 10: the fill measures nothing, and
            # 100 retrains would take most of its time
            "MEMLANE_PREDICTOR__TRAIN_INTERVAL_SESSIONS": "100",
        }
        proc = start_daemon(home, port, env={k: v for k, v in {**os.environ, **env}.items()})
        url = f"http://127.0.0.1:{port}"
        try:
            t0 = time.perf_counter()
            with httpx.Client(base_url=url, timeout=300, headers=auth_headers(home)) as http:
                report["fill"] = fill(http, data, memories=memories, sessions=sessions, progress=progress)
                report["drain_s"] = round(wait_drained(http), 1)
                report["fill_s"] = round(time.perf_counter() - t0, 1)
                targets = urls(http)
                report["store"] = {
                    "stats": http.get("/api/memories", params={"limit": 1}).json()["stats"]["live"],
                    "sessions": http.get("/api/sessions/summary").json()["sessions"],
                    "comparisons": len(http.get("/api/predictor/comparisons", params={"limit": 1000}).json()),
                    "jobs": http.get("/api/pipeline/status").json()["jobs"],
                }
            with sign_in(url, home) as client:
                report["server"] = measure(client, targets, repeats=repeats)
            pages = {k: v for k, v in targets.items() if k.startswith("page ")}
            report["browser"] = browser_timings(url, home, pages, repeats=browser_repeats) if browser else {}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            if tmp is not None:
                tmp.cleanup()
    report["python"] = sys.version.split()[0]
    return report
