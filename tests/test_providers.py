"""LLM providers: the reply helpers, the HTTP providers against a real loopback server, and
the Claude Code provider against a real executable script standing in for ``claude``."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError as PydValidationError

from memlane.errors import ConfigError, MemlaneError
from memlane.pipeline.contradiction import semantic_contradiction
from memlane.pipeline.extraction import extract
from memlane.pipeline.prompts import CONTRADICTION_SCHEMA, EXTRACTION_SCHEMA
from memlane.providers import (
    ClaudeCodeProvider,
    LlmError,
    LlmProvider,
    LlmSettings,
    LlmTimeout,
    OllamaProvider,
    OpenAICompatProvider,
    build_provider,
    extract_json_object,
    strip_fences,
    strip_think,
)
from memlane.providers.claude_cli import ARGV_PROMPT_LIMIT_BYTES, prompt_via_stdin

# ---------------------------------------------------------------- errors


def test_error_classes() -> None:
    assert issubclass(LlmError, MemlaneError)
    assert issubclass(LlmTimeout, LlmError)
    assert (LlmError.status, LlmError.code) == (502, "llm_unavailable")
    assert (LlmTimeout.status, LlmTimeout.code) == (502, "llm_timeout")


# ---------------------------------------------------------------- strip_think


@pytest.mark.parametrize(
    "text, expected",
    [
        ("plain answer", "plain answer"),
        ("  padded \n", "padded"),
        ("<think>reasoning</think>answer", "answer"),
        ('<think>\nline 1\nline 2 {"x": 1}\n</think>\n\nanswer\n', "answer"),
        ("<THINK>loud</Think> answer", "answer"),
        ("<think>a</think>one <think>b</think>two", "one two"),
        ('<think>cut off while reasoning {"a": 1}', ""),
        ("   \n<think>unclosed after whitespace", ""),
        ("<think>one</think>\n<think>second, unclosed", ""),
        ("reasoning without an opening tag</think>answer", "answer"),
        ("<think></think>answer", "answer"),
        ("", ""),
        ("no tags but a < and a > sign", "no tags but a < and a > sign"),
    ],
)
def test_strip_think(text: str, expected: str) -> None:
    assert strip_think(text) == expected


# ---------------------------------------------------------------- strip_fences


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": 1}', '{"a": 1}'),
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('```\n{"a": 1}\n```\n', '{"a": 1}'),
        ('```JSON\r\n{"a": 1}\r\n```', '{"a": 1}'),
        ('  ```json  \n{"a": 1}\n  ```  ', '{"a": 1}'),
        ('Here you go:\n```json\n{"a": 1}\n```\nAnything else?', 'Here you go:\n{"a": 1}\nAnything else?'),
        ('```json {"a": 1}```', '{"a": 1}'),
        ('```{"a": 1}```', '{"a": 1}'),
        ('```json\n{"a": 1}', '{"a": 1}'),  # cut off before the closing fence
        ('{"code": "use ``` for fences"}', '{"code": "use ``` for fences"}'),
        ("```python\nprint(1)\n```", "print(1)"),
        ("", ""),
    ],
)
def test_strip_fences(text: str, expected: str) -> None:
    assert strip_fences(text) == expected


# ---------------------------------------------------------------- extract_json_object


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": 1}', {"a": 1}),
        ("{}", {}),
        ('  {"a": 1}  ', {"a": 1}),
        ('Sure! Here is the JSON: {"a": 1}. Hope that helps.', {"a": 1}),
        ('{"outer": {"inner": {"deep": [1, {"x": 2}]}}}', {"outer": {"inner": {"deep": [1, {"x": 2}]}}}),
        ('{"s": "braces } and { inside"}', {"s": "braces } and { inside"}),
        ('{"s": "quote \\" and } brace"}', {"s": 'quote " and } brace'}),
        ('{"s": "backslash at end \\\\"} tail', {"s": "backslash at end \\"}),
        ('{"a": 1} {"b": 2}', {"a": 1}),
        ('{"a": 1}\n{"b": 2}', {"a": 1}),
        ('{not json} then {"b": 2}', {"b": 2}),
        ('{"a": {"b": 1}, broken} {"c": 3}', {"c": 3}),  # nested objects of a broken span are skipped
        ('a stray { brace, then {"b": 2}', {"b": 2}),
        ('a stray "quote { here, then {"b": 2}', {"b": 2}),
        ('prose with {"x": "y"} close } brace', {"x": "y"}),
        ('<think>maybe {"draft": true}</think>{"final": true}', {"final": True}),
        (
            '<think>\nI will answer {"wrong": 1}\n</think>\n```json\n{"facts": ["a"], "n": 2}\n```',
            {"facts": ["a"], "n": 2},
        ),
        ('```json\n{\n  "a": [1, 2],\n  "b": null\n}\n```', {"a": [1, 2], "b": None}),
        ('{"text": "line one\nline two"}', {"text": "line one\nline two"}),  # raw newline in a string
        ('{"emoji": "café ✓ 日本"}', {"emoji": "café ✓ 日本"}),
        ('[{"a": 1}]', {"a": 1}),  # the first object, even inside an array
    ],
)
def test_extract_json_object_finds(text: str, expected: dict[str, Any]) -> None:
    assert extract_json_object(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no json here",
        "[1, 2, 3]",
        '"just a string"',
        "42",
        "{",
        "}",
        "}{",
        '{"a": 1',
        '{"a": 1,}',  # trailing comma
        "{'a': 1}",  # single quotes
        "{a: 1}",
        '<think>{"only": "in thought"}</think>',
        '<think>{"cut": "off"',
        "{" * 10_000,
        "{" * 5_000 + "}" * 5_000,
        '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",  # too deep for the json module
        "\x00\x01{\x02}",
        "{" + '"' * 1001,
    ],
)
def test_extract_json_object_garbage_is_none(text: str) -> None:
    assert extract_json_object(text) is None


def test_extract_json_object_many_stray_braces() -> None:
    # Stray braces in prose are skipped one by one; each is scanned at most once.
    assert extract_json_object("{ " * 3 + '{"a": 1}') == {"a": 1}
    assert extract_json_object("{ " * 100_000 + '{"a": 1}') == {"a": 1}
    assert extract_json_object('{"' * 50_000 + '{"a": 1}') == {"a": 1}  # braces and quotes interleaved
    assert extract_json_object('{"' * 50_000 + '"{"a": 1') is None
    assert extract_json_object('{"a": 1} ' + "{ " * 100_000) == {"a": 1}
    assert extract_json_object("{ " * 100_000) is None


def _naive_extract(text: str) -> dict[str, Any] | None:
    """Reference for extract_json_object: a fresh character-by-character scan from every brace."""
    text = strip_fences(strip_think(text))
    pos = 0
    while (start := text.find("{", pos)) >= 0:
        depth, in_string, escaped, end = 0, False, False, None
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch in "{}":
                depth += 1 if ch == "{" else -1
                if depth == 0:
                    end = i + 1
                    break
        if end is None:
            pos = start + 1
            continue
        try:
            value = json.loads(text[start:end], strict=False)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        pos = end
    return None


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='{}"\\:,[]a1 ', max_size=60))
def test_extract_json_object_matches_naive_reference(text: str) -> None:
    assert extract_json_object(text) == _naive_extract(text)


_PROSE = st.text(alphabet=st.characters(blacklist_characters="{}<`", blacklist_categories=("Cs",)), max_size=40)
_JSON_TEXT = st.text(alphabet=st.characters(blacklist_characters="<`", blacklist_categories=("Cs",)), max_size=20)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _JSON_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_JSON_TEXT, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    obj=st.dictionaries(_JSON_TEXT, _JSON_VALUES, max_size=5),
    before=_PROSE,
    after=st.text(alphabet=st.characters(blacklist_characters="<`", blacklist_categories=("Cs",)), max_size=40),
    indent=st.sampled_from([None, 2]),
    ascii_only=st.booleans(),
    fenced=st.booleans(),
    think=st.booleans(),
)
def test_extract_json_object_round_trips(
    obj: dict[str, Any], before: str, after: str, indent: int | None, ascii_only: bool, fenced: bool, think: bool
) -> None:
    body = json.dumps(obj, indent=indent, ensure_ascii=ascii_only)
    if fenced:
        body = f"```json\n{body}\n```"
    text = f"{before}\n{body}\n{after}"
    if think:
        text = '<think>draft {"no": 1} and a stray {</think>' + text
    assert extract_json_object(text) == obj


# ---------------------------------------------------------------- loopback HTTP server


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    delay_s: float = 0.0


@dataclass
class Loopback:
    """A real HTTP server on 127.0.0.1 answering each GET/POST with the next scripted reply."""

    url: str = ""
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)


@pytest.fixture
def server() -> Iterator[Loopback]:
    state = Loopback()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, method: str) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                state.requests.append(
                    {
                        "method": method,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "json": json.loads(raw) if raw else None,
                    }
                )
                reply = state.replies.pop(0) if state.replies else Reply(500, b"no scripted reply")
            if reply.delay_s:
                time.sleep(reply.delay_s)
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout tests)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def ollama_body(text: str) -> bytes:
    return json.dumps(
        {"model": "m", "created_at": "2025-01-01T00:00:00Z", "response": text, "done": True, "done_reason": "stop"}
    ).encode()


def openai_body(text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


@dataclass
class Kind:
    make: Any
    body: Any
    generate_path: str
    probe_path: str


KINDS = {
    "ollama": Kind(
        lambda url, **kw: OllamaProvider("m", base_url=url, **kw), ollama_body, "/api/generate", "/api/tags"
    ),
    "openai": Kind(
        lambda url, **kw: OpenAICompatProvider("m", base_url=url + "/v1", **kw),
        openai_body,
        "/v1/chat/completions",
        "/v1/models",
    ),
}


@pytest.fixture(params=sorted(KINDS))
def http(request: pytest.FixtureRequest, server: Loopback) -> Iterator[tuple[Any, Kind, Loopback]]:
    kind = KINDS[request.param]
    made: list[Any] = []

    def factory(url: str | None = None, **kw: Any) -> Any:
        p = kind.make(url or server.url, **kw)
        made.append(p)
        return p

    yield factory, kind, server
    for p in made:
        p.close()


# ---------------------------------------------------------------- HTTP: shared behaviour


def test_http_success(http: Any) -> None:
    make, kind, srv = http
    srv.script(Reply(body=kind.body("Paris is the capital of France.")))
    p = make()
    assert isinstance(p, LlmProvider)
    assert p.generate("What is the capital of France?") == "Paris is the capital of France."
    req = srv.requests[0]
    assert (req["method"], req["path"]) == ("POST", kind.generate_path)


def test_http_reply_is_returned_raw_and_helpers_clean_it(http: Any) -> None:
    make, kind, srv = http
    raw = '<think>\nThe user wants JSON {"draft": 1}.\n</think>\n\n```json\n{"facts": ["likes {tea}"], "n": 1}\n```\n'
    srv.script(Reply(body=kind.body(raw)))
    out = make().generate("extract")
    assert out == raw
    assert strip_fences(strip_think(out)) == '{"facts": ["likes {tea}"], "n": 1}'
    assert extract_json_object(out) == {"facts": ["likes {tea}"], "n": 1}


def test_http_unicode_round_trip(http: Any) -> None:
    make, kind, srv = http
    srv.script(Reply(body=kind.body("Ça va ✓ — 日本語")))
    assert make().generate("Ünïcode prompt ✓") == "Ça va ✓ — 日本語"
    prompt_sent = json.dumps(srv.requests[0]["json"], ensure_ascii=False)
    assert "Ünïcode prompt ✓" in prompt_sent


def test_http_500_message_has_status_and_first_200_chars(http: Any) -> None:
    make, _, srv = http
    long_body = "model exploded: " + "".join(f"{i:04d}" for i in range(300))  # 1,216 chars
    srv.script(Reply(500, long_body.encode()))
    with pytest.raises(LlmError) as info:
        make().generate("hi")
    assert not isinstance(info.value, LlmTimeout)
    message = str(info.value)
    assert "500" in message
    assert long_body[:200] in message
    assert long_body[:201] not in message
    assert info.value.details["status"] == 500
    assert info.value.code == "llm_unavailable"
    assert info.value.status == 502


def test_http_404_model_not_found(http: Any) -> None:
    make, _, srv = http
    srv.script(Reply(404, b'{"error": "model \\"m\\" not found, try pulling it first"}'))
    with pytest.raises(LlmError, match=r'404.*model \\?"m\\?" not found'):
        make().generate("hi")


def test_http_malformed_json(http: Any) -> None:
    make, _, srv = http
    srv.script(Reply(200, b'{"response": "cut off'))
    with pytest.raises(LlmError, match="not valid JSON"):
        make().generate("hi")


WRONG_SHAPES = {
    "ollama": [
        ({}, 'no string "response"'),
        ([], 'no string "response"'),
        ({"response": None}, 'no string "response"'),
        ({"response": ["a"]}, 'no string "response"'),
        ({"error": "something broke"}, 'no string "response" \\(error: something broke\\)'),
        ({"choices": [{"message": {"content": "hi"}}]}, 'no string "response"'),  # the other protocol
    ],
    "openai": [
        ({}, 'no non-empty "choices"'),
        ([], 'no non-empty "choices"'),
        ({"choices": []}, 'no non-empty "choices"'),
        ({"choices": {"0": {}}}, 'no non-empty "choices"'),
        ({"choices": ["text"]}, 'no string "choices\\[0\\].message.content"'),
        ({"choices": [{"text": "legacy completion"}]}, 'no string "choices\\[0\\].message.content"'),
        ({"choices": [{"message": {"content": None}}]}, 'no string "choices\\[0\\].message.content"'),
        ({"response": "hi"}, 'no non-empty "choices"'),  # the other protocol
    ],
}


@pytest.mark.parametrize("kind_name, reply, match", [(k, r, m) for k, cases in WRONG_SHAPES.items() for r, m in cases])
def test_http_wrong_shape(server: Loopback, kind_name: str, reply: Any, match: str) -> None:
    server.script(Reply(body=json.dumps(reply).encode()))
    p = KINDS[kind_name].make(server.url)
    try:
        with pytest.raises(LlmError, match=match) as info:
            p.generate("hi")
        assert str(info.value).startswith(f"{kind_name}:m: ")
    finally:
        p.close()


def test_http_slow_reply_times_out(http: Any) -> None:
    make, kind, srv = http
    srv.script(Reply(body=kind.body("too late"), delay_s=3.0))
    p = make(timeout_s=0.3)
    with pytest.raises(LlmTimeout) as info:
        p.generate("hi")
    message = str(info.value)
    assert p.name in message
    assert "0.3 s" in message
    assert info.value.details["timeout_s"] == 0.3
    assert info.value.code == "llm_timeout"


def test_http_per_call_timeout_overrides_default(http: Any) -> None:
    make, kind, srv = http
    srv.script(Reply(body=kind.body("too late"), delay_s=3.0))
    with pytest.raises(LlmTimeout, match=r"0\.3 s"):
        make(timeout_s=30).generate("hi", timeout_s=0.3)


def test_http_connection_refused(http: Any) -> None:
    make, _, _ = http
    p = make(url=closed_port_url(), timeout_s=5)
    with pytest.raises(LlmError, match="cannot reach") as info:
        p.generate("hi")
    assert not isinstance(info.value, LlmTimeout)
    assert p.available() is False


def test_http_available(http: Any) -> None:
    make, kind, srv = http
    srv.script(Reply(body=b'{"models": [], "data": []}'), Reply(503, b"loading model"), Reply(200, b"not json"))
    p = make()
    assert p.available() is True
    assert p.available() is False
    assert p.available() is True  # any 2xx: the server is up
    assert [(r["method"], r["path"]) for r in srv.requests] == [("GET", kind.probe_path)] * 3


def test_http_rejects_bad_arguments(http: Any) -> None:
    make, _, _ = http
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_s"):
            make(timeout_s=bad)
    with pytest.raises(ValueError, match="max_tokens"):
        make(max_tokens=0)
    p = make()
    with pytest.raises(ValueError, match="timeout_s"):
        p.generate("hi", timeout_s=0)
    with pytest.raises(ValueError, match="max_tokens"):
        p.generate("hi", max_tokens=-5)


# ---------------------------------------------------------------- HTTP: protocol specifics


def test_ollama_protocol(server: Loopback) -> None:
    server.script(*(Reply(body=ollama_body("ok")) for _ in range(3)))
    p = OllamaProvider(base_url=server.url + "/", timeout_s=5)
    assert p.name == "ollama:qwen3:4b"
    p.generate("no cap")
    p.generate("capped", max_tokens=64)
    p2 = OllamaProvider("llama3.2:1b", base_url=server.url, max_tokens=256)
    p2.generate("default cap")
    bodies = [r["json"] for r in server.requests]
    assert bodies[0] == {"model": "qwen3:4b", "prompt": "no cap", "stream": False}
    assert bodies[1] == {"model": "qwen3:4b", "prompt": "capped", "stream": False, "options": {"num_predict": 64}}
    assert bodies[2] == {
        "model": "llama3.2:1b",
        "prompt": "default cap",
        "stream": False,
        "options": {"num_predict": 256},
    }
    assert all(r["path"] == "/api/generate" for r in server.requests)
    assert "authorization" not in {k.lower() for k in server.requests[0]["headers"]}
    p.close()
    p2.close()


def test_http_proxy_from_environment(server: Loopback, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY routes calls through the proxy (absolute-URI request); NO_PROXY exempts a host."""
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.setenv("http_proxy", server.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    server.script(Reply(body=ollama_body("via proxy")))
    p = OllamaProvider(base_url="http://llm.invalid:11434", timeout_s=5)
    assert p.generate("hi") == "via proxy"
    assert server.requests[-1]["path"] == "http://llm.invalid:11434/api/generate"
    p.close()
    monkeypatch.setenv("NO_PROXY", "llm.invalid")
    monkeypatch.setenv("no_proxy", "llm.invalid")
    p = OllamaProvider(base_url="http://llm.invalid:11434", timeout_s=5)
    with pytest.raises(LlmError, match="cannot reach"):
        p.generate("hi")
    assert len(server.requests) == 1
    p.close()


# ---------------------------------------------------------------- structured output


def _schema_sent(kind_name: str, body: dict[str, Any]) -> Any:
    if kind_name == "ollama":
        return body.get("format")
    fmt = body.get("response_format")
    assert fmt is None or (fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "reply")
    return None if fmt is None else fmt["json_schema"]["schema"]


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_structured_output_sends_the_schema_and_the_reply_parses(server: Loopback, kind_name: str) -> None:
    """The extraction stage asks for its schema; the server's constrained reply is parsed into facts."""
    kind = KINDS[kind_name]
    reply = {
        "facts": [{"content": "The billing service uses PostgreSQL 16.", "type": "fact", "confidence": 0.9}],
        "entities": [
            {"source": "billing service", "relationship": "uses", "target": "PostgreSQL 16", "confidence": 0.9}
        ],
    }
    server.script(Reply(body=kind.body(json.dumps(reply))), Reply(body=kind.body("plain")))
    p = kind.make(server.url, timeout_s=5)
    try:
        result = extract(p, "We moved billing to PostgreSQL 16.")
        assert [f.content for f in result.facts] == ["The billing service uses PostgreSQL 16."]
        assert [(e.source, e.target) for e in result.entities] == [("billing service", "PostgreSQL 16")]
        assert _schema_sent(kind_name, server.requests[0]["json"]) == EXTRACTION_SCHEMA
        assert p.generate("no schema") == "plain"  # a caller without a schema sends none
        assert _schema_sent(kind_name, server.requests[1]["json"]) is None
    finally:
        p.close()


@pytest.mark.parametrize("kind_name", sorted(KINDS))
@pytest.mark.parametrize("status", [400, 422])
def test_a_server_refusing_the_schema_gets_the_prompt_without_it(server: Loopback, kind_name: str, status: int) -> None:
    """A server that does not know the field answers 400/422: the call is repeated without a
    schema, later calls send none, and the tolerant parser reads the prose-wrapped reply."""
    kind = KINDS[kind_name]
    wrapped = 'Sure! {"contradicts": true, "confidence": 0.8, "reasoning": "PostgreSQL vs MongoDB"} Done.'
    server.script(
        Reply(status, b'{"error": "unknown field response_format / format"}'),
        Reply(body=kind.body(wrapped)),
        Reply(body=kind.body(wrapped)),
    )
    p = kind.make(server.url, timeout_s=5)
    try:
        verdict = semantic_contradiction(p, "uses PostgreSQL", "migrated to MongoDB", timeout_ms=5_000)
        assert verdict.contradicts is True and verdict.confidence == 0.8
        assert p.structured_output is False
        sent = [_schema_sent(kind_name, r["json"]) for r in server.requests]
        assert sent == [CONTRADICTION_SCHEMA, None]
        p.generate("again", schema=CONTRADICTION_SCHEMA)
        assert _schema_sent(kind_name, server.requests[-1]["json"]) is None
    finally:
        p.close()


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_other_errors_with_a_schema_are_not_retried(server: Loopback, kind_name: str) -> None:
    server.script(Reply(500, b"boom"), Reply(body=KINDS[kind_name].body("never")))
    p = KINDS[kind_name].make(server.url, timeout_s=5)
    try:
        with pytest.raises(LlmError, match="500"):
            p.generate("x", schema=CONTRADICTION_SCHEMA)
        assert len(server.requests) == 1 and p.structured_output is True
    finally:
        p.close()


def test_concurrent_calls_each_get_a_connection() -> None:
    """More calls at once than the idle connections kept (8): none waits for another's
    connection. The server answers only once all 12 are in flight at the same time."""
    calls = 12
    barrier = threading.Barrier(calls, timeout=30)  # a hang guard: a call held back breaks it

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                barrier.wait()
                body = ollama_body("together")
            except threading.BrokenBarrierError:
                body = ollama_body("alone")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    p = OllamaProvider("m", base_url=f"http://127.0.0.1:{httpd.server_address[1]}", timeout_s=60)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(p.generate("hi"))) for _ in range(calls)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == ["together"] * calls
    finally:
        p.close()
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("proxy", ["socks5://user:pw-secret@proxy.invalid:1080", "ftp://user:pw-secret@proxy.invalid"])
def test_an_unusable_proxy_from_the_environment_is_a_clear_llm_error(
    monkeypatch: pytest.MonkeyPatch, proxy: str
) -> None:
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    p = OllamaProvider(base_url="http://llm.invalid:11434", timeout_s=5)
    try:
        with pytest.raises(LlmError, match="cannot reach .*proxy named by the environment") as info:
            p.generate("hi")
        assert "pw-secret" not in str(info.value) and "pw-secret" not in json.dumps(info.value.details)
    finally:
        p.close()


def test_ollama_defaults() -> None:
    p = OllamaProvider()
    assert (p.name, p.url, p.probe_url, p.timeout_s) == (
        "ollama:qwen3:4b",
        "http://127.0.0.1:11434/api/generate",
        "http://127.0.0.1:11434/api/tags",
        45.0,
    )
    p.close()


def test_openai_protocol_and_bearer(server: Loopback) -> None:
    server.script(Reply(body=openai_body("ok")), Reply(body=openai_body("ok")), Reply(body=b'{"data": []}'))
    p = OpenAICompatProvider("gpt-4o-mini", base_url=server.url + "/v1/", api_key="sk-test", timeout_s=5)
    assert p.name == "openai:gpt-4o-mini"
    p.generate("no cap")
    p.generate("capped", max_tokens=32)
    assert p.available() is True
    first, second, probe = server.requests
    assert first["json"] == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "no cap"}],
        "temperature": 0,
    }
    assert second["json"]["max_tokens"] == 32
    assert first["path"] == "/v1/chat/completions"
    assert probe["path"] == "/v1/models"
    assert first["headers"]["Authorization"] == "Bearer sk-test"
    assert probe["headers"]["Authorization"] == "Bearer sk-test"
    p.close()


def test_openai_no_bearer_without_key_and_key_not_in_errors(server: Loopback) -> None:
    server.script(Reply(body=openai_body("ok")))
    p = OpenAICompatProvider("m", base_url=server.url)
    p.generate("x")
    assert "authorization" not in {k.lower() for k in server.requests[0]["headers"]}
    p.close()
    secret = OpenAICompatProvider("m", base_url=closed_port_url(), api_key="sk-very-secret")
    with pytest.raises(LlmError) as info:
        secret.generate("x")
    assert "sk-very-secret" not in str(info.value)
    assert "sk-very-secret" not in json.dumps(info.value.details)
    assert "sk-very-secret" not in repr(secret)
    secret.close()


def test_openai_defaults_and_requires_model() -> None:
    p = OpenAICompatProvider("local")
    assert p.url == "http://127.0.0.1:8080/v1/chat/completions"
    assert p.probe_url == "http://127.0.0.1:8080/v1/models"
    p.close()
    with pytest.raises(ValueError, match="model"):
        OpenAICompatProvider("")


# ---------------------------------------------------------------- Claude Code CLI (fake `claude`)

FAKE_CLAUDE = r'''#!/usr/bin/env python3
"""Stands in for the Claude Code CLI: checks its argv, answers based on the prompt."""
import json, os, subprocess, sys, time

args = [os.fsencode(a).decode("utf-8") for a in sys.argv[1:]]


def die(message, code=3):
    sys.stderr.write(message)
    sys.exit(code)


if not args or args[0] != "-p":
    die("expected -p first, got %r" % (args,))
rest = args[1:]
stdin_is_devnull = os.path.samestat(os.fstat(0), os.stat(os.devnull))
if rest and not rest[0].startswith("--"):
    prompt, rest, via = rest[0], rest[1:], "argv"
    if not stdin_is_devnull:
        die("prompt on argv but stdin is not /dev/null")
else:
    prompt, via = sys.stdin.buffer.read().decode("utf-8"), "stdin"
if len(rest) != 5 or rest[0] != "--model" or "--no-session-persistence" not in rest:
    die("bad options: %r" % (rest,))
if rest[rest.index("--output-format") + 1] != "text":
    die("expected --output-format text: %r" % (rest,))
model = rest[1]

if prompt == "FAIL":
    die("fatal: " + "".join("%04d" % i for i in range(300)), code=7)
if prompt == "FAIL-STDOUT-ONLY":
    sys.stdout.write("Invalid API key - please run /login")
    sys.exit(1)
if prompt == "SLEEP":
    time.sleep(60)
if prompt.startswith("SLEEP-WITH-CHILD "):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # inherits stdout
    path = prompt.split(" ", 1)[1]
    with open(path + ".tmp", "w") as f:
        f.write(str(child.pid))
    os.replace(path + ".tmp", path)
    time.sleep(60)
if prompt == "THINK":
    sys.stdout.write('<think>\nhmm {"draft": 1}\n</think>\n```json\n{"ok": true}\n```\n')
    sys.exit(0)
if prompt == "EMPTY":
    sys.exit(0)
reply = {"model": model, "via": via, "chars": len(prompt), "head": prompt[:40]}
sys.stdout.buffer.write(("\n  " + json.dumps(reply, ensure_ascii=False) + "  \n\n").encode("utf-8"))
'''


@pytest.fixture
def fake_claude(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "claude"
    path.parent.mkdir()
    path.write_text(FAKE_CLAUDE, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_claude_success_via_argv(fake_claude: Path) -> None:
    p = ClaudeCodeProvider(command=str(fake_claude))
    assert isinstance(p, LlmProvider)
    assert p.name == "claude-code:haiku"
    out = p.generate("Summarise: café ✓", max_tokens=10)
    assert out == out.strip()
    assert json.loads(out) == {"model": "haiku", "via": "argv", "chars": 17, "head": "Summarise: café ✓"}
    p.close()


def test_claude_model_is_passed(fake_claude: Path) -> None:
    p = ClaudeCodeProvider(model="sonnet", command=str(fake_claude))
    assert p.name == "claude-code:sonnet"
    assert json.loads(p.generate("hi"))["model"] == "sonnet"


def test_claude_argv_shape() -> None:
    p = ClaudeCodeProvider(command="claude")
    assert p.argv("hello") == [
        "claude",
        "-p",
        "hello",
        "--model",
        "haiku",
        "--no-session-persistence",
        "--output-format",
        "text",
    ]
    assert p.argv("x" * (ARGV_PROMPT_LIMIT_BYTES + 1))[:3] == ["claude", "-p", "--model"]


def test_claude_think_and_fences_come_back_raw(fake_claude: Path) -> None:
    out = ClaudeCodeProvider(command=str(fake_claude)).generate("THINK")
    assert out.startswith("<think>")
    assert extract_json_object(out) == {"ok": True}


def test_claude_empty_output_is_empty_string(fake_claude: Path) -> None:
    assert ClaudeCodeProvider(command=str(fake_claude)).generate("EMPTY") == ""


def test_claude_large_prompt_goes_on_stdin(fake_claude: Path) -> None:
    prompt = "é" * 60_000  # 60k chars, 120 KB in UTF-8: over the argv limit
    assert prompt_via_stdin(prompt)
    reply = json.loads(ClaudeCodeProvider(command=str(fake_claude)).generate(prompt))
    assert (reply["via"], reply["chars"]) == ("stdin", 60_000)


def test_claude_prompt_at_the_limit_stays_on_argv(fake_claude: Path) -> None:
    prompt = "x" * ARGV_PROMPT_LIMIT_BYTES
    assert not prompt_via_stdin(prompt)
    reply = json.loads(ClaudeCodeProvider(command=str(fake_claude)).generate(prompt))
    assert (reply["via"], reply["chars"]) == ("argv", ARGV_PROMPT_LIMIT_BYTES)


@pytest.mark.parametrize("prompt", ["-h looks like an option", "--model opus", "has a \x00 NUL"])
def test_claude_unsafe_argv_prompts_go_on_stdin(fake_claude: Path, prompt: str) -> None:
    reply = json.loads(ClaudeCodeProvider(command=str(fake_claude)).generate(prompt))
    assert (reply["via"], reply["head"], reply["model"]) == ("stdin", prompt, "haiku")


def test_claude_non_zero_exit(fake_claude: Path) -> None:
    with pytest.raises(LlmError) as info:
        ClaudeCodeProvider(command=str(fake_claude)).generate("FAIL")
    assert not isinstance(info.value, LlmTimeout)
    stderr = "fatal: " + "".join(f"{i:04d}" for i in range(300))
    message = str(info.value)
    assert "exited with code 7" in message
    assert stderr[:200] in message
    assert stderr[:201] not in message
    assert info.value.details["exit_code"] == 7


def test_claude_non_zero_exit_without_stderr_quotes_stdout(fake_claude: Path) -> None:
    with pytest.raises(LlmError, match="exited with code 1: Invalid API key"):
        ClaudeCodeProvider(command=str(fake_claude)).generate("FAIL-STDOUT-ONLY")


def test_claude_timeout(fake_claude: Path) -> None:
    p = ClaudeCodeProvider(command=str(fake_claude), timeout_s=0.3)
    with pytest.raises(LlmTimeout) as info:
        p.generate("SLEEP")
    assert "claude-code:haiku" in str(info.value)
    assert "0.3 s" in str(info.value)
    assert info.value.details["timeout_s"] == 0.3


def test_claude_per_call_timeout_overrides_default(fake_claude: Path) -> None:
    with pytest.raises(LlmTimeout, match=r"0\.3 s"):
        ClaudeCodeProvider(command=str(fake_claude), timeout_s=60).generate("SLEEP", timeout_s=0.3)


def _gone(pid: int) -> bool:
    """The process no longer exists or is a zombie (killed, not yet reaped by init)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return True
    return fields[0] in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_claude_timeout_kills_the_whole_process_group(fake_claude: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(LlmTimeout):
        ClaudeCodeProvider(command=str(fake_claude), timeout_s=2.0).generate(f"SLEEP-WITH-CHILD {pid_file}")
    assert pid_file.exists(), "the fake CLI did not start its child within the timeout"
    pid = int(pid_file.read_text())
    for _ in range(100):  # SIGKILL is delivered asynchronously; allow up to 5 s
        if _gone(pid):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail(f"grandchild {pid} survived the timeout")


def test_claude_missing_command(tmp_path: Path) -> None:
    p = ClaudeCodeProvider(command=str(tmp_path / "no-such-claude"))
    assert p.available() is False
    with pytest.raises(LlmError, match="cannot run"):
        p.generate("hi")
    on_path = ClaudeCodeProvider(command="memlane-no-such-command-on-path")
    assert on_path.available() is False
    with pytest.raises(LlmError, match="cannot run"):
        on_path.generate("hi")


def test_claude_not_executable(fake_claude: Path) -> None:
    fake_claude.chmod(0o644)
    p = ClaudeCodeProvider(command=str(fake_claude))
    assert p.available() is False
    with pytest.raises(LlmError, match="cannot run"):
        p.generate("hi")


def test_claude_available_on_path(fake_claude: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ClaudeCodeProvider(command=str(fake_claude)).available() is True
    monkeypatch.setenv("PATH", f"{fake_claude.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    p = ClaudeCodeProvider()  # command="claude", found on PATH
    assert p.available() is True
    assert json.loads(p.generate("via PATH"))["via"] == "argv"


def test_claude_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        ClaudeCodeProvider(timeout_s=0)
    with pytest.raises(ValueError, match="timeout_s"):
        ClaudeCodeProvider().generate("x", timeout_s=-1)


# ---------------------------------------------------------------- settings and build_provider


def test_llm_settings_defaults_and_descriptions() -> None:
    s = LlmSettings()
    assert (s.provider, s.model, s.base_url, s.api_key.get_secret_value(), s.timeout_s, s.max_tokens) == (
        "none",
        "",
        "",
        "",
        45.0,
        1024,
    )
    for name, info in LlmSettings.model_fields.items():
        assert info.description, f"{name} has no description"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"provider": "bogus"},
        {"timeout_s": 0},
        {"timeout_s": 601},
        {"max_tokens": 0},
        {"provider": "openai"},  # no model
    ],
)
def test_llm_settings_rejects(kwargs: dict[str, Any]) -> None:
    with pytest.raises(PydValidationError):
        LlmSettings(**kwargs)


def test_build_provider_none() -> None:
    assert build_provider(LlmSettings()) is None


def test_build_provider_ollama_defaults_and_overrides() -> None:
    p = build_provider(LlmSettings(provider="ollama"))
    assert isinstance(p, OllamaProvider)
    assert (p.name, p.url, p.timeout_s, p.max_tokens) == (
        "ollama:qwen3:4b",
        "http://127.0.0.1:11434/api/generate",
        45.0,
        1024,
    )
    p.close()
    s = LlmSettings(provider="ollama", model="gemma3:1b", base_url="http://h:1", timeout_s=9, max_tokens=7)
    q = build_provider(s)
    assert isinstance(q, OllamaProvider)
    assert (q.name, q.url, q.timeout_s, q.max_tokens) == ("ollama:gemma3:1b", "http://h:1/api/generate", 9.0, 7)
    q.close()


def test_build_provider_openai(server: Loopback) -> None:
    server.script(Reply(body=openai_body("ok")))
    s = LlmSettings(provider="openai", model="qwen2.5", base_url=server.url + "/v1", api_key="k", max_tokens=99)
    p = build_provider(s)
    assert isinstance(p, OpenAICompatProvider)
    assert p.generate("hi") == "ok"
    req = server.requests[0]
    assert req["json"]["max_tokens"] == 99
    assert req["headers"]["Authorization"] == "Bearer k"
    p.close()
    with pytest.raises(ConfigError, match="llm.model"):
        build_provider(
            LlmSettings.model_construct(
                provider="openai", model="", base_url="", api_key="", timeout_s=45.0, max_tokens=1024
            )
        )


def test_build_provider_claude_code(fake_claude: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = build_provider(LlmSettings(provider="claude-code", timeout_s=30))
    assert isinstance(p, ClaudeCodeProvider)
    assert (p.name, p.command, p.timeout_s) == ("claude-code:haiku", "claude", 30.0)
    monkeypatch.setenv("PATH", f"{fake_claude.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert json.loads(p.generate("hi"))["model"] == "haiku"
