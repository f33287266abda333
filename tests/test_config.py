"""Settings: defaults, config.yaml, MEMLANE_* environment, precedence and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane.config import Settings, load_settings, public_settings
from memlane.errors import ConfigError


def test_every_field_has_a_default_and_a_description():
    for name, field in Settings.model_fields.items():
        assert field.description, name
        assert not field.is_required(), name


def test_defaults(tmp_path):
    s = load_settings(home=tmp_path)
    assert s.host == "127.0.0.1" and s.port == 7437
    assert s.recall.alpha == 0.7 and s.embedding.provider == "local"
    assert s.db_path == tmp_path / "memories.db"


def test_yaml_in_home_is_read_and_env_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMLANE_CONFIG", raising=False)
    (tmp_path / "config.yaml").write_text("port: 9001\nrecall:\n  alpha: 0.4\nembedding:\n  provider: none\n")
    s = load_settings(home=tmp_path)
    assert s.port == 9001 and s.recall.alpha == 0.4 and s.embedding.provider == "none"
    monkeypatch.setenv("MEMLANE_PORT", "9002")
    monkeypatch.setenv("MEMLANE_RECALL__ALPHA", "0.9")
    s = load_settings(home=tmp_path)
    assert s.port == 9002 and s.recall.alpha == 0.9
    assert load_settings(home=tmp_path, port=9003).port == 9003


def test_memlane_home_locates_the_yaml(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMLANE_CONFIG", raising=False)
    monkeypatch.setenv("MEMLANE_HOME", str(tmp_path))
    (tmp_path / "config.yaml").write_text("port: 9100\n")
    s = load_settings()
    assert s.home == tmp_path and s.port == 9100


@pytest.mark.parametrize(
    "text, needle",
    [
        ("port: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("port: 70000\n", "port"),
        ("recall:\n  alpha: 1.5\n", "recall.alpha"),
        ("embedding:\n  provider: carrier-pigeon\n", "embedding.provider"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, monkeypatch, text, needle):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    monkeypatch.setenv("MEMLANE_CONFIG", str(path))
    with pytest.raises(ConfigError) as exc:
        load_settings(home=tmp_path)
    assert needle in exc.value.message


def test_public_settings_masks_the_api_key(tmp_path):
    s = load_settings(home=tmp_path, embedding={"provider": "openai", "api_key": "sk-secret"})
    data = public_settings(s)
    assert data["embedding"]["api_key"] == "***"
    assert "sk-secret" not in str(data)
    assert Path(data["db_path"]) == tmp_path / "memories.db"


def test_secret_settings_are_found_from_their_type_masked_and_refused_over_http(tmp_path):
    """Every SecretStr setting, wherever it sits, is masked by public_settings and in
    HTTP_FORBIDDEN_KEYS; a secret added later needs no list updated."""
    from pydantic import BaseModel, SecretStr

    from memlane.config import secret_paths
    from memlane.services.config_service import HTTP_FORBIDDEN_KEYS

    assert secret_paths() == {"embedding.api_key", "llm.api_key"}
    assert secret_paths() <= HTTP_FORBIDDEN_KEYS

    class Inner(BaseModel):
        token: SecretStr = SecretStr("")
        name: str = ""

    class Outer(BaseModel):
        inner: Inner = Inner()
        key: SecretStr = SecretStr("")

    assert secret_paths(Outer) == {"inner.token", "key"}
    s = load_settings(home=tmp_path, llm={"provider": "openai", "model": "m", "api_key": "sk-llm"})
    data = public_settings(s)
    assert (data["llm"]["api_key"], data["embedding"]["api_key"]) == ("***", "")
