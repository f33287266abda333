"""The dashboard's login, pages and actions in process (issue 40, part 2).

Each finding of the issue is written as the attack or the user's action: a request without
the session cookie or the token on every dashboard and API route, a cross-origin request with
a valid cookie, a replayed or expired login code, memory text that tries to become markup, a
flag-wrong that must supersede (not overwrite) and label, a session-end review. None of the
routes existed before, so each test fails on the old code.
"""

from __future__ import annotations

import re
import time

from fastapi.testclient import TestClient

from conftest import TEST_BASE_URL, api_client
from memlane.dashboard.auth import CODE_TTL_S, COOKIE_NAME, TOKEN_RECHECK_S, DashboardAuth
from memlane.dashboard.service import FLAGGED_WRONG_LABEL, FLAGGED_WRONG_REASON, PAGE_SIZE
from memlane.storage import dashboard as dash_sql

PAGES = ("/", "/memories", "/sessions", "/predictor", "/knowledge", "/logs")


def browser(api: TestClient) -> TestClient:
    """A client on the same app that sends no token (a browser)."""
    return TestClient(api.app, base_url=TEST_BASE_URL, raise_server_exceptions=False)


def login(api: TestClient) -> TestClient:
    """A browser signed in through the one-time link."""
    code = api.post("/api/dashboard/login-code", json={}).json()
    b = browser(api)
    r = b.get(code["url"].replace("http://127.0.0.1:7437", ""), follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    return b


def session_with_injection(api: TestClient, key: str = "s1", texts: tuple[str, ...] = ()) -> list[str]:
    ids = [api.post("/api/memory/remember", json={"content": t, "project": "p"}).json()["id"] for t in texts]
    api.post("/api/hooks/session-start", json={"session_key": key, "project": "p"})
    api.post("/api/hooks/session-end", json={"session_key": key, "wait": True})
    return ids


def test_login_link_sets_a_strict_httponly_cookie_and_works_once(store):
    api = api_client(store)
    code = api.post("/api/dashboard/login-code", json={}).json()
    assert code["url"].startswith("http://127.0.0.1:7437/login?code=") and code["expires_in_s"] == CODE_TTL_S
    b = browser(api)
    r = b.get("/login", params={"code": code["code"]}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"  # no code or token in the page URL
    cookie = r.headers["set-cookie"]
    for attr in ("HttpOnly", "SameSite=Strict", "Path=/"):
        assert attr in cookie
    assert re.match(rf"{COOKIE_NAME}=[A-Za-z0-9_-]{{40,}};", cookie)
    assert b.get("/", headers={"accept": "text/html"}).status_code == 200
    again = browser(api).get("/login", params={"code": code["code"]}, follow_redirects=False)
    assert again.status_code == 401 and "not valid" in again.text and "set-cookie" not in again.headers
    assert browser(api).get("/login", params={"code": "guessed"}).status_code == 401
    assert browser(api).get("/login").status_code == 401


def test_login_codes_and_sessions_expire():
    t = [1000.0]
    auth = DashboardAuth(clock=lambda: t[0])
    code, _ = auth.issue_code()
    t[0] += CODE_TTL_S + 1
    assert auth.redeem(code) is None
    code, _ = auth.issue_code()
    sid = auth.redeem(code)
    assert sid and auth.valid(sid) and not auth.valid(sid[:-1] + "x")
    t[0] += 12 * 3600 + 1
    assert not auth.valid(sid) and auth.session_count() == 0


def test_rotating_the_token_ends_every_dashboard_session(store):
    from memlane.auth import rotate_token

    api = api_client(store)
    b = login(api)
    assert b.get("/").status_code == 200
    rotate_token(store.settings.home)
    time.sleep(TOKEN_RECHECK_S + 0.1)  # the token file is read at most once per TOKEN_RECHECK_S
    assert b.get("/").status_code == 401
    assert login(api_client(store)).get("/").status_code == 200  # a new link, under the new token


def test_a_login_code_needs_the_token_not_a_session(store):
    b = login(api_client(store))
    r = b.post("/api/dashboard/login-code", json={})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


def all_routes(routes):
    """Every route, walking included routers (their paths are complete: no prefix at include)."""
    for r in routes:
        inner = getattr(r, "original_router", None)
        if inner is not None:
            yield from all_routes(inner.routes)
        else:
            yield r


def test_every_route_refuses_a_request_without_cookie_or_token(store):
    api = api_client(store)
    b = browser(api)
    checked = 0
    for route in all_routes(api.app.routes):
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None) or {"GET"}
        if path in (None, "/health", "/login") or path.startswith("/static"):
            continue
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for method in methods - {"HEAD", "OPTIONS"}:
            r = b.request(method, concrete, json={} if method != "GET" else None)
            assert r.status_code == 401, (method, path, r.status_code)
            checked += 1
    assert checked > 40
    for path in PAGES + ("/static/app.js", "/static/vendor/uplot/uPlot.iife.min.js", "/mcp"):
        assert b.get(path).status_code == 401, path
    page = b.get("/memories", headers={"accept": "text/html"})
    assert page.status_code == 401 and "memlane dashboard" in page.text  # a page, not JSON, for a browser
    assert b.get("/api/memories", headers={"accept": "text/html"}).json()["error"]["code"] == "unauthorized"
    forged = browser(api)
    forged.cookies.set(COOKIE_NAME, "forged")
    assert forged.get("/").status_code == 401


def test_the_cookie_works_for_pages_and_the_api_but_not_cross_origin(store):
    api = api_client(store)
    b = login(api)
    for path in PAGES:
        r = b.get(path)
        assert r.status_code == 200, path
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY" and r.headers["cache-control"] == "no-store"
    assert b.post("/api/memory/remember", json={"content": "from the dashboard"}).status_code == 200
    evil = {"Origin": "http://evil.example"}
    assert b.get("/api/memories", headers=evil).status_code == 403
    assert b.post("/api/memory/remember", json={"content": "x"}, headers=evil).status_code == 403
    # a form post from any page (no JSON content type) is refused before the cookie is even read
    r = b.post(
        "/api/memory/remember", content=b"content=x", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "csrf_refused"
    assert b.post("/api/dashboard/logout", json={}).json() == {"ended": True}
    assert b.get("/").status_code == 401


def test_memory_text_is_escaped_on_every_page(store):
    api = api_client(store)
    evil = '<script>alert(1)</script><img src=x onerror=alert(2)> "quoted" & {{ 7*7 }}'
    mid = api.post("/api/memory/remember", json={"content": evil, "project": "<b>proj</b>"}).json()["id"]
    api.post("/api/hooks/session-start", json={"session_key": "<i>k</i>", "project": "<b>proj</b>", "context": "alert"})
    b = login(api)
    for path in ("/memories", f"/memories/{mid}", "/memories?q=alert", "/sessions", "/", "/sessions/%3Ci%3Ek%3C/i%3E"):
        html = b.get(path).text
        assert "<script>alert(1)" not in html and "<img src=x" not in html and "<b>proj</b>" not in html, path
        assert "&lt;i&gt;k&lt;/i&gt;" in html or "&lt;script&gt;" in html or "&lt;b&gt;proj" in html, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in b.get(f"/memories/{mid}").text
    assert "{{ 7*7 }}" in b.get(f"/memories/{mid}").text.replace("&#34;", '"')  # not evaluated as a template


def test_memory_list_is_paginated_and_filtered_on_the_server(store):
    api = api_client(store)
    batch = [
        {
            "content": f"memory number {i}",
            "project": "a" if i % 2 else "b",
            "type": "fact" if i % 3 else "note",
            "pinned": i % 5 == 0,
        }
        for i in range(60)
    ]
    api.post("/api/memory/remember", json={"memories": batch})
    b = login(api)
    first = b.get("/memories").text
    assert first.count('<li class="card') == PAGE_SIZE and "Page 1 of 3" in first and "60 in all" in first
    third = b.get("/memories", params={"page": 3}).text
    assert third.count('<li class="card') == 10 and "memory number 0" in third  # oldest last
    assert b.get("/memories", params={"page": 99}).text.count('<li class="card') == 0
    assert "30 in all" in b.get("/memories", params={"project": "a"}).text
    assert "12 in all" in b.get("/memories", params={"pinned": "yes"}).text
    assert "20 in all" in b.get("/memories", params={"type": "note"}).text
    api.delete(f"/api/memory/{api.get('/api/memories', params={'limit': 1}).json()['items'][0]['id']}")
    assert "59 in all" in b.get("/memories").text and "60 in all" in b.get("/memories", params={"state": "all"}).text
    assert "1 in all" in b.get("/memories", params={"state": "deleted"}).text
    health = b.get("/").text  # the store's counts, from the in-memory index
    assert "<dt>live memories</dt><dd>59</dd>" in health and "<dt>deleted</dt><dd>1</dd>" in health
    assert "<dt>pinned</dt><dd>12</dd>" in health
    hits = b.get("/memories", params={"q": "number 7", "project": "a"}).text
    assert "memory number 7" in hits and "memory number 8<" not in hits


def test_flag_wrong_supersedes_and_labels_every_session_that_injected_it(store):
    api = api_client(store)
    ids = session_with_injection(api, "s1", ("The deploy script lives in ops/deploy.sh",))
    session_with_injection(api, "s2")
    rows = api.get("/api/sessions/s1").json()["memories"]
    assert rows[0]["memory_id"] == ids[0] and rows[0]["was_injected"]
    b = login(api)
    r = b.post(
        f"/api/dashboard/memories/{ids[0]}/flag-wrong",
        json={"reason": "inaccurate", "corrected": "The deploy script lives in tools/ship.sh", "note": "moved"},
    )
    out = r.json()
    assert r.status_code == 200 and out["action"] == "superseded" and out["labelled"] == 2
    assert out["old"]["superseded_by"] == out["new"]["id"] and out["old"]["content"].endswith("ops/deploy.sh")
    assert out["new"]["source_type"] == "user_correction" and out["new"]["source_id"] == ids[0]
    for key in ("s1", "s2"):
        row = next(m for m in api.get(f"/api/sessions/{key}").json()["memories"] if m["memory_id"] == ids[0])
        assert row["label"] == FLAGGED_WRONG_LABEL and FLAGGED_WRONG_REASON in row["label_reason"]
    history = [h["event"] for h in api.get(f"/api/memory/{ids[0]}/history").json()]
    assert history[-1] == "superseded"
    card = b.get(f"/memories/{ids[0]}").text
    assert "superseded" in card and out["new"]["id"][:8] in card and f"{FLAGGED_WRONG_LABEL:.2f}" in card
    again = b.post(f"/api/dashboard/memories/{ids[0]}/flag-wrong", json={"reason": "inaccurate", "corrected": "x"})
    assert again.status_code == 409


def test_flag_wrong_outdated_forgets_and_duplicate_points_at_the_original(store):
    api = api_client(store)
    a, b_, c = session_with_injection(api, "s1", ("Standup is at 9", "Standup is at nine", "Lunch at noon"))
    br = login(api)
    assert br.post(f"/api/dashboard/memories/{a}/flag-wrong", json={"reason": "too_specific"}).status_code == 422
    assert br.post(f"/api/dashboard/memories/{a}/flag-wrong", json={"reason": "nope"}).status_code == 422
    out = br.post(f"/api/dashboard/memories/{c}/flag-wrong", json={"reason": "outdated"}).json()
    assert out["action"] == "forgotten" and out["old"]["is_deleted"] and out["new"] is None
    dup = br.post(f"/api/dashboard/memories/{b_}/flag-wrong", json={"reason": "duplicate", "original_id": a}).json()
    assert dup["old"]["superseded_by"] == a and dup["action"] == "superseded"


def test_session_end_review_approves_edits_and_rejects(store):
    api = api_client(store)
    src = api.post(
        "/api/memory/remember", json={"content": "turn", "source_type": "session", "source_id": "conv-1"}
    ).json()["id"]
    inferred = [
        api.post(
            "/api/memory/remember",
            json={"content": f"Inferred fact {i}", "source_type": "pipeline_v2", "source_id": src, "confidence": 0.8},
        ).json()["id"]
        for i in range(3)
    ]
    api.post("/api/hooks/session-start", json={"session_key": "conv-1"})
    api.post("/api/hooks/session-end", json={"session_key": "conv-1", "wait": True})
    b = login(api)
    page = b.get("/sessions/conv-1").text
    assert "review required (3)" in page
    assert b.post(f"/api/dashboard/review/{inferred[0]}", json={"action": "approve"}).json()["review"] == "approved"
    edited = b.post(f"/api/dashboard/review/{inferred[1]}", json={"action": "edit", "content": "Corrected fact"}).json()
    assert edited["memory"]["content"] == "Corrected fact" and edited["memory"]["metadata"]["review"] == "edited"
    rejected = b.post(f"/api/dashboard/review/{inferred[2]}", json={"action": "reject"}).json()
    assert rejected["memory"]["is_deleted"] and rejected["memory"]["metadata"]["review"] == "rejected"
    assert b.post(f"/api/dashboard/review/{inferred[0]}", json={"action": "maybe"}).status_code == 422
    page = b.get("/sessions/conv-1").text
    assert "review required (0)" in page and "Reviewed (3)" in page
    approved = api.get(f"/api/memory/{inferred[0]}").json()
    assert approved["confidence"] == 1.0 and approved["metadata"]["review"] == "approved"
    rows = store.db.read(lambda c: dash_sql.session_review_rows(c, "conv-1"))
    assert {r["id"] for r in rows} == set(inferred)


def test_predictor_page_shows_cold_start_without_a_predictor(store):
    api = api_client(store)
    session_with_injection(api, "s1", ("one memory",))
    html = login(api).get("/predictor").text
    assert "does not run in this daemon" in html and 'id="predictor-mode"' in html


def test_sessions_pages_paginate_and_unknown_ids_are_404_pages(store):
    api = api_client(store)
    for i in range(30):
        api.post("/api/hooks/session-start", json={"session_key": f"k{i:02d}"})
    b = login(api)
    assert "Page 1 of 2" in b.get("/sessions").text and b.get("/sessions?page=2").text.count("/sessions/k") == 5
    for path in ("/memories/nope", "/sessions/nope", "/knowledge/entities/nope"):
        r = b.get(path)
        assert r.status_code == 404 and "not found" in r.text
    assert b.get("/memories?state=bogus").status_code == 422


def test_stale_and_drifting_memories_need_attention_and_show_why_on_their_card(store):
    api = api_client(store)
    batch = [{"content": f"The release checklist item {i} is open", "project": "p"} for i in range(4)]
    ids = [r["id"] for r in api.post("/api/memory/remember", json={"memories": batch}).json()["results"]]
    b = login(api)
    assert "stale or drifting" not in b.get("/").text  # nothing flagged: nothing needs attention
    for mid in ids[:2]:
        r = api.post(f"/api/memory/{mid}/signal", json={"source": "linear", "evidence": {"issue": "REL-1 closed"}})
        assert r.status_code == 200
    health = b.get("/").text
    assert "2 stale or drifting memories" in health and "2 external signal" in health
    assert 'href="/memories?drift=flagged&amp;state=all"' in health
    flagged = b.get("/memories", params={"drift": "flagged", "state": "all"}).text
    assert "2 in all" in flagged and flagged.count('<li class="card') == 2
    assert "[DRIFT: external signal from linear]" in flagged
    assert "2 in all" in b.get("/memories", params={"drift": "trusted"}).text
    searched = b.get("/memories", params={"q": "release checklist", "drift": "flagged"}).text
    assert searched.count('<li class="card') == 2 and "drifting" in searched
    card = b.get(f"/memories/{ids[0]}").text
    assert 'id="drift-warning"' in card and "[DRIFT: external signal from linear]" in card
    assert "score and confidence × 0.5" in card  # 1 - drift.penalty
    assert "external signal" in card and 'data-action="drift-resolve"' in card
    error_id = api.get("/api/drift/errors", params={"memory_id": ids[0]}).json()["items"][0]["error_id"]
    # the card's "Dismiss (false positive)" button calls the drift API with the session cookie
    assert b.post(f"/api/drift/errors/{error_id}/resolve", json={}).status_code == 200
    card = b.get(f"/memories/{ids[0]}").text
    assert 'id="drift-warning"' not in card and "resolved" in card
    assert "1 stale or drifting memory" in b.get("/").text
    assert "1 in all" in b.get("/memories", params={"drift": "flagged"}).text
    api.patch(f"/api/memory/{ids[1]}", json={"content": "The release checklist item 1 is closed"})
    assert "stale or drifting" not in b.get("/").text  # an update resolves its rows


def test_logs_page_lists_log_events_and_errors_filtered_and_paginated_on_the_server(store):
    import logging

    api = api_client(store)
    b = login(api)  # the observability hub (and the process's log ring) exists once the app is built
    marker = f"logs-test-{time.monotonic_ns()}"
    pred, pipe = logging.getLogger("memlane.predictor.logs_test"), logging.getLogger("memlane.pipeline.logs_test")
    level = logging.getLogger("memlane").getEffectiveLevel()
    for i in range(30):
        pred.warning("%s predictor event %d <b>bold</b>", marker, i)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        pipe.error("%s pipeline failure", marker, exc_info=True)
    assert level <= logging.WARNING  # the records above were created at the daemon's log level
    page1 = b.get("/logs", params={"q": marker, "category": "predictor"}).text
    assert "30 in all" in page1 and "Page 1 of 2" in page1 and page1.count(f"{marker} predictor event") == PAGE_SIZE
    assert f"{marker} predictor event 29" in page1 and "&lt;b&gt;bold&lt;/b&gt;" in page1 and "<b>bold" not in page1
    page2 = b.get("/logs", params={"q": marker, "category": "predictor", "page": 2}).text
    assert page2.count(f"{marker} predictor event") == 5 and f"{marker} predictor event 0 &lt;b&gt;" in page2
    errors_only = b.get("/logs", params={"q": marker, "level": "ERROR"}).text
    assert "1 in all" in errors_only and "pipeline failure" in errors_only and "RuntimeError: boom" in errors_only
    api_page = api.get("/api/analytics/logs", params={"q": marker, "category": "pipeline"}).json()
    assert api_page["total"] == 1 and api_page["items"][0]["logger"] == "memlane.pipeline.logs_test"
    assert api_page["items"][0]["level"] == "ERROR" and api_page["categories"]["predictor"] >= 30
    assert api.get("/api/analytics/logs", params={"level": "LOUD"}).status_code == 422
    assert b.get("/logs", params={"level": "loud"}).status_code == 422
    # the error ring: a hook the daemon refuses lands there as a connector error
    assert api.post("/api/hooks/session-start", json={"session_key": ""}).status_code == 422
    errors = b.get("/logs", params={"kind": "errors", "stage": "connector"}).text
    assert 'id="log-errors"' in errors and "connector" in errors and "1 in all" in errors
    assert b.get("/logs", params={"kind": "other"}).status_code == 422


def test_entity_page_pages_its_mentions_and_attributes_on_the_server(store):
    from memlane.graph import persist_extraction

    api = api_client(store)
    batch = [{"content": f"Alice Smith works on project {i:02d}"} for i in range(30)]
    ids = [r["id"] for r in api.post("/api/memory/remember", json={"memories": batch}).json()["results"]]
    for i, mid in enumerate(ids):
        at = f"2026-01-01T00:{i:02d}:00.000Z"
        store.db.write(
            lambda c, mid=mid, i=i, at=at: persist_extraction(
                c,
                memory_id=mid,
                entities=[],
                at=at,
                relations=[
                    {"source": "Alice Smith", "target": f"Project {i:02d}", "relation": "works_on", "confidence": 0.9}
                ],
            )
        )
    alice = next(
        e
        for e in api.get("/api/knowledge/entities", params={"q": "Alice"}).json()["entities"]
        if e["name"] == "Alice Smith"
    )
    attrs = api.get(f"/api/knowledge/entities/{alice['id']}/attributes", params={"limit": 500}).json()["attributes"]
    b = login(api)
    first = b.get(f"/knowledge/entities/{alice['id']}").text
    mentions = first.split('id="mentions"')[1]
    assert mentions.count("/memories/") == PAGE_SIZE and "30 in all" in mentions
    second = b.get(f"/knowledge/entities/{alice['id']}", params={"mentions_page": 2}).text.split('id="mentions"')[1]
    assert second.count("/memories/") == 5 and "Page 2 of 2" in second
    shown = set(re.findall(r"works on project (\d\d)", mentions + second))
    assert shown == {f"{i:02d}" for i in range(30)}  # the two pages together: every mention once
    assert f"{len(attrs)} in all" in first
    assert (
        b.get(f"/knowledge/entities/{alice['id']}", params={"mentions_page": 9})
        .text.split('id="mentions"')[1]
        .count("/memories/")
        == 0
    )


def test_predictor_series_is_reread_when_a_comparison_is_added(store):
    from memlane.dashboard.service import DashboardService
    from memlane.storage import predictor as pred_sql

    api_client(store)
    svc = DashboardService(store)

    def add(key: str, won: int) -> None:
        store.db.write(
            lambda c: pred_sql.insert_comparison(
                c,
                {
                    "id": key,
                    "session_key": key,
                    "project": "p",
                    "predictor_ndcg": 0.9 if won else 0.1,
                    "baseline_ndcg": 0.5,
                    "predictor_won": won,
                    "margin": 0.4 if won else -0.4,
                    "scorer_confidence": 0.9,
                    "ema_updated": 1,
                    "success_rate": 0.5,
                    "alpha": 0.5,
                    "predictor_top_ids": ["a"],
                    "baseline_top_ids": ["b"],
                    "relevance_scores": {"a": 1.0},
                    "model_version": 1,
                    "created_at": f"2026-01-01T00:00:0{len(key)}.000Z",
                },
            )
        )

    add("s1", 1)
    first = svc.predictor(page=1)
    assert first["series"]["won"] == [0.4] and first["page"].total == 1
    assert svc.predictor(page=1)["series"] is first["series"]  # unchanged table: reused
    add("s22", 0)
    second = svc.predictor(page=1)
    assert second["series"]["won"] == [0.4, None] and second["series"]["lost"] == [None, -0.4]
    assert [c["session_key"] for c in second["comparisons"]] == ["s22", "s1"] and second["series_age_s"] == 0.0


def test_memory_card_shows_a_page_of_its_prediction_errors_with_the_total(store):
    api = api_client(store)
    mid = api.post("/api/memory/remember", json={"content": "The office is on floor 3"}).json()["id"]
    for i in range(PAGE_SIZE + 1):
        assert api.post(f"/api/memory/{mid}/signal", json={"source": f"badge-reader-{i}"}).status_code == 200
    card = login(api).get(f"/memories/{mid}").text
    assert card.count('data-drift-error="') == PAGE_SIZE and f"The newest {PAGE_SIZE} of {PAGE_SIZE + 1}" in card
    assert "badge-reader-25" in card and "(badge-reader-0)" not in card  # newest first
