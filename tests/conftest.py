"""Shared fixtures for the store, recall, API and daemon tests.

* Every test runs with no ``MEMLANE_*`` variable from the outer environment and with
  ``MEMLANE_CONFIG`` pointing at a file that does not exist, so a developer's
  ``~/.memlane/config.yaml`` never leaks in.
* ``shared_embedder`` is one real :class:`LocalOnnxEmbedder` for the whole session (the model
  loads once); stores opened with it never close it.
* ``open_store(**overrides)`` opens a real SQLite store under ``tmp_path`` and closes it at
  teardown. ``embedding="local"`` uses the shared embedder; anything else is passed to
  ``load_settings`` (default: ``{"provider": "none"}``, BM25 only, fast).
* ``slow``: every module not in ``FAST_MODULES`` is marked slow; ``make test`` runs everything,
  ``make test-fast`` (``-m "not slow"``) only the fast modules, without importing the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.daemon import Daemon as _Daemon
from benchmarks.daemon import DaemonStartError, free_port  # noqa: F401  (tests import free_port from here)
from memlane.auth import CLIENT_HEADER, auth_headers, ensure_token
from memlane.config import load_settings
from memlane.container import Container, open_container
from memlane.embedding.local_onnx import LocalOnnxEmbedder

#: The test modules `make test-fast` runs (pytest -m "not slow"): those whose tests took the least
#: time in a `pytest --durations=0` run on the 2-core machine at load ~10, up to ~40 s together.
#: Every other module is marked slow (a new module too, until it is measured and listed here).
FAST_MODULES = frozenset(
    {
        "test_bench_metrics",
        "test_config",
        "test_container",
        "test_continuity",
        "test_db_checkpoint",
        "test_docs",
        "test_drift_propagation",
        "test_drift_references",
        "test_drift_relations",
        "test_graph_aspects",
        "test_graph_classify",
        "test_graph_linker",
        "test_graph_search",
        "test_graph_store",
        "test_jobs_queue",
        "test_labels",
        "test_locomo_loader",
        "test_lru",
        "test_memory_index",
        "test_migrations_discovery",
        "test_pipeline_extraction",
        "test_predictor_canary_refresh",
        "test_ranker_features",
        "test_ranker_graph_specific",
        "test_ranker_touch",
        "test_rerank",
        "test_retention",
        "test_settings_renamed",
        "test_sql_in_storage",
    }
)


def _is_slow(path: Path) -> bool:
    return path.name.startswith("test_") and path.suffix == ".py" and path.stem not in FAST_MODULES


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With exactly ``-m "not slow"``, a slow module is not imported at all (several import
    PyTorch or the MCP SDK at the top, seconds of the run); None lets pytest decide otherwise."""
    if config.getoption("markexpr") == "not slow" and _is_slow(collection_path):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of a slow module ``slow`` (``-m slow`` selects them)."""
    for item in items:
        if _is_slow(item.path):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for key in list(os.environ):
        if key.startswith("MEMLANE_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MEMLANE_CONFIG", str(tmp_path_factory.getbasetemp() / "no-such-config.yaml"))


@pytest.fixture(scope="session")
def shared_embedder() -> Iterator[LocalOnnxEmbedder]:
    emb = LocalOnnxEmbedder()
    emb.warmup()
    yield emb
    emb.close()


StoreFactory = Callable[..., Container]


@pytest.fixture
def open_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """Factory: ``open_store(home=None, embedding="local"|dict|None, memory_listeners=(), **settings)``."""
    opened: list[Container] = []

    def factory(
        home: Path | None = None, embedding: Any = None, memory_listeners: Any = (), **overrides: Any
    ) -> Container:
        home = home or tmp_path / "home"
        if embedding == "local":
            emb = request.getfixturevalue("shared_embedder")
            settings = load_settings(home=home, **overrides)
            c = open_container(settings, embedder=emb, memory_listeners=memory_listeners)
            opened.append(c)
            return c
        settings = load_settings(home=home, embedding=embedding or {"provider": "none"}, **overrides)
        c = open_container(settings, memory_listeners=memory_listeners)
        opened.append(c)
        return c

    yield factory
    for c in reversed(opened):
        c.close()  # a shared embedder passed to open_container stays open (the session's)


@pytest.fixture
def store(open_store: StoreFactory) -> Container:
    """A BM25-only store (no embedder)."""
    return open_store()


@pytest.fixture
def vstore(open_store: StoreFactory) -> Container:
    """A store with the real local embedding model (shared)."""
    return open_store(embedding="local")


def row_snapshot(c: Container, *, exclude: tuple[str, ...] = ("access_count", "last_accessed")) -> list[tuple]:
    """Every memories row (minus ``exclude`` columns), plus history and embeddings counts."""

    def read(conn):
        cols = [r[1] for r in conn.execute("PRAGMA table_info(memories)") if r[1] not in exclude]
        rows = conn.execute(f"SELECT {', '.join(cols)} FROM memories ORDER BY seq").fetchall()
        hist = conn.execute("SELECT count(*) FROM memory_history").fetchone()[0]
        embs = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        return [tuple(r) for r in rows] + [("history", hist), ("embeddings", embs)]

    return c.db.read(read)


#: The base URL in-process test clients use: a loopback Host the request guard accepts.
TEST_BASE_URL = "http://127.0.0.1:7437"


def api_client(c: Container, **kwargs: Any):  # noqa: ANN201 - fastapi.testclient.TestClient
    """A TestClient over ``create_app(c)`` that sends the store's token, as memlane's own clients do.

    Keyword arguments go to TestClient (default ``raise_server_exceptions=False``, so a 500
    is seen as the response a real client would get)."""
    from fastapi.testclient import TestClient

    from memlane.api.app import create_app

    kwargs.setdefault("raise_server_exceptions", False)
    kwargs.setdefault("base_url", TEST_BASE_URL)
    headers = {CLIENT_HEADER: "test", **auth_headers(c.settings.home), **kwargs.pop("headers", {})}
    if c.settings.require_token and "Authorization" not in headers:
        headers.update({"Authorization": "Bearer " + ensure_token(c.settings.home)})
    client = TestClient(create_app(c), **kwargs)
    client.headers.update(headers)
    return client


READY_TIMEOUT_S = 60


class Daemon(_Daemon):
    """An isolated daemon for a test (:class:`benchmarks.daemon.Daemon`: no ``MEMLANE_*`` variable
    of the outer environment, no config.yaml; embedding ``provider``, then ``extra_env``); a daemon
    that does not become ready fails the test with its log."""

    def __init__(
        self, home: Path, log: Path, *, provider: str = "local", extra_env: dict[str, str] | None = None
    ) -> None:
        super().__init__(home, log, env={"MEMLANE_EMBEDDING__PROVIDER": provider, **(extra_env or {})}, isolated=True)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        try:
            super().wait_ready(timeout_s)
        except DaemonStartError as exc:
            pytest.fail(str(exc))


@pytest.fixture
def start_daemon(tmp_path):
    """Factory: ``start_daemon(home, provider=..., env={...})`` -> a ready Daemon (``env``: extra
    variables for the child, e.g. ``MEMLANE_*`` settings); all are killed at teardown."""
    started: list[Daemon] = []

    def start(home: Path | None = None, provider: str = "local", env: dict[str, str] | None = None) -> Daemon:
        home = home or tmp_path / "home"
        home.mkdir(parents=True, exist_ok=True)
        d = Daemon(home, tmp_path / f"daemon-{len(started)}.log", provider=provider, extra_env=env)
        started.append(d)
        d.wait_ready()
        return d

    yield start
    for d in started:
        d.kill()
