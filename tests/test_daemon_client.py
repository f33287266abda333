"""Issue 38, "one of each": the CLI and the MCP stdio server talk to the daemon through one
client (memlane.daemon_client) and report a missing daemon with one error class.

A real loopback HTTP server stands in for the daemon where an odd answer is needed; a closed
port stands in for a daemon that is down."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import free_port
from memlane.auth import ensure_token
from memlane.cli.client import Client
from memlane.daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from memlane.errors import MemlaneError, NotFound, ValidationError
from memlane.mcp.stdio import HttpBackend

#: path -> (status, content type, body) the fake daemon answers with
ANSWERS: dict[str, tuple[int, str, bytes]] = {
    "/ok": (200, "application/json", b'{"status": "ok"}'),
    "/invalid": (
        422,
        "application/json",
        json.dumps(
            {
                "error": {
                    "code": "validation_error",
                    "message": "importance: must be <= 1",
                    "details": {"field": "importance"},
                }
            }
        ).encode(),
    ),
    "/api/memory/missing": (
        404,
        "application/json",
        json.dumps({"error": {"code": "not_found", "message": "no memory missing"}}).encode(),
    ),
    "/proxy": (502, "text/html", b"<html>bad gateway</html>"),
    "/html": (200, "text/html", b"<html>not a daemon</html>"),
}


@pytest.fixture
def fake_daemon() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(dict(self.headers.items()))
            status, ctype, body = ANSWERS[self.path.split("?")[0]]
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_down_daemon_is_one_error_class_for_cli_and_mcp(tmp_path: Path):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(DaemonUnavailable) as cli:
        Client(url, home=tmp_path).request("GET", "/health")
    assert str(cli.value).startswith(f"no memlane daemon at {url} (ConnectError)")
    backend = HttpBackend(url, home=tmp_path)
    with pytest.raises(DaemonUnavailable) as mcp:
        backend.get("x")
    assert str(mcp.value) == f"memlane daemon not reachable at {url}; start it with `memlane serve`"
    assert cli.value.status == mcp.value.status == 503 and cli.value.code == mcp.value.code == "daemon_unavailable"
    backend.close()


def test_both_send_the_token_and_name_themselves(fake_daemon, tmp_path: Path):
    url, seen = fake_daemon
    token = ensure_token(tmp_path)
    cli = Client(url, home=tmp_path)
    backend = HttpBackend(url, home=tmp_path)
    assert cli.request("GET", "/ok") == {"status": "ok"}
    assert backend._request("GET", "/ok") == {"status": "ok"}
    cli.close()
    backend.close()
    assert [(h["Authorization"], h["X-Memlane-Client"]) for h in seen] == [
        (f"Bearer {token}", "cli"),
        (f"Bearer {token}", "mcp"),
    ]


def test_the_daemons_error_shape_is_kept(fake_daemon, tmp_path: Path):
    url, _ = fake_daemon
    client = DaemonClient(url, home=tmp_path)
    with pytest.raises(DaemonError) as exc:
        client.request("GET", "/invalid")
    e = exc.value
    assert (e.status, e.daemon_code, e.daemon_message, e.details) == (
        422,
        "validation_error",
        "importance: must be <= 1",
        {"field": "importance"},
    )
    assert str(e) == "validation_error: importance: must be <= 1"
    client.close()
    # the MCP surface maps the code back to memlane's class, message verbatim
    backend = HttpBackend(url, home=tmp_path)
    with pytest.raises(ValidationError, match=r"^importance: must be <= 1$"):
        backend._request("GET", "/invalid")
    with pytest.raises(NotFound, match="^no memory missing$"):
        backend.get("missing")
    backend.close()


def test_answers_that_are_not_the_daemons_are_clear_errors(fake_daemon, tmp_path: Path):
    url, _ = fake_daemon
    cli = Client(url, home=tmp_path)
    with pytest.raises(DaemonError, match=r"answered HTTP 502: <html>bad gateway</html>") as bad:
        cli.request("GET", "/proxy")
    assert bad.value.status == 502 and bad.value.daemon_code is None
    # a 2xx that is not JSON: the CLI used to fail with a bare JSONDecodeError
    with pytest.raises(DaemonError, match=r"not JSON\): is this a memlane daemon\?"):
        cli.request("GET", "/html")
    cli.close()
    backend = HttpBackend(url, home=tmp_path)
    with pytest.raises(MemlaneError, match="not JSON"):
        backend._request("GET", "/html")
    backend.close()
