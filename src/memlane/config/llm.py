""":class:`LlmSettings`: which LLM provider memlane calls (the ``llm:`` section of the settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator


class LlmSettings(BaseModel):
    """Which LLM provider extraction and other LLM callers use; ``none`` = no LLM."""

    provider: Literal["none", "ollama", "openai", "claude-code"] = Field(
        "none",
        description="none = no LLM features; ollama = POST /api/generate; openai = an "
        "OpenAI-compatible /chat/completions endpoint (llama.cpp server, vLLM, LM Studio, OpenAI); "
        "claude-code = the Claude Code CLI ('claude -p') as a subprocess.",
    )
    model: str = Field(
        "",
        description="Model name; empty = the provider's default (ollama: qwen3:4b, claude-code: haiku). "
        "Required for openai.",
    )
    base_url: str = Field(
        "",
        description="HTTP provider base URL; empty = http://127.0.0.1:11434 (ollama) or "
        "http://127.0.0.1:8080/v1 (openai). Ignored by claude-code. Set in config.yaml or the environment only.",
    )
    api_key: SecretStr = Field(
        SecretStr(""),
        description="Bearer token for the openai provider, sent only when non-empty (never logged, "
        "masked in every dump) and only to the base URL it was first used with (memlane.key_binding). "
        "Set in config.yaml or the environment only.",
    )
    command: str = Field(
        "claude",
        description="The Claude Code CLI executable for claude-code (a name on PATH or a full path). "
        "Set in config.yaml or the environment only.",
    )
    timeout_s: float = Field(
        45.0, gt=0, le=600, description="Timeout of one generate call, seconds (claude-code: the whole process run)."
    )
    max_tokens: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="Cap on generated tokens per call (ignored by claude-code, which has no such option).",
    )

    @model_validator(mode="after")
    def _openai_needs_model(self) -> LlmSettings:
        if self.provider == "openai" and not self.model:
            raise ValueError("model must name a model when provider is 'openai'")
        return self
