"""Ollama text generation over HTTP: ``POST {base_url}/api/generate``.

Request ``{"model": str, "prompt": str, "stream": false, "options": {"num_predict": int},
"format": <JSON schema>}`` (``options`` only when a token cap is set, ``format`` only when the
caller gives a schema: Ollama >= 0.5 then constrains the reply to it); reply
``{"response": str, ...}``.
``available()`` is ``GET {base_url}/api/tags`` with a 3 s timeout.
"""

from __future__ import annotations

from typing import Any

from memlane.httpjson import BODY_EXCERPT_CHARS
from memlane.providers.base import HttpLlmProvider

DEFAULT_MODEL = "qwen3:4b"
DEFAULT_BASE_URL = "http://127.0.0.1:11434"


class OllamaProvider(HttpLlmProvider):
    """Text from a running Ollama server.

    Args:
        model: the Ollama model name; ``name`` is ``"ollama:{model}"``.
        base_url: the server, without ``/api/...``.
        timeout_s: default per-call timeout, seconds (> 0).
        max_tokens: default ``num_predict`` (``None`` = Ollama's default).

    ``generate`` raises :class:`~memlane.providers.base.LlmTimeout` past the timeout and
    :class:`~memlane.providers.base.LlmError` on a connection failure, an HTTP error (status
    and the first 200 characters of the body in the message), or a reply without a string
    ``"response"``.
    """

    kind = "ollama"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = 45.0,
        max_tokens: int | None = None,
    ) -> None:
        root = (base_url or DEFAULT_BASE_URL).rstrip("/")
        super().__init__(
            model=model or DEFAULT_MODEL,
            url=root + "/api/generate",
            probe_url=root + "/api/tags",
            timeout_s=timeout_s,
            max_tokens=max_tokens,
        )

    def _payload(self, prompt: str, max_tokens: int | None, schema: dict[str, Any] | None) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "prompt": prompt, "stream": False}
        if max_tokens is not None:
            payload["options"] = {"num_predict": max_tokens}
        if schema is not None:
            payload["format"] = schema
        return payload

    def _text(self, reply: Any) -> str:
        if not isinstance(reply, dict) or not isinstance(reply.get("response"), str):
            extra = ""
            if isinstance(reply, dict) and "error" in reply:
                extra = f" (error: {str(reply['error'])[:BODY_EXCERPT_CHARS]})"
            raise self._fail(f'reply has no string "response"{extra}')
        return reply["response"]
