"""Pipeline v2 settings: every key of memory-pipeline-v2.md "Configuration Reference".

``memory.pipelineV2`` in ``config.yaml`` (or ``MEMLANE_MEMORY__PIPELINE_V2__...`` in the
environment) becomes :class:`PipelineV2Settings`, reached as ``settings.memory.pipeline_v2``.
Attributes are snake_case (``pipeline_v2.worker.lease_timeout_ms``); the file may use the seed's
camelCase (``worker.leaseTimeoutMs``) or snake_case. Legacy flat keys (``workerPollMs``,
``graphBoostWeight``, ``minFactConfidenceForWrite``, ``documentChunkSize``...) are accepted
too; a nested key wins over its legacy flat key. Unknown keys are errors naming their path.

Modes ("Pipeline Modes"): ``disabled`` (enabled false), ``shadow`` (shadowMode or
mutationsFrozen: extract and decide, record proposals, write nothing), ``controlled-write``
(ADD applied, UPDATE/DELETE blocked), ``full`` (controlled-write + allowUpdateDelete).

Extraction's LLM: memlane configures its LLM once, in ``settings.llm`` (``memlane.providers``).
``extraction.provider`` and ``extraction.model`` are empty by default and then mean "use
``settings.llm``" (the seed's default ``claude-code``/``haiku`` is what ``llm.provider:
claude-code`` with an empty model gives). Set them to give extraction a different provider or
model; ``extraction.timeout`` (ms) always becomes the extraction calls' timeout. See
:func:`extraction_llm_settings`. With no LLM (``llm.provider: none``) the pipeline still runs
its deterministic parts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic import ValidationError as PydValidationError
from pydantic.alias_generators import to_camel, to_snake

from memlane.config.checks import printable
from memlane.config.hosts import HostAllowlist
from memlane.config.llm import LlmSettings


def camel(key: str) -> str:
    """``poll_ms`` -> ``pollMs``; camelCase keys are returned unchanged."""
    return to_camel(key) if "_" in key else key


def snake(key: str) -> str:
    """``pollMs`` -> ``poll_ms``; snake_case keys are returned unchanged."""
    return key if "_" in key or key.islower() else to_snake(key)


def snake_keys(data: Any) -> Any:
    """``data`` with every mapping key turned to snake_case, recursively."""
    if isinstance(data, dict):
        return {snake(str(k)): snake_keys(v) for k, v in data.items()}
    return data


class _Group(BaseModel):
    """Base of every pipeline group: camelCase aliases, snake_case names accepted, unknown keys refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _camel_keys(cls, data: Any) -> Any:
        # Trigger: the same key may arrive as pollMs (YAML, seed layout) or poll_ms (env, API).
        # Why: errors must name the seed's camelCase path whatever the input spelling.
        # Outcome: keys become camelCase (the aliases) before validation.
        # (validate_assignment re-validates the whole field dict by snake_case name: converting
        # that would leave camelCase attributes behind, so a dict of field names stays as is.)
        if isinstance(data, dict) and not set(data) <= set(cls.model_fields):
            return {camel(str(k)): v for k, v in data.items()}
        return data


class ExtractionSettings(_Group):
    """First LLM pass (seed "Extraction Stage")."""

    provider: Literal["ollama", "claude-code", "openai", "none"] | None = Field(
        None, description="LLM provider for extraction; empty = settings.llm (memlane's one LLM setting)."
    )
    model: str = Field("", description="Model for extraction; empty = settings.llm.model (provider default).")
    timeout: int = Field(45_000, ge=5_000, le=300_000, description="Extraction call timeout, ms.")
    min_confidence: float = Field(
        0.7, ge=0.0, le=1.0, description="Facts below this confidence are not written (fraction)."
    )

    @field_validator("provider", mode="before")
    @classmethod
    def _empty_is_default(cls, v: Any) -> Any:
        return None if v == "" else v


class WorkerSettings(_Group):
    """The extraction worker (seed "Worker Model")."""

    poll_ms: int = Field(2_000, ge=100, le=60_000, description="Tick interval when idle, ms.")
    max_retries: int = Field(3, ge=1, le=10, description="Leases of a job before it goes dead (max_attempts).")
    lease_timeout_ms: int = Field(
        300_000, ge=10_000, le=600_000, description="A lease older than this is reset to pending by the reaper, ms."
    )
    concurrency: int = Field(
        2,
        ge=1,
        le=16,
        description="Extraction workers leasing jobs in parallel (each job's LLM wait "
        "overlaps another's writes; writes stay serialised). Needs a restart.",
    )


class GraphSettings(_Group):
    """Knowledge graph boost (seed "Graph Boost")."""

    enabled: bool = Field(True, description="Write entity graph and boost graph-linked memories in recall.")
    boost_weight: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Score added to graph-linked hits (fraction). "
        "0 by default (the seed's is 0.15): on LoCoMo no weight beat no boost "
        "(docs/benchmarks.md, 'Graph boost'); the graph itself is still built.",
    )
    boost_timeout_ms: int = Field(500, ge=50, le=5_000, description="Budget of the graph lookup per recall, ms.")
    boost_max_share: float = Field(
        0.05,
        gt=0.0,
        le=1.0,
        description="Only entities linked to at most this share of the store's memories "
        "(and always those linked to 5 or fewer) boost: a name most memories mention, such as a chat's speaker, "
        "says nothing about which one answers (fraction; 1 = every entity).",
    )


class RerankerSettings(_Group):
    """Reranking of recall candidates."""

    enabled: bool = Field(
        False,
        description="Rerank the top candidates. Off by default, as the seed says; "
        "on LoCoMo the embedding reranker lowered retrieval (docs/decisions.md, "
        "'Defaults left off').",
    )
    model: str = Field("", description="Reranker model; empty = the built-in one.")
    top_n: int = Field(20, ge=1, le=100, description="Candidates reranked.")
    timeout_ms: int = Field(2_000, ge=100, le=30_000, description="Reranker budget, ms.")


class AutonomousSettings(_Group):
    """The maintenance worker (seed "Autonomous Maintenance")."""

    enabled: bool = Field(True, description="Schedule the maintenance worker.")
    frozen: bool = Field(False, description="Stop the scheduled interval even when enabled (autonomousFrozen).")
    allow_update_delete: bool = Field(True, description="Maintenance may update/delete memories.")
    maintenance_interval_ms: int = Field(
        1_800_000, ge=60_000, le=86_400_000, description="Interval between maintenance runs, ms (60 s - 24 h)."
    )
    maintenance_mode: Literal["observe", "execute"] = Field(
        "execute", description="observe = report what would be repaired; execute = repair."
    )


class RepairSettings(_Group):
    """Repair actions' cooldowns and hourly budgets."""

    reembed_cooldown_ms: int = Field(300_000, ge=10_000, le=3_600_000, description="Between re-embed runs, ms.")
    reembed_hourly_budget: int = Field(10, ge=1, le=1000, description="Re-embed runs per hour.")
    requeue_cooldown_ms: int = Field(60_000, ge=5_000, le=3_600_000, description="Between requeue runs, ms.")
    requeue_hourly_budget: int = Field(50, ge=1, le=1000, description="Requeue runs per hour.")
    dedup_cooldown_ms: int = Field(600_000, ge=10_000, le=3_600_000, description="Between dedup runs, ms.")
    dedup_hourly_budget: int = Field(3, ge=1, le=100, description="Dedup runs per hour.")
    dedup_semantic_threshold: float = Field(
        0.92, ge=0.0, le=1.0, description="Cosine at or above which two memories are duplicates."
    )
    dedup_batch_size: int = Field(100, ge=10, le=1000, description="Memories compared per dedup run.")


class DocumentsSettings(_Group):
    """Document ingest (seed "Document Ingest")."""

    worker_interval_ms: int = Field(10_000, ge=1_000, le=300_000, description="Document worker tick, ms.")
    chunk_size: int = Field(2_000, ge=200, le=50_000, description="Chunk window, chars.")
    chunk_overlap: int = Field(200, ge=0, le=10_000, description="Overlap between chunks, chars.")
    max_content_bytes: int = Field(10_485_760, ge=1_024, le=104_857_600, description="Largest fetched body, bytes.")
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts a URL fetch may reach although they are loopback, private, "
        "link-local or otherwise non-public: host names (matched against the URL's host), IP addresses or CIDR "
        "networks (matched against the resolved addresses). Set in config.yaml or the environment only.",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _valid_hosts(cls, value: list[str]) -> list[str]:
        HostAllowlist(value)  # the one parser of allow-list entries; raises ValueError naming the entry
        return [v.strip() for v in value]

    @model_validator(mode="after")
    def _overlap_below_size(self) -> DocumentsSettings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(f"chunkOverlap ({self.chunk_overlap}) must be smaller than chunkSize ({self.chunk_size})")
        return self


class EmbeddingTrackerSettings(_Group):
    """The worker that embeds memories stored without a vector."""

    enabled: bool = Field(True, description="Run the embedding tracker.")
    poll_ms: int = Field(5_000, ge=1_000, le=60_000, description="Tick interval, ms.")
    batch_size: int = Field(8, ge=1, le=20, description="Memories embedded per tick.")


class HintsSettings(_Group):
    """Prospective hints (seed "Hints")."""

    enabled: bool = Field(False, description="Generate hints for new memories.")
    max: int = Field(5, ge=1, le=20, description="Hints per memory.")
    timeout: int = Field(45_000, ge=5_000, le=300_000, description="Hint generation timeout, ms.")
    poll: int = Field(5_000, ge=1_000, le=60_000, description="Hint worker tick, ms.")


class DampeningSettings(_Group):
    """Post-fusion dampening (seed "Post-Fusion Dampening")."""

    gravity_enabled: bool = Field(True, description="Stage 1: gravity dampening.")
    hub_enabled: bool = Field(
        False,
        description="Stage 2: hub penalty. Off by default (the seed's default is "
        "on): in a chat most memories name the speakers, so it penalises most of them "
        "(docs/decisions.md, 'Defaults left off').",
    )
    resolution_enabled: bool = Field(True, description="Stage 3: resolution boost.")
    hub_percentile: float = Field(0.9, ge=0.0, le=1.0, description="Entity degree percentile that makes a hub.")
    hub_penalty: float = Field(0.7, ge=0.0, le=1.0, description="Score multiplier for hub-only hits.")
    gravity_penalty: float = Field(0.5, ge=0.0, le=1.0, description="Score multiplier for gravity hits.")
    resolution_boost: float = Field(1.2, gt=0.0, le=10.0, description="Score multiplier for constraints.")


_GROUPS: dict[str, type[_Group]] = {
    "extraction": ExtractionSettings,
    "worker": WorkerSettings,
    "graph": GraphSettings,
    "reranker": RerankerSettings,
    "autonomous": AutonomousSettings,
    "repair": RepairSettings,
    "documents": DocumentsSettings,
    "embeddingTracker": EmbeddingTrackerSettings,
    "hints": HintsSettings,
    "dampening": DampeningSettings,
}


def _legacy_keys() -> dict[str, tuple[str, str]]:
    """Legacy flat key (camelCase) -> (group, key). Every ``group + Key`` is accepted
    (``workerPollMs``, ``hintsMax``, ``embeddingTrackerBatchSize``...), plus the names below."""
    out: dict[str, tuple[str, str]] = {}
    for group, model in _GROUPS.items():
        for name in model.model_fields:
            key = camel(name)
            out[group + key[0].upper() + key[1:]] = (group, key)
    for name in DocumentsSettings.model_fields:  # documentChunkSize, documentWorkerIntervalMs...
        key = camel(name)
        out["document" + key[0].upper() + key[1:]] = ("documents", key)
    for name in RepairSettings.model_fields:  # reembedCooldownMs, dedupHourlyBudget...
        out[camel(name)] = ("repair", camel(name))
    out.update(
        {
            "leaseTimeoutMs": ("worker", "leaseTimeoutMs"),
            "maxRetries": ("worker", "maxRetries"),
            "pollMs": ("worker", "pollMs"),
            "minConfidence": ("extraction", "minConfidence"),
            "minFactConfidenceForWrite": ("extraction", "minConfidence"),
            "extractionTimeoutMs": ("extraction", "timeout"),
            "maintenanceIntervalMs": ("autonomous", "maintenanceIntervalMs"),
            "maintenanceMode": ("autonomous", "maintenanceMode"),
            "hintsTimeoutMs": ("hints", "timeout"),
            "hintsPollMs": ("hints", "poll"),
        }
    )
    return out


LEGACY_KEYS: dict[str, tuple[str, str]] = _legacy_keys()

#: Seed keys memlane accepted and never read, removed from the settings: a config that still
#: sets them loads, with a warning naming them (:func:`removed_keys`); ``POST /api/config``
#: refuses them. ``guardrails`` (fact, chunk and recall sizes: ``max_content_chars`` and the
#: ``sessions.*_budget_chars`` settings bound those), ``continuity`` (checkpoints are configured
#: by the top-level ``continuity`` section) and ``telemetry`` with ``telemetryEnabled`` (no
#: telemetry is exported).
_REMOVED_GROUPS: dict[str, tuple[str, ...]] = {
    "guardrails": ("maxContentChars", "chunkTargetChars", "recallTruncateChars"),
    "continuity": (
        "enabled",
        "promptInterval",
        "timeIntervalMs",
        "maxCheckpointsPerSession",
        "retentionDays",
        "recoveryBudgetChars",
    ),
    "telemetry": ("posthogHost", "posthogApiKey", "flushIntervalMs", "flushBatchSize", "retentionDays"),
}
_REMOVED_TOP: frozenset[str] = frozenset({*_REMOVED_GROUPS, "telemetryEnabled"})
#: Their legacy flat spellings (``guardrailsMaxContentChars``, ``posthogApiKey``...).
_REMOVED_FLAT: dict[str, str] = {
    **{g + k[0].upper() + k[1:]: f"{g}.{k}" for g, keys in _REMOVED_GROUPS.items() for k in keys},
    "maxContentChars": "guardrails.maxContentChars",
    "chunkTargetChars": "guardrails.chunkTargetChars",
    "recallTruncateChars": "guardrails.recallTruncateChars",
    "posthogHost": "telemetry.posthogHost",
    "posthogApiKey": "telemetry.posthogApiKey",
}


def removed_keys(data: Any) -> list[str]:
    """The removed pipeline keys a ``memory.pipelineV2`` mapping sets, as sorted labels
    (``memory.pipelineV2.telemetry``, ``memory.pipelineV2.telemetry.posthogApiKey`` for a legacy
    flat key); ``[]`` for anything else. Keys may be camelCase or snake_case."""
    if not isinstance(data, dict):
        return []
    out = set()
    for k in data:
        key = camel(str(k))
        if key in _REMOVED_TOP:
            out.add(key)
        elif key in _REMOVED_FLAT:
            out.add(_REMOVED_FLAT[key])
    return sorted(f"memory.pipelineV2.{k}" for k in out)


# Keys POST /api/config applies to the running daemon (each is read at use time by the
# workers); every other change is written to config.yaml and needs a restart.
HOT_KEYS: frozenset[str] = frozenset(
    {
        "enabled",
        "shadowMode",
        "mutationsFrozen",
        "allowUpdateDelete",
        "semanticContradictionEnabled",
        "semanticContradictionTimeoutMs",
        "autonomous.frozen",
        "autonomous.maintenanceMode",
        "autonomous.allowUpdateDelete",
    }
)


class PipelineV2Settings(_Group):
    """``memory.pipelineV2``: the whole pipeline configuration (memory-pipeline-v2.md
    "Configuration Reference", "Pipeline Modes"). Time values are ms, sizes chars unless named."""

    enabled: bool = Field(True, description="Master switch: when false no extraction job is enqueued or processed.")
    shadow_mode: bool = Field(False, description="Extract and decide, record proposals to history, write no facts.")
    mutations_frozen: bool = Field(
        False, description="Emergency brake: no pipeline writes even if shadowMode is false."
    )
    allow_update_delete: bool = Field(
        False, description="Permit UPDATE/DELETE decisions (full mode); blocked by default."
    )
    semantic_contradiction_enabled: bool = Field(False, description="LLM check for semantic contradictions.")
    semantic_contradiction_timeout_ms: int = Field(
        45_000, ge=5_000, le=300_000, description="Semantic contradiction check timeout, ms."
    )
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings, description="Extraction LLM pass.")
    worker: WorkerSettings = Field(default_factory=WorkerSettings, description="Extraction worker.")
    graph: GraphSettings = Field(default_factory=GraphSettings, description="Knowledge graph.")
    reranker: RerankerSettings = Field(default_factory=RerankerSettings, description="Reranker.")
    autonomous: AutonomousSettings = Field(default_factory=AutonomousSettings, description="Maintenance worker.")
    repair: RepairSettings = Field(default_factory=RepairSettings, description="Repair budgets.")
    documents: DocumentsSettings = Field(default_factory=DocumentsSettings, description="Document ingest.")
    embedding_tracker: EmbeddingTrackerSettings = Field(
        default_factory=EmbeddingTrackerSettings, description="Embedding tracker worker."
    )
    hints: HintsSettings = Field(default_factory=HintsSettings, description="Prospective hints.")
    dampening: DampeningSettings = Field(default_factory=DampeningSettings, description="Post-fusion dampening.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_flat_keys(cls, data: Any) -> Any:
        # Trigger: a config written for the flat layout (workerPollMs, graphBoostWeight...).
        # Why: the seed keeps legacy flat keys working, nested keys taking precedence.
        # Outcome: each legacy key moves into its group unless the group already sets it.
        if not isinstance(data, dict):
            return data
        data = {camel(str(k)): v for k, v in data.items()}
        dead = removed_keys(data)
        if dead:
            logging.getLogger("memlane.config").warning(
                "%s: deprecated and ignored (memlane never read %s); remove %s from config.yaml",
                ", ".join(dead),
                "it" if len(dead) == 1 else "them",
                "it" if len(dead) == 1 else "them",
            )
            data = {k: v for k, v in data.items() if k not in _REMOVED_TOP and k not in _REMOVED_FLAT}
        for key in [k for k in data if k in LEGACY_KEYS and k not in cls.model_fields and k not in _ALIASES]:
            value = data.pop(key)
            group, field = LEGACY_KEYS[key]
            nested = data.get(group)
            if nested is None:
                data[group] = {field: value}
            elif isinstance(nested, dict):
                nested = {camel(str(k)): v for k, v in nested.items()}
                nested.setdefault(field, value)
                data[group] = nested
            # a group given as a model object wins as a whole
        return data

    # -- modes ("Pipeline Modes") --------------------------------------------------------
    def mode(self) -> Literal["disabled", "shadow", "controlled-write", "full"]:
        """The operational mode composed from the flags."""
        if not self.enabled:
            return "disabled"
        if self.shadow_mode or self.mutations_frozen:
            return "shadow"
        return "full" if self.allow_update_delete else "controlled-write"

    @property
    def mutations_allowed(self) -> bool:
        """ADD decisions may write memories (controlled-write or full)."""
        return self.mode() in ("controlled-write", "full")

    @property
    def destructive_allowed(self) -> bool:
        """UPDATE/DELETE decisions are permitted (full mode). The seed still blocks their
        application with ``destructive_mutations_not_implemented``."""
        return self.mode() == "full"

    @property
    def maintenance_scheduled(self) -> bool:
        """The maintenance worker's interval runs: pipeline enabled, autonomous.enabled, not frozen."""
        return self.enabled and self.autonomous.enabled and not self.autonomous.frozen

    @property
    def maintenance_executes(self) -> bool:
        """Maintenance may repair (not only observe): scheduled, ``execute`` mode, mutations allowed."""
        return self.maintenance_scheduled and self.autonomous.maintenance_mode == "execute" and self.mutations_allowed

    def flags(self) -> dict[str, Any]:
        """The mode and the flags that compose it (for status endpoints)."""
        return {
            "mode": self.mode(),
            "enabled": self.enabled,
            "shadowMode": self.shadow_mode,
            "mutationsFrozen": self.mutations_frozen,
            "allowUpdateDelete": self.allow_update_delete,
            "autonomousEnabled": self.autonomous.enabled,
            "autonomousFrozen": self.autonomous.frozen,
            "maintenanceMode": self.autonomous.maintenance_mode,
            "mutationsAllowed": self.mutations_allowed,
            "destructiveAllowed": self.destructive_allowed,
            "maintenanceScheduled": self.maintenance_scheduled,
        }


_ALIASES = {camel(n) for n in PipelineV2Settings.model_fields}


class MemorySettings(BaseModel):
    """The ``memory:`` section: today only ``pipelineV2``."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    pipeline_v2: PipelineV2Settings = Field(
        default_factory=PipelineV2Settings,
        alias="pipelineV2",
        description="Memory pipeline v2 (memory-pipeline-v2.md).",
    )


def apply_hot(current: PipelineV2Settings, new: PipelineV2Settings) -> PipelineV2Settings:
    """``current`` with the :data:`HOT_KEYS` taken from ``new`` (what a running daemon may change)."""
    top = {
        k: getattr(new, k)
        for k in (
            "enabled",
            "shadow_mode",
            "mutations_frozen",
            "allow_update_delete",
            "semantic_contradiction_enabled",
            "semantic_contradiction_timeout_ms",
        )
    }
    auto = current.autonomous.model_copy(
        update={
            "frozen": new.autonomous.frozen,
            "maintenance_mode": new.autonomous.maintenance_mode,
            "allow_update_delete": new.autonomous.allow_update_delete,
        }
    )
    return current.model_copy(update={**top, "autonomous": auto})


def extraction_llm_settings(pipeline: PipelineV2Settings, llm: LlmSettings) -> LlmSettings:
    """The LLM settings extraction uses: ``settings.llm`` with ``extraction.provider`` /
    ``extraction.model`` when set, and ``extraction.timeout`` (ms) as ``timeout_s`` (seconds).

    A provider other than ``settings.llm``'s starts from that provider's defaults (empty model
    and base URL) and gets no API key: ``llm.api_key`` belongs to ``llm.base_url`` and is never
    sent to another provider's default URL (memlane.key_binding). The CLI command is kept.
    """
    ex = pipeline.extraction
    provider = ex.provider or llm.provider
    same = provider == llm.provider
    return LlmSettings(
        provider=provider,
        model=ex.model or (llm.model if same else ""),
        base_url=llm.base_url if same else "",
        api_key=llm.api_key if same else SecretStr(""),
        command=llm.command,
        timeout_s=ex.timeout / 1000.0,
        max_tokens=llm.max_tokens,
    )


def error_lines(exc: PydValidationError | Sequence[Mapping[str, Any]], prefix: str = "") -> list[str]:
    """One ``path: message`` line per error, e.g. ``memory.pipelineV2.worker.pollMs: must be >= 100``.

    ``exc`` is a ValidationError or its ``errors()`` list. Range, choice and unknown-key errors
    get short messages; others keep pydantic's. The input value is never echoed, and key paths
    are escaped (a key may hold any character).
    """
    out = []
    for e in exc.errors() if isinstance(exc, PydValidationError) else exc:
        loc = [str(p) for p in (*([prefix] if prefix else []), *e["loc"])]
        if loc and loc[0] == "memory":  # the pipeline's paths in the seed's camelCase
            loc = ["memory", *(camel(p) for p in loc[1:])]
        path = ".".join(loc)
        ctx, kind = e.get("ctx") or {}, e["type"]
        msg = {
            "greater_than_equal": f"must be >= {ctx.get('ge')}",
            "less_than_equal": f"must be <= {ctx.get('le')}",
            "greater_than": f"must be > {ctx.get('gt')}",
            "less_than": f"must be < {ctx.get('lt')}",
            "extra_forbidden": "unknown key",
            "literal_error": f"must be one of {ctx.get('expected')}",
        }.get(kind, e["msg"])
        if kind == "value_error":
            msg = e["msg"].removeprefix("Value error, ")
        if not path and kind == "value_error":  # a model-level rule whose message names its keys
            out.append(printable(msg, 300))
            continue
        out.append(f"{printable(path, 200) or '(root)'}: {printable(msg, 300)}")
    return out
