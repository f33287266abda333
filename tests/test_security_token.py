"""Issue "Secure by default", findings 1 and 5, written as the attacks: the per-install token,
the Host and Origin checks and the CSRF rule, against a real daemon process where the network
matters and the in-process app for the route-by-route sweeps."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import TEST_BASE_URL, api_client, free_port
from memlane.api.guard import bind_warnings, host_name, is_loopback_bind
from memlane.auth import TokenStore, auth_headers, bearer_value, ensure_token, read_token, rotate_token, token_path
from memlane.errors import ConfigError

EVIL_HOSTS = [
    "evil.example",
    "evil.example:7437",
    "127.0.0.1.evil.example",
    "localhost.evil.example:80",
    "[::2]:7437",
    "10.0.0.5",
    "",
]


def state_changing_routes(client) -> list[tuple[str, str]]:
    """(method, path) of every state-changing route of the app, path parameters filled in."""
    import re

    out = [("POST", "/mcp"), ("DELETE", "/mcp")]
    for path, ops in client.app.openapi()["paths"].items():
        for method in ops:
            if method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
                out.append((method.upper(), re.sub(r"\{[^}]+\}", "00000000-0000-4000-8000-000000000000", path)))
    return out


# -- the token itself ----------------------------------------------------------------------------
def test_token_file_is_private_random_and_rotates(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = ensure_token(home)
    assert stat.S_IMODE(token_path(home).stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert len(first) >= 40 and ensure_token(home) == first == read_token(home)
    second = rotate_token(home)
    assert second != first and read_token(home) == second
    assert auth_headers(home) == {"Authorization": f"Bearer {second}"}
    assert auth_headers(tmp_path / "other") == {}


def test_bearer_parsing_and_constant_time_match(tmp_path: Path) -> None:
    assert bearer_value("Bearer abc") == "abc" and bearer_value("bearer abc ") == "abc"
    assert bearer_value("Basic abc") is None and bearer_value("Bearer ") is None and bearer_value(None) is None
    store = TokenStore(tmp_path / "home", recheck_s=0.0)
    token = read_token(tmp_path / "home")
    assert store.matches(token) and not store.matches(token + "x") and not store.matches(None)
    assert not store.matches("\ud800")  # not ASCII: refused, never an exception
    new = rotate_token(tmp_path / "home")
    assert store.matches(new) and not store.matches(token)


def test_host_names_are_parsed_like_the_header() -> None:
    assert host_name("[::1]:7437") == "::1" and host_name("LocalHost:80") == "localhost"
    assert host_name("127.0.0.1") == "127.0.0.1" and host_name("::1") == "::1"
    assert is_loopback_bind("127.0.0.2") and is_loopback_bind("::1") and not is_loopback_bind("0.0.0.0")


def test_a_non_loopback_bind_needs_the_token() -> None:
    with pytest.raises(ConfigError, match="require_token off"):
        bind_warnings("0.0.0.0", require_token=False)
    assert "reachable from the network" in bind_warnings("0.0.0.0", require_token=True)[0]
    assert "require_token is off" in bind_warnings("127.0.0.1", require_token=False)[0]
    assert bind_warnings("127.0.0.1", require_token=True) == []


# -- in process: every route ------------------------------------------------------------------------
def test_every_route_but_health_refuses_a_missing_or_wrong_token(store) -> None:
    with api_client(store) as client:
        good = {"Authorization": client.headers["Authorization"]}
        routes = state_changing_routes(client) + [
            ("GET", "/api/memories"),
            ("GET", "/api/config"),
            ("GET", "/openapi.json"),
            ("GET", "/docs"),
            ("POST", "/mcp"),
        ]
        assert len(routes) > 20
        for method, path in routes:
            for auth in (None, "Bearer wrong", "Basic " + good["Authorization"].split()[1]):
                headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
                client.headers.pop("Authorization", None)
                r = client.request(method, path, headers=headers, content=b"{}")
                assert r.status_code == 401, (method, path, auth, r.text)
                assert r.json()["error"]["code"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
        client.headers.update(good)
        assert client.get("/api/memories").status_code == 200


def test_health_without_the_token_says_only_ok(store) -> None:
    with api_client(store) as client:
        full = client.get("/health").json()
        assert full["status"] == "ok" and "db_path" in full and "memories" in full
        bare = client.get("/health", headers={"Authorization": ""}).json()
        assert bare == {"status": "ok"}
        assert client.post("/health", headers={"Authorization": ""}).status_code == 401


def test_dns_rebinding_hosts_are_refused_on_every_route(store) -> None:
    with api_client(store) as client:
        for host in EVIL_HOSTS:
            for method, path in [
                ("GET", "/health"),
                ("GET", "/api/memories"),
                ("GET", "/api/config"),
                ("POST", "/api/memory/remember"),
                ("POST", "/mcp"),
            ]:
                r = client.request(method, path, headers={"Host": host}, json={"content": "planted"})
                assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host", (host, path)
        assert client.get("/api/memories").json()["total"] == 0
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        for host in ("localhost:7437", "127.0.0.1", "[::1]:7437", "LOCALHOST", "localhost"):
            assert client.get("/api/memories", headers={"Host": host}).status_code == 200, host
            r = client.post("/mcp", json=init, headers={"Host": host, "Accept": "application/json, text/event-stream"})
            assert r.status_code == 200, (host, r.text)  # the same Host rules on /mcp as everywhere


def test_allowed_hosts_and_the_bind_host_are_accepted(open_store) -> None:
    c = open_store(allowed_hosts=["memlane.internal"], host="192.0.2.10")
    with api_client(c) as client:
        for host in ("memlane.internal:7437", "192.0.2.10:7437", "127.0.0.1"):
            assert client.get("/api/memories", headers={"Host": host}).status_code == 200, host
        assert client.get("/api/memories", headers={"Host": "other.internal"}).status_code == 403


def test_foreign_origins_are_refused_even_with_the_token(store) -> None:
    with api_client(store) as client:
        for origin in (
            "http://evil.example",
            "null",
            "http://127.0.0.1:9999",
            "https://127.0.0.1:7437",
            "http://localhost:7437",
        ):
            r = client.post("/api/memory/remember", json={"content": "from a web page"}, headers={"Origin": origin})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin", origin
        assert client.get("/api/memories").json()["total"] == 0
        own = client.post("/api/memory/remember", json={"content": "same origin"}, headers={"Origin": TEST_BASE_URL})
        assert own.status_code == 200
        assert "access-control-allow-origin" not in {k.lower() for k in own.headers}


def test_body_less_cross_site_posts_are_refused_with_the_token_off(open_store) -> None:
    """With ``require_token`` off (trusted container), a form or ``fetch(no-cors)`` POST must
    still not reach a state-changing route: no JSON content type, no custom header -> 403."""
    c = open_store(require_token=False)
    for i in range(5):
        c.memories.remember(__import__("memlane.services.inputs", fromlist=["x"]).RememberInput(content=f"note {i}"))
    with api_client(c) as client:
        client.headers.pop("X-Memlane-Client", None)
        client.headers.pop("Authorization", None)
        routes = state_changing_routes(client)
        for method, path in routes:
            for ctype in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"):
                headers = {"Content-Type": ctype} if ctype else {}
                r = client.request(method, path, headers=headers)
                assert r.status_code == 403 and r.json()["error"]["code"] == "csrf_refused", (method, path, ctype)
        assert c.memories.live_count() == 5
        # memlane's own clients (custom header) and JSON bodies still work without a token.
        assert client.get("/api/memories").status_code == 200
        r = client.post("/api/memory/remember", json={"content": "from the CLI"})
        assert r.status_code == 200
        r = client.post("/api/predictor/train", headers={"X-Memlane-Client": "cli"})
        assert r.status_code != 403


# -- a real daemon ---------------------------------------------------------------------------------
def test_real_daemon_refuses_rebinding_and_strangers_and_serves_its_own_clients(start_daemon, tmp_path) -> None:
    d = start_daemon(provider="none")
    token = read_token(d.home)
    assert token and stat.S_IMODE(token_path(d.home).stat().st_mode) == 0o600
    with httpx.Client(base_url=d.url, timeout=30) as anon:
        assert anon.get("/health").json() == {"status": "ok"}
        for path in ("/api/memories", "/api/config"):
            assert anon.get(path).status_code == 401
        assert anon.post("/api/memory/remember", json={"content": "planted"}).status_code == 401
        r = anon.get("/api/memories", headers={"Host": "evil.example", **d.headers})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host"
        r = anon.post("/api/repair/dedup", headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
    with d.client() as own:
        assert own.post("/api/memory/remember", json={"content": "the user's own note"}).status_code == 200
        assert own.get("/api/memories").json()["total"] == 1
        assert own.get("/health").json()["memories"] == 1
    # The CLI finds the token in the home by itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(MEMLANE_HOME=str(d.home), MEMLANE_CONFIG=str(tmp_path / "none.yaml"))
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "recall", "own note", "--url", d.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "the user's own note" in out.stdout, out.stderr
    # Rotation: the running daemon refuses the old token within its recheck interval.
    rotated = subprocess.run(
        [sys.executable, "-m", "memlane", "token", "rotate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert rotated.returncode == 0, rotated.stderr
    assert read_token(d.home) != token
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = httpx.get(d.url + "/api/memories", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        if r.status_code == 401:
            break
        time.sleep(0.2)
    assert r.status_code == 401
    with d.client() as own:
        assert own.get("/api/memories").status_code == 200


def test_hook_command_works_with_the_token_and_a_stranger_gets_nothing(start_daemon, tmp_path) -> None:
    d = start_daemon(provider="none")
    with d.client() as own:
        own.post(
            "/api/memory/remember",
            json={"content": "Deploys go through staging first.", "importance": 0.9, "pinned": True},
        ).raise_for_status()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(MEMLANE_HOME=str(d.home), MEMLANE_CONFIG=str(tmp_path / "none.yaml"), MEMLANE_PORT=str(d.port))
    payload = json.dumps({"session_id": "s-token", "cwd": str(tmp_path), "hook_event_name": "SessionStart"})
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "hook", "session-start"],
        input=payload,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "staging first" in out.stdout, (out.stdout, out.stderr)
    # The same hook pointed at a home with another token is refused (and says nothing).
    other = tmp_path / "other-home"
    ensure_token(other)
    env.update(MEMLANE_HOME=str(other))
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "hook", "session-start"],
        input=payload,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout == ""


def test_serve_refuses_a_public_bind_without_the_token(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(
        MEMLANE_HOME=str(tmp_path / "home"),
        MEMLANE_CONFIG=str(tmp_path / "none.yaml"),
        MEMLANE_REQUIRE_TOKEN="false",
        MEMLANE_EMBEDDING__PROVIDER="none",
    )
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "require_token off" in out.stderr
