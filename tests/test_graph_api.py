"""``/api/knowledge/...`` through FastAPI's TestClient over a real store: entities (list,
search, one with mentions), aspects, attributes, one-hop expansion; bad input is a 4xx in the
one error shape, never a 500."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from conftest import api_client
from memlane.graph import persist_extraction

AT = "2026-01-01T00:00:00.000Z"


@pytest.fixture
def api(open_store):
    c = open_store(memory={"pipelineV2": {"graph": {"boost_weight": 0.15}}})  # the seed's boost (memlane ships 0)
    with api_client(c) as client:
        r = client.post("/api/memory/remember", json={"content": "Alice Smith prefers Vim over Emacs."})
        mid = r.json()["id"]
        client.post("/api/memory/remember", json={"content": "Billing runs nightly exports."})
        c.db.write(
            lambda conn: persist_extraction(
                conn,
                memory_id=mid,
                entities=[],
                at=AT,
                relations=[{"source": "Alice Smith", "target": "Billing", "relation": "owns", "confidence": 0.9}],
            )
        )
        yield client, mid


def entity_id(client: TestClient, name: str) -> str:
    (e,) = [
        e for e in client.get("/api/knowledge/entities", params={"q": name}).json()["entities"] if e["name"] == name
    ]
    return e["id"]


def assert_error(r, status: int, code: str | None = None) -> None:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert set(body) == {"code", "message", "details"}
    if code:
        assert body["code"] == code


def test_list_and_search_entities(api) -> None:
    client, _ = api
    body = client.get("/api/knowledge/entities").json()
    names = [e["name"] for e in body["entities"]]
    assert set(names) == {"Alice Smith", "Vim", "Emacs", "Billing"} and body["total"] == 4
    assert names[0] in ("Alice Smith", "Billing")  # 2 mentions each, most mentioned first
    page = client.get("/api/knowledge/entities", params={"limit": 1, "offset": 1}).json()
    assert len(page["entities"]) == 1 and page["total"] == 4
    assert [e["name"] for e in client.get("/api/knowledge/entities", params={"q": "MAC"}).json()["entities"]] == [
        "Emacs"
    ]
    assert client.get("/api/knowledge/entities", params={"q": "%"}).json()["total"] == 0  # literal %
    assert client.get("/api/knowledge/entities", params={"type": "person"}).json()["total"] == 0


def test_status_counts_and_boost_telemetry(api) -> None:
    client, _ = api
    client.post("/api/memory/recall", json={"query": "alice smith"})
    body = client.get("/api/knowledge/status").json()
    assert body["counts"]["entities"] == 4 and body["counts"]["relations"] == 1
    assert body["boost"]["calls"] == 1 and body["boost"]["boosted"] == 1
    assert body["graph"] == {"enabled": True, "boost_weight": 0.15, "boost_timeout_ms": 500}


def test_get_one_entity_with_mentions_and_relations(api) -> None:
    client, mid = api
    e = client.get(f"/api/knowledge/entities/{entity_id(client, 'Alice Smith')}").json()
    assert e["mentions"] == 1 and e["entity_type"] == "extracted"
    assert [(m["memory_id"], m["content"]) for m in e["mentions_list"]] == [
        (mid, "Alice Smith prefers Vim over Emacs.")
    ]
    (rel,) = e["relations"]
    assert (rel["source_name"], rel["relation_type"], rel["target_name"]) == ("Alice Smith", "owns", "Billing")


def test_aspects_and_attributes(api) -> None:
    client, mid = api
    eid = entity_id(client, "Alice Smith")
    (aspect,) = client.get(f"/api/knowledge/entities/{eid}/aspects").json()["aspects"]
    assert (aspect["name"], aspect["weight"], aspect["attributes"]) == ("preferences", 0.5, 1)
    attrs = client.get(f"/api/knowledge/entities/{eid}/attributes").json()["attributes"]
    by_content = {a["content"]: a for a in attrs}
    assert by_content["prefers Vim over Emacs"]["kind"] == "constraint"  # decision auto-protection
    assert by_content["prefers Vim over Emacs"]["importance"] == 0.85
    assert by_content["owns Billing"]["aspect_id"] is None  # waiting for structural classification
    only = client.get(f"/api/knowledge/entities/{eid}/attributes", params={"kind": "attribute"}).json()
    assert [a["content"] for a in only["attributes"]] == ["owns Billing"]


def test_expand_from_a_query_or_an_entity(api) -> None:
    client, mid = api
    body = client.get("/api/knowledge/expand", params={"query": "what does alice smith own?"}).json()
    assert [e["name"] for e in body["entities"]] == ["Alice Smith"]
    assert [e["name"] for e in body["neighbours"]] == ["Billing"]
    assert len(body["memory_ids"]) == 2 and mid in body["memory_ids"]
    by_id = client.get("/api/knowledge/expand", params={"entity_id": entity_id(client, "Billing")}).json()
    assert [e["name"] for e in by_id["neighbours"]] == ["Alice Smith"]
    empty = client.get("/api/knowledge/expand", params={"query": "nothing known"}).json()
    assert empty["entities"] == [] and empty["memory_ids"] == []


BAD = [
    ("/api/knowledge/entities/nope", {}, 404),
    ("/api/knowledge/entities/nope/aspects", {}, 404),
    ("/api/knowledge/entities/nope/attributes", {}, 404),
    ("/api/knowledge/entities", {"limit": 0}, 422),
    ("/api/knowledge/entities", {"limit": "x"}, 422),
    ("/api/knowledge/entities", {"offset": -1}, 422),
    ("/api/knowledge/entities", {"q": "x" * 201}, 422),
    ("/api/knowledge/expand", {}, 422),
    ("/api/knowledge/expand", {"query": "a", "entity_id": "b"}, 422),
    ("/api/knowledge/expand", {"entity_id": "nope"}, 404),
    ("/api/knowledge/expand", {"query": "a", "limit": 1000}, 422),
]


def test_bad_input_is_a_4xx_in_the_error_shape(api) -> None:
    client, _ = api
    for path, params, status in BAD:
        assert_error(client.get(path, params=params), status)


def test_bad_attribute_filters(api) -> None:
    client, _ = api
    eid = entity_id(client, "Vim")
    assert_error(client.get(f"/api/knowledge/entities/{eid}/attributes", params={"kind": "rule"}), 422)
    assert_error(client.get(f"/api/knowledge/entities/{eid}/attributes", params={"status": "gone"}), 422)
    assert_error(client.get(f"/api/knowledge/entities/{eid}/attributes", params={"limit": 501}), 422)


def test_odd_strings_never_500(api) -> None:
    client, _ = api
    for q in ("\x00", "'; DROP TABLE entities; --", "\\", "_%_", "\U0001f600" * 50):
        for path, params in (
            ("/api/knowledge/entities", {"q": q}),
            ("/api/knowledge/expand", {"query": q}),
            (f"/api/knowledge/entities/{quote(q, safe='')}", {}),
        ):
            r = client.get(path, params=params)
            assert r.status_code < 500, (path, r.text)
