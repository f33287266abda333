"""The V3 memory vocabulary and the validation of its fields (seed memory-system-v3-design.md
section 4).

A memory's ``type`` stays a free string (older clients write ``fact``, ``constraint``...); the
sixteen V3 types below get their extended fields checked against :data:`TYPE_FIELDS` and stored in
the ``type_fields`` column. ``scope`` and ``source`` are closed sets. Every check raises
:class:`memlane.errors.ValidationError` naming the field.
"""

from __future__ import annotations

import math
import re
from typing import Any

from memlane.errors import ValidationError
from memlane.services.validation import check_metadata

V3_TYPES: tuple[str, ...] = (
    "gotcha",
    "decision",
    "preference",
    "pattern",
    "requirement",
    "error_pattern",
    "module_insight",
    "prefetch_pattern",
    "work_state",
    "causal_dependency",
    "task_calibration",
    "e2e_observation",
    "dead_end",
    "work_unit_outcome",
    "workflow_recipe",
    "context_cost",
)
SCOPES: tuple[str, ...] = ("global", "module", "work_unit", "session")
SOURCES: tuple[str, ...] = ("agent_explicit", "observer_inferred", "qa_auto", "mcp_auto", "commit_auto", "user_taught")
E2E_OBSERVATION_TYPES: tuple[str, ...] = ("precondition", "timing", "ui_behavior", "test_sequence", "mcp_gotcha")

#: Default ``decay_half_life_days`` per type when the caller gives none (seed: work_state 7,
#: dead_end 90; every other type decays by the general rules).
DEFAULT_HALF_LIFE: dict[str, float] = {"work_state": 7.0, "dead_end": 90.0}
#: Types whose scope is fixed by the seed (a recipe is always global; a context cost and a
#: prefetch pattern describe a module).
FIXED_SCOPE: dict[str, str] = {"workflow_recipe": "global", "context_cost": "module", "prefetch_pattern": "module"}

MAX_LIST = 200  # entries in related_files / related_modules / list-valued type fields
MAX_ITEM_CHARS = 1000  # characters of one such entry or string field
_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")

# Extended fields per type: name -> (kind, required). Kinds: str, bool, int, num, str_list,
# steps (workflow_recipe), obj (plugin-defined JSON object), enum:<a|b|c>.
TYPE_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "work_state": {"methodology_state": ("obj", False)},
    "e2e_observation": {
        "observation_type": ("enum:" + "|".join(E2E_OBSERVATION_TYPES), True),
        "mcp_tool_used": ("str", True),
        "app_state": ("str", False),
    },
    "dead_end": {
        "approach_tried": ("str", True),
        "why_it_failed": ("str", True),
        "alternative_used": ("str", False),
        "task_context": ("str", False),
    },
    "work_unit_outcome": {
        "succeeded": ("bool", True),
        "files_modified": ("str_list", False),
        "key_decisions": ("str_list", False),
        "steps_taken": ("int", False),
        "context_tokens_used": ("int", False),
        "retry_count": ("int", False),
        "failure_reason": ("str", False),
    },
    "workflow_recipe": {
        "task_pattern": ("str", True),
        "steps": ("steps", True),
        "last_validated_at": ("str", False),
        "success_count": ("int", False),
    },
    "context_cost": {
        "module": ("str", True),
        "average_tokens_per_session": ("num", True),
        "p90_tokens_per_session": ("num", False),
        "sample_count": ("int", False),
    },
    "prefetch_pattern": {
        "always_read_files": ("str_list", False),
        "frequently_read_files": ("str_list", False),
        "module_trigger": ("str", True),
        "session_count": ("int", False),
    },
    "task_calibration": {
        "module": ("str", True),
        "methodology": ("str", False),
        "average_actual_steps": ("num", True),
        "average_planned_steps": ("num", True),
        "ratio": ("num", False),
        "sample_count": ("int", False),
    },
    "causal_dependency": {"when_file": ("str", True), "also_touch": ("str_list", True)},
}


def _fail(field: str, msg: str) -> ValidationError:
    return ValidationError(f"{field}: {msg}", details={"field": field})


def check_choice(value: object, field: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``; otherwise ValidationError listing them."""
    if not isinstance(value, str) or value not in choices:
        raise _fail(field, f"must be one of {', '.join(choices)}")
    return value


def check_str(value: object, field: str, *, max_chars: int = MAX_ITEM_CHARS) -> str:
    """A non-empty string of at most ``max_chars`` characters, without NUL or lone surrogates."""
    if not isinstance(value, str):
        raise _fail(field, "expected a string")
    if not value.strip():
        raise _fail(field, "must not be empty")
    if len(value) > max_chars:
        raise _fail(field, f"at most {max_chars} characters")
    if "\x00" in value:
        raise _fail(field, "must not contain NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(field, "must be valid Unicode (no lone surrogates)") from None
    return value


def check_str_list(value: object, field: str) -> tuple[str, ...]:
    """A list of at most :data:`MAX_LIST` strings (see :func:`check_str`), duplicates dropped, order kept."""
    if not isinstance(value, (list, tuple)):
        raise _fail(field, "expected a list of strings")
    if len(value) > MAX_LIST:
        raise _fail(field, f"at most {MAX_LIST} entries")
    out: list[str] = []
    for v in value:
        s = check_str(v, f"{field}[]")
        if s not in out:
            out.append(s)
    return tuple(out)


def check_commit_sha(value: object, field: str = "commit_sha") -> str:
    """A git object name: 7 to 64 hex digits, returned lower-case."""
    if not isinstance(value, str) or not _SHA.match(value):
        raise _fail(field, "expected 7 to 64 hexadecimal digits")
    return value.lower()


def check_work_unit_ref(value: object, field: str = "work_unit_ref") -> dict[str, Any]:
    """A work-unit reference ``{"methodology": str, "hierarchy": [str, ...], "label"?: str}`` (seed
    section 3 "Universal Work Unit Reference"): ``hierarchy`` runs from the outermost unit
    (a spec, an epic) to the innermost (a subtask), 1 to 8 entries."""
    if not isinstance(value, dict):
        raise _fail(field, "expected an object with methodology and hierarchy")
    unknown = set(value) - {"methodology", "hierarchy", "label"}
    if unknown:
        raise _fail(field, f"unknown keys {sorted(unknown)}; allowed: methodology, hierarchy, label")
    methodology = check_str(value.get("methodology"), f"{field}.methodology", max_chars=100)
    hierarchy = check_str_list(value.get("hierarchy"), f"{field}.hierarchy")
    if not 1 <= len(hierarchy) <= 8:
        raise _fail(f"{field}.hierarchy", "1 to 8 entries")
    out: dict[str, Any] = {"methodology": methodology, "hierarchy": list(hierarchy)}
    if value.get("label") is not None:
        out["label"] = check_str(value["label"], f"{field}.label")
    return out


def _check_kind(kind: str, value: object, field: str) -> Any:
    if kind == "str":
        return check_str(value, field)
    if kind == "str_list":
        return list(check_str_list(value, field))
    if kind == "bool":
        if not isinstance(value, bool):
            raise _fail(field, "expected true or false")
        return value
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 10**12:
            raise _fail(field, "expected a non-negative integer")
        return value
    if kind == "num":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise _fail(field, "expected a non-negative finite number")
        return float(value)
    if kind == "obj":
        if not isinstance(value, dict):
            raise _fail(field, "expected a JSON object")
        return check_metadata(value, field)
    if kind.startswith("enum:"):
        return check_choice(value, field, tuple(kind[5:].split("|")))
    if kind == "steps":
        if not isinstance(value, list) or not 1 <= len(value) <= 50:
            raise _fail(field, "expected a list of 1 to 50 steps")
        steps = []
        for i, s in enumerate(value):
            f = f"{field}[{i}]"
            if not isinstance(s, dict) or set(s) - {"order", "description", "canonical_file", "canonical_line"}:
                raise _fail(f, "expected {order, description, canonical_file?, canonical_line?}")
            step = {
                "order": _check_kind("int", s.get("order"), f + ".order"),
                "description": check_str(s.get("description"), f + ".description"),
            }
            if s.get("canonical_file") is not None:
                step["canonical_file"] = check_str(s["canonical_file"], f + ".canonical_file")
            if s.get("canonical_line") is not None:
                step["canonical_line"] = _check_kind("int", s["canonical_line"], f + ".canonical_line")
            steps.append(step)
        return steps
    raise AssertionError(kind)


def check_type_fields(type_: str, value: object, field: str = "type_fields") -> dict[str, Any]:
    """The extended fields of a memory of ``type_``, checked against :data:`TYPE_FIELDS`.

    A type without extended fields (``gotcha``, ``fact``...) takes none: any key is an error, so a
    misspelt field is never stored silently. Returns the canonical dict (only given fields).
    """
    if not isinstance(value, dict):
        raise _fail(field, "expected a JSON object")
    spec = TYPE_FIELDS.get(type_, {})
    unknown = set(value) - set(spec)
    if unknown:
        allowed = ", ".join(sorted(spec)) or "none"
        raise _fail(field, f"unknown for type {type_!r}: {sorted(unknown)}; allowed: {allowed}")
    out: dict[str, Any] = {}
    for name, (kind, required) in spec.items():
        if value.get(name) is None:
            if required:
                raise _fail(f"{field}.{name}", f"required for type {type_!r}")
            continue
        out[name] = _check_kind(kind, value[name], f"{field}.{name}")
    return out


def check_v3(
    *,
    type_: str,
    scope: str | None,
    source: str,
    work_unit_ref: object,
    related_files: object,
    related_modules: object,
    citation_text: object,
    commit_sha: object,
    type_fields: object,
    decay_half_life_days: object,
    needs_review: object,
    user_verified: object,
) -> dict[str, Any]:
    """Check every V3 field of one memory and return them canonical (a dict of column values).

    ``type_fields`` is checked for V3 types (and must be empty for others). ``scope`` None means
    the type's :data:`FIXED_SCOPE`, else ``global``; an explicit scope of a type with a fixed scope
    must be that scope. A ``work_unit`` scope
    needs a ``work_unit_ref``. ``decay_half_life_days`` defaults per :data:`DEFAULT_HALF_LIFE`.

    Raises:
        ValidationError: the first bad field, named in ``details.field``.
    """
    fixed = FIXED_SCOPE.get(type_)
    if scope is None:
        scope = fixed or "global"
    check_choice(scope, "scope", SCOPES)
    check_choice(source, "source", SOURCES)
    ref = check_work_unit_ref(work_unit_ref) if work_unit_ref is not None else None
    if scope == "work_unit" and ref is None:
        raise _fail("work_unit_ref", "required when scope is work_unit")
    if fixed is not None and scope != fixed:
        raise _fail("scope", f"a {type_} memory is always {fixed}-scoped")
    for name, v in (("needs_review", needs_review), ("user_verified", user_verified)):
        if not isinstance(v, bool):
            raise _fail(name, "expected true or false")
    half = decay_half_life_days
    if half is not None and (
        isinstance(half, bool) or not isinstance(half, (int, float)) or not math.isfinite(half) or half <= 0
    ):
        raise _fail("decay_half_life_days", "expected a positive number of days")
    return {
        "scope": scope,
        "source": source,
        "work_unit_ref": ref,
        "methodology": ref["methodology"] if ref else None,
        "related_files": check_str_list(related_files if related_files is not None else (), "related_files"),
        "related_modules": check_str_list(related_modules if related_modules is not None else (), "related_modules"),
        "citation_text": check_str(citation_text, "citation_text", max_chars=200)
        if citation_text is not None
        else None,
        "commit_sha": check_commit_sha(commit_sha) if commit_sha is not None else None,
        "type_fields": check_type_fields(type_, type_fields if type_fields is not None else {}),
        "decay_half_life_days": float(half) if half is not None else DEFAULT_HALF_LIFE.get(type_),
        "needs_review": needs_review,
        "user_verified": user_verified,
    }
