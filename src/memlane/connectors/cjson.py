"""``json.loads`` / ``json.dumps`` for the light hook client, without importing :mod:`json`.

The hook client (:mod:`memlane.hookclient`) starts a new interpreter for every hook call, and
``import json`` costs more than the call's own work: the package imports ``re`` (with ``enum``,
``functools``, ``sre_compile``...) for the pure-Python fallbacks of its decoder and encoder.
The parsing and printing themselves are done by the standard library's C accelerator
``_json``, the same functions ``json`` calls (CPython's ``json.decoder.JSONDecoder`` and
``json.encoder.JSONEncoder.iterencode`` with their default arguments). This module calls that
accelerator with exactly the arguments ``json`` passes:

* :func:`loads` is ``json.loads(text)`` for a ``str``: leading/trailing JSON whitespace
  (space, tab, CR, LF) around one value, ``NaN`` / ``Infinity`` / ``-Infinity`` accepted,
  strict strings (no raw control characters);
* :func:`dumps` is ``json.dumps(obj, ensure_ascii=...)`` with every other argument at its
  default (separators ``", "`` / ``": "``, no sorting, circular check on, NaN allowed);
* :func:`raw_decode` is ``json.JSONDecoder().raw_decode(text, idx)``.

Errors are not reproduced here: whenever the accelerator raises (malformed JSON, an
unserializable object, a circular reference, nesting too deep) or is missing (an interpreter
without ``_json``), the same call is made through :mod:`json` itself, which raises exactly
what it always raises (``json.JSONDecodeError``, ``TypeError``, ``ValueError``,
``RecursionError``). So results and exceptions are those of :mod:`json`;
``tests/test_cjson.py`` compares both on generated documents.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - every CPython ships it
    _json = None  # type: ignore[assignment]  # (the module or None; typing stays out of this import)

#: JSON's insignificant whitespace (RFC 8259 section 2), what ``json.decoder.WHITESPACE`` matches.
_WS = " \t\n\r"


class _DecoderSettings:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder()`` with default
    arguments (``json.decoder.JSONDecoder.__init__``)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


# typeshed types make_scanner's argument as a scanner; it reads a decoder's attributes
_scan = _json.make_scanner(_DecoderSettings()) if _json is not None else None  # type: ignore[arg-type]


def loads(text: str) -> Any:
    """``json.loads(text)`` for a ``str`` (module docstring).

    Raises:
        json.JSONDecodeError: ``text`` is not one JSON document (a ``ValueError``).
        TypeError: ``text`` is not a ``str``, ``bytes`` or ``bytearray``.
        RecursionError: nesting too deep for the interpreter.
    """
    if _scan is not None and type(text) is str and not text.startswith("\ufeff"):
        try:
            obj, end = _scan(text, len(text) - len(text.lstrip(_WS)))
        except Exception:  # noqa: BLE001 - json raises the right error below
            pass
        else:
            if not text[end:].strip(_WS):
                return obj
    import json

    return json.loads(text)


def raw_decode(text: str, idx: int = 0) -> tuple[Any, int]:
    """``json.JSONDecoder().raw_decode(text, idx)``: the JSON value starting exactly at
    ``text[idx]`` and the index just past it.

    Raises:
        json.JSONDecodeError: no JSON value starts at ``idx``.
    """
    if _scan is not None and type(text) is str:
        try:
            return _scan(text, idx)
        except Exception:  # noqa: BLE001 - json raises the right error below
            pass
    import json

    return json.JSONDecoder().raw_decode(text, idx)


def _not_serializable(obj: object) -> Any:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


def dumps(obj: Any, *, ensure_ascii: bool = True) -> str:
    """``json.dumps(obj, ensure_ascii=ensure_ascii)`` (module docstring).

    Raises:
        TypeError: an object JSON cannot represent (a set, bytes...), or a non-string key of
            another type than int, float, bool or None.
        ValueError: a circular reference.
    """
    if _json is not None:
        encode_str = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
        if isinstance(obj, str):
            return encode_str(obj)
        try:
            # the arguments of json.encoder.JSONEncoder.iterencode with JSONEncoder's defaults:
            # markers (check_circular), default, the string encoder, indent, key and item
            # separators, sort_keys, skipkeys, allow_nan
            chunks = _json.make_encoder({}, _not_serializable, encode_str, None, ": ", ", ", False, False, True)(obj, 0)
            return "".join(chunks)
        except Exception:  # noqa: BLE001 - json raises the right error below
            pass
    import json

    return json.dumps(obj, ensure_ascii=ensure_ascii)
