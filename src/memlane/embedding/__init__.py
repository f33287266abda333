"""Text -> vector providers.

Modules:

* :mod:`memlane.embedding.base` -- the :class:`Embedder` protocol (``embed(texts) -> float32
  [n, dimensions]`` with unit-norm rows, ``close()``) and the shared HTTP provider code.
* :mod:`memlane.embedding.local_onnx` -- :class:`LocalOnnxEmbedder`, all-MiniLM-L6-v2 int8
  ONNX on onnxruntime, offline (the default, ``provider: local``).
* :mod:`memlane.embedding.ollama` -- :class:`OllamaEmbedder`, ``POST /api/embed``.
* :mod:`memlane.embedding.openai_compat` -- :class:`OpenAICompatEmbedder`, ``POST /embeddings``.

Every failure surfaces as :class:`memlane.errors.EmbeddingError`. Why the int8 ONNX model
is the default: ``docs/embedding.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlane.embedding.base import Embedder
from memlane.embedding.local_onnx import LocalOnnxEmbedder
from memlane.embedding.ollama import OllamaEmbedder
from memlane.embedding.openai_compat import OpenAICompatEmbedder

if TYPE_CHECKING:
    from memlane.config import EmbeddingSettings

__all__ = [
    "Embedder",
    "LocalOnnxEmbedder",
    "OllamaEmbedder",
    "OpenAICompatEmbedder",
    "build_embedder",
]


def build_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The embedder ``settings.provider`` names; ``None`` for ``"none"`` (BM25-only recall).

    ``local`` uses ``threads``; ``ollama``/``openai`` use ``model``, ``base_url`` (empty = the
    provider's default), ``timeout_s``, ``dimensions`` and, for openai, ``api_key``.
    Nothing is loaded or contacted here: the local model loads on first use (or ``warmup()``).

    Raises:
        ValueError: an unknown provider (settings validation normally prevents it).
    """
    provider = settings.provider
    if provider == "none":
        return None
    if provider == "local":
        return LocalOnnxEmbedder(threads=settings.threads)
    if provider == "ollama":
        return OllamaEmbedder(
            settings.model,
            base_url=settings.base_url or "http://127.0.0.1:11434",
            timeout_s=settings.timeout_s,
            dimensions=settings.dimensions,
        )
    if provider == "openai":
        return OpenAICompatEmbedder(
            settings.model,
            base_url=settings.base_url or "https://api.openai.com/v1",
            api_key=settings.api_key.get_secret_value(),
            timeout_s=settings.timeout_s,
            dimensions=settings.dimensions,
        )
    raise ValueError(f"unknown embedding provider {provider!r}")
