"""The MCP server, driven by the official SDK's own client over real transports.

* In-process backend: the daemon app (``create_app`` + ``memlane.mcp.http.mount``) served by
  uvicorn on a free loopback port; the client connects to ``/mcp`` over streamable HTTP.
* stdio: ``memlane mcp serve`` spawned by the SDK's ``stdio_client`` against a real daemon
  subprocess, and against a port where nothing listens.

Nothing of memlane is mocked; stores are BM25-only (embedding provider ``none``) for speed.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from conftest import free_port
from memlane.api.app import create_app
from memlane.auth import auth_headers
from memlane.config import load_settings
from memlane.container import Container, open_container
from memlane.mcp.http import mount

pytestmark = pytest.mark.anyio

TOOLS = {
    "memory_search",
    "memory_store",
    "memory_get",
    "memory_list",
    "memory_modify",
    "memory_forget",
    "memory_feedback",
    "memory_prune",
    "memory_phase",
    "memory_record_signal",
    "memory_prediction_errors",
    "memory_record_outcome",
    "memory_qa_failure",
}
CALL_TIMEOUT_S = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- servers and sessions -----------------------------------------------------------------------
#: The token header of each in-process daemon, by URL (filled as each one starts).
TOKEN_HEADERS: dict[str, dict[str, str]] = {}


class InProcessDaemon:
    """The daemon app with /mcp mounted, on uvicorn in a thread (the container stays inspectable)."""

    def __init__(self, home: Path) -> None:
        self.container: Container = open_container(load_settings(home=home, embedding={"provider": "none"}))
        app = create_app(self.container)
        mount(app, self.container)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.headers = auth_headers(home)
        TOKEN_HEADERS[self.url] = self.headers

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                pytest.fail("in-process daemon did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.container.close()


@pytest.fixture
def inproc(tmp_path: Path) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "home")
    d.start()
    yield d
    d.stop()


@asynccontextmanager
async def http_session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers=headers if headers is not None else TOKEN_HEADERS.get(url, {}))
    async with (
        client,
        streamable_http_client(url + "/mcp", http_client=client) as (read, write),
        ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(
    daemon_url: str, tmp_path: Path, token_home: Path | None = None
) -> AsyncIterator[ClientSession]:
    # The stdio server reads the token from its own home, as it does for a user.
    (tmp_path / "stdio-home").mkdir(exist_ok=True)
    if token_home is not None:
        (tmp_path / "stdio-home" / "token").write_text((token_home / "token").read_text())
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from memlane.cli.mcp_cmd import mcp_app; mcp_app()", "serve", "--url", daemon_url],
        # A home of its own: proves the stdio server never opens (or creates) a database.
        env={"MEMLANE_HOME": str(tmp_path / "stdio-home"), "MEMLANE_CONFIG": str(tmp_path / "none.yaml")},
    )
    with open(tmp_path / "stdio-stderr.log", "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session,
        ):
            await session.initialize()
            yield session


def ok(result: CallToolResult) -> Any:
    """The structured result of a successful call (a list result is unwrapped)."""
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict)
    return data["result"] if set(data) == {"result"} else data


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    assert result.content and result.content[0].type == "text"
    return result.content[0].text


# -- shared scenarios (run against both backends) -------------------------------------------------
async def round_trip(s: ClientSession, daemon_url: str) -> str:
    """Store, search, get, list, modify, feedback, forget; returns the forgotten id."""
    stored = ok(
        await s.call_tool(
            "memory_store",
            {
                "content": "The user prefers tabs over spaces in Python files.",
                "type": "preference",
                "importance": 0.8,
                "project": "memlane",
                "tags": ["style", "python"],
            },
        )
    )
    assert stored["status"] == "created"
    mid = stored["id"]
    again = ok(await s.call_tool("memory_store", {"content": "The user prefers tabs over spaces in Python files."}))
    assert again == {"id": mid, "status": "deduplicated"}
    other = ok(await s.call_tool("memory_store", {"content": "Deploys go through staging first.", "type": "decision"}))

    hits = ok(await s.call_tool("memory_search", {"query": "tabs spaces python", "limit": 5}))
    assert hits and hits[0]["id"] == mid
    assert set(hits[0]) == {"id", "content", "type", "project", "score", "created_at"}
    assert hits[0]["project"] == "memlane" and hits[0]["type"] == "preference" and 0 < hits[0]["score"] <= 1.5
    assert ok(await s.call_tool("memory_search", {"query": "tabs", "types": ["decision"]})) == []
    assert ok(await s.call_tool("memory_search", {"query": "tabs", "project": "elsewhere"})) == []

    m = ok(await s.call_tool("memory_get", {"id": mid}))
    assert m["content"].startswith("The user prefers tabs") and m["tags"] == ["style", "python"]
    assert m["who"] == "mcp" and m["importance"] == 0.8 and m["is_deleted"] is False

    page = ok(await s.call_tool("memory_list", {"limit": 1}))
    assert page["total"] == 2 and len(page["items"]) == 1
    assert ok(await s.call_tool("memory_list", {"offset": 1}))["items"][0]["id"] == mid  # newest first
    only = ok(await s.call_tool("memory_list", {"type": "decision"}))
    assert only["total"] == 1 and only["items"][0]["id"] == other["id"]
    assert ok(await s.call_tool("memory_list", {"project": "memlane"}))["total"] == 1

    changed = ok(
        await s.call_tool(
            "memory_modify",
            {"id": mid, "importance": 0.9, "pinned": True, "tags": ["style"], "why": "confirmed by the user"},
        )
    )
    assert changed["importance"] == 0.9 and changed["pinned"] is True and changed["tags"] == ["style"]
    assert changed["content"] == m["content"]
    rewritten = ok(await s.call_tool("memory_modify", {"id": mid, "content": "The user prefers tabs, width 4."}))
    assert rewritten["content"] == "The user prefers tabs, width 4."

    # Feedback applies to memories injected into the session: start one on the daemon.
    async with httpx.AsyncClient(base_url=daemon_url, headers=TOKEN_HEADERS.get(daemon_url, {})) as h:
        start = (await h.post("/api/hooks/session-start", json={"session_key": "sess-1"})).json()
    injected = [i["id"] for i in start["injected"]]
    assert mid in injected
    fb = ok(
        await s.call_tool("memory_feedback", {"session_key": "sess-1", "feedback": {mid[:8]: 1.0, "0000000": -1.0}})
    )
    assert fb == {"applied": 1, "ignored": 1}
    assert ok(await s.call_tool("memory_feedback", {"session_key": "no-such-session", "feedback": {mid: 0.5}})) == {
        "applied": 0,
        "ignored": 1,
    }

    gone = ok(await s.call_tool("memory_forget", {"id": mid, "why": "user asked"}))
    assert gone == {"id": mid, "deleted": True}
    assert ok(await s.call_tool("memory_get", {"id": mid}))["is_deleted"] is True
    assert [h["id"] for h in ok(await s.call_tool("memory_search", {"query": "tabs"}))] == []
    assert ok(await s.call_tool("memory_list", {}))["total"] == 1
    return mid


#: (tool, arguments, text the error must contain). Every one is a tool error, never a crash.
BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("memory_store", {"content": ""}, "content: must not be empty"),
    ("memory_store", {"content": "   \n "}, "content: must not be empty"),
    ("memory_store", {"content": "x", "importance": 7}, "importance"),
    ("memory_store", {"content": "x", "importance": -0.1}, "greater than or equal to 0"),
    ("memory_store", {"content": 5}, "content"),
    ("memory_store", {"content": "x", "tags": "not-a-list"}, "tags"),
    ("memory_store", {}, "content"),
    ("memory_get", {"id": "no-such-id"}, "no memory with id 'no-such-id'"),
    ("memory_get", {"id": "  "}, "id: must not be empty"),
    ("memory_get", {"id": ["a"]}, "id"),
    ("memory_search", {"query": "x", "limit": 0}, "limit"),
    ("memory_search", {"query": "x", "limit": 5000}, "less than or equal to 1000"),
    ("memory_search", {"query": "x", "limit": "many"}, "limit"),
    ("memory_search", {"query": "x", "types": [1, 2]}, "types"),
    ("memory_list", {"offset": -1}, "offset"),
    ("memory_list", {"limit": "abc"}, "limit"),
    ("memory_modify", {"id": "no-such-id", "content": "new"}, "no memory with id 'no-such-id'"),
    ("memory_modify", {"id": "no-such-id"}, "nothing to change"),
    ("memory_modify", {"id": "no-such-id", "importance": 7}, "importance"),
    ("memory_modify", {"id": "no-such-id", "pinned": "maybe"}, "pinned"),
    ("memory_forget", {"id": "no-such-id"}, "no memory with id 'no-such-id'"),
    ("memory_feedback", {"session_key": "s", "feedback": "great"}, "feedback"),
    ("memory_feedback", {"session_key": "s", "feedback": {"abc": "very"}}, "feedback"),
    ("memory_feedback", {"session_key": " ", "feedback": {}}, "session_key: must be a non-empty string"),
]


async def bad_calls(s: ClientSession) -> None:
    for tool, args, expected in BAD_CALLS:
        text = error_text(await s.call_tool(tool, args))
        assert expected in text, (tool, args, text)
    # MemlaneErrors come back as exactly their message.
    assert error_text(await s.call_tool("memory_get", {"id": "nope"})) == "no memory with id 'nope'"
    ok(await s.call_tool("memory_list", {}))  # the session is still alive


# -- in-process backend over streamable HTTP --------------------------------------------------------
async def test_http_lists_seven_tools_with_descriptions_and_schemas(inproc: InProcessDaemon) -> None:
    async with http_session(inproc.url) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.description and len(t.description) > 80, t.name
        assert t.input_schema["type"] == "object" and t.output_schema is not None
    assert tools["memory_search"].input_schema["required"] == ["query"]
    assert tools["memory_store"].input_schema["properties"]["importance"]["maximum"] == 1
    assert set(tools["memory_modify"].input_schema["properties"]) == {
        "id",
        "content",
        "type",
        "importance",
        "tags",
        "pinned",
        "keep",
        "why",
    }
    assert tools["memory_feedback"].input_schema["required"] == ["session_key", "feedback"]
    assert tools["memory_get"].annotations.read_only_hint is True
    assert tools["memory_forget"].annotations.destructive_hint is True


async def test_http_every_tool_round_trip(inproc: InProcessDaemon) -> None:
    async with http_session(inproc.url) as s:
        mid = await round_trip(s, inproc.url)
    events = [(h.event, h.who) for h in inproc.container.memories.history(mid)]
    assert events[0] == ("created", "mcp") and ("deleted", "mcp") in events and ("updated", "mcp") in events


async def test_http_bad_input_is_a_tool_error(inproc: InProcessDaemon) -> None:
    async with http_session(inproc.url) as s:
        await bad_calls(s)
        stored = ok(await s.call_tool("memory_store", {"content": "only once"}))
        ok(await s.call_tool("memory_forget", {"id": stored["id"]}))
        assert error_text(await s.call_tool("memory_forget", {"id": stored["id"]})) == "memory is already deleted"
        assert (
            error_text(await s.call_tool("memory_modify", {"id": stored["id"], "type": "x"}))
            == "memory is deleted; recover it first"
        )
    assert inproc.container.memories.list()[1] == 0


async def test_http_mount_leaves_the_rest_of_the_daemon_alone(inproc: InProcessDaemon) -> None:
    async with httpx.AsyncClient(base_url=inproc.url, headers=inproc.headers) as h:
        assert (await h.get("/health")).status_code == 200
        r = await h.get("/no-such-path")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert (await h.post("/health")).json()["error"]["code"] == "method_not_allowed"
        # DNS-rebinding protection of the SDK: a foreign Host header is refused.
        assert (await h.post("/mcp", json={}, headers={"Host": "evil.example:80"})).status_code in (403, 421)
    async with http_session(inproc.url) as s1, http_session(inproc.url) as s2:  # concurrent sessions
        stored = ok(await s1.call_tool("memory_store", {"content": "shared between sessions"}))
        assert ok(await s2.call_tool("memory_get", {"id": stored["id"]}))["content"] == "shared between sessions"


def test_http_mount_survives_a_restarted_lifespan(tmp_path: Path) -> None:
    """Each lifespan gets a fresh session manager (the SDK's runs once); none running -> 503."""
    from fastapi.testclient import TestClient

    c = open_container(load_settings(home=tmp_path / "home", embedding={"provider": "none"}))
    app = create_app(c)
    mount(app, c)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", **auth_headers(c.settings.home)}
    try:
        r = TestClient(app, base_url="http://127.0.0.1:7437").post("/mcp", json=init, headers=headers)
        assert r.status_code == 503 and r.json()["error"]["code"] == "mcp_unavailable"
        for _ in range(2):
            with TestClient(app, base_url="http://127.0.0.1:7437") as tc:
                r = tc.post("/mcp", json=init, headers=headers)
                assert r.status_code == 200 and r.headers["mcp-session-id"] and '"memlane"' in r.text
    finally:
        c.close()


# -- stdio, backed by a daemon subprocess -----------------------------------------------------------
async def test_stdio_against_a_real_daemon(start_daemon, tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "daemon-home", provider="none")
    TOKEN_HEADERS[daemon.url] = daemon.headers
    async with stdio_session(daemon.url, tmp_path, token_home=daemon.home) as s:
        assert {t.name for t in (await s.list_tools()).tools} == TOOLS
        mid = await round_trip(s, daemon.url)
        await bad_calls(s)
    r = httpx.get(f"{daemon.url}/api/memory/{mid}/history", headers=daemon.headers).json()
    assert [(e["event"], e["who"]) for e in r][0] == ("created", "mcp") and r[-1]["event"] == "deleted"
    assert not (tmp_path / "stdio-home" / "memories.db").exists(), "the stdio server must not open a database"


async def test_stdio_with_the_daemon_down_returns_a_clear_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    expected = f"memlane daemon not reachable at {url}; start it with `memlane serve`"
    async with stdio_session(url, tmp_path) as s:
        assert {t.name for t in (await s.list_tools()).tools} == TOOLS
        assert error_text(await s.call_tool("memory_store", {"content": "hello"})) == expected
        assert error_text(await s.call_tool("memory_search", {"query": "hello"})) == expected
        assert error_text(await s.call_tool("memory_get", {"id": "x"})) == expected
        assert error_text(await s.call_tool("memory_feedback", {"session_key": "s", "feedback": {}})) == expected
        # Argument errors are still reported as such, without the daemon.
        assert "importance" in error_text(await s.call_tool("memory_store", {"content": "x", "importance": 7}))
