"""memory.pipelineV2 settings: seed defaults and ranges, camelCase/snake_case, legacy flat keys
(nested wins), modes, YAML/env sources, errors naming the key path, POST /api/config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from conftest import api_client
from memlane.config import load_settings, public_settings
from memlane.config.llm import LlmSettings
from memlane.config.pipeline import (
    LEGACY_KEYS,
    PipelineV2Settings,
    extraction_llm_settings,
    snake_keys,
)
from memlane.container import open_container
from memlane.errors import ConfigError


def P(**kw) -> PipelineV2Settings:
    return PipelineV2Settings.model_validate(kw)


def test_seed_defaults():
    p = PipelineV2Settings()
    assert (p.enabled, p.shadow_mode, p.mutations_frozen, p.allow_update_delete) == (True, False, False, False)
    assert p.semantic_contradiction_enabled is False and p.semantic_contradiction_timeout_ms == 45_000
    assert (p.extraction.provider, p.extraction.model, p.extraction.timeout, p.extraction.min_confidence) == (
        None,
        "",
        45_000,
        0.7,
    )
    assert (p.worker.poll_ms, p.worker.max_retries, p.worker.lease_timeout_ms, p.worker.concurrency) == (
        2_000,
        3,
        300_000,
        2,
    )
    # the boost ships off (seed: 0.15; it lowered LoCoMo R@5, docs/benchmarks.md "Graph boost")
    assert (p.graph.enabled, p.graph.boost_weight, p.graph.boost_timeout_ms, p.graph.boost_max_share) == (
        True,
        0.0,
        500,
        0.05,
    )
    assert (p.reranker.enabled, p.reranker.model, p.reranker.top_n, p.reranker.timeout_ms) == (False, "", 20, 2_000)
    a = p.autonomous
    assert (a.enabled, a.frozen, a.allow_update_delete, a.maintenance_interval_ms, a.maintenance_mode) == (
        True,
        False,
        True,
        1_800_000,
        "execute",
    )
    r = p.repair
    assert (
        r.reembed_cooldown_ms,
        r.reembed_hourly_budget,
        r.requeue_cooldown_ms,
        r.requeue_hourly_budget,
        r.dedup_cooldown_ms,
        r.dedup_hourly_budget,
        r.dedup_semantic_threshold,
        r.dedup_batch_size,
    ) == (300_000, 10, 60_000, 50, 600_000, 3, 0.92, 100)
    d = p.documents
    assert (d.worker_interval_ms, d.chunk_size, d.chunk_overlap, d.max_content_bytes) == (
        10_000,
        2_000,
        200,
        10_485_760,
    )
    e = p.embedding_tracker
    assert (e.enabled, e.poll_ms, e.batch_size) == (True, 5_000, 8)
    h = p.hints
    assert (h.enabled, h.max, h.timeout, h.poll) == (False, 5, 45_000, 5_000)
    dm = p.dampening
    assert (
        dm.gravity_enabled,
        dm.hub_enabled,
        dm.resolution_enabled,
        dm.hub_percentile,
        dm.hub_penalty,
        dm.gravity_penalty,
        dm.resolution_boost,
    ) == (True, False, True, 0.9, 0.7, 0.5, 1.2)


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    out = [model]
    for f in model.model_fields.values():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            out += _models(f.annotation)
    return out


def test_every_field_has_a_description_and_a_camel_alias():
    for model in _models(PipelineV2Settings):
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name}"
            assert f.alias and "_" not in f.alias, f"{model.__name__}.{name}"
    dumped = PipelineV2Settings().model_dump(by_alias=True)
    assert dumped["embeddingTracker"]["batchSize"] == 8 and dumped["worker"]["leaseTimeoutMs"] == 300_000


def test_camel_and_snake_keys_are_both_accepted():
    a = P(shadowMode=True, worker={"pollMs": 500}, embeddingTracker={"batchSize": 4})
    b = P(shadow_mode=True, worker={"poll_ms": 500}, embedding_tracker={"batch_size": 4})
    assert a == b and a.worker.poll_ms == 500 and a.embedding_tracker.batch_size == 4


@pytest.mark.parametrize(
    "key, value, path",
    [
        ("workerPollMs", 700, ("worker", "poll_ms")),
        ("workerMaxRetries", 5, ("worker", "max_retries")),
        ("leaseTimeoutMs", 20_000, ("worker", "lease_timeout_ms")),
        ("graphEnabled", False, ("graph", "enabled")),
        ("graphBoostWeight", 0.3, ("graph", "boost_weight")),
        ("extractionModel", "qwen3:4b", ("extraction", "model")),
        ("extractionProvider", "ollama", ("extraction", "provider")),
        ("extractionTimeout", 60_000, ("extraction", "timeout")),
        ("minConfidence", 0.8, ("extraction", "min_confidence")),
        ("minFactConfidenceForWrite", 0.85, ("extraction", "min_confidence")),
        ("rerankerEnabled", False, ("reranker", "enabled")),
        ("rerankerTopN", 7, ("reranker", "top_n")),
        ("autonomousEnabled", False, ("autonomous", "enabled")),
        ("autonomousFrozen", True, ("autonomous", "frozen")),
        ("maintenanceIntervalMs", 120_000, ("autonomous", "maintenance_interval_ms")),
        ("maintenanceMode", "observe", ("autonomous", "maintenance_mode")),
        ("documentWorkerIntervalMs", 5_000, ("documents", "worker_interval_ms")),
        ("documentChunkSize", 1_000, ("documents", "chunk_size")),
        ("documentChunkOverlap", 100, ("documents", "chunk_overlap")),
        ("documentMaxContentBytes", 2_048, ("documents", "max_content_bytes")),
        ("embeddingTrackerBatchSize", 3, ("embedding_tracker", "batch_size")),
        ("hintsEnabled", True, ("hints", "enabled")),
        ("dedupHourlyBudget", 9, ("repair", "dedup_hourly_budget")),
        ("worker_poll_ms", 800, ("worker", "poll_ms")),  # a legacy key in snake_case
    ],
)
def test_legacy_flat_keys(key, value, path):
    p = P(**{key: value})
    assert getattr(getattr(p, path[0]), path[1]) == value


def test_nested_keys_win_over_legacy_flat_keys():
    p = P(
        workerPollMs=700,
        worker={"pollMs": 900},
        graphBoostWeight=0.3,
        graph={"enabled": False},
        minFactConfidenceForWrite=0.9,
        extraction={"min_confidence": 0.75},
    )
    assert p.worker.poll_ms == 900
    assert p.graph.boost_weight == 0.3 and p.graph.enabled is False  # legacy fills what nested leaves out
    assert p.extraction.min_confidence == 0.75
    assert "allowUpdateDelete" not in LEGACY_KEYS and P(allowUpdateDelete=True).allow_update_delete is True


@pytest.mark.parametrize(
    "flags, mode",
    [
        ({"enabled": False, "shadowMode": True}, "disabled"),
        ({"shadowMode": True}, "shadow"),
        ({"mutationsFrozen": True, "allowUpdateDelete": True}, "shadow"),
        ({}, "controlled-write"),
        ({"allowUpdateDelete": True}, "full"),
    ],
)
def test_modes(flags, mode):
    p = P(**flags)
    assert p.mode() == mode
    assert p.mutations_allowed is (mode in ("controlled-write", "full"))
    assert p.destructive_allowed is (mode == "full")
    assert p.flags()["mode"] == mode


def test_maintenance_scheduled():
    assert P().maintenance_scheduled and P().maintenance_executes
    assert not P(autonomous={"frozen": True}).maintenance_scheduled
    assert not P(autonomousFrozen=True).maintenance_scheduled
    assert not P(autonomous={"enabled": False}).maintenance_scheduled
    assert not P(enabled=False).maintenance_scheduled
    assert P(autonomous={"maintenanceMode": "observe"}).maintenance_scheduled
    assert not P(autonomous={"maintenanceMode": "observe"}).maintenance_executes
    assert not P(shadowMode=True).maintenance_executes


def test_extraction_uses_settings_llm_unless_overridden():
    llm = LlmSettings(provider="ollama", model="qwen3:4b", base_url="http://h:1", timeout_s=10)
    same = extraction_llm_settings(P(), llm)
    assert (same.provider, same.model, same.base_url, same.timeout_s) == ("ollama", "qwen3:4b", "http://h:1", 45.0)
    other = extraction_llm_settings(P(extraction={"provider": "claude-code", "timeout": 60_000}), llm)
    assert (other.provider, other.model, other.base_url, other.timeout_s) == ("claude-code", "", "", 60.0)
    model = extraction_llm_settings(P(extraction={"model": "qwen3:8b", "provider": ""}), llm)
    assert (model.provider, model.model) == ("ollama", "qwen3:8b")
    assert extraction_llm_settings(P(), LlmSettings()).provider == "none"


def _yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    monkeypatch.setenv("MEMLANE_CONFIG", str(path))
    return path


def test_yaml_memory_section_and_env_precedence(tmp_path, monkeypatch):
    _yaml(
        tmp_path,
        monkeypatch,
        """
port: 9001
memory:
  port: 9999
  recall: {alpha: 0.4}
  pipelineV2:
    shadowMode: true
    workerPollMs: 300
    worker: {maxRetries: 5}
    graph: {boostWeight: 0.3}
""",
    )
    s = load_settings(home=tmp_path)
    p = s.memory.pipeline_v2
    assert s.port == 9001 and s.recall.alpha == 0.4  # memory.* flattened; a top-level key wins
    assert p.mode() == "shadow" and p.worker.poll_ms == 300 and p.worker.max_retries == 5
    assert p.graph.boost_weight == 0.3
    monkeypatch.setenv("MEMLANE_MEMORY__PIPELINE_V2__WORKER__MAX_RETRIES", "7")
    monkeypatch.setenv("MEMLANE_MEMORY__PIPELINE_V2__SHADOW_MODE", "false")
    p = load_settings(home=tmp_path).memory.pipeline_v2
    assert p.worker.max_retries == 7 and p.worker.poll_ms == 300 and p.mode() == "controlled-write"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("memory:\n  pipelineV2:\n    worker:\n      pollMs: 50\n", "memory.pipelineV2.worker.pollMs: must be >= 100"),
        (
            "memory:\n  pipelineV2:\n    worker:\n      poll_ms: 60001\n",
            "memory.pipelineV2.worker.pollMs: must be <= 60000",
        ),
        (
            "memory:\n  pipelineV2:\n    graph: {boostWeight: 1.5}\n",
            "memory.pipelineV2.graph.boostWeight: must be <= 1",
        ),
        ("memory:\n  pipelineV2:\n    workerMaxRetries: 11\n", "memory.pipelineV2.worker.maxRetries: must be <= 10"),
        (
            "memory:\n  pipelineV2:\n    autonomous: {maintenanceMode: yolo}\n",
            "memory.pipelineV2.autonomous.maintenanceMode: must be one of",
        ),
        ("memory:\n  pipelineV2:\n    extraction: {provider: opencode}\n", "memory.pipelineV2.extraction.provider"),
        ("memory:\n  pipelineV2:\n    grpah: {enabled: true}\n", "memory.pipelineV2.grpah: unknown key"),
        (
            "memory:\n  pipelineV2:\n    documents: {chunkSize: 300, chunkOverlap: 300}\n",
            "memory.pipelineV2.documents: chunkOverlap (300) must be smaller than chunkSize (300)",
        ),
        ("memory:\n  pipelineV2:\n    hints: {max: 0}\n", "memory.pipelineV2.hints.max: must be >= 1"),
    ],
)
def test_range_errors_name_the_key_path(tmp_path, monkeypatch, text, needle):
    _yaml(tmp_path, monkeypatch, text)
    with pytest.raises(ConfigError) as exc:
        load_settings(home=tmp_path)
    assert needle in exc.value.message and exc.value.status == 400


def test_env_range_error_names_the_key(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMLANE_MEMORY__PIPELINE_V2__EMBEDDING_TRACKER__BATCH_SIZE", "21")
    with pytest.raises(ConfigError, match=r"memory\.pipelineV2\.embeddingTracker\.batchSize: must be <= 20"):
        load_settings(home=tmp_path)


REMOVED = [
    ({"guardrails": {"maxContentChars": 800}}, ["memory.pipelineV2.guardrails"]),
    (
        {"continuity": {"promptInterval": 5}, "telemetryEnabled": True},
        ["memory.pipelineV2.continuity", "memory.pipelineV2.telemetryEnabled"],
    ),
    (
        {"telemetry": {"posthogHost": "https://ph.example", "posthogApiKey": "phc_secret"}},
        ["memory.pipelineV2.telemetry"],
    ),
    (
        {"posthogApiKey": "phc_secret", "recallTruncateChars": 300, "guardrailsChunkTargetChars": 200},  # legacy flat
        [
            "memory.pipelineV2.guardrails.chunkTargetChars",
            "memory.pipelineV2.guardrails.recallTruncateChars",
            "memory.pipelineV2.telemetry.posthogApiKey",
        ],
    ),
]


@pytest.mark.parametrize("pipeline, labels", REMOVED)
def test_a_config_with_removed_keys_loads_with_a_warning(tmp_path, monkeypatch, caplog, pipeline, labels):
    """guardrails, continuity, telemetry and telemetryEnabled were accepted and never read: an old
    config.yaml still loads (the keys are dropped), and the warning names each of them."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"memory": {"pipelineV2": {**pipeline, "worker": {"pollMs": 700}}}}))
    monkeypatch.setenv("MEMLANE_CONFIG", str(path))
    with caplog.at_level("WARNING", logger="memlane.config"):
        s = load_settings(home=tmp_path)
    assert s.memory.pipeline_v2.worker.poll_ms == 700  # the rest of the section still applies
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "deprecated and ignored" in warned and all(label in warned for label in labels)
    assert not {"guardrails", "continuity", "telemetry", "telemetry_enabled"} & set(s.memory.pipeline_v2.model_dump())
    assert "phc_secret" not in str(public_settings(s))


def test_removed_keys_from_the_environment_are_ignored(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MEMLANE_MEMORY__PIPELINE_V2__TELEMETRY__POSTHOG_HOST", "https://ph.example")
    with caplog.at_level("WARNING", logger="memlane.config"):
        s = load_settings(home=tmp_path)
    assert "memory.pipelineV2.telemetry" in caplog.text
    assert s.memory.pipeline_v2.enabled is True


def test_snake_keys():
    assert snake_keys({"pipelineV2": {"embeddingTracker": {"batchSize": 1}, "poll_ms": 2}}) == {
        "pipeline_v2": {"embedding_tracker": {"batch_size": 1}, "poll_ms": 2}
    }


# -- POST /api/config ---------------------------------------------------------------------


@pytest.fixture
def api(tmp_path):
    c = open_container(load_settings(home=tmp_path / "home", embedding={"provider": "none"}))
    with api_client(c) as client:
        yield c, client
    c.close()


def test_post_config_round_trip(api, monkeypatch):
    c, client = api
    r = client.post(
        "/api/config",
        json={
            "memory": {"pipelineV2": {"shadowMode": True, "worker": {"poll_ms": 500}, "autonomousFrozen": True}},
            "recall": {"alpha": 0.6},
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert sorted(body["applied"]) == ["memory.pipelineV2.autonomous.frozen", "memory.pipelineV2.shadowMode"]
    assert sorted(body["restart_required"]) == ["memory.pipelineV2.worker.pollMs", "recall.alpha"]
    assert body["pipeline"]["mode"] == "shadow" and body["pipeline"]["maintenanceScheduled"] is False
    # applied in process: hot keys only
    p = c.settings.memory.pipeline_v2
    assert p.shadow_mode and p.autonomous.frozen and p.worker.poll_ms == 2_000 and c.settings.recall.alpha == 0.7
    assert client.get("/api/config").json()["memory"]["pipeline_v2"]["shadow_mode"] is True
    # written: the next start sees everything
    path = c.settings.home / "config.yaml"
    assert Path(body["path"]) == path
    data = yaml.safe_load(path.read_text())
    assert data["memory"]["pipelineV2"]["worker"] == {"pollMs": 500} and data["recall"] == {"alpha": 0.6}
    monkeypatch.setenv("MEMLANE_CONFIG", str(path))
    s = load_settings(home=c.settings.home)
    assert s.memory.pipeline_v2.worker.poll_ms == 500 and s.recall.alpha == 0.6 and s.memory.pipeline_v2.shadow_mode
    # a second patch merges into the file
    r = client.post("/api/config", json={"memory": {"pipelineV2": {"shadowMode": False}}})
    assert (
        r.json()["applied"] == ["memory.pipelineV2.shadowMode"] and r.json()["pipeline"]["mode"] == "controlled-write"
    )
    s = load_settings(home=c.settings.home)
    assert s.memory.pipeline_v2.worker.poll_ms == 500 and not s.memory.pipeline_v2.shadow_mode
    r = client.post("/api/config", json={"memory": {"pipelineV2": {"shadowMode": False}}})
    assert r.json()["unchanged"] == ["memory.pipelineV2.shadowMode"] and r.json()["applied"] == []


def test_post_config_score_timeout_applies_in_process(api):
    """predictor.scoreTimeoutMs is hot: set on the settings object the predictor service holds
    (it reads the deadline as each score request is sent); other predictor keys need a restart."""
    c, client = api
    shared = c.settings.predictor
    r = client.post("/api/config", json={"predictor": {"scoreTimeoutMs": 250, "rrfK": 20}})
    assert r.status_code == 200, r.text
    assert r.json()["applied"] == ["predictor.score_timeout_ms"]
    assert r.json()["restart_required"] == ["predictor.rrf_k"]
    assert c.settings.predictor is shared and shared.score_timeout_ms == 250 and shared.rrf_k == 12
    data = yaml.safe_load((c.settings.home / "config.yaml").read_text())
    assert data["predictor"] == {"score_timeout_ms": 250, "rrf_k": 20}
    r = client.post("/api/config", json={"predictor": {"scoreTimeoutMs": 0}})
    assert r.status_code == 400 and "predictor.score_timeout_ms" in r.json()["error"]["message"]
    assert shared.score_timeout_ms == 250


@pytest.mark.parametrize(
    "body, status, needle",
    [
        ({"memory": {"pipelineV2": {"worker": {"pollMs": 5}}}}, 400, "memory.pipelineV2.worker.pollMs: must be >= 100"),
        ({"memory": {"pipelineV2": {"bogus": 1}}}, 400, "memory.pipelineV2.bogus: unknown key"),
        ({"memory": {"pipelineV2": "on"}}, 400, "memory.pipelineV2"),
        ({"memory": {"pipelineV2": {"graph": [1]}}}, 400, "memory.pipelineV2.graph"),
        ({"recall": {"alpha": "high"}}, 400, "recall.alpha"),
        ({"recall": {"nope": 1}}, 400, "recall.nope: unknown key"),
        ({"nope": 1}, 400, "nope: unknown key"),
        ({"memory": 5}, 400, "memory: must be a mapping"),
        ({"home": "/tmp/elsewhere"}, 403, "home: cannot be changed over HTTP"),
        (
            {"memory": {"pipelineV2": {"telemetry": {"posthogHost": "https://ph.example"}}}},
            400,
            "memory.pipelineV2.telemetry: removed setting",
        ),
        (
            {"memory": {"pipelineV2": {"posthogApiKey": "phc_x"}}},
            400,
            "memory.pipelineV2.telemetry.posthogApiKey: removed setting",
        ),
        ({"memory": {"pipeline_v2": {"telemetry_enabled": True}}}, 400, "memory.pipelineV2.telemetryEnabled: removed"),
        ([1, 2], 400, "JSON object"),
        ("text", 400, "JSON object"),
    ],
)
def test_post_config_bad_input_is_400_and_writes_nothing(api, body, status, needle):
    c, client = api
    r = client.post("/api/config", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == ("config_forbidden" if status == 403 else "config_error") and needle in err["message"]
    assert not (c.settings.home / "config.yaml").exists()
    assert c.settings.memory.pipeline_v2 == PipelineV2Settings()


def test_post_config_not_json_is_400(api):
    _, client = api
    r = client.post("/api/config", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_post_config_with_a_broken_file_is_400(api):
    c, client = api
    (c.settings.home / "config.yaml").write_text("port: [unclosed")
    r = client.post("/api/config", json={"memory": {"pipelineV2": {"shadowMode": True}}})
    assert r.status_code == 400 and "not valid YAML" in r.json()["error"]["message"]
    assert not c.settings.memory.pipeline_v2.shadow_mode
