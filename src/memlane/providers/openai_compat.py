"""OpenAI-compatible chat completions over HTTP: ``POST {base_url}/chat/completions``.

Request ``{"model": str, "messages": [{"role": "user", "content": str}], "max_tokens": int,
"temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "reply",
"schema": <JSON schema>}}}`` (``max_tokens`` only when a cap is set, ``response_format`` only
when the caller gives a schema: OpenAI, llama.cpp server, vLLM and LM Studio then constrain
the reply to it); reply
``{"choices": [{"message": {"content": str}}, ...]}``, the text is ``choices[0]``'s.
``available()`` is ``GET {base_url}/models`` with a 3 s timeout. Works with llama.cpp server,
vLLM, LM Studio, OpenAI and other servers that copy its API.
"""

from __future__ import annotations

from typing import Any

from memlane.providers.base import HttpLlmProvider

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"


class OpenAICompatProvider(HttpLlmProvider):
    """Text from an OpenAI-compatible ``/chat/completions`` endpoint (one user message).

    Args:
        model: the model name; ``name`` is ``"openai:{model}"``.
        base_url: the API root including ``/v1``, e.g. ``https://api.openai.com/v1``.
        api_key: sent as ``Authorization: Bearer ...`` only when non-empty; never in messages.
        timeout_s: default per-call timeout, seconds (> 0).
        max_tokens: default ``max_tokens`` (``None`` = not sent, the server's default).

    ``generate`` raises :class:`~memlane.providers.base.LlmTimeout` past the timeout and
    :class:`~memlane.providers.base.LlmError` on a connection failure, an HTTP error (status
    and the first 200 characters of the body in the message), or a reply without a string
    ``choices[0].message.content``.
    """

    kind = "openai"

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str = "",
        timeout_s: float = 45.0,
        max_tokens: int | None = None,
    ) -> None:
        root = (base_url or DEFAULT_BASE_URL).rstrip("/")
        super().__init__(
            model=model,
            url=root + "/chat/completions",
            probe_url=root + "/models",
            timeout_s=timeout_s,
            max_tokens=max_tokens,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
        )

    def _payload(self, prompt: str, max_tokens: int | None, schema: dict[str, Any] | None) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
        }
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if schema is not None:
            payload["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
        return payload

    def _text(self, reply: Any) -> str:
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices:
            raise self._fail('reply has no non-empty "choices" list')
        first = choices[0]
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise self._fail('reply has no string "choices[0].message.content"')
        return content
