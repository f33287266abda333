"""Shared fixtures for the store, recall, API and daemon tests.

* Every test runs with no ``MEMLANE_*`` variable from the outer environment and with
  ``MEMLANE_CONFIG`` pointing at a file that does not exist, so a developer's
  ``~/.memlane/config.yaml`` never leaks in.
* ``shared_embedder`` is one real :class:`LocalOnnxEmbedder` for the whole session (the model
  loads once); stores opened with it never close it.
* ``open_store(**overrides)`` opens a real SQLite store under ``tmp_path`` and closes it at
  teardown. ``embedding="local"`` uses the shared embedder; anything else is passed to
  ``load_settings`` (default: ``{"provider": "none"}``, BM25 only, fast).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memlane.config import load_settings
from memlane.container import Container, open_container
from memlane.embedding.local_onnx import LocalOnnxEmbedder


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


def free_port() -> int:
    """A loopback TCP port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


StoreFactory = Callable[..., Container]


@pytest.fixture
def open_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """Factory: ``open_store(home=None, embedding="local"|dict|None, **settings)``."""
    opened: list[tuple[Container, bool]] = []

    def factory(home: Path | None = None, embedding: Any = None, **overrides: Any) -> Container:
        home = home or tmp_path / "home"
        if embedding == "local":
            emb = request.getfixturevalue("shared_embedder")
            settings = load_settings(home=home, **overrides)
            c = open_container(settings, embedder=emb)
            opened.append((c, True))
            return c
        settings = load_settings(home=home, embedding=embedding or {"provider": "none"}, **overrides)
        c = open_container(settings)
        opened.append((c, False))
        return c

    yield factory
    for c, shared in reversed(opened):
        if shared:
            c.embedder = None  # the session's embedder outlives this store
        c.close()


def close_store(c: Container, *, shared: bool) -> None:
    """Close a store opened by hand (keeping a shared embedder open)."""
    if shared:
        c.embedder = None
    c.close()


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
