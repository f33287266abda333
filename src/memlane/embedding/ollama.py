"""Ollama embeddings over HTTP: ``POST {base_url}/api/embed``.

Request ``{"model": str, "input": [str, ...]}``; reply ``{"embeddings": [[float, ...], ...]}``
(one vector per input, in input order).
"""

from __future__ import annotations

from typing import Any

from memlane.embedding.base import HttpEmbedder

DEFAULT_BASE_URL = "http://127.0.0.1:11434"


class OllamaEmbedder(HttpEmbedder):
    """Vectors from a running Ollama server.

    Args:
        model: the Ollama model name (e.g. ``"nomic-embed-text"``); ``model_id`` is ``"ollama:{model}"``.
        base_url: the server, without ``/api/embed``.
        timeout_s: connect/read/write timeout, seconds (> 0).
        dimensions: expected vector size; 0 = learn it from the first reply.

    ``embed(texts)`` returns float32 ``[len(texts), dimensions]`` with unit-norm rows and
    raises :class:`memlane.errors.EmbeddingError` on a timeout, an HTTP error (status
    and the first 200 characters of the body in the message) or a malformed reply.
    """

    provider = "ollama"

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = 30,
        dimensions: int = 0,
    ) -> None:
        super().__init__(
            model_id=f"ollama:{model}",
            url=(base_url or DEFAULT_BASE_URL).rstrip("/") + "/api/embed",
            model=model,
            timeout_s=timeout_s,
            dimensions=dimensions,
        )

    def _vectors(self, reply: Any) -> list[Any]:
        if not isinstance(reply, dict) or not isinstance(reply.get("embeddings"), list):
            raise self._fail('reply has no "embeddings" list')
        return reply["embeddings"]
