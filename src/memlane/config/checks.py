"""Checks every source of settings shares: no NUL or lone surrogate in any string, no NaN or
infinity, strict types for values that arrive typed (config.yaml, the JSON of ``POST /api/config``).

Why strings are checked: a NUL cannot go through a C API (paths, subprocess arguments, SQLite
text) unharmed, and a lone surrogate (``"\\ud800"``, which JSON and YAML can both spell) is not
encodable as UTF-8, so a setting holding one breaks every JSON answer and every print of the
settings. Both are refused where they enter, with a ConfigError naming the key. A NaN or an
infinity (Python's JSON reader takes ``NaN`` and ``Infinity``, YAML ``.nan`` and ``.inf``) cannot be
written as JSON and passes a one-sided range check, so it is refused the same way.

Why types are strict: lax validation turns ``true`` into ``1`` (``scoreTimeoutMs: true`` became
a 1 ms deadline) and ``"300"`` into ``300``. JSON and YAML carry types, so a wrong one is a
mistake to report, not to guess at. Environment variables are text by nature and are still
parsed (``MEMLANE_PORT=7437``); this module's strict pass is only run on typed sources.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr, create_model, field_validator, model_validator
from pydantic import ValidationError as PydValidationError
from pydantic_core import ErrorDetails

from memlane.errors import ConfigError

#: Deepest nesting a settings mapping may have. The deepest real key has 4 levels
#: (``memory.pipelineV2.worker.pollMs``); anything far deeper is not a config and is refused
#: before any recursive walk.
MAX_DEPTH = 12
_SURROGATES = range(0xD800, 0xE000)


def bad_char(text: str) -> str | None:
    """Why ``text`` cannot be a setting, or None when it can.

    Returns ``"contains a NUL character"`` or ``"contains a lone surrogate (U+D800..U+DFFF)"``.
    """
    if "\x00" in text:
        return "contains a NUL character"
    if any(ord(ch) in _SURROGATES for ch in text):
        return "contains a lone surrogate (U+D800..U+DFFF), which is not valid UTF-8"
    return None


def printable(text: Any, limit: int = 80) -> str:
    """``text`` safe to put in an error message or a JSON answer: surrogates and control
    characters escaped (``\\ud800``, ``\\x00``), at most ``limit`` characters."""
    s = str(text)
    out = "".join(ch if ch.isprintable() and ord(ch) not in _SURROGATES else ascii(ch)[1:-1] for ch in s)
    return out if len(out) <= limit else out[:limit] + "..."


def check_values(data: Any, *, prefix: str = "", where: str = "") -> None:
    """Refuse ``data`` (a parsed JSON / YAML value) when a key or a string value holds a NUL or
    a lone surrogate, a number is NaN or infinite, or it nests deeper than :data:`MAX_DEPTH`.

    Args:
        data: mappings, lists and scalars as ``json.loads`` / ``yaml.safe_load`` return them.
        prefix: dotted path of ``data`` itself (for the message).
        where: what the data came from, e.g. ``"/home/u/.memlane/config.yaml: "``.
    Raises:
        ConfigError (400): the message names the key path (escaped) and the reason.
    """
    stack: list[tuple[str, Any, int]] = [(prefix, data, 0)]
    while stack:
        path, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"{where}{printable(path) or '(root)'}: nested deeper than {MAX_DEPTH} levels",
                details={"key": printable(path)},
            )
        if isinstance(value, dict):
            for k, v in value.items():
                key = str(k)
                sub = f"{path}.{key}" if path else key
                reason = bad_char(key)
                if reason:
                    raise ConfigError(f"{where}{printable(sub)}: the key {reason}", details={"key": printable(sub)})
                stack.append((sub, v, depth + 1))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                stack.append((f"{path}[{i}]", v, depth + 1))
        elif isinstance(value, str):
            reason = bad_char(value)
            if reason:
                raise ConfigError(
                    f"{where}{printable(path) or '(root)'}: the value {reason}", details={"key": printable(path)}
                )
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(
                f"{where}{printable(path) or '(root)'}: the value must be a finite number",
                details={"key": printable(path)},
            )


def settings_value_error(model: BaseModel, prefix: str = "") -> str | None:
    """``"path: reason"`` for the first setting of a validated model (nested models, lists, paths
    and secrets included) that is a string holding a NUL or a lone surrogate, or a NaN or infinite
    number; None when all are clean."""
    stack: list[tuple[str, Any]] = [(prefix, model)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, BaseModel):
            for name in type(value).model_fields:
                stack.append((f"{path}.{name}" if path else name, getattr(value, name)))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in value.items())
        else:
            text = (
                value.get_secret_value()
                if isinstance(value, SecretStr)
                else str(value)
                if isinstance(value, Path)
                else value
            )
            if isinstance(text, str):
                reason = bad_char(text)
                if reason:
                    return f"{path}: {reason}"
            elif isinstance(value, float) and not math.isfinite(value):
                return f"{path}: must be a finite number"
    return None


@lru_cache(maxsize=8)
def plain_model(settings_cls: type[BaseModel]) -> type[BaseModel]:
    """A plain pydantic model with the fields of ``settings_cls`` (a ``BaseSettings``).

    ``BaseSettings.model_validate`` reads the environment and ignores ``strict=True``; this twin
    validates exactly the data it is given, so ``plain_model(Settings).model_validate(data,
    strict=True)`` checks a config.yaml or an API patch on its own. Unknown keys are ignored
    (callers that refuse them check first)."""
    fields: dict[str, Any] = {name: (f.annotation, f) for name, f in settings_cls.model_fields.items()}
    # The class's own validators come along (its nested models carry theirs).
    decorators = settings_cls.__pydantic_decorators__
    validators: dict[str, Any] = {
        **{
            name: field_validator(*d.info.fields, mode=d.info.mode)(classmethod(getattr(d.func, "__func__", d.func)))
            for name, d in decorators.field_validators.items()
        },
        **{name: model_validator(mode=d.info.mode)(d.func) for name, d in decorators.model_validators.items()},
    }
    return create_model(
        f"{settings_cls.__name__}Data", __config__=ConfigDict(extra="ignore"), __validators__=validators, **fields
    )


#: Error types of a strict pass that mean "wrong type" (as opposed to out of range or a rule
#: between fields, which are checked once all sources are merged).
_TYPE_ERRORS = frozenset({"int_from_float", "bool_parsing", "int_parsing", "float_parsing"})


def strict_type_errors(settings_cls: type[BaseModel], data: dict[str, Any]) -> list[ErrorDetails]:
    """The type errors of ``data`` (one typed source, e.g. config.yaml) validated strictly against
    ``settings_cls``'s fields: ``true`` where a number belongs, ``"300"`` where an int belongs...

    Range and cross-field errors are left out on purpose: another source (the environment) may
    complete them, and the merged settings are validated again, with every rule.

    Returns:
        pydantic error dicts (``ValidationError.errors()`` entries; format them with
        :func:`memlane.config.pipeline.error_lines`), ``[]`` when every type is right.
    """
    try:
        plain_model(settings_cls).model_validate(data, strict=True)
    except PydValidationError as exc:
        return [e for e in exc.errors() if e["type"].endswith("_type") or e["type"] in _TYPE_ERRORS]
    return []
