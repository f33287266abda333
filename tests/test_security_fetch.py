"""Issue 37, finding 6 (and the ``http://[::1/`` 500 of finding 8): outbound fetches, tried as
an attacker would. Each test is an attack; on the code before the address guard each one
reached the loopback server or answered 500.

Real loopback HTTP(S) servers stand in for what an attacker wants to reach (memlane itself,
a local database, a metadata endpoint); each counts the requests it received, and a refused
attack leaves that count at 0. Where a test needs a public-looking name that resolves to
loopback, the resolver handed to the guard is a function with ``getaddrinfo``'s signature
answering from a table: the system resolver cannot be told what to answer without editing
``/etc/hosts``.
"""

from __future__ import annotations

import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from conftest import api_client
from memlane.documents.fetcher import FetchError, FetchRefused, check_url, fetch_url
from memlane.documents.service import DOCUMENT_INGEST, DocumentService
from memlane.netguard import AddressRefused, HostAllowlist, check_literal, guarded_client, numeric_address, refusal, vet
from memlane.workers.runtime import JobWorker


class Site:
    """A loopback HTTP server: ``routes`` maps a path to (status, headers, body); every request
    is counted in ``hits`` (by path) and its Host header kept in ``hosts``."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, routes: dict | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.routes = routes if routes is not None else {"/": (200, {"Content-Type": "text/plain"}, b"secret")}
        self.hits: dict[str, int] = {}
        self.hosts: list[str] = []
        self.sni: list[str | None] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                site.hits[self.path] = site.hits.get(self.path, 0) + 1
                site.hosts.append(self.headers.get("Host", ""))
                status, headers, body = site.routes.get(self.path, (404, {"Content-Type": "text/plain"}, b""))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_cls = type("Server", (ThreadingHTTPServer,), {"address_family": family})
        self.httpd = server_cls((host, port), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: site.sni.append(name)
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def total(self) -> int:
        return sum(self.hits.values())

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def sites() -> Iterator[Callable[..., Site]]:
    made: list[Site] = []

    def make(*args, **kw) -> Site:
        s = Site(*args, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def table_resolver(table: dict[str, list[str]], calls: list[str] | None = None):
    """A resolver with ``socket.getaddrinfo``'s signature answering from ``table`` (name ->
    addresses, in order); other names raise ``gaierror`` as an unknown name does."""

    def resolve(host, port, family=0, type=0, proto=0, flags=0):
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        out = []
        for a in table[host]:
            if ":" in a:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)))
        return out

    return resolve


# -- the address policy -------------------------------------------------------------------

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "::1": "loopback",
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "fec0::1": "private",
    "169.254.169.254": "cloud metadata (link-local)",
    "fd00:ec2::254": "cloud metadata (link-local)",
    "169.254.1.1": "link-local",
    "fe80::1": "link-local",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "ff02::1": "multicast",
    "0.0.0.0": "unspecified",
    "0.1.2.3": "unspecified",
    "::": "unspecified",
    "100.64.0.1": "shared (CGNAT)",
    "100.127.255.254": "shared (CGNAT)",
    "255.255.255.255": "reserved",
    "240.0.0.1": "reserved",
    "192.0.2.1": "non-global",
    "198.18.0.1": "non-global",
    "2001:db8::1": "non-global",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2": "non-global",  # Teredo
    "64:ff9b:1::a": "private",  # local-use NAT64
}
# IPv6 forms that carry a refused IPv4 address, and the IPv4 verdict they must get.
WRAPPED = {
    "::ffff:127.0.0.1": "loopback",
    "::ffff:7f00:1": "loopback",
    "::127.0.0.1": "loopback",
    "2002:7f00:1::": "loopback",
    "64:ff9b::7f00:1": "loopback",
    "::ffff:169.254.169.254": "cloud metadata",
    "64:ff9b::a9fe:a9fe": "cloud metadata",
    "2002:a00:1::1": "private",
    "::ffff:100.64.0.1": "shared (CGNAT)",
}
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "2002:808:808::1",
    "64:ff9b::808:808",
]


@pytest.mark.parametrize("address, why", sorted(REFUSED.items()))
def test_every_non_public_address_is_refused_with_its_reason(address, why):
    assert refusal(ipaddress.ip_address(address)) == why


@pytest.mark.parametrize("address, why", sorted(WRAPPED.items()))
def test_ipv6_forms_carrying_a_refused_ipv4_address_are_refused(address, why):
    got = refusal(ipaddress.ip_address(address))
    assert got is not None and got.startswith(why) and "inside" in got


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address):
    assert refusal(ipaddress.ip_address(address)) is None


NUMERIC_LOOPBACK = [
    "2130706433",
    "0x7f000001",
    "0x7F.0.0.1",
    "0177.0.0.1",
    "017700000001",
    "127.1",
    "127.0.1",
    "[::ffff:127.0.0.1]",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
]


@pytest.mark.parametrize("host", NUMERIC_LOOPBACK)
def test_numeric_spellings_are_judged_by_what_getaddrinfo_makes_of_them(host):
    bare = host.strip("[]")
    resolved = {info[4][0] for info in socket.getaddrinfo(bare, 80, type=socket.SOCK_STREAM)}
    assert resolved and all(refusal(ipaddress.ip_address(a)) for a in resolved)
    with pytest.raises(AddressRefused) as e:
        vet(host, 80)  # the real system resolver
    assert e.value.reason.startswith("loopback")
    assert numeric_address(host) is not None
    with pytest.raises(AddressRefused):
        check_literal(host)  # refused without DNS too


def test_a_public_looking_name_resolving_to_loopback_is_refused():
    resolver = table_resolver(
        {
            "docs.example.com": ["93.184.216.34", "127.0.0.1"],
            "meta.example.com": ["169.254.169.254"],
            "ok.example.com": ["93.184.216.34"],
        }
    )
    with pytest.raises(AddressRefused) as e:  # one bad answer among good ones refuses the host
        vet("docs.example.com", 443, resolver=resolver)
    assert (e.value.host, e.value.address, e.value.reason) == ("docs.example.com", "127.0.0.1", "loopback")
    assert "docs.example.com (127.0.0.1)" in e.value.message and "loopback" in e.value.message
    with pytest.raises(AddressRefused, match="cloud metadata"):
        vet("meta.example.com", 80, resolver=resolver)
    assert vet("ok.example.com", 80, resolver=resolver) == ["93.184.216.34"]


def test_allowlist_names_addresses_and_networks():
    allow = HostAllowlist(["Docs.Internal.", "10.1.2.0/24", "[::1]", "127.0.0.2"])
    resolver = table_resolver(
        {
            "docs.internal": ["10.9.9.9"],
            "other.internal": ["10.9.9.9"],
            "db.internal": ["10.1.2.7"],
            "mixed.internal": ["10.1.2.7", "10.3.3.3"],
        }
    )
    assert allow.allows_name("DOCS.internal.") and not allow.allows_name("docs.internal.evil.com")
    assert vet("docs.internal", 80, allow, resolver=resolver) == ["10.9.9.9"]  # by name, any address
    assert vet("db.internal", 80, allow, resolver=resolver) == ["10.1.2.7"]  # by network
    with pytest.raises(AddressRefused, match="10.9.9.9"):  # same address, name not listed
        vet("other.internal", 80, allow, resolver=resolver)
    with pytest.raises(AddressRefused, match="10.3.3.3"):
        vet("mixed.internal", 80, allow, resolver=resolver)
    check_literal("[::1]", allow)
    check_literal("127.0.0.2", allow)
    with pytest.raises(AddressRefused):
        check_literal("127.0.0.1", allow)
    for bad in (["a b"], [""], ["http://x/"], [5], ["x"] * 101):
        with pytest.raises(ValueError):
            HostAllowlist(bad)


def test_allowed_hosts_setting_is_validated(open_store):
    from memlane.errors import ConfigError

    with pytest.raises(ConfigError, match=r"documents\.allowedHosts.*'not a host'"):
        open_store(memory={"pipeline_v2": {"documents": {"allowedHosts": ["not a host"]}}})
    c = open_store(memory={"pipeline_v2": {"documents": {"allowedHosts": [" localhost ", "10.0.0.0/8"]}}})
    assert c.settings.memory.pipeline_v2.documents.allowed_hosts == ["localhost", "10.0.0.0/8"]


# -- fetches ------------------------------------------------------------------------------


def test_fetch_of_a_loopback_server_is_refused(sites):
    target = sites()
    with pytest.raises(FetchRefused) as e:
        fetch_url(f"http://127.0.0.1:{target.port}/")
    err = e.value
    assert err.code == "address_refused" and err.retryable is False and err.status == 422
    assert err.details == {"host": "127.0.0.1", "address": "127.0.0.1", "reason": "loopback"}
    assert "documents.allowedHosts" in err.message
    assert target.total == 0


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST.",
        "2130706433",
        "0x7f000001",
        "017700000001",
        "127.1",
        "[::ffff:127.0.0.1]",
        "0.0.0.0",
        "0",
    ],
)
def test_fetch_of_loopback_spellings_is_refused(sites, host):
    target = sites()
    with pytest.raises(FetchRefused) as e:
        fetch_url(f"http://{host}:{target.port}/")
    assert e.value.details["reason"].startswith(("loopback", "unspecified"))
    assert target.total == 0


def test_fetch_of_ipv6_loopback_is_refused(sites):
    target = sites("::1")
    with pytest.raises(FetchRefused, match="loopback"):
        fetch_url(f"http://[::1]:{target.port}/")
    assert target.total == 0


def test_octal_dotted_form_is_refused_as_malformed(sites):
    target = sites()
    with pytest.raises(FetchError, match="not a valid URL"):
        fetch_url(f"http://0177.0.0.1:{target.port}/")
    assert target.total == 0


def test_an_allowed_name_lets_its_loopback_server_through(sites):
    target = sites()
    r = fetch_url(f"http://localhost:{target.port}/", allowed_hosts=["localhost"])
    assert r.content == "secret" and target.hosts == [f"localhost:{target.port}"]
    r = fetch_url(f"http://127.0.0.1:{target.port}/", allowed_hosts=["127.0.0.0/8"])
    assert r.content == "secret" and target.total == 2


def test_a_redirect_from_an_allowed_host_to_loopback_is_refused_at_the_hop(sites):
    secret = sites()
    redirects = {
        "/to-ip": f"http://127.0.0.1:{secret.port}/",
        "/to-decimal": f"http://2130706433:{secret.port}/",
        "/to-mapped": f"http://[::ffff:127.0.0.1]:{secret.port}/",
        "/to-metadata": "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "/to-private": "http://10.0.0.1/admin",
        "/to-ipv6": f"http://[::1]:{secret.port}/",
        "/chain": "/to-ip",
    }
    relay = sites(routes={p: (302, {"Location": loc}, b"") for p, loc in redirects.items()})
    base = f"http://localhost:{relay.port}"
    expect = {
        "/to-ip": "127.0.0.1",
        "/to-decimal": "127.0.0.1",
        "/to-mapped": "::ffff:7f00:1",
        "/to-metadata": "169.254.169.254",
        "/to-private": "10.0.0.1",
        "/to-ipv6": "::1",
        "/chain": "127.0.0.1",
    }
    for path, address in expect.items():
        with pytest.raises(FetchRefused) as e:
            fetch_url(base + path, allowed_hosts=["localhost"])
        assert e.value.details["address"] == address, path
    assert secret.total == 0
    assert relay.hits == {p: (2 if p == "/to-ip" else 1) for p in redirects}  # /chain passes through /to-ip


def test_a_redirect_to_a_non_http_scheme_or_a_malformed_url_is_refused(sites):
    relay = sites(
        routes={
            "/file": (302, {"Location": "file:///etc/passwd"}, b""),
            "/bad": (302, {"Location": "http://[::1/"}, b""),
        }
    )
    with pytest.raises(FetchError, match="only http and https"):
        fetch_url(f"http://localhost:{relay.port}/file", allowed_hosts=["localhost"])
    with pytest.raises(FetchError, match="Invalid URL in location header"):
        fetch_url(f"http://localhost:{relay.port}/bad", allowed_hosts=["localhost"])


def test_the_connection_goes_to_the_address_that_was_checked(sites):
    # DNS rebinding: the name answers an allowed address when checked and loopback after. A
    # check-then-connect fetcher resolves twice and lands on the secret server.
    good = sites("127.0.0.2")
    try:
        secret = sites("127.0.0.1", good.port)
    except OSError:
        pytest.skip(f"port {good.port} is taken on 127.0.0.1")
    answers = iter([["127.0.0.2"]])
    calls: list[str] = []

    def rebinding(host, port, family=0, type=0, proto=0, flags=0):
        calls.append(host)
        return table_resolver({host: next(answers, ["127.0.0.1"])})(host, port)

    good.routes["/"] = (200, {"Content-Type": "text/plain"}, b"the page that was checked")
    allow = HostAllowlist(["127.0.0.2"])
    with guarded_client(allow, resolver=rebinding) as client:
        r = fetch_url(f"http://rebind.example:{good.port}/", client=client)
    assert r.content == "the page that was checked" and good.hosts == [f"rebind.example:{good.port}"]
    assert calls == ["rebind.example"] and secret.total == 0
    # a new connection is vetted again
    with (
        guarded_client(allow, resolver=rebinding) as client,
        pytest.raises(FetchRefused, match=r"rebind\.example \(127\.0\.0\.1\)"),
    ):
        fetch_url(f"http://rebind.example:{good.port}/", client=client)
    assert calls == ["rebind.example"] * 2 and secret.total == 0 and good.total == 1


def test_environment_proxies_are_not_used(sites, monkeypatch):
    # A proxy resolves the target itself: the guard would check the proxy, not the target.
    proxy = sites(routes={})
    target = sites()
    monkeypatch.setenv("HTTP_PROXY", f"http://localhost:{proxy.port}")
    monkeypatch.setenv("ALL_PROXY", f"http://localhost:{proxy.port}")
    with pytest.raises(FetchRefused):
        fetch_url(f"http://127.0.0.1:{target.port}/", allowed_hosts=["localhost"])
    assert proxy.total == 0 and target.total == 0


# -- TLS keeps the URL's name -----------------------------------------------------------


def _cert(tmp: Path, name: str) -> tuple[Path, Path]:
    key, crt = tmp / f"{name}.key", tmp / f"{name}.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(crt),
            "-days",
            "2",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return crt, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command makes the test certificates")
def test_tls_uses_the_url_name_for_sni_and_verification_while_connecting_to_the_vetted_ip(sites, tmp_path):
    name = "docs.memlane-test.example"
    crt, key = _cert(tmp_path, name)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(crt, key)
    site = sites(routes={"/": (200, {"Content-Type": "text/plain"}, b"over tls")}, tls=server_ctx)
    trust = ssl.create_default_context(cafile=str(crt))
    resolver = table_resolver({name: ["127.0.0.1"], "wrong.memlane-test.example": ["127.0.0.1"]})
    with guarded_client(HostAllowlist([name, "wrong.memlane-test.example"]), verify=trust, resolver=resolver) as client:
        r = fetch_url(f"https://{name}:{site.port}/", client=client)
        assert r.content == "over tls" and site.sni == [name] and site.hosts == [f"{name}:{site.port}"]
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED|certificate|hostname"):
            fetch_url(f"https://wrong.memlane-test.example:{site.port}/", client=client)
    assert site.total == 1


# -- through the service and the HTTP API ------------------------------------------------

MALFORMED = [
    "http://[::1/",
    "http://:80",
    "http://:80/x",
    "http://a b/",
    "http://x:99999999/",
    "http://x:0/",
    "http://x:abc/",
    "http:///path",
    "http:example.com",
    "http://ex ample.com",
    "http://" + "a" * 300 + ".com/",
    "http://-/",
    "http://a..b/",
    "http://[::1]]/",
    "http://[/",
    "https://[::g]/",
]


@pytest.fixture
def api(open_store):
    c = open_store()
    with api_client(c) as client:
        yield c, client


@pytest.mark.parametrize("url", MALFORMED)
def test_malformed_urls_are_422_never_500(api, url):
    c, client = api
    r = client.post("/api/documents", json={"url": url})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "fetch_failed" and err["message"].startswith("url:") and err["details"]["field"] == "url"
    assert client.get("/api/documents").json()["total"] == 0
    with pytest.raises(FetchError):
        check_url(url)


@pytest.mark.parametrize("url", ["http://h\x00st/", "http://host\ud800/", "http://x\n.com/", 42, None])
def test_check_url_refuses_control_characters_and_non_strings(url):
    with pytest.raises(FetchError):
        check_url(url)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "2130706433",
        "0x7f000001",
        "127.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "169.254.169.254",
        "10.0.0.1",
        "0.0.0.0",
        "foo.localhost",
        "[fe80::1%25eth0]",
        "LOCALHOST.",
    ],
)
def test_api_refuses_a_numeric_or_localhost_target_at_once(api, sites, host):
    target = sites()
    c, client = api
    r = client.post("/api/documents", json={"url": f"http://{host}:{target.port}/"})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "address_refused" and set(err["details"]) == {"host", "address", "reason"}
    assert client.get("/api/documents").json()["total"] == 0 and target.total == 0


def test_a_name_resolving_to_loopback_fails_the_document_at_fetch_time(open_store, sites):
    target = sites()
    c = open_store()
    resolver = table_resolver({"intranet.example.com": ["127.0.0.1"]})

    def fetch(url, **kw):
        kw.pop("allowed_hosts")
        with guarded_client(resolver=resolver) as client:
            return fetch_url(url, client=client, **kw)

    svc = DocumentService(c.db, c.memories, lambda: c.settings.memory.pipeline_v2, fetch=fetch)
    doc = svc.create(url=f"http://intranet.example.com:{target.port}/")  # a name: accepted, checked when fetched
    w = JobWorker(c.db, "documents-test")
    w.register(DOCUMENT_INGEST, svc.process)
    w.run_once()
    d = svc.get(doc.id)
    assert d.status == "failed" and d.attempts == 1  # permanent: no retry
    assert "FetchRefused" in d.error and "intranet.example.com (127.0.0.1)" in d.error and "loopback" in d.error
    assert target.total == 0


def _wait_status(client: httpx.Client, doc_id: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        d = client.get(f"/api/documents/{doc_id}").json()
        if d["status"] in ("done", "failed"):
            return d
        time.sleep(0.05)
    pytest.fail(f"document {doc_id} still {d['status']} after 60 s")


def test_real_daemon_refuses_loopback_and_redirect_hops(start_daemon, sites, tmp_path):
    secret = sites(routes={"/": (200, {"Content-Type": "text/plain"}, b"internal admin page")})
    relay = sites(
        routes={
            "/ok": (200, {"Content-Type": "text/plain"}, b"an allowed page about deploys"),
            "/hop": (302, {"Location": f"http://127.0.0.1:{secret.port}/"}, b""),
        }
    )
    d = start_daemon(provider="none", env={"MEMLANE_MEMORY__PIPELINE_V2__DOCUMENTS__ALLOWED_HOSTS": '["localhost"]'})
    with d.client() as client:
        for host in ("127.0.0.1", "2130706433", "[::ffff:127.0.0.1]"):
            r = client.post("/api/documents", json={"url": f"http://{host}:{secret.port}/"})
            assert r.status_code == 422 and r.json()["error"]["code"] == "address_refused", r.text
        r = client.post("/api/documents", json={"url": "http://[::1/"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "fetch_failed", r.text
        ok = client.post("/api/documents", json={"url": f"http://localhost:{relay.port}/ok"})
        hop = client.post("/api/documents", json={"url": f"http://localhost:{relay.port}/hop"})
        assert ok.status_code == hop.status_code == 202
        assert _wait_status(client, ok.json()["id"])["status"] == "done"
        failed = _wait_status(client, hop.json()["id"])
    assert failed["status"] == "failed" and "127.0.0.1" in failed["error"] and "loopback" in failed["error"]
    assert relay.hits == {"/ok": 1, "/hop": 1} and secret.total == 0


@pytest.mark.parametrize(
    "patch",
    [
        {"memory": {"pipelineV2": {"documents": {"allowedHosts": ["127.0.0.1"]}}}},
        {"memory": {"pipeline_v2": {"documents": {"allowed_hosts": ["127.0.0.0/8"]}}}},
        {"memory": {"pipelineV2": {"documentAllowedHosts": ["localhost"]}}},  # the legacy flat spelling
        {"memory": {"pipelineV2": {"documentsAllowedHosts": ["169.254.169.254"]}}},
    ],
)
def test_the_allow_list_cannot_be_widened_over_http(api, sites, patch):
    target = sites()
    c, client = api
    r = client.post("/api/config", json=patch)
    assert r.status_code == 403 and r.json()["error"]["code"] == "config_forbidden", r.text
    assert c.settings.memory.pipeline_v2.documents.allowed_hosts == []
    assert not (c.settings.home / "config.yaml").exists()
    r = client.post("/api/documents", json={"url": f"http://127.0.0.1:{target.port}/"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "address_refused"
