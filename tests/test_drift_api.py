"""Drift over HTTP and MCP (issue 41): the external-signal route, the prediction-error listing
with the memory attached, dismissal, confidence propagation, the staleness sweep, bad input in the
one error shape; the two MCP tools over the in-process /mcp and the stdio server against a real
daemon."""

from __future__ import annotations

import anyio
import pytest

from conftest import api_client
from memlane.services.inputs import RememberInput
from memlane.storage import relations
from test_mcp import error_text, http_session, ok, stdio_session


def test_signal_listing_resolve_and_propagation_routes(store, tmp_path):
    c = store
    a = c.memories.remember(RememberInput(content="The billing job runs nightly at 02:00.", confidence=0.9)).id
    b = c.memories.remember(RememberInput(content="Invoices are emailed after the billing job.", confidence=0.9)).id
    c.db.write(lambda conn: relations.add(conn, a, b, "required_with", at="2026-01-01T00:00:00.000Z"))
    api = api_client(c)
    r = api.post(
        f"/api/memory/{a}/signal",
        json={"source": "git", "evidence": {"commit": "abc123", "message": "billing job hourly"}, "weight": 2.0},
    )
    assert r.status_code == 200, r.text
    row = r.json()
    assert (row["error_type"], row["memory_id"], row["weight"]) == ("memory_external_signal", a, 2.0)
    assert row["context"] == {"source": "git", "evidence": {"commit": "abc123", "message": "billing job hourly"}}
    items = api.get("/api/drift/errors").json()["items"]
    assert [i["error_id"] for i in items] == [row["error_id"]]
    assert items[0]["memory"]["content"] == "The billing job runs nightly at 02:00."
    assert api.get("/api/drift/errors", params={"error_type": "memory_drift"}).json()["items"] == []
    rec = api.post("/api/memory/recall", json={"query": "billing job nightly", "limit": 5}).json()
    top = next(h for h in rec["results"] if h["id"] == a)
    assert top["content"].startswith("[DRIFT: external signal from git]")
    # propagation: a validated memory's confidence and its neighbour's
    ch = api.post(f"/api/memory/{a}/confidence", json={"confidence": 0.2}).json()["changed"]
    assert ch[a] == 0.2 and b in ch
    # dismissal
    assert api.post(f"/api/drift/errors/{row['error_id']}/resolve").status_code == 200
    assert api.get("/api/drift/errors").json()["items"] == []
    assert len(api.get("/api/drift/errors", params={"resolved": "all"}).json()["items"]) == 1
    assert api.post(f"/api/drift/errors/{row['error_id']}/resolve").status_code == 404
    assert api.post("/api/stale/scan", json={}).json()["checked"] == 0


@pytest.mark.parametrize(
    "path,body,status",
    [
        ("/api/memory/{a}/signal", {"source": "", "evidence": {}}, 422),
        ("/api/memory/{a}/signal", {"source": "git", "evidence": [1, 2]}, 422),
        ("/api/memory/{a}/signal", {"source": "git", "weight": 11}, 422),
        ("/api/memory/{a}/signal", {"source": "git", "nope": 1}, 422),
        ("/api/memory/unknown-id/signal", {"source": "git"}, 404),
        ("/api/memory/{a}/confidence", {"confidence": 1.5}, 422),
        ("/api/memory/unknown-id/confidence", {"confidence": 0.5}, 404),
        ("/api/stale/scan", {"project": 5}, 422),
    ],
)
def test_bad_input_is_4xx_in_the_one_shape(store, path, body, status):
    a = store.memories.remember(RememberInput(content="x memory")).id
    r = api_client(store).post(path.format(a=a), json=body)
    assert r.status_code == status, r.text
    assert set(r.json()["error"]) >= {"code", "message"}


def test_bad_listing_filters_are_422(store):
    api = api_client(store)
    for params in ({"error_type": "nope"}, {"resolved": "maybe"}, {"limit": 0}, {"offset": -1}):
        r = api.get("/api/drift/errors", params=params)
        assert r.status_code == 422 and "error" in r.json()


async def _mcp_scenario(s, mid: str) -> None:
    row = ok(
        await s.call_tool(
            "memory_record_signal", {"id": mid, "source": "linear", "evidence": {"ticket": "ENG-1", "state": "done"}}
        )
    )
    assert row["error_type"] == "memory_external_signal"
    items = ok(await s.call_tool("memory_prediction_errors", {}))["items"]
    assert [(i["memory_id"], i["memory"]["content"]) for i in items] == [(mid, "Ticket ENG-1 blocks the release.")]
    hits = ok(await s.call_tool("memory_search", {"query": "ENG-1 release blocker"}))
    assert hits[0]["content"].startswith("[DRIFT: external signal from linear]")
    assert "not found" in error_text(
        await s.call_tool("memory_record_signal", {"id": "nope", "source": "x", "evidence": {}})
    )


def test_mcp_tools_over_http_and_stdio(start_daemon, tmp_path):
    d = start_daemon(provider="none")
    with d.client() as http:
        m1 = http.post("/api/memory/remember", json={"content": "Ticket ENG-1 blocks the release."}).json()["id"]

    async def main():
        async with http_session(d.url, d.headers) as s:
            await _mcp_scenario(s, m1)
        with d.client() as http:
            http.delete(f"/api/memory/{m1}")
            m2 = http.post("/api/memory/remember", json={"content": "Ticket ENG-1 blocks the release."}).json()["id"]
        async with stdio_session(d.url, tmp_path, token_home=d.home) as s:
            await _mcp_scenario(s, m2)

    anyio.run(main)
