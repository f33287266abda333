"""Document ingest: the URL fetcher against a real loopback HTTP server, chunking, the ingest
job (status transitions, dedup, retries, failures) and the /api/documents endpoints.

The loopback test server is reached through the address guard's allow-list (``LOOPBACK``),
as a user reaches a server on their own machine; tests/test_security_fetch.py covers the
refusals."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import api_client
from memlane.documents.chunking import chunk_text
from memlane.documents.fetcher import FetchError, fetch_url, html_to_text
from memlane.documents.service import CHUNK_TYPE, DOCUMENT_INGEST, DocumentService
from memlane.services.inputs import RememberInput
from memlane.storage import documents as doc_sql
from memlane.storage import jobs as J
from memlane.workers.runtime import JobWorker

T0 = "2026-01-01T00:00:00.000Z"
#: documents.allowedHosts entries that let the loopback test server through the address guard.
LOOPBACK = ["127.0.0.1"]
ALLOW_LOOPBACK = {"documents": {"allowedHosts": LOOPBACK}}
PAGE = """<!doctype html><html><head><title>  Deploy &amp; Ops Guide </title>
<style>body { color: red }</style><script>var secret = "do not index";</script></head>
<body><h1>Deploys</h1><p>Every deploy goes through <b>staging</b> first &mdash; always.</p>
<noscript>enable js</noscript><ul><li>build</li><li>ship</li></ul></body></html>"""


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> str:
        return self.t

    def advance(self, ms: float) -> None:
        self.t = J.add_ms(self.t, ms)


class Loopback:
    def __init__(self, base: str, release: threading.Event) -> None:
        self.base = base
        self.release = release
        self.hits: dict[str, int] = {}

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
def server() -> Iterator[Loopback]:
    release = threading.Event()
    state: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, body: bytes, ctype: str | None, length: bool = True, **headers) -> None:
            self.send_response(status)
            if ctype:
                self.send_header("Content-Type", ctype)
            if length:
                self.send_header("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k.replace("_", "-"), v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            lb: Loopback = state["lb"]
            lb.hits[self.path] = lb.hits.get(self.path, 0) + 1
            p = self.path
            if p == "/page.html":
                self._send(200, PAGE.encode(), "text/html; charset=utf-8")
            elif p == "/latin1.txt":
                self._send(200, "caf\u00e9 cr\u00e8me".encode("latin-1"), "text/plain; charset=iso-8859-1")
            elif p == "/data.json":
                self._send(200, b'{"service": "billing", "owner": "payments team"}', "application/json")
            elif p == "/feed":
                self._send(200, b"<feed><title>x</title></feed>", "application/atom+xml")
            elif p == "/image.png":
                self._send(200, b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "image/png")
            elif p == "/notype":
                self._send(200, b"hello", None)
            elif p == "/big":  # declared too large
                self._send(200, b"x" * 5000, "text/plain")
            elif p == "/big-stream":  # no Content-Length; grows past the cap while streaming
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                try:
                    for _ in range(100):
                        self.wfile.write(b"y" * 1000)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
            elif p == "/slow-headers":
                lb.release.wait(30)
                self._send(200, b"late", "text/plain")
            elif p == "/trickle":  # headers at once, then a byte now and then, never finishing in time
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                try:
                    for _ in range(1000):
                        self.wfile.write(b"z")
                        self.wfile.flush()
                        if lb.release.wait(0.05):
                            break
                except (BrokenPipeError, ConnectionResetError):
                    pass
            elif p.startswith("/redirect/"):
                n = int(p.rsplit("/", 1)[1])
                target = "/page.html" if n <= 1 else f"/redirect/{n - 1}"
                self._send(302, b"", "text/plain", Location=target)
            elif p == "/to-ftp":
                self._send(301, b"", "text/plain", Location="ftp://example.com/file.txt")
            elif p == "/missing":
                self._send(404, b"nope", "text/plain")
            elif p == "/broken":
                self._send(503, b"down", "text/plain")
            else:
                self._send(404, b"", "text/plain")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    lb = Loopback(f"http://127.0.0.1:{httpd.server_address[1]}", release)
    state["lb"] = lb
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield lb
    release.set()
    httpd.shutdown()
    httpd.server_close()


# -- fetcher ---------------------------------------------------------------------------


def fetch_local(url: str, **kw):
    return fetch_url(url, allowed_hosts=LOOPBACK, **kw)


def test_html_is_stripped_and_title_extracted(server):
    r = fetch_local(server.url("/page.html"))
    assert r.title == "Deploy & Ops Guide"
    assert r.content_type == "text/html" and r.byte_length == len(PAGE.encode())
    assert "Every deploy goes through staging first \u2014 always." in r.content
    assert r.content.splitlines()[0] == "Deploys" and "build\nship" in r.content
    for gone in ("secret", "color", "enable js", "<", "Deploy & Ops Guide"):
        assert gone not in r.content


def test_text_json_xml_types_and_charset(server):
    assert fetch_local(server.url("/latin1.txt")).content == "caf\u00e9 cr\u00e8me"
    j = fetch_local(server.url("/data.json"))
    assert j.content_type == "application/json" and "payments team" in j.content and j.title is None
    assert fetch_local(server.url("/feed")).content_type == "application/atom+xml"


@pytest.mark.parametrize("path", ["/image.png", "/notype"])
def test_wrong_or_missing_content_type_is_refused(server, path):
    with pytest.raises(FetchError, match="unsupported content type") as e:
        fetch_local(server.url(path))
    assert e.value.retryable is False


def test_oversize_declared_and_streamed(server):
    with pytest.raises(FetchError, match="over the limit of 1024 bytes") as e:
        fetch_local(server.url("/big"), max_bytes=1024)
    assert not e.value.retryable
    with pytest.raises(FetchError, match="over the limit of 2048 bytes"):
        fetch_local(server.url("/big-stream"), max_bytes=2048)
    assert len(fetch_local(server.url("/big"), max_bytes=5000).content) == 5000


@pytest.mark.parametrize("path", ["/slow-headers", "/trickle"])
def test_slow_server_times_out(server, path):
    with pytest.raises(FetchError, match="timed out after 300 ms") as e:
        fetch_local(server.url(path), timeout_ms=300)
    assert e.value.retryable is True


def test_redirects_are_followed_within_the_limit(server):
    r = fetch_local(server.url("/redirect/3"))
    assert r.final_url.endswith("/page.html") and r.title == "Deploy & Ops Guide"
    with pytest.raises(FetchError, match="more than 2 redirects"):
        fetch_local(server.url("/redirect/3"), max_redirects=2)
    with pytest.raises(FetchError, match="only http and https"):
        fetch_local(server.url("/to-ftp"))


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "file:///etc/passwd", "/relative", "http://", "", "http://x/" + "a" * 3000]
)
def test_bad_urls_are_refused_before_any_request(url):
    with pytest.raises(FetchError):
        fetch_url(url)


def test_http_errors_retryable_or_not(server):
    with pytest.raises(FetchError, match="HTTP 404") as e:
        fetch_local(server.url("/missing"))
    assert not e.value.retryable
    with pytest.raises(FetchError, match="HTTP 503") as e:
        fetch_local(server.url("/broken"))
    assert e.value.retryable


def test_html_to_text_without_title():
    text, title = html_to_text("<p>only &lt;text&gt;</p>")
    assert title is None and text.strip() == "only <text>"


# -- chunking ----------------------------------------------------------------------------


def test_short_text_is_one_chunk_and_blank_is_none():
    assert [c.text for c in chunk_text("  a short document.  ")] == ["a short document."]
    assert chunk_text(" \n\t ") == []


def test_chunks_are_bounded_overlap_and_break_at_words():
    words = [f"word{i}" for i in range(1500)]
    text = " ".join(words) + "."
    chunks = chunk_text(text, chunk_size=500, chunk_overlap=100)
    assert len(chunks) > 10 and [c.index for c in chunks] == list(range(len(chunks)))
    for prev, cur in zip(chunks, chunks[1:]):
        assert len(cur.text) <= 500
        assert 0 < prev.end - cur.start <= 100  # overlapping, by at most the overlap
        assert text[cur.start - 1] == " "  # starts at a word
    for c in chunks:
        assert all(w in words for w in c.text.rstrip(".").split())  # no word cut in two
    seen = set(" ".join(c.text for c in chunks).rstrip(".").split())
    assert seen == set(words)


def test_chunks_prefer_paragraph_then_sentence_breaks():
    para = ("Alpha beta gamma. " * 20).strip()
    text = "\n\n".join([para] * 6)
    chunks = chunk_text(text, chunk_size=800, chunk_overlap=50)
    assert all(c.text.endswith(".") for c in chunks)
    with pytest.raises(ValueError):
        chunk_text("x", chunk_size=100, chunk_overlap=100)


def test_a_text_without_breaks_is_cut_hard():
    chunks = chunk_text("x" * 4500, chunk_size=2000, chunk_overlap=200)
    assert [len(c.text) for c in chunks] == [2000, 2000, 900]


# -- the ingest job ----------------------------------------------------------------------


def _worker(c, svc: DocumentService, clock: Clock) -> JobWorker:
    w = JobWorker(c.db, "documents-test", now=clock)
    w.register(DOCUMENT_INGEST, svc.process)
    return w


def _svc(c, clock: Clock, **kw) -> DocumentService:
    return DocumentService(c.db, c.memories, lambda: c.settings.memory.pipeline_v2, now=clock, **kw)


def _text(n_paragraphs: int) -> str:
    return "\n\n".join(
        f"Paragraph {i} explains how service {i} is deployed via the pipeline runner number {i}. " * 8
        for i in range(n_paragraphs)
    )


def test_text_document_becomes_linked_chunk_memories(open_store):
    c = open_store()
    clock = Clock()
    svc = _svc(c, clock)
    doc = svc.create(content=_text(6), title="Runbook", project="ops", tags=["deploy"])
    assert doc.status == "queued" and doc.job_id is not None
    job = c.db.read(lambda conn: J.get(conn, doc.job_id))
    assert job.job_type == DOCUMENT_INGEST and job.payload == {"document_id": doc.id} and job.max_attempts == 3
    assert _worker(c, svc, clock).run_once() is True
    done = svc.get(doc.id)
    assert done.status == "done" and done.error is None and done.attempts == 1 and done.completed_at
    chunks = svc.chunks(doc.id)
    assert len(chunks) == done.chunk_count == done.memory_count > 1
    m = c.memories.get(chunks[0].memory_id)
    assert (m.type, m.importance, m.source_type, m.source_id, m.project) == (CHUNK_TYPE, 0.3, "document", doc.id, "ops")
    assert m.tags == ("Runbook", "deploy") and m.metadata["chunk_index"] == 0
    assert c.db.read(lambda conn: J.get(conn, doc.job_id)).status == "completed"


def test_identical_chunks_reuse_memories_and_delete_keeps_shared_ones(open_store):
    c = open_store()
    clock = Clock()
    svc = _svc(c, clock)
    w = _worker(c, svc, clock)
    own = c.memories.remember(RememberInput(content="A standalone note about deploys.")).id
    a = svc.create(content=_text(5))
    b = svc.create(content=_text(5) + "\n\nOne extra closing paragraph only the second document has.")
    c_ = svc.create(content="A standalone note about deploys.")
    assert w.run_once() and w.run_once() and w.run_once()
    res_b = c.db.read(lambda conn: J.get(conn, svc.get(b.id).job_id)).result
    assert res_b["deduplicated"] >= 1 and res_b["created"] >= 1
    assert svc.chunks(c_.id)[0].memory_id == own  # an existing memory is reused, not copied
    a_ids = {ch.memory_id for ch in svc.chunks(a.id)}
    b_ids = {ch.memory_id for ch in svc.chunks(b.id)}
    shared = a_ids & b_ids
    assert shared
    deleted = svc.delete(a.id)
    assert deleted.document.deleted_at is not None
    assert set(deleted.deleted_memory_ids) == a_ids - b_ids  # shared chunks stay for document b
    assert all(not c.memories.get(i).is_deleted for i in b_ids)
    assert svc.list()[1] == 2 and svc.list(include_deleted=True)[1] == 3


def test_retryable_fetch_failures_retry_then_fail_the_document(open_store, server):
    c = open_store(memory={"pipeline_v2": {"worker": {"maxRetries": 2}, **ALLOW_LOOPBACK}})
    clock = Clock()
    svc = _svc(c, clock)
    w = _worker(c, svc, clock)
    doc = svc.create(url=server.url("/broken"))
    assert w.run_once() is False  # a failed attempt
    d = svc.get(doc.id)
    assert d.status == "queued" and "HTTP 503" in d.error and d.attempts == 1
    assert c.db.read(lambda conn: J.get(conn, doc.job_id)).status == "pending"
    assert w.run_once() is False  # backoff: not due yet
    clock.advance(60_000)
    w.run_once()
    d = svc.get(doc.id)
    assert d.status == "failed" and "HTTP 503" in d.error and d.attempts == 2
    assert c.db.read(lambda conn: J.get(conn, doc.job_id)).status == "dead"
    assert server.hits["/broken"] == 2


def test_permanent_failures_fail_at_once(open_store, server):
    c = open_store(memory={"pipeline_v2": ALLOW_LOOPBACK})
    clock = Clock()
    svc = _svc(c, clock)
    w = _worker(c, svc, clock)
    doc = svc.create(url=server.url("/image.png"))
    assert w.run_once() is True
    d = svc.get(doc.id)
    assert d.status == "failed" and "unsupported content type" in d.error
    job = c.db.read(lambda conn: J.get(conn, doc.job_id))
    assert job.status == "skipped" and job.error.startswith("failed:")


def test_url_document_backfills_title_and_stores_the_body(open_store, server):
    c = open_store(memory={"pipeline_v2": ALLOW_LOOPBACK})
    clock = Clock()
    svc = _svc(c, clock)
    doc = svc.create(url=server.url("/page.html"))
    assert doc.title is None
    _worker(c, svc, clock).run_once()
    d = c.db.read(lambda conn: doc_sql.get(conn, doc.id, content=True))
    assert d.status == "done" and d.title == "Deploy & Ops Guide" and d.content_type == "text/html"
    assert "staging first" in d.raw_content and "secret" not in d.raw_content
    assert c.memories.get(svc.chunks(doc.id)[0].memory_id).tags == ("Deploy & Ops Guide",)
    titled = svc.create(url=server.url("/page.html"), title="My own title")
    _worker(c, svc, clock).run_once()
    assert svc.get(titled.id).title == "My own title"  # a given title is never overwritten


def test_a_deleted_document_is_not_ingested(open_store):
    c = open_store()
    clock = Clock()
    svc = _svc(c, clock)
    doc = svc.create(content="Some text that will never be ingested.")
    svc.delete(doc.id)
    assert _worker(c, svc, clock).run_once() is True
    assert c.db.read(lambda conn: J.get(conn, doc.job_id)).status == "skipped"
    assert svc.get(doc.id).memory_count == 0


# -- endpoints -----------------------------------------------------------------------------


@pytest.fixture
def api(open_store):
    c = open_store(memory={"pipeline_v2": {"documents": {"maxContentBytes": 2048, "allowedHosts": LOOPBACK}}})
    with api_client(c) as client:
        yield c, client


def test_document_endpoints_roundtrip(api, server):
    c, client = api
    r = client.post(
        "/api/documents", json={"content": "Deploys go through staging first. " * 20, "title": "Notes", "tags": ["ops"]}
    )
    assert r.status_code == 202 and r.json()["status"] == "queued"
    doc_id = r.json()["id"]
    u = client.post("/api/documents", json={"url": server.url("/page.html")})
    assert u.status_code == 202 and u.json()["source_type"] == "url"
    docs = c.workers.get("documents")
    assert docs.run_once() and docs.run_once()
    got = client.get(f"/api/documents/{doc_id}").json()
    assert got["status"] == "done" and got["memory_count"] == 1 and got["tags"] == ["ops"]
    assert client.get(f"/api/documents/{u.json()['id']}").json()["title"] == "Deploy & Ops Guide"
    listed = client.get("/api/documents?limit=1").json()
    assert listed["total"] == 2 and len(listed["items"]) == 1
    ch = client.get(f"/api/documents/{doc_id}/chunks").json()["items"]
    assert ch[0]["chunk_index"] == 0 and "staging" in ch[0]["content"]
    d = client.delete(f"/api/documents/{doc_id}")
    assert d.status_code == 200 and d.json()["deleted_memory_ids"] == [ch[0]["memory_id"]]
    assert c.memories.get(ch[0]["memory_id"]).is_deleted
    again = client.delete(f"/api/documents/{doc_id}")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    status = client.get("/api/pipeline/status").json()
    assert {"documents", "embedding-tracker", "retention", "maintenance"} <= {w["name"] for w in status["workers"]}


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({}, 422, "validation_error"),
        ({"url": "https://example.com", "content": "both"}, 422, "validation_error"),
        ({"url": "ftp://example.com/file"}, 422, "fetch_failed"),
        ({"url": "javascript:alert(1)"}, 422, "fetch_failed"),
        ({"content": "   "}, 422, "validation_error"),
        ({"content": "x" * 3000}, 413, "payload_too_large"),
        ({"content": "\u00e9" * 1500}, 413, "payload_too_large"),  # 3,000 UTF-8 bytes
        ({"content": "ok", "color": "red"}, 422, "validation_error"),
        ({"content": 42}, 422, "validation_error"),
        ({"content": "ok", "tags": "notalist"}, 422, "validation_error"),
        ({"content": "nul\x00byte"}, 422, "validation_error"),
        ({"content": "ok", "title": "t" * 600}, 413, "payload_too_large"),
    ],
)
def test_bad_document_input_is_4xx(api, body, status, code):
    _, client = api
    r = client.post("/api/documents", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


def test_unknown_ids_and_bad_queries(api):
    _, client = api
    for path in ("/api/documents/nope", "/api/documents/nope/chunks"):
        r = client.get(path)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.delete("/api/documents/nope").status_code == 404
    assert client.get("/api/documents?status=bogus").status_code == 422
    assert client.get("/api/documents?limit=0").status_code == 422
    assert client.get("/api/documents?offset=99999999999999999999999").status_code == 422
    assert (
        client.post("/api/documents", content=b"not json", headers={"content-type": "application/json"}).status_code
        == 400
    )
