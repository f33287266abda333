"""The dashboard end to end in a real browser (issue 40): Debian's chromium driven by
Playwright against a real daemon process filled with a LoCoMo conversation replayed through
the session lifecycle (``memlane replay locomo --max-conversations 1``), with a scripted
loopback LLM (benchmarks.dashboard_llm) as the extraction model and continuity judge.

Flows: sign in through the one-time link; the predictor tab in cold start (before the fill)
and in active mode (after it, a trained model serving); search and open a memory card; edit;
flag wrong and see the superseding memory and the negative label; forget and recover; approve
and reject in the session-end review; a session's comparison inspector; the knowledge graph; a
stale memory in Needs attention, the filtered list and its card; the Logs page.
Screenshots of every page go to ``bench-results/dashboard/`` (CI artefacts), with each page's
navigation timing (``browser-timing.json``; recorded, never asserted).

The store uses BM25 recall only (``embedding.provider: none``): the local model would make the
fill alone take minutes on 2 cores, and nothing here depends on vectors.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import Daemon

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium; .ci/run installs it)",
)

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "bench-results" / "dashboard"
LOCOMO = ROOT.parent / "shared" / "bench-data" / "locomo" / "locomo10.json"
#: Question sessions replayed after the conversation's 19 sessions (each one a labelled session).
QUESTIONS = 30
TIMINGS: dict[str, dict[str, float]] = {}


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(MEMLANE_HOME=str(home), MEMLANE_CONFIG=str(home / "no-such-config.yaml"))
    return env


def _wait(fn, timeout_s: float = 120.0, every_s: float = 0.3):
    """Poll ``fn`` until truthy (a guard against hanging, not a measurement)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every_s)
    pytest.fail(f"condition not met within {timeout_s} s")


@pytest.fixture(scope="module")
def llm():
    from benchmarks.dashboard_llm import fill_reply
    from benchmarks.scripted_llm import ScriptedLlmServer

    with ScriptedLlmServer(fill_reply) as server:
        yield server


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, llm):
    home = tmp_path_factory.mktemp("dash") / "home"
    home.mkdir()
    d = Daemon(
        home,
        home.parent / "daemon.log",
        provider="none",
        extra_env={
            "MEMLANE_LLM__PROVIDER": "ollama",
            "MEMLANE_LLM__BASE_URL": llm.url,
            "MEMLANE_LLM__MODEL": "scripted",
            "MEMLANE_MEMORY__PIPELINE_V2__WORKER__POLL_MS": "200",
        },
    )
    d.wait_ready()
    yield d
    d.kill()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        yield b
        b.close()
    (SHOTS / "browser-timing.json").write_text(json.dumps(TIMINGS, indent=2))


def sign_in_url(d: Daemon) -> str:
    """``memlane dashboard --no-open`` as a user runs it: the printed one-time link."""
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "dashboard", "--no-open", "--url", d.url],
        env=_env(d.home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    url = out.stdout.strip().splitlines()[-1]
    assert url.startswith(d.url + "/login?code=")
    return url


@pytest.fixture(scope="module")
def page(browser, daemon):
    """A signed-in page (light scheme)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    pg = ctx.new_page()
    pg.goto(sign_in_url(daemon))
    yield pg
    ctx.close()


def visit(page, url: str, name: str | None = None, *, full: bool = True):
    """Go to ``url``; record its navigation timing; screenshot it as ``name``."""
    resp = page.goto(url)
    page.wait_for_load_state("load")
    nav = page.evaluate("""() => { const n = performance.getEntriesByType('navigation')[0];
        return {ttfb_ms: n.responseStart - n.startTime, dom_ready_ms: n.domContentLoadedEventEnd - n.startTime,
                load_ms: n.loadEventEnd - n.startTime}; }""")
    if name:
        TIMINGS[name] = {k: round(v, 1) for k, v in nav.items()}
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)
    return resp


@pytest.fixture(scope="module")
def filled(daemon, page):
    """The daemon after one LoCoMo conversation replayed through the session lifecycle, its
    extraction queue drained and the predictor trained (a model serving)."""
    if not LOCOMO.is_file():
        pytest.skip(f"LoCoMo data not found at {LOCOMO}")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "memlane",
            "replay",
            "locomo",
            "--data",
            str(LOCOMO),
            "--url",
            daemon.url,
            "--max-conversations",
            "1",
            "--max-questions",
            str(QUESTIONS),
            "--out",
            str(daemon.home.parent / "replay.json"),
        ],
        env=_env(daemon.home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    with daemon.client(timeout=300) as c:

        def drained():
            jobs = c.get("/api/pipeline/status").json()["jobs"]
            return not any(n for counts in jobs.values() for s, n in counts.items() if s in ("pending", "leased"))

        _wait(drained, timeout_s=300)
        status = c.get("/api/predictor/status").json()
        if status["phase"] == "collecting":
            c.post("/api/predictor/train", json={})
        status = c.get("/api/predictor/status").json()
        assert status["state"]["model_version"] >= 1 and status["phase"] != "collecting", status["phase"]
    return daemon


def api(d: Daemon) -> httpx.Client:
    return d.client()


# -- the flows, in order -----------------------------------------------------------------------
def test_sign_in_through_the_one_time_link_then_it_is_spent(browser, daemon, page):
    assert page.url == daemon.url + "/"  # the code is gone from the address bar
    assert page.get_by_role("heading", level=1).inner_text().startswith("Health")
    cookie = next(c for c in page.context.cookies() if c["name"] == "memlane_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    visit(page, daemon.url + "/", "health-empty")
    other = browser.new_context()
    try:
        spent = other.new_page()
        again = spent.goto(page.context.pages[0].url)  # the dashboard URL itself, without a session
        assert again.status == 401 and "memlane dashboard" in spent.content()
        url = sign_in_url(daemon)
        assert spent.goto(url).url == daemon.url + "/"
        assert spent.goto(url).status == 401  # a used link signs nobody in
    finally:
        other.close()


def test_predictor_tab_in_cold_start(daemon, page):
    visit(page, daemon.url + "/predictor", "predictor-cold-start")
    assert page.locator("#predictor-mode").inner_text() == "cold start"
    assert "Collecting training data: 0/10" in page.inner_text("main")
    assert page.locator("progress").count() == 1


def test_health_page_after_the_replay(filled, page):
    visit(page, filled.url + "/", "health")
    main = page.inner_text("main")
    assert "conv-26" in main  # recent sessions
    assert page.locator(".domain").count() == 7
    assert page.locator("[data-spark] canvas").count() >= 3  # uPlot sparklines, loaded from the daemon
    dark = page.context.browser.new_context(color_scheme="dark", viewport={"width": 1280, "height": 900})
    try:
        dp = dark.new_page()
        dp.goto(sign_in_url(filled))
        visit(dp, filled.url + "/", "health-dark")
        bg = dp.evaluate("getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(20, 21, 23)"  # the dark scheme's --bg
    finally:
        dark.close()


def test_search_and_open_a_memory_card(filled, page):
    visit(page, filled.url + "/memories", "memories")
    page.fill("input[name=q]", "adoption agencies")
    page.select_option("select[name=source]", "session")  # the conversation's own turns
    page.click("form[role=search] button[type=submit]")
    page.wait_for_load_state("load")
    assert "q=adoption" in page.url
    cards = page.locator("li.card")
    assert cards.count() >= 1
    page.screenshot(path=str(SHOTS / "memories-search.png"), full_page=True)
    first = cards.first.inner_text().lower()
    assert "adopt" in first
    cards.first.get_by_role("link", name="Open").click()
    page.wait_for_load_state("load")
    assert "/memories/" in page.url
    prov = page.locator("dl[aria-label=Provenance]").inner_text()
    assert "session" in prov and "conv-26-s" in prov and "replay" in prov
    visit(page, page.url, "memory-card")


def _injected_memory(d: Daemon, key: str) -> str:
    with api(d) as c:
        rows = c.get(f"/api/sessions/{key}").json()["memories"]
    return next(r["memory_id"] for r in rows if r["was_injected"] and not r["superseded_by"] and not r["is_deleted"])


def test_edit_a_memory(filled, page):
    mid = _injected_memory(filled, "conv-26-q3")
    visit(page, f"{filled.url}/memories/{mid}")
    page.get_by_role("button", name="Edit").click()
    box = page.locator("#edit-form textarea")
    text = box.input_value() + " (checked by the user)"
    box.fill(text)
    with page.expect_navigation():
        page.locator("#edit-form button[type=submit]").click()
    assert page.locator("#memory-content").inner_text() == text
    assert "edited in the dashboard" in page.inner_text("main")
    visit(page, page.url, "memory-edited")


def test_flag_wrong_supersedes_and_records_the_negative_label(filled, page):
    key = "conv-26-q0"
    mid = _injected_memory(filled, key)
    visit(page, f"{filled.url}/memories/{mid}")
    page.get_by_role("button", name="Flag wrong").click()
    dialog = page.locator("#flag-dialog")
    assert dialog.is_visible()
    page.screenshot(path=str(SHOTS / "flag-wrong-modal.png"))
    dialog.locator("input[value=inaccurate]").check()
    dialog.locator("textarea[name=corrected]").fill("Corrected by the user: this turn was misremembered.")
    dialog.locator("input[name=note]").fill("wrong speaker")
    with page.expect_navigation():
        dialog.get_by_role("button", name="Save correction").click()
    new_id = page.url.rsplit("/", 1)[1]
    assert new_id != mid and "user_correction" in page.inner_text("main")
    visit(page, f"{filled.url}/memories/{mid}", "memory-superseded")
    main = page.inner_text("main")
    assert "superseded" in main and new_id[:8] in main and "-0.50" in main
    with api(filled) as c:
        assert c.get(f"/api/memory/{mid}").json()["superseded_by"] == new_id
        row = next(r for r in c.get(f"/api/sessions/{key}").json()["memories"] if r["memory_id"] == mid)
    assert row["label"] == -0.5 and "negative:user_flagged_wrong" in row["label_reason"]
    # the predictor's training rows (what train_from_db reads) carry it
    from memlane.storage import predictor as pred_sql

    conn = sqlite3.connect(f"file:{filled.home / 'memories.db'}?mode=ro", uri=True)
    try:
        labels = [c.label for c in pred_sql.session_candidates(conn, key, None) if c.memory_id == mid]
    finally:
        conn.close()
    assert labels == [-0.5]


def test_forget_and_recover(filled, page):
    mid = _injected_memory(filled, "conv-26-q5")
    visit(page, f"{filled.url}/memories/{mid}")
    with page.expect_navigation():
        page.get_by_role("button", name="Forget").click()
    assert page.get_by_role("button", name="Recover").is_visible()
    assert "deleted" in page.locator(".badges").first.inner_text()
    page.screenshot(path=str(SHOTS / "memory-forgotten.png"), full_page=True)
    with page.expect_navigation():
        page.get_by_role("button", name="Recover").click()
    assert page.get_by_role("button", name="Forget").is_visible()
    with api(filled) as c:
        events = [h["event"] for h in c.get(f"/api/memory/{mid}/history").json()]
    assert events[-2:] == ["deleted", "recovered"]


def _session_with_inferred(d: Daemon, n: int = 2) -> str:
    conn = sqlite3.connect(f"file:{d.home / 'memories.db'}?mode=ro", uri=True)
    try:
        row = conn.execute(
            """SELECT m.source_id, count(*) FROM memories d JOIN memories m ON m.id = d.source_id
                              WHERE d.source_type = 'pipeline_v2' AND m.source_id LIKE 'conv-26-s%'
                              GROUP BY m.source_id HAVING count(*) >= ? ORDER BY count(*) DESC LIMIT 1""",
            (n,),
        ).fetchone()
    finally:
        conn.close()
    assert row is not None, "the scripted extraction inferred nothing"
    return row[0]


def test_session_end_review_approve_and_reject(filled, page):
    key = _session_with_inferred(filled)
    visit(page, f"{filled.url}/sessions/{key}", "session")
    items = page.locator(".review-item")
    before = items.count()
    assert before >= 2
    first, second = items.nth(0).get_attribute("data-memory"), items.nth(1).get_attribute("data-memory")
    with page.expect_navigation():
        items.nth(0).get_by_role("button", name="Approve").click()
    with page.expect_navigation():
        page.locator(f".review-item[data-memory='{second}']").get_by_role("button", name="Reject").click()
    assert page.locator(".review-item").count() == before - 2
    reviewed = page.locator("#review-h").locator("xpath=..").inner_text()
    assert "approved" in reviewed and "rejected" in reviewed
    page.locator("#review-h").scroll_into_view_if_needed()
    visit(page, page.url, "session-review")
    with api(filled) as c:
        a, r = c.get(f"/api/memory/{first}").json(), c.get(f"/api/memory/{second}").json()
    assert a["metadata"]["review"] == "approved" and not a["is_deleted"]
    assert r["metadata"]["review"] == "rejected" and r["is_deleted"]


def test_predictor_tab_active_and_the_comparison_inspector(filled, page):
    visit(page, filled.url + "/predictor", "predictor-active")
    assert page.locator("#predictor-mode").inner_text() == "active"
    main = page.inner_text("main")
    assert "NDCG@10 over your last" in main and "baseline" in main
    assert page.locator("svg.split").count() == 1 and page.locator("#winloss canvas").count() >= 1
    assert page.locator("#ndcg canvas").count() >= 1 and page.locator("#training canvas").count() >= 1
    link = page.locator("#cmp-h").locator("xpath=..").locator("table a").first
    key = link.inner_text()
    with page.expect_navigation():
        link.click()
    inspector = page.locator("#insp-h").locator("xpath=..")
    text = inspector.inner_text()
    assert "Predictor ranking" in text and "Baseline ranking" in text and "Confidence gate" in text
    assert inspector.locator("ol.ranked").count() == 2
    page.locator("#insp-h").scroll_into_view_if_needed()
    visit(page, page.url, "comparison-inspector")
    assert key in page.inner_text("h1")
    visit(page, filled.url + "/sessions", "sessions")


def test_knowledge_entities_graph_and_pipeline(filled, page):
    visit(page, filled.url + "/knowledge", "knowledge")
    main = page.inner_text("main")
    assert "extraction" in main and "Queue" in main
    with page.expect_navigation():
        page.locator("#ent-h").locator("xpath=..").locator("table a").first.click()
    visit(page, page.url, "entity")
    assert page.locator("svg.graph, p.muted").count() >= 1


def test_keyboard_reaches_the_skip_link_and_the_navigation(filled, page):
    visit(page, filled.url + "/memories")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Health"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"  # a visible focus style


def test_a_stale_memory_needs_attention_and_its_card_says_why(filled, page):
    mid = _injected_memory(filled, "conv-26-q7")
    with api(filled) as c:
        r = c.post(f"/api/memory/{mid}/signal", json={"source": "calendar", "evidence": {"event": "moved"}})
        assert r.status_code == 200, r.text
    visit(page, filled.url + "/", "health-attention")
    attention = page.locator("#attention-h").locator("xpath=..")
    assert "stale or drifting memor" in attention.inner_text() and "external signal" in attention.inner_text()
    with page.expect_navigation():
        attention.get_by_role("link", name="stale or drifting").click()
    assert "drift=flagged" in page.url
    cards = page.locator("li.card")
    assert cards.count() >= 1 and "[DRIFT: external signal from calendar]" in page.inner_text("main")
    visit(page, page.url, "memories-drifting")
    with page.expect_navigation():
        page.locator(f"li.card a[href='/memories/{mid}']").click()
    assert "[DRIFT: external signal from calendar]" in page.locator("#drift-warning").inner_text()
    assert "drifting" in page.locator(".badges").first.inner_text()
    visit(page, page.url, "memory-drifting")
    with page.expect_navigation():
        page.get_by_role("button", name="Dismiss (false positive)").click()
    assert (
        page.locator("#drift-warning").count() == 0
        and "resolved" in page.locator("#drift-h").locator("xpath=..").inner_text()
    )


def test_logs_page_filters_events_and_errors_on_the_server(filled, page):
    visit(page, filled.url + "/logs", "logs")
    assert page.locator("h1").inner_text() == "Logs"
    options = page.locator("select[name=category] option")
    assert options.count() >= 2  # "any" and at least one category the daemon logged under
    category = options.nth(1).get_attribute("value")
    page.select_option("select[name=category]", category)
    with page.expect_navigation():
        page.locator("form[role=search] button[type=submit]").click()
    assert f"category={category}" in page.url
    rows = page.locator("#log-events tbody tr")
    assert rows.count() >= 1
    assert all(rows.nth(i).locator("td").nth(2).inner_text() == category for i in range(rows.count()))
    with api(filled) as c:  # a hook the daemon refuses lands in the error ring, stage connector
        assert c.post("/api/hooks/session-start", json={"session_key": ""}).status_code == 422
    visit(page, filled.url + "/logs?kind=errors&stage=connector", "logs-errors")
    assert page.locator("#log-errors tbody tr").count() >= 1
    assert "connector" in page.locator("#log-errors tbody tr").first.inner_text()
