"""memlane.connectors.cjson gives what json gives: the same values, the same text, the same errors.

Hypothesis draws JSON documents (nested objects and arrays of strings with any code point,
lone surrogates included, integers of any size, floats with NaN and infinities, booleans,
null) and compares :mod:`memlane.connectors.cjson` with :mod:`json` on each, as text and as
the exception raised."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane.connectors import cjson

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
documents = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5), max_leaves=30
)


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN (json keeps NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - compared below
        return type(exc).__name__, str(exc)


@settings(max_examples=300, deadline=None)
@given(documents, st.booleans())
def test_dumps_is_json_dumps(doc: Any, ensure_ascii: bool) -> None:
    assert cjson.dumps(doc, ensure_ascii=ensure_ascii) == json.dumps(doc, ensure_ascii=ensure_ascii)


@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from(["", " ", "\n\t ", "\r\n"]), st.sampled_from(["", " ", "\n", " \t\r\n"]))
def test_loads_is_json_loads(doc: Any, before: str, after: str) -> None:
    text = before + json.dumps(doc) + after
    assert same(cjson.loads(text), json.loads(text))
    assert same(cjson.raw_decode(text, len(before)), json.JSONDecoder().raw_decode(text, len(before)))


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40)
    | st.sampled_from(
        [
            '{"a": 1',
            "[1,]",
            '{"a" 1}',
            '"\\ud800"',
            '"\x01"',
            "NaN",
            "-Infinity",
            "1 2",
            "{} x",
            "\ufeff{}",
            "[1] ",
            " 007",
            '"a\\u00e9"',
            '{"a":1,}',
        ]
    )
)
def test_any_text_loads_or_fails_as_json_does(text: str) -> None:
    got, want = outcome(cjson.loads, text), outcome(json.loads, text)
    assert got[0] == want[0]
    assert same(got[1], want[1]) if got[0] == "ok" else got[1] == want[1]


@pytest.mark.parametrize("obj", [{1, 2}, b"bytes", {"a": object()}, {(1, 2): 3}, [float("nan"), {"k": {"x"}}]])
def test_what_json_cannot_write_fails_as_json_does(obj: Any) -> None:
    assert outcome(cjson.dumps, obj) == outcome(json.dumps, obj)


def test_circular_and_deep_documents_fail_as_json_does() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert outcome(cjson.dumps, loop) == outcome(json.dumps, loop)
    deep = "[" * 100_000 + "]" * 100_000
    assert outcome(cjson.loads, deep)[0] == outcome(json.loads, deep)[0] == "RecursionError"
    assert outcome(cjson.loads, b'{"a": 1}') == outcome(json.loads, b'{"a": 1}')  # bytes: json's own path
