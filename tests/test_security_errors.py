"""Issue 37, finding 8 (and the "every error in the one shape" item): no input gives a 500.

The attacks:

* A lone surrogate (``"\\ud800"`` in the JSON text) in a field of the wrong type: the 422
  handler echoed the input, the response could not be encoded as UTF-8, and 7 routes
  answered 500. Found by sending every body field of every route such a value
  (:func:`test_every_body_field_of_every_route_survives_surrogates`).
* A surrogate inside a metadata object: accepted (the check encoded ASCII-escaped JSON), so
  ``PATCH`` answered 500 and the memory could no longer be read.
* A surrogate in a hook's ``cwd`` or ``harness``: unchecked on four of the five hook routes,
  the SQLite write raised, 500.
* ``/mcp``: the MCP SDK answered some refusals in plain text; they now come in the one shape.

Every answer here must be a 4xx in ``{"error": {"code", "message", "details"}}`` (or 200),
readable as UTF-8 JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from conftest import api_client
from memlane.schemas.errors import ECHO_CHARS, error_response, json_safe
from memlane.services.inputs import RememberInput

J = {"content-type": "application/json"}

#: The seven routes that answered 500, each with a field of the wrong type, and the status now
#: (``POST /api/config`` validates its own body and names the key: any 4xx in the one shape).
FIVE_HUNDREDS = [
    ("POST", "/api/memory/recall", {"query": "x", "limit": "\ud800"}, 422),
    ("PATCH", "/api/memory/{id}", {"importance": "\ud800"}, 422),
    ("POST", "/api/hooks/session-start", {"session_key": "k", "ranking": "\ud800"}, 422),
    ("POST", "/api/hooks/session-end", {"session_key": "k", "wait": "\ud800"}, 422),
    ("POST", "/api/config", {"\ud800": "\ud800"}, None),
    ("POST", "/api/documents", {"text": "x", "tags": "\ud800"}, 422),
    ("POST", "/api/repair/dedup", {"dry_run": "\ud800"}, 422),
]

#: Values with lone surrogates, of every JSON type, for any field.
SURROGATE_VALUES: list[Any] = ["\ud800", "x\udfff\x00", ["\ud800"], {"a": "\ud800"}, {"\udc00": 1}]


def body(obj: Any) -> bytes:
    """JSON text with every non-ASCII character escaped, so a lone surrogate travels as ``\\ud800``."""
    return json.dumps(obj).encode("ascii")


def shape(r) -> dict:  # noqa: ANN001 - an httpx response
    """The error object of ``r``, after checking that ``r`` is UTF-8 JSON in the one shape."""
    assert r.headers["content-type"].startswith("application/json"), r.text
    doc = json.loads(r.content.decode("utf-8"))
    assert set(doc) == {"error"} and set(doc["error"]) == {"code", "message", "details"}, doc
    assert isinstance(doc["error"]["message"], str) and isinstance(doc["error"]["details"], dict)
    return doc["error"]


@pytest.fixture
def api(open_store):
    c = open_store()
    mid = c.memories.remember(RememberInput("the deploy script lives in ops/deploy.sh")).id
    with api_client(c) as client:
        yield client, c, mid


@pytest.mark.parametrize("method,path,payload,status", FIVE_HUNDREDS, ids=[f"{m} {p}" for m, p, _, _ in FIVE_HUNDREDS])
def test_a_lone_surrogate_in_a_wrongly_typed_field_is_refused_in_the_one_shape(
    api, method, path, payload, status
) -> None:
    client, _, mid = api
    r = client.request(method, path.replace("{id}", mid), content=body(payload), headers=J)
    assert r.status_code == status if status else 400 <= r.status_code < 500, r.text
    err = shape(r)
    if status == 422:
        assert err["code"] == "validation_error"
        echoed = [e["input"] for e in err["details"]["errors"]]
        assert "\\ud800" in echoed, echoed  # the surrogate, escaped once as text
    else:
        assert "\\ud800" in json.dumps(err, ensure_ascii=False)


def test_every_body_field_of_every_route_survives_surrogates(api) -> None:
    """The search that found the seven: every field of every JSON body, and every query
    parameter (as the invalid UTF-8 ``%ED%A0%80``), with a lone surrogate of every type."""
    client, _, mid = api
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def fields(schema: dict) -> set[str]:
        if "$ref" in schema:
            return fields(schemas[schema["$ref"].rsplit("/", 1)[1]])
        out = set(schema.get("properties", {}))
        for alt in schema.get("anyOf", []) + schema.get("oneOf", []):
            out |= fields(alt)
        return out

    sent, failures = 0, []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            url = path.replace("{memory_id}", mid)
            for p in op.get("parameters", []):
                if p["in"] == "path":
                    url = url.replace("{" + p["name"] + "}", "x")
            req = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            attempts: list[tuple[str, bytes | None]] = []
            for f in sorted(fields(req) if req else ()):
                attempts += [(url, body({f: v})) for v in SURROGATE_VALUES]
            if req:
                attempts += [(url, body(v)) for v in SURROGATE_VALUES]
            attempts += [(f"{url}?{p['name']}=%ED%A0%80", None) for p in op.get("parameters", []) if p["in"] == "query"]
            for target, content in attempts:
                r = client.request(method.upper(), target, content=content, headers=J if content else None)
                sent += 1
                if r.status_code >= 500:
                    failures.append(f"{method.upper()} {target} {content!r}: {r.status_code} {r.text[:200]}")
                elif r.status_code >= 400:
                    shape(r)
    assert sent > 300 and not failures, "\n".join(failures)


def test_surrogate_keys_in_a_config_change_are_refused_in_the_one_shape(api) -> None:
    client, _, _ = api
    for payload in ({"\ud800": "\ud800"}, {"recall": {"\udfff": 1}}, {"sessions": {"inject_limit": "\ud800"}}):
        r = client.post("/api/config", content=body(payload), headers=J)
        assert 400 <= r.status_code < 500, r.text
        shape(r)
    r = client.get("/api/config")
    assert r.status_code == 200 and "\\ud800" not in r.text


def test_a_surrogate_inside_metadata_is_refused_and_the_memory_stays_readable(api) -> None:
    client, _, mid = api
    for meta in ({"a": "\ud800"}, {"\udc00": 1}, {"deep": [{"x": "ok\udfff"}]}):
        r = client.patch(f"/api/memory/{mid}", content=body({"metadata": meta}), headers=J)
        assert r.status_code == 422 and shape(r)["code"] == "validation_error", r.text
        r = client.post("/api/memory/remember", content=body({"content": "another", "metadata": meta}), headers=J)
        assert r.status_code == 422 and shape(r)["code"] == "validation_error", r.text
    r = client.get(f"/api/memory/{mid}")
    assert r.status_code == 200 and r.json()["metadata"] == {}


HOOK_TEXT_FIELDS = [
    ("/api/hooks/session-start", "cwd", {}),
    ("/api/hooks/session-start", "harness", {}),
    ("/api/hooks/user-prompt-submit", "cwd", {"prompt": "x"}),
    ("/api/hooks/user-prompt-submit", "harness", {"prompt": "x"}),
    ("/api/hooks/session-end", "cwd", {}),
    ("/api/hooks/session-end", "harness", {}),
    ("/api/hooks/pre-compaction", "harness", {}),  # the compaction hooks take no cwd
    ("/api/hooks/compaction-complete", "harness", {"summary": "we fixed it"}),
]


@pytest.mark.parametrize("path,field,extra", HOOK_TEXT_FIELDS, ids=[f"{p} {f}" for p, f, _ in HOOK_TEXT_FIELDS])
def test_a_surrogate_in_a_hooks_cwd_or_harness_is_a_422(api, path, field, extra) -> None:
    client, _, _ = api
    r = client.post(path, content=body({"session_key": f"k-{field}", field: "src\ud800", **extra}), headers=J)
    assert r.status_code == 422, r.text
    err = shape(r)
    assert err["code"] == "validation_error" and field in err["message"]


def test_a_rejected_value_is_echoed_clipped(api) -> None:
    client, _, _ = api
    r = client.post("/api/memory/recall", content=body({"query": "x", "limit": "9" * 10_000 + "\ud800"}), headers=J)
    assert r.status_code == 422
    [e] = shape(r)["details"]["errors"]
    assert e["field"] == "limit" and len(e["input"]) <= ECHO_CHARS + 3 and e["input"].startswith("999")
    r = client.post("/api/memory/recall", content=body({"query": "x", "limit": [[["\ud800"] * 500] * 500]}), headers=J)
    assert r.status_code == 422
    [e] = shape(r)["details"]["errors"]
    assert len(e["input"]) <= ECHO_CHARS + 3 and e["input"].startswith('[[["\\ud800"')
    r = client.post("/api/memory/recall", content=body({"query": "x", "k" * 5000: 1}), headers=J)
    assert r.status_code == 422
    [e] = shape(r)["details"]["errors"]
    assert len(e["field"]) <= ECHO_CHARS + 3 and e["field"].startswith("kkk")
    # a lone surrogate in a key: the key is the rejected value (not "the body is not an object")
    r = client.post("/api/memory/recall", content=body({"query": "x", "k\ud800" * 5000: 1}), headers=J)
    assert r.status_code == 422
    [e] = shape(r)["details"]["errors"]
    assert len(e["input"]) <= ECHO_CHARS + 3 and e["input"].startswith("k\\ud800k")


def test_error_response_encodes_whatever_an_error_carries() -> None:
    nested: Any = "bottom"
    for _ in range(100):
        nested = [nested]
    details = {
        "\ud800key": "\udfff",
        "nan": math.nan,
        "inf": -math.inf,
        "huge": 10**2000,
        "raw": b"\xff\xfe",
        "set": {1},
        "deep": nested,
        "obj": object(),
    }
    r = error_response(422, "validation_error", "bad \ud800 input", details)
    doc = json.loads(r.body.decode("utf-8"))
    d = doc["error"]["details"]
    assert doc["error"]["message"] == "bad \\ud800 input"
    assert d["\\ud800key"] == "\\udfff" and d["nan"] == "nan" and d["inf"] == "-inf"
    assert d["huge"].startswith("<integer of ") and d["set"] == [1] and d["obj"].startswith("<object object")
    assert json.dumps(d["deep"]).count("[") <= 40
    assert json_safe({"ok": [1, 2.5, None, True, "é"]}) == {"ok": [1, 2.5, None, True, "é"]}


# ------------------------------------------------------------------ /mcp refusals

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}


def test_mcp_plain_text_refusals_come_in_the_one_shape(api) -> None:
    client, _, _ = api
    # Host is the request guard's alone (the SDK's own check, which wanted a port and answered
    # in plain text, is off): a loopback Host without a port is served, a foreign one refused.
    r = client.post("/mcp", json=INIT, headers={**MCP_ACCEPT, "host": "127.0.0.1"})
    assert r.status_code == 200
    r = client.post("/mcp", json=INIT, headers={**MCP_ACCEPT, "host": "evil.example"})
    assert r.status_code == 403 and shape(r)["code"] == "forbidden_host"
    r = client.post("/mcp", content=json.dumps(INIT), headers={**MCP_ACCEPT, "content-type": "text/plain"})
    assert r.status_code == 400 and shape(r)["code"] == "bad_request"
    assert "Content-Type" in shape(r)["message"]


def test_mcp_protocol_errors_keep_the_json_rpc_shape_and_the_endpoint_still_works(api) -> None:
    client, _, _ = api
    r = client.post("/mcp", json=INIT, headers={"accept": "application/json"})
    assert r.status_code == 406 and r.json()["error"]["code"] == -32600  # JSON-RPC, for MCP clients
    r = client.post("/mcp", content=b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}', headers={**MCP_ACCEPT, **J})
    assert 400 <= r.status_code < 500 and "jsonrpc" in r.json()
    r = client.post("/mcp", json=INIT, headers=MCP_ACCEPT)
    assert r.status_code == 200 and '"protocolVersion"' in r.text
