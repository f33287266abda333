"""LLM providers: text in, text out, behind one small interface.

Modules:

* :mod:`memlane.providers.base` -- the :class:`LlmProvider` protocol (``generate(prompt,
  schema=...) -> str``, the schema asking for structured output where the provider offers it;
  ``available() -> bool``, ``close()``), :class:`LlmError` / :class:`LlmTimeout`, the shared HTTP
  code (over :mod:`memlane.httpjson`), and the reply helpers :func:`strip_think`, :func:`strip_fences`, :func:`extract_json_object`.
* :mod:`memlane.providers.ollama` -- :class:`OllamaProvider`, ``POST /api/generate``.
* :mod:`memlane.providers.openai_compat` -- :class:`OpenAICompatProvider`, ``POST /chat/completions``.
* :mod:`memlane.providers.claude_cli` -- :class:`ClaudeCodeProvider`, a ``claude -p`` subprocess.
* :mod:`memlane.config.llm` -- :class:`LlmSettings`.
"""

from __future__ import annotations

from memlane.config.llm import LlmSettings
from memlane.errors import ConfigError
from memlane.providers.base import (
    LlmError,
    LlmProvider,
    LlmTimeout,
    extract_json_object,
    strip_fences,
    strip_think,
)
from memlane.providers.claude_cli import ClaudeCodeProvider
from memlane.providers.ollama import OllamaProvider
from memlane.providers.openai_compat import OpenAICompatProvider

__all__ = [
    "ClaudeCodeProvider",
    "LlmError",
    "LlmProvider",
    "LlmSettings",
    "LlmTimeout",
    "OllamaProvider",
    "OpenAICompatProvider",
    "build_provider",
    "extract_json_object",
    "strip_fences",
    "strip_think",
]


def build_provider(settings: LlmSettings) -> LlmProvider | None:
    """The provider ``settings.provider`` names; ``None`` for ``"none"``.

    Empty ``model`` / ``base_url`` mean the provider's defaults; ``timeout_s`` and ``max_tokens``
    become the provider's per-call defaults (claude-code ignores ``max_tokens`` and ``base_url``).
    Nothing is contacted here; call ``available()`` to probe.

    Raises:
        ConfigError: provider ``openai`` without a model.
        ValueError: an unknown provider (settings validation normally prevents both).
    """
    provider = settings.provider
    if provider == "none":
        return None
    if provider == "ollama":
        return OllamaProvider(
            settings.model, base_url=settings.base_url, timeout_s=settings.timeout_s, max_tokens=settings.max_tokens
        )
    if provider == "openai":
        if not settings.model:
            raise ConfigError("llm.model must name a model when llm.provider is 'openai'")
        return OpenAICompatProvider(
            settings.model,
            base_url=settings.base_url,
            api_key=settings.api_key.get_secret_value(),
            timeout_s=settings.timeout_s,
            max_tokens=settings.max_tokens,
        )
    if provider == "claude-code":
        return ClaudeCodeProvider(settings.model, command=settings.command, timeout_s=settings.timeout_s)
    raise ValueError(f"unknown LLM provider {provider!r}")
