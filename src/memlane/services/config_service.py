"""Change the configuration of a running daemon: validate a partial config, merge it into
``$MEMLANE_HOME/config.yaml`` (written atomically), apply what is safe in process.

A patch has the shape of config.yaml (``{"recall": {"alpha": 0.6}, "memory": {"pipelineV2":
{"shadowMode": true}}}``), keys in camelCase or snake_case, pipeline legacy flat keys allowed.

What a patch may not do (the whole patch is refused, nothing is written):

* name a key of :data:`HTTP_FORBIDDEN_KEYS` (where the daemon listens, where clients send
  prompts and transcripts, which servers get memory texts and API keys, which programs and
  files the daemon runs or loads, who may talk to it): 403 ``config_forbidden``. Those are
  changed in config.yaml or the environment only. The hook commands, the CLI and the MCP stdio
  server read config.yaml at every run, so a ``daemon_url`` written here would redirect them
  at once, whatever the daemon does;
* hold a NUL or a lone surrogate in any key or string, a NaN or an infinity, or nest deeper
  than config.yaml can (:mod:`memlane.config.checks`): 400 ``config_error``;
* name a removed pipeline key (``memory.pipelineV2.guardrails``, ``.continuity``, ``.telemetry``,
  ``.telemetryEnabled``; :func:`memlane.config.pipeline.removed_keys`): 400 ``config_error``
  (config.yaml files that still hold them load with a warning);
* give a value of the wrong type: validation is strict (``true`` is not a number, ``"300"``
  not an int; JSON carries types), and every range and rule of the settings applies: 400.

Applied at once, in the running daemon, are only the keys listed here: the pipeline's
:data:`memlane.config.pipeline.HOT_KEYS` (the mode flags, autonomous.frozen,
autonomous.maintenanceMode, autonomous.allowUpdateDelete, the semantic-contradiction
switches), ``methodology.default`` and ``methodology.projects`` (read at each request) and :data:`PREDICTOR_HOT_KEYS` (``predictor.scoreTimeoutMs``, which the
daemon reads as each score request is sent, and ``predictor.enabled``: off stops the sidecar
and serves the baseline, on starts it again when there is a model; a daemon that started
with the predictor off needs a restart). Every other changed key is written and reported
in ``restart_required``: nothing else changes the running daemon. :data:`CLIENT_READ_KEYS` are
also read by the hook commands at each run; the answer warns that they take effect there at
once. Environment variables (``MEMLANE_*``) still override the file: a hot key that one
overrides is written but not applied, with a warning.
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

from memlane.config import Settings, read_config_file, secret_paths, yaml_settings_data
from memlane.config.checks import check_values, plain_model, printable
from memlane.config.methodology import MethodologySettings
from memlane.config.pipeline import (
    HOT_KEYS,
    LEGACY_KEYS,
    PipelineV2Settings,
    camel,
    error_lines,
    removed_keys,
    snake,
    snake_keys,
)
from memlane.errors import ConfigError
from memlane.fsutil import atomic_write

_lock = threading.Lock()
_PIPELINE = ("memory", "pipeline_v2")
#: Predictor keys applied in place to ``settings.predictor`` (the object the predictor service
#: holds): the score deadline is read when each request is sent (services/predictor_scoring.py);
#: ``enabled`` at each request, and the config route starts or stops the sidecar at once.
PREDICTOR_HOT_KEYS = frozenset({"score_timeout_ms", "enabled"})

#: Settings ``POST /api/config`` refuses (dotted snake_case paths; a patch naming any of them, in
#: any spelling: camelCase, under ``memory:``, a pipeline legacy flat key, is refused whole).
#: They decide where the daemon listens and who may talk to it (``host``, ``port``,
#: ``require_token``, ``allowed_hosts``), where the hook commands, the CLI and the MCP server
#: send prompts and transcripts (``daemon_url``), which servers receive memory texts and API
#: keys (every ``base_url``, ``api_key``, the document fetcher's
#: allow-list of internal hosts), which program or file the daemon runs or loads
#: (``llm.command``, ``predictor.base_weights``, ``recall.ranker_model``), where the data lives (``home``) and how much
#: secret text is stored raw (``redact``: turning it off would hand whoever can read memories
#: the secrets of every later session). Whoever can reach the API must not be able to change
#: any of them: they are set in config.yaml or the environment, by the user.
HTTP_FORBIDDEN_KEYS: frozenset[str] = frozenset(
    {
        "home",
        "host",
        "port",
        "daemon_url",
        "require_token",
        "allowed_hosts",
        "embedding.base_url",
        "llm.base_url",
        "llm.command",
        "memory.pipeline_v2.documents.allowed_hosts",
        "predictor.base_weights",
        "recall.ranker_model",
        "redact",
    }
) | secret_paths(Settings)  # every SecretStr setting (the API keys), found from the models

#: Settings the hook commands read from config.yaml at each run (memlane.connectors.claude_code):
#: a change reaches them at once, the daemon only at its restart; the answer says so.
CLIENT_READ_KEYS: frozenset[str] = frozenset({"hook_timeout_s", "max_body_bytes"})


class ConfigKeyForbidden(ConfigError):
    """A ``POST /api/config`` patch names a key of :data:`HTTP_FORBIDDEN_KEYS` (403)."""

    status = 403
    code = "config_forbidden"


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
        elif (
            isinstance(v, dict)
            and isinstance(f.annotation, type)
            and issubclass(f.annotation, BaseModel)
            and path != "memory"
        ):
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


def _pipeline_paths(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """Snake-case paths (relative to ``memory.pipeline_v2``) a pipeline patch names, with legacy
    flat keys (``posthogApiKey``, ``documentAllowedHosts``...) resolved to their group."""
    out: list[tuple[str, ...]] = []
    fields = PipelineV2Settings.model_fields
    for k, v in data.items():
        key = camel(str(k))
        if snake(key) not in fields and key in LEGACY_KEYS:
            group, name = LEGACY_KEYS[key]
            out.append((snake(group), snake(name)))
        elif isinstance(v, dict) and v:
            out.extend((snake(key), *p) for p in _leaves(snake_keys(v)))
        else:
            out.append((snake(key),))
    return out


def _patch_paths(patch: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every snake_case settings path ``patch`` names, in the spellings config.yaml allows:
    camelCase, keys under ``memory:`` (the seeds' layout, flattened to the top level) and the
    pipeline's legacy flat keys."""
    out: list[tuple[str, ...]] = []
    for k, v in patch.items():
        key = snake(str(k))
        if key == "memory" and isinstance(v, dict):
            for mk, mv in v.items():
                if mk in ("pipelineV2", "pipeline_v2") and isinstance(mv, dict):
                    out.extend((*_PIPELINE, *p) for p in _pipeline_paths(mv))
                elif mk in ("pipelineV2", "pipeline_v2"):
                    out.append(_PIPELINE)
                else:
                    out.extend(_leaves({snake(str(mk)): snake_keys(mv)}))
        elif isinstance(v, dict) and v:
            out.extend((key, *p) for p in _leaves(snake_keys(v)))
        else:
            out.append((key,))
    return out


def forbidden_keys(patch: dict[str, Any]) -> list[str]:
    """The :data:`HTTP_FORBIDDEN_KEYS` ``patch`` names (or names a part of), as sorted labels
    (pipeline keys in the seed's camelCase, e.g. ``memory.pipelineV2.documents.allowedHosts``)."""
    hits = set()
    for path in _patch_paths(patch):
        for n in range(1, len(path) + 1):
            if ".".join(path[:n]) in HTTP_FORBIDDEN_KEYS:
                hits.add(_label(path[:n]))
                break
    return sorted(hits)


def _env_name(path: tuple[str, ...]) -> str:
    """The ``MEMLANE_*`` variable that overrides ``path`` (nested with ``__``)."""
    return "MEMLANE_" + "__".join(p.upper() for p in path)


def _read_existing(path: Path) -> dict[str, Any]:
    """config.yaml as snake_case Settings input, checked as at start (memlane.config.read_config_file).

    Raises:
        ConfigError: the file is broken; the message says it was not changed.
    """
    if not path.is_file():
        return {}
    try:
        return _normalize(read_config_file(path, Settings))
    except ConfigError as exc:
        raise ConfigError(f"{exc.message} (not changed)", details=exc.details) from exc


def update_config(settings: Settings, patch: Any) -> ConfigChange:
    """Validate ``patch``, merge it into ``{home}/config.yaml`` and apply the hot keys to
    ``settings`` (in place: ``settings.memory.pipeline_v2`` is swapped for an updated copy;
    :data:`PREDICTOR_HOT_KEYS` are set on ``settings.predictor`` itself, which the predictor
    service shares).

    Raises:
        ConfigKeyForbidden (403): the patch names a key of :data:`HTTP_FORBIDDEN_KEYS`; the
            message lists them and says where to change them.
        ConfigError (400): the patch is not a mapping, names an unknown or removed key, holds a NUL, a
            lone surrogate, a NaN or an infinity, nests too deep, or a value is of the wrong type or out of range (the
            message names the key path); the existing config.yaml is broken. Nothing is
            written then, and nothing in ``settings`` changes.
        OSError: the file could not be written.
    """
    if not isinstance(patch, dict):
        raise ConfigError("the body must be a JSON object shaped like config.yaml")
    check_values(patch)
    memory = patch.get("memory")
    if memory is not None and not isinstance(memory, dict):
        raise ConfigError('memory: must be a mapping (e.g. {"pipelineV2": {...}})')
    forbidden = forbidden_keys(patch)
    if forbidden:
        raise ConfigKeyForbidden(
            f"{', '.join(forbidden)}: cannot be changed over HTTP; change it in config.yaml or the environment "
            "(MEMLANE_*) and restart the daemon. Nothing was written.",
            details={"keys": forbidden},
        )
    body = _normalize(patch)
    pipe_patch = body.get("memory", {}).get("pipeline_v2") if isinstance(body.get("memory"), dict) else None
    dead = removed_keys(pipe_patch)
    if dead:
        raise ConfigError(
            f"{', '.join(dead)}: removed setting (memlane never read it); leave it out. Nothing was written.",
            details={"keys": dead},
        )
    unknown = _unknown_keys(Settings, body, "")
    if unknown:
        shown = [printable(k) for k in unknown]
        raise ConfigError(f"{shown[0]}: unknown key", details={"keys": shown})
    with _lock:
        path = config_path(settings)
        merged = _deep_merge(_read_existing(path), body)
        try:
            # Strict, and on exactly this data: JSON and YAML carry types, so nothing is coerced
            # (Settings.model_validate would also read the environment, and ignores strict).
            new = plain_model(Settings).model_validate({**merged, "home": settings.home}, strict=True)
            paths = [p for p in _leaves(body) if p[:2] != _PIPELINE]
            if isinstance(pipe_patch, dict):
                pipe = PipelineV2Settings.model_validate(pipe_patch, strict=True)
                paths += [(*_PIPELINE, *p) for p in _set_paths(pipe)]
        except PydValidationError as exc:
            lines = error_lines(exc)
            raise ConfigError("invalid settings: " + "; ".join(lines), details={"errors": lines}) from exc
        change = ConfigChange(path)
        env_path = os.environ.get("MEMLANE_CONFIG")
        if env_path and Path(env_path).expanduser() != path:
            change.warnings.append(f"MEMLANE_CONFIG points at {env_path}: the daemon reads that file, not {path}")
        env = {k.upper() for k in os.environ}
        hot: dict[tuple[str, ...], Any] = {}
        predictor_hot: dict[str, Any] = {}
        methodology_hot = False
        for p in paths:
            if p[0] == "methodology":  # compared whole: a projects entry is a list item, not a path
                p = p[:2]
            old_v, new_v = _get(settings, p), _get(new, p)
            is_hot = (
                (p[:2] == _PIPELINE and ".".join(camel(x) for x in p[2:]) in HOT_KEYS)
                or (len(p) == 2 and p[0] == "predictor" and p[1] in PREDICTOR_HOT_KEYS)
                or p[0] == "methodology"
            )
            if _env_name(p) in env:
                change.warnings.append(
                    f"{_label(p)}: {_env_name(p)} is set and overrides config.yaml; written, not applied"
                )
                change.restart_required.append(_label(p))
            elif old_v == new_v:
                change.unchanged.append(_label(p))
            elif is_hot and p[0] == "methodology":
                methodology_hot = True
                change.applied.append(_label(p))
            elif is_hot and p[0] == "predictor":
                predictor_hot[p[1]] = new_v
                change.applied.append(_label(p))
            elif is_hot:
                hot[p[2:]] = new_v
                change.applied.append(_label(p))
            else:
                change.restart_required.append(_label(p))
            if ".".join(p) in CLIENT_READ_KEYS and old_v != new_v:
                change.warnings.append(
                    f"{_label(p)}: the hook commands read config.yaml at each run and use "
                    "the new value now; the daemon at its restart"
                )
        out = dict(merged)
        if isinstance(out.get("memory"), dict) and "pipeline_v2" in out["memory"]:
            mem = dict(out["memory"])
            mem["pipelineV2"] = _camel_keys(mem.pop("pipeline_v2"))
            out["memory"] = mem
        atomic_write(path, yaml.safe_dump(out, sort_keys=False, allow_unicode=True).encode("utf-8"), mode=0o600)
        if hot:
            settings.memory.pipeline_v2 = _with(settings.memory.pipeline_v2, hot)
        for name, value in predictor_hot.items():  # validated above, strictly
            setattr(settings.predictor, name, value)
        if methodology_hot:  # read at each request (memlane.v3.methodology.service)
            settings.methodology = MethodologySettings.model_validate(new.model_dump()["methodology"])
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
