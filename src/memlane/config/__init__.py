"""One settings class for the whole daemon (pydantic-settings).

Sources, highest priority first: constructor arguments, ``MEMLANE_*`` environment
variables (nested with ``__``, e.g. ``MEMLANE_EMBEDDING__PROVIDER=ollama``), the YAML
file ``$MEMLANE_HOME/config.yaml`` (default ``~/.memlane/config.yaml``), then the
defaults below. Every field has a default and a description; ``memlane config``
prints the effective values.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from memlane.config.checks import check_values, settings_value_error, strict_type_errors
from memlane.config.continuity import SessionCheckpointSettings
from memlane.config.drift import DriftSettings
from memlane.config.llm import LlmSettings
from memlane.config.methodology import MethodologySettings
from memlane.config.pipeline import MemorySettings, error_lines, snake_keys
from memlane.config.predictor import PredictorSettings
from memlane.errors import ConfigError

#: The log levels ``log_level`` accepts (lower-case; input in any case).
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def default_home() -> Path:
    """The data directory: ``$MEMLANE_HOME`` if set, else ``~/.memlane``."""
    env = os.environ.get("MEMLANE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".memlane"


class EmbeddingSettings(BaseModel):
    """Which embedding provider turns text into vectors."""

    provider: Literal["local", "ollama", "openai", "none"] = Field(
        "local",
        description="local = all-MiniLM-L6-v2 int8 ONNX shipped in a PyPI package (offline); "
        "ollama / openai = an HTTP embedding endpoint; none = BM25 only.",
    )
    model: str = Field(
        "all-MiniLM-L6-v2",
        description="Model name sent to an HTTP provider (ignored by the local provider).",
    )
    base_url: str = Field(
        "",
        description="HTTP provider base URL; empty = http://127.0.0.1:11434 (ollama) "
        "or https://api.openai.com/v1 (openai). Set in config.yaml or the environment only.",
    )
    api_key: SecretStr = Field(
        SecretStr(""),
        description="Bearer token for the openai provider (never logged, masked in every dump), "
        "sent only to the base URL it was first used with (memlane.key_binding). "
        "Set in config.yaml or the environment only.",
    )
    dimensions: int = Field(
        0, ge=0, le=8192, description="Expected vector size for HTTP providers; 0 = learn it from the first reply."
    )
    batch_size: int = Field(64, ge=1, le=1024, description="Texts per embedding call during ingest.")
    timeout_s: float = Field(30.0, gt=0, le=600, description="HTTP provider timeout, seconds.")
    threads: int = Field(0, ge=0, le=64, description="onnxruntime intra-op threads for the local model; 0 = all cores.")


class RecallSettings(BaseModel):
    """Hybrid recall defaults (memory-pipeline-v2.md 'Decision Stage' merge rule)."""

    alpha: float = Field(0.7, ge=0.0, le=1.0, description="Weight of the vector leg: alpha*vector + (1-alpha)*bm25.")
    min_score: float = Field(0.0, ge=0.0, le=1.0, description="Results whose final score is below this are dropped.")
    default_limit: int = Field(10, ge=1, le=1000, description="Results returned when a request names no limit.")
    candidate_multiplier: int = Field(
        4, ge=1, le=50, description="Each leg fetches limit x this many candidates before merging."
    )
    context_weight: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Weight of a memory's context (its conversational neighbourhood) in both legs: "
        "the FTS column weight and the share of the context vector in the vector score.",
    )
    recency_half_life_days: float = Field(30.0, gt=0, le=36_500, description="Half-life of the recency boost, days.")
    recency_weight: float = Field(0.0, ge=0.0, le=1.0, description="Maximum multiplicative recency boost (0 = off).")
    rehearsal_weight: float = Field(
        0.05, ge=0.0, le=1.0, description="Maximum multiplicative boost from access_count (rehearsal), log-scaled."
    )
    max_query_chars: int = Field(
        100_000, ge=1, le=100_000_000, description="Queries longer than this are truncated (never rejected)."
    )
    ranker: Literal["learned", "heuristic"] = Field(
        "learned",
        description="Who orders recall's best candidates: 'learned' (the LightGBM model shipped "
        "in the package, trained on LoCoMo; used when its features are available: the vector leg ran with "
        "the embedding model it was trained on) or 'heuristic' (the hybrid score, boosts and stages only).",
    )
    ranker_pool: int = Field(100, ge=10, le=500, description="Candidates the learned ranker rescores.")
    ranker_model: str = Field("", description="Learned ranker model file; empty = the one shipped in the package.")


class RedactSettings(BaseModel):
    """Secret redaction before storage (memlane.redact; docs/security.md). Transcripts, session
    context and checkpoints are always redacted."""

    memories: Literal["hooks", "all", "off"] = Field(
        "hooks",
        description="Memories redacted before they are stored: hooks = those whose source_type is "
        "hook, session or transcript (text from an agent session's hooks); all = every memory (API, CLI, MCP, "
        "import, documents); off = none.",
    )


class SessionSettings(BaseModel):
    """Session lifecycle: candidate pool, injection and prompt recall
    (predictive-memory-scorer.md "Candidate Pre-Filtering", "Hook Flow (session-start)")."""

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        # sessions.min_training_sessions shared its name with predictor.min_training_sessions
        # while meaning only the status line's N: the old key still sets the new one (unless
        # both are given), with a warning naming the new key.
        if isinstance(data, dict) and "min_training_sessions" in data:
            data = dict(data)
            value = data.pop("min_training_sessions")
            data.setdefault("collecting_target_sessions", value)
            logging.getLogger("memlane.config").warning(
                "sessions.min_training_sessions is deprecated: it is now sessions.collecting_target_sessions "
                "(the predictor's training threshold is predictor.min_training_sessions)"
            )
        return data

    candidate_pool_size: int = Field(100, ge=1, le=1000, description="Most candidates recorded per session-start.")
    effective_top: int = Field(50, ge=1, le=1000, description="Candidates taken by effectiveScore.")
    similarity_top: int = Field(50, ge=0, le=1000, description="Candidates taken by similarity to the session context.")
    relevance_ranker: Literal["learned", "heuristic"] = Field(
        "heuristic",
        description="Where the per-user predictor of a relevance start (ranking 'relevance') starts from: "
        "'learned' (the shipped base, recall.ranker_model's LightGBM model, plus the user's correction; the "
        "heuristic when its features are unavailable) or 'heuristic'. Either way the baseline it is fused with "
        'and earns alpha against is the heuristic recall (docs/predictor.md, "Starting from the shipped base").',
    )
    similarity_pool: int = Field(
        200, ge=1, le=10_000, description="Top memories by effectiveScore among which similarity is computed."
    )
    min_effective: float = Field(
        0.1, ge=0.0, le=1.0, description="Decayed importance below this is excluded from the pool (pinned exempt)."
    )
    inject_limit: int = Field(10, ge=0, le=100, description="Most memories injected at session-start.")
    inject_budget_chars: int = Field(4000, ge=0, le=100_000, description="Character budget of the session-start block.")
    prompt_limit: int = Field(5, ge=0, le=50, description="Most memories injected per prompt.")
    prompt_budget_chars: int = Field(2000, ge=0, le=100_000, description="Character budget of a prompt block.")
    prefetch_content_chars: int = Field(
        6000,
        ge=0,
        le=100_000,
        description="Characters of pre-fetched files' contents added after the pre-fetch list (at most 3,000 "
        "per file, secrets redacted, only under the project); 0 = paths only.",
    )
    prompt_min_score: float = Field(
        0.45,
        ge=0.0,
        le=1.0,
        description="Prompt recall injects only hits at or above this hybrid score (say nothing rather than pad).",
    )
    collecting_target_sessions: int = Field(
        10,
        ge=1,
        le=1000,
        description="The N of the session-start status line '[memlane: collecting | n/N ...]' shown when the "
        "predictor does not run (the predictor's own threshold is predictor.min_training_sessions). "
        "Formerly sessions.min_training_sessions, still accepted with a warning.",
    )
    agent_feedback: bool = Field(True, description="Ask the agent to rate injected memories (<memory-feedback>).")
    max_prompt_chars: int = Field(
        100_000, ge=1, le=100_000_000, description="Longest prompt a hook accepts, characters."
    )
    max_transcript_chars: int = Field(
        20_000_000,
        ge=1,
        le=2_000_000_000,
        description="Longest transcript stored at session-end, characters (stored whole, secrets redacted).",
    )
    judge_queue_max: int = Field(
        8,
        ge=0,
        le=1000,
        description="Session-ends that may wait for the LLM continuity judge besides the one it is judging; "
        "beyond that a session-end is scored from behaviour at once, the reason recorded.",
    )
    judge_wait_s: float = Field(
        60.0,
        gt=0,
        le=600,
        description="Longest a session-end with wait: true waits for the judge, seconds; past it the answer "
        "carries the behavioural score and says the judge is still queued or running.",
    )


class Settings(BaseSettings):
    """Every setting memlane reads. Built once by ``memlane.container``; nothing else reads the environment."""

    model_config = SettingsConfigDict(
        env_prefix="MEMLANE_", env_nested_delimiter="__", extra="ignore", validate_default=True
    )

    home: Path = Field(default_factory=default_home, description="Data directory (MEMLANE_HOME).")
    host: str = Field("127.0.0.1", description="Address the daemon binds to.")
    port: int = Field(7437, ge=1, le=65535, description="TCP port of the daemon.")
    daemon_url: str = Field("", description="URL the CLI talks to; empty = http://{host}:{port}.")
    require_token: bool = Field(
        True,
        description="Every route but GET /health needs the per-install token ($MEMLANE_HOME/token). "
        "Turn off only inside a trusted container: the daemon warns at start, and refuses a non-loopback "
        "bind address without it.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host header names accepted besides loopback names and the bind "
        "address (e.g. a container's service name); anything else gets 403 (DNS-rebinding defence).",
    )
    max_content_chars: int = Field(
        100_000, ge=1, le=100_000_000, description="Largest memory content accepted, characters."
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, le=1 << 30, description="Largest HTTP request body accepted, bytes."
    )
    max_batch: int = Field(1000, ge=1, le=100_000, description="Most memories in one batch remember call.")
    hook_timeout_s: float = Field(
        4.0,
        gt=0,
        le=55,
        description="How long a hook command waits for the daemon before spooling the event, "
        "seconds (Claude Code's own hook timeout is 60 s).",
    )
    read_pool_size: int = Field(4, ge=1, le=64, description="Read connections in the pool.")
    busy_timeout_ms: int = Field(5000, ge=0, le=3_600_000, description="SQLite busy_timeout, ms.")
    sqlite_synchronous: Literal["FULL", "NORMAL"] = Field(
        "FULL", description="SQLite synchronous mode: FULL survives power loss, NORMAL only process crashes."
    )
    log_level: str = Field("info", description="Daemon log level: critical, error, warning, info or debug (any case).")
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings, description="Embedding provider.")
    recall: RecallSettings = Field(default_factory=RecallSettings, description="Hybrid recall.")
    sessions: SessionSettings = Field(default_factory=SessionSettings, description="Session lifecycle.")
    redact: RedactSettings = Field(default_factory=RedactSettings, description="Secret redaction before storage.")
    llm: LlmSettings = Field(default_factory=LlmSettings, description="LLM provider (continuity judge, extraction).")
    continuity: SessionCheckpointSettings = Field(
        default_factory=SessionCheckpointSettings,
        description="Session checkpoints (memory-pipeline-v2.md 'Session Checkpoints').",
    )
    memory: MemorySettings = Field(
        default_factory=MemorySettings,
        description="memory.pipelineV2: the memory pipeline v2 (memlane.config.pipeline).",
    )
    predictor: PredictorSettings = Field(
        default_factory=PredictorSettings,
        description="The predictive memory scorer (predictive-memory-scorer.md Phase 5).",
    )
    drift: DriftSettings = Field(
        default_factory=DriftSettings, description="Memory drift and staleness (docs/drift.md)."
    )
    methodology: MethodologySettings = Field(
        default_factory=MethodologySettings, description="Methodology plugin per project (docs/v3.md, phases)."
    )

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, value: str) -> str:
        # Both logging.basicConfig and uvicorn take these names; anything else failed at start.
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @model_validator(mode="after")
    def _no_unencodable_values(self) -> Settings:
        # Every source (config.yaml, MEMLANE_* variables, which may carry surrogate-escaped
        # bytes, constructor arguments): a NUL or a lone surrogate would break every JSON
        # answer and every print of the settings, a NaN or an infinity every JSON answer, so
        # they are refused here, naming the key.
        problem = settings_value_error(self)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def db_path(self) -> Path:
        """``{home}/memories.db``."""
        return self.home / "memories.db"

    @property
    def url(self) -> str:
        """The daemon URL the CLI uses."""
        return self.daemon_url or f"http://{self.host}:{self.port}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        home = init_settings.init_kwargs.get("home") if hasattr(init_settings, "init_kwargs") else None
        return (init_settings, env_settings, YamlSource(settings_cls, home=home))


class YamlSource(PydanticBaseSettingsSource):
    """Reads ``config.yaml``: ``$MEMLANE_CONFIG`` if set, else ``{home}/config.yaml`` where home is
    the one given to Settings, else ``$MEMLANE_HOME``, else ``~/.memlane``. A missing file is
    empty; a broken one is a ConfigError naming the file."""

    def __init__(self, settings_cls: type[BaseSettings], home: Path | str | None = None) -> None:
        super().__init__(settings_cls)
        self._home = Path(home).expanduser() if home is not None else None

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        home = self._home or default_home()
        path = Path(os.environ.get("MEMLANE_CONFIG", home / "config.yaml")).expanduser()
        if not path.is_file():
            return {}
        return read_config_file(path, self.settings_cls)


def read_config_file(path: Path, settings_cls: type[BaseModel]) -> dict[str, Any]:
    """config.yaml at ``path`` as Settings input (:func:`yaml_settings_data`), checked: valid
    UTF-8 and YAML, a mapping, no NUL or lone surrogate in any key or string, and every value
    of the type its setting has (strictly: ``true`` is not a number, ``"300"`` not an int).

    Raises:
        ConfigError: naming the file and the key path; nothing is coerced or skipped.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (byte {exc.start})") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    check_values(data, where=f"{path}: ")
    flat = yaml_settings_data(data)
    typed = {k: v for k, v in flat.items() if k != "home"}  # home: a path, given as text
    errors = strict_type_errors(settings_cls, typed)
    if errors:
        lines = error_lines(errors)
        raise ConfigError(f"{path}: wrong type: " + "; ".join(lines), details={"errors": lines})
    return flat


def yaml_settings_data(data: dict[str, Any]) -> dict[str, Any]:
    """config.yaml's mapping as Settings input. Keys under ``memory:`` (the seeds' layout) are
    accepted beside top-level keys (a top-level key wins), except ``memory.pipelineV2`` (or
    ``pipeline_v2``), which becomes ``memory.pipeline_v2`` with snake_case keys, so that
    ``MEMLANE_MEMORY__PIPELINE_V2__*`` environment variables override it key by key."""
    flat = {k: v for k, v in data.items() if k != "memory"}
    memory = data.get("memory")
    if isinstance(memory, dict):
        for k, v in memory.items():
            if k in ("pipelineV2", "pipeline_v2"):
                flat["memory"] = {"pipeline_v2": snake_keys(v) if isinstance(v, dict) else v}
            else:
                flat.setdefault(k, v)
    return flat


def load_settings(**overrides: Any) -> Settings:
    """Build the effective Settings, turning pydantic's errors into a ConfigError naming the key.

    Raises:
        ConfigError: a value is out of range or of the wrong type.
    """
    from pydantic import ValidationError as PydValidationError

    try:
        return Settings(**overrides)
    except PydValidationError as exc:
        parts = error_lines(exc)
        raise ConfigError("invalid settings: " + "; ".join(parts), details={"errors": parts}) from exc


def public_settings(settings: Settings) -> dict[str, Any]:
    """The settings as JSON-able data with secrets masked: every :class:`~pydantic.SecretStr`
    setting (``embedding.api_key``, ``llm.api_key``...) is ``"***"`` when set, ``""`` when not."""
    data = settings.model_dump(mode="json")
    _mask_secrets(settings, data)
    data["db_path"] = str(settings.db_path)
    return data


def secret_paths(model: type[BaseModel] = Settings, prefix: str = "") -> frozenset[str]:
    """Dotted snake_case paths of every :class:`~pydantic.SecretStr` setting of ``model``
    (``{"embedding.api_key", "llm.api_key"}`` for :class:`Settings`), nested models included."""
    out: set[str] = set()
    for name, f in model.model_fields.items():
        ann = f.annotation
        if ann is SecretStr:
            out.add(prefix + name)
        elif isinstance(ann, type) and issubclass(ann, BaseModel):
            out |= secret_paths(ann, f"{prefix}{name}.")
    return frozenset(out)


def _mask_secrets(model: BaseModel, data: dict[str, Any]) -> None:
    """Replace, in ``data`` (``model``'s JSON dump, keyed by field name), each SecretStr field's
    value by ``"***"`` (set) or ``""`` (empty), recursing into nested settings models."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, SecretStr):
            data[name] = "***" if value.get_secret_value() else ""
        elif isinstance(value, BaseModel) and isinstance(data.get(name), dict):
            _mask_secrets(value, data[name])
