"""Change the configuration of a running daemon: validate a partial config, merge it into
``$MEMLANE_HOME/config.yaml`` (written atomically), apply what is safe in process.

A patch has the shape of config.yaml (``{"recall": {"alpha": 0.6}, "memory": {"pipelineV2":
{"shadowMode": true}}}``), keys in camelCase or snake_case, pipeline legacy flat keys allowed.
Only the pipeline's :data:`memlane.pipeline.config.HOT_KEYS` (the mode flags, autonomous.frozen,
autonomous.maintenanceMode, autonomous.allowUpdateDelete) and :data:`PREDICTOR_HOT_KEYS`
(``predictor.scoreTimeoutMs``, which the daemon reads as each score request is sent) change
in the running daemon; every other changed key is written and reported as needing a restart. Environment variables
(``MEMLANE_*``) still override the file at the next start.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic import ValidationError as PydValidationError

from memlane.config import Settings, yaml_settings_data
from memlane.errors import ConfigError
from memlane.fsutil import atomic_write
from memlane.pipeline.config import HOT_KEYS, PipelineV2Settings, camel, error_lines, snake_keys

_lock = threading.Lock()
_PIPELINE = ("memory", "pipeline_v2")
#: Predictor keys applied in place to ``settings.predictor`` (the object the predictor service
#: holds): the score deadline is read when each request is sent (services/predictor_scoring.py).
PREDICTOR_HOT_KEYS = frozenset({"score_timeout_ms"})
_FIXED = {"home"}  # cannot change through the API


@dataclass(frozen=True)
class ConfigChange:
    """What :func:`update_config` did. Keys are dotted paths (pipeline keys in camelCase,
    e.g. ``memory.pipelineV2.worker.pollMs``)."""

    path: Path
    applied: list[str] = field(default_factory=list)
    restart_required: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def config_path(settings: Settings) -> Path:
    """``{home}/config.yaml``, the file :func:`update_config` writes."""
    return settings.home / "config.yaml"


def _deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _unknown_keys(model: type[BaseModel], data: dict[str, Any], prefix: str) -> list[str]:
    """Dotted paths of keys ``model`` has no field for (the pipeline checks its own keys)."""
    out = []
    for k, v in data.items():
        f = model.model_fields.get(k)
        path = f"{prefix}{k}"
        if f is None:
            out.append(path)
        elif isinstance(v, dict) and isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel) \
                and path != "memory":
            out.extend(_unknown_keys(f.annotation, v, path + "."))
    return out


def _leaves(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for k, v in data.items():
        out.extend(_leaves(v, (*prefix, k)) if isinstance(v, dict) and v else [(*prefix, k)])
    return out


def _set_paths(model: BaseModel, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of the fields explicitly given to a validated model (legacy keys already moved)."""
    out: list[tuple[str, ...]] = []
    for name in sorted(model.model_fields_set):
        v = getattr(model, name)
        out.extend(_set_paths(v, (*prefix, name)) if isinstance(v, BaseModel) else [(*prefix, name)])
    return out


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for p in path:
        obj = getattr(obj, p, None)
    return obj


def _label(path: tuple[str, ...]) -> str:
    if path[:2] == _PIPELINE:
        return ".".join(("memory", "pipelineV2", *(camel(p) for p in path[2:])))
    return ".".join(path)


def _camel_keys(data: Any) -> Any:
    return {camel(k): _camel_keys(v) for k, v in data.items()} if isinstance(data, dict) else data


def _normalize(raw: dict[str, Any]) -> dict[str, Any]:
    """config.yaml layout -> Settings input with snake_case keys everywhere."""
    return snake_keys(yaml_settings_data(raw))


def update_config(settings: Settings, patch: Any) -> ConfigChange:
    """Validate ``patch``, merge it into ``{home}/config.yaml`` and apply the hot keys to
    ``settings`` (in place: ``settings.memory.pipeline_v2`` is swapped for an updated copy;
    :data:`PREDICTOR_HOT_KEYS` are set on ``settings.predictor`` itself, which the predictor
    service shares).

    Raises:
        ConfigError (400): the patch is not a mapping, names an unknown or fixed key, or a value
            is out of range / of the wrong type (the message names the key path); the existing
            config.yaml is not valid YAML. Nothing is written then.
        OSError: the file could not be written.
    """
    if not isinstance(patch, dict):
        raise ConfigError("the body must be a JSON object shaped like config.yaml")
    memory = patch.get("memory")
    if memory is not None and not isinstance(memory, dict):
        raise ConfigError("memory: must be a mapping (e.g. {\"pipelineV2\": {...}})")
    body = _normalize(patch)
    bad = sorted(set(body) & _FIXED)
    if bad:
        raise ConfigError(f"{bad[0]}: cannot be changed through the API (set MEMLANE_HOME)", details={"keys": bad})
    unknown = _unknown_keys(Settings, body, "")
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key", details={"keys": unknown})
    pipe_patch = body.get("memory", {}).get("pipeline_v2") if isinstance(body.get("memory"), dict) else None
    with _lock:
        path = config_path(settings)
        existing: Any = {}
        if path.is_file():
            try:
                existing = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError as exc:
                raise ConfigError(f"{path}: not valid YAML, not changed: {exc}") from exc
            if not isinstance(existing, dict):
                raise ConfigError(f"{path}: the top level must be a mapping, not changed")
        merged = _deep_merge(_normalize(existing), body)
        try:
            new = Settings.model_validate({**merged, "home": settings.home})
            paths = [p for p in _leaves(body) if p[:2] != _PIPELINE]
            if isinstance(pipe_patch, dict):
                paths += [(*_PIPELINE, *p) for p in _set_paths(PipelineV2Settings.model_validate(pipe_patch))]
        except PydValidationError as exc:
            lines = error_lines(exc)
            raise ConfigError("invalid settings: " + "; ".join(lines), details={"errors": lines}) from exc
        change = ConfigChange(path)
        env_path = os.environ.get("MEMLANE_CONFIG")
        if env_path and Path(env_path).expanduser() != path:
            change.warnings.append(f"MEMLANE_CONFIG points at {env_path}: the daemon reads that file, not {path}")
        hot: dict[tuple[str, ...], Any] = {}
        predictor_hot: dict[str, Any] = {}
        for p in paths:
            old_v, new_v = _get(settings, p), _get(new, p)
            if old_v == new_v:
                change.unchanged.append(_label(p))
            elif p[:2] == _PIPELINE and ".".join(camel(x) for x in p[2:]) in HOT_KEYS:
                hot[p[2:]] = new_v
                change.applied.append(_label(p))
            elif len(p) == 2 and p[0] == "predictor" and p[1] in PREDICTOR_HOT_KEYS:
                predictor_hot[p[1]] = new_v
                change.applied.append(_label(p))
            else:
                change.restart_required.append(_label(p))
        out = dict(merged)
        if isinstance(out.get("memory"), dict) and "pipeline_v2" in out["memory"]:
            mem = dict(out["memory"])
            mem["pipelineV2"] = _camel_keys(mem.pop("pipeline_v2"))
            out["memory"] = mem
        atomic_write(path, yaml.safe_dump(out, sort_keys=False, allow_unicode=True).encode("utf-8"), mode=0o600)
        if hot:
            settings.memory.pipeline_v2 = _with(settings.memory.pipeline_v2, hot)
        for name, value in predictor_hot.items():  # validated above (Settings.model_validate)
            setattr(settings.predictor, name, value)
    return change


def _with(p: PipelineV2Settings, values: dict[tuple[str, ...], Any]) -> PipelineV2Settings:
    """A copy of ``p`` with ``values`` ({(field,) or (group, field): value}) set."""
    top = {k[0]: v for k, v in values.items() if len(k) == 1}
    groups: dict[str, dict[str, Any]] = {}
    for k, v in values.items():
        if len(k) == 2:
            groups.setdefault(k[0], {})[k[1]] = v
    for g, upd in groups.items():
        top[g] = getattr(p, g).model_copy(update=upd)
    return p.model_copy(update=top)
