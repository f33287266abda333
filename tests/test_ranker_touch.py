"""Issue 39: every HTTP recall counted each returned hit as accessed (the rehearsal boost's input,
a rich-get-richer loop) with no way to turn it off per request. ``touch: false`` now leaves the
store unchanged; the default still counts (documented in README, "Recall and access counts").
Real SQLite store, the real FastAPI app."""

from __future__ import annotations

import time

from conftest import api_client


def access(client, memory_id: str) -> int:
    r = client.get(f"/api/memory/{memory_id}")
    assert r.status_code == 200, r.text
    return r.json()["access_count"]


def wait_for_access(client, memory_id: str, want: int) -> int:
    """The touch is a background write: poll until it lands (bounded, not a timing assertion)."""
    got = access(client, memory_id)
    for _ in range(200):
        if got >= want:
            break
        time.sleep(0.05)
        got = access(client, memory_id)
    return got


def test_recall_with_touch_false_counts_no_access(store) -> None:
    client = api_client(store)
    mid = client.post("/api/memory/remember", json={"content": "The deploy script lives in ops/deploy.sh"}).json()["id"]
    for _ in range(3):
        r = client.post("/api/memory/recall", json={"query": "deploy script", "touch": False})
        assert r.status_code == 200 and [h["id"] for h in r.json()["results"]] == [mid]
    # a default recall does count, so had the three above counted, the total would be 4
    client.post("/api/memory/recall", json={"query": "deploy script"})
    assert wait_for_access(client, mid, 1) == 1
    r = client.post("/api/memory/recall", json={"query": "deploy script", "touch": False})
    assert r.json()["results"][0]["access_count"] == 1


def test_touch_must_be_a_boolean(store) -> None:
    client = api_client(store)
    r = client.post("/api/memory/recall", json={"query": "x", "touch": "sometimes"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
