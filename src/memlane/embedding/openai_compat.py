"""OpenAI-compatible embeddings over HTTP: ``POST {base_url}/embeddings``.

Request ``{"model": str, "input": [str, ...]}``; reply
``{"data": [{"index": int, "embedding": [float, ...]}, ...]}``. Rows are put back in
input order by ``index``. Works with OpenAI and the many servers that copy its API
(vLLM, LM Studio, llama.cpp server, LiteLLM, ...).
"""

from __future__ import annotations

from typing import Any

from memlane.embedding.base import HttpEmbedder

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAICompatEmbedder(HttpEmbedder):
    """Vectors from an OpenAI-compatible ``/embeddings`` endpoint.

    Args:
        model: the model name (e.g. ``"text-embedding-3-small"``); ``model_id`` is ``"openai:{model}"``.
        base_url: the API root, e.g. ``https://api.openai.com/v1``.
        api_key: sent as ``Authorization: Bearer ...`` only when non-empty; never in messages.
        timeout_s: connect/read/write timeout, seconds (> 0).
        dimensions: expected vector size; 0 = learn it from the first reply.

    ``embed(texts)`` returns float32 ``[len(texts), dimensions]`` with unit-norm rows and
    raises :class:`memlane.errors.EmbeddingError` on a timeout, an HTTP error (status
    and the first 200 characters of the body in the message) or a malformed reply
    (missing/duplicate/out-of-range ``index`` included).
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str = "",
        timeout_s: float = 30,
        dimensions: int = 0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(
            model_id=f"openai:{model}",
            url=(base_url or DEFAULT_BASE_URL).rstrip("/") + "/embeddings",
            model=model,
            timeout_s=timeout_s,
            dimensions=dimensions,
            headers=headers,
        )

    def _vectors(self, reply: Any) -> list[Any]:
        if not isinstance(reply, dict) or not isinstance(reply.get("data"), list):
            raise self._fail('reply has no "data" list')
        items = reply["data"]
        slots: list[Any] = [None] * len(items)
        seen: set[int] = set()
        for pos, item in enumerate(items):
            if not isinstance(item, dict) or "embedding" not in item:
                raise self._fail(f'data[{pos}] has no "embedding"')
            index = item.get("index", pos)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(items):
                raise self._fail(f"data[{pos}] has an invalid index {index!r}")
            if index in seen:
                raise self._fail(f"index {index} appears twice in the reply")
            seen.add(index)
            slots[index] = item["embedding"]
        return slots
