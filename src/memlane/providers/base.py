"""The :class:`LlmProvider` protocol, its errors, the shared HTTP code and the text helpers.

Every LLM caller (extraction, summaries, ...) talks to one :class:`LlmProvider`:
``generate(prompt) -> str`` and a cheap ``available()`` probe. Replies are raw model text;
callers clean them with :func:`strip_think` / :func:`strip_fences` or pull a JSON object
out with :func:`extract_json_object`.

Structured output: a caller that wants a JSON object passes its JSON schema as
``generate(prompt, schema=...)``. The providers whose servers constrain decoding to a schema
send it (Ollama's ``format``, the OpenAI API's ``response_format`` of type ``json_schema``), so
the reply is that object; the others (the Claude Code CLI) ignore it. Callers parse every reply
with the same tolerant parser (:func:`extract_json_object`), which is what keeps working for
the providers without structured output and for servers too old to honour it.
"""

from __future__ import annotations

import json
import logging
import math
import re
from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

from memlane.errors import MemlaneError
from memlane.httpjson import JsonHttpClient

#: Timeout of every ``available()`` probe, seconds.
PROBE_TIMEOUT_S = 3.0
#: HTTP statuses of a server that refuses a request for carrying a schema it does not support.
SCHEMA_REFUSED_STATUSES = frozenset({400, 422})

log = logging.getLogger("memlane.providers")


class LlmError(MemlaneError):
    """The LLM provider failed: unreachable, HTTP error, unusable reply, non-zero exit."""

    status = 502
    code = "llm_unavailable"


class LlmTimeout(LlmError):
    """The LLM provider gave no reply within the timeout (the message names both)."""

    code = "llm_timeout"


@runtime_checkable
class LlmProvider(Protocol):
    """One text-in, text-out LLM. No streaming, no chat history, no tool use.

    Attributes:
        name: ``"{provider}:{model}"``, e.g. ``"ollama:qwen3:4b"``, ``"openai:gpt-4o-mini"``,
            ``"claude-code:haiku"``; used in logs and error messages.
    """

    name: str

    def generate(
        self,
        prompt: str,
        *,
        timeout_s: float | None = None,
        max_tokens: int | None = None,
        schema: dict[str, Any] | None = None,
    ) -> str:
        """The model's raw reply to ``prompt`` (think blocks and fences left in).

        Args:
            timeout_s: seconds for this call; ``None`` = the provider's own timeout.
            max_tokens: cap on generated tokens; ``None`` = the provider's default.
            schema: a JSON schema (draft 2020-12 subset: object, array, string, number,
                boolean, enum, required) the reply should follow; a provider with structured
                output makes the server decode to it, the others ignore it.

        Raises:
            LlmTimeout: no reply within the timeout.
            LlmError: any other failure.
        """
        ...

    def available(self) -> bool:
        """Whether the provider looks usable (cheap probe, at most 3 s); never raises."""
        ...

    def close(self) -> None:
        """Release connections and abort the calls in flight (they raise :class:`LlmError` at
        once); later calls fail without contacting the model. Idempotent. A daemon shutting
        down calls it so that a hung model never holds up the exit."""
        ...


def check_timeout(timeout_s: float) -> float:
    """``timeout_s`` as a float if it is finite and > 0, else ``ValueError``."""
    value = float(timeout_s)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
    return value


def check_max_tokens(max_tokens: int | None) -> int | None:
    """``max_tokens`` if it is ``None`` or an int >= 1, else ``ValueError``."""
    if max_tokens is None:
        return None
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    return max_tokens


# ---------------------------------------------------------------- shared HTTP part


class HttpLlmProvider(ABC):
    """Common part of the HTTP providers: one POST per ``generate``, errors mapped to LlmError.

    Subclasses set ``kind`` and implement ``_payload`` and ``_text``.

    Structured output: a schema is sent (``_payload``'s ``schema``) until the server refuses a
    request carrying one with HTTP 400 or 422 (a server that does not know the field); the call
    is then repeated without it, and no later call sends one (the reply goes to the tolerant
    parser, as for providers without structured output).

    Args:
        model: the model name sent in the payload; ``name`` is ``"{kind}:{model}"``.
        url: the endpoint ``generate`` POSTs to.
        probe_url: the endpoint ``available()`` GETs.
        timeout_s: default per-call timeout, seconds (> 0). It applies to connecting and
            to each read; with a non-streaming reply the server sends nothing until it is done,
            so it bounds the whole generation.
        max_tokens: default cap on generated tokens (``None`` = the server's default).
        headers: extra request headers (e.g. ``Authorization``).

    Thread-safe (one shared keep-alive pool, :class:`memlane.httpjson.JsonHttpClient`).
    """

    kind = "http"

    def __init__(
        self,
        *,
        model: str,
        url: str,
        probe_url: str,
        timeout_s: float,
        max_tokens: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty string")
        self.model = model
        self.name = f"{self.kind}:{model}"
        self.url = url
        self.probe_url = probe_url
        self.timeout_s = check_timeout(timeout_s)
        self.max_tokens = check_max_tokens(max_tokens)
        self._client = JsonHttpClient(headers=headers)
        #: False once the server refused a schema (see the class docstring).
        self.structured_output = True

    # -- to override ------------------------------------------------------

    @abstractmethod
    def _payload(self, prompt: str, max_tokens: int | None, schema: dict[str, Any] | None) -> dict[str, Any]:
        """The JSON request body for one generate call (``schema``: ask for structured output)."""

    @abstractmethod
    def _text(self, reply: Any) -> str:
        """The generated text in a decoded JSON reply; raise via ``_fail`` on a wrong shape."""

    # -- shared -----------------------------------------------------------

    def _fail(self, message: str, cls: type[LlmError] = LlmError, **details: Any) -> LlmError:
        return cls(f"{self.name}: {message}", details={"provider": self.name, "url": self.url, **details})

    def generate(
        self,
        prompt: str,
        *,
        timeout_s: float | None = None,
        max_tokens: int | None = None,
        schema: dict[str, Any] | None = None,
    ) -> str:
        """POST ``prompt`` and return the generated text, unmodified.

        Args:
            timeout_s: seconds for this call (> 0); ``None`` = the constructor's ``timeout_s``.
            max_tokens: cap on generated tokens; ``None`` = the constructor's ``max_tokens``.
            schema: the JSON schema the reply should follow (structured output), or ``None``.

        Raises:
            LlmTimeout: no reply within the timeout; the message names the provider and the
                timeout in seconds.
            LlmError: connection failure; HTTP status >= 400 (message has the status and the
                first 200 characters of the body); a reply that is not JSON or has the wrong shape.
            ValueError: a non-positive ``timeout_s`` or ``max_tokens``.
        """
        timeout = check_timeout(timeout_s) if timeout_s is not None else self.timeout_s
        tokens = check_max_tokens(max_tokens) if max_tokens is not None else self.max_tokens
        wanted = schema if self.structured_output else None
        try:
            reply = self._post(self._payload(prompt, tokens, wanted), timeout)
        except LlmError as exc:
            if wanted is None or exc.details.get("status") not in SCHEMA_REFUSED_STATUSES:
                raise
            self.structured_output = False
            log.warning(
                "%s refused structured output (HTTP %s); sending prompts without a schema from now on",
                self.name,
                exc.details.get("status"),
            )
            reply = self._post(self._payload(prompt, tokens, None), timeout)
        return self._text(reply)

    def _post(self, payload: dict[str, Any], timeout: float) -> Any:
        return self._client.post_json(
            self.url,
            payload,
            timeout_s=timeout,
            fail=lambda message, timed_out, **details: self._fail(
                message, LlmTimeout if timed_out else LlmError, **details
            ),
        )

    def available(self) -> bool:
        """``GET probe_url`` answers 2xx within 3 s. Never raises."""
        status = self._client.status(self.probe_url, timeout_s=PROBE_TIMEOUT_S)
        return status is not None and 200 <= status < 300

    def close(self) -> None:
        """Abort the calls in flight (their sockets are shut down; they raise :class:`LlmError`
        saying so), refuse new ones and close the connection pool. Idempotent."""
        self._client.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self.url!r})"


# ---------------------------------------------------------------- reply cleaning

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*[\w+.-]*[ \t]*\r?(?:\n|$)", re.MULTILINE)
_INLINE_OPEN = re.compile(r"^```(?:json\w*)?", re.IGNORECASE)


def strip_think(text: str) -> str:
    """``text`` without reasoning blocks, stripped of surrounding whitespace.

    Removes every ``<think>...</think>`` block (case-insensitive, across lines); an unclosed
    ``<think>`` at the start (a reply cut off while reasoning) removes everything; a stray
    ``</think>`` with no opening tag (templates that put ``<think>`` in the prompt) removes
    everything before it.
    """
    out = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(out))
    if closes:
        out = out[closes[-1].end() :]
    if _THINK_OPEN.match(out.lstrip()):
        return ""
    return out.strip()


def strip_fences(text: str) -> str:
    """``text`` without Markdown code-fence markers, stripped of surrounding whitespace.

    Removes every line that is only a fence (```` ``` ```` or ```` ```json ````, any language
    tag), and the one-line form ```` ```json {...}``` ````. The fenced content is kept.
    """
    out = _FENCE_LINE.sub("", text).strip()
    if out.startswith("```"):
        out = _INLINE_OPEN.sub("", out, count=1)
        if out.endswith("```"):
            out = out[:-3]
    elif out.endswith("```"):
        out = out[:-3]
    return out.strip()


#: Fresh scans :func:`extract_json_object` makes before giving up (bounds the work on garbage).
_MAX_SCANS = 64
_JSON_SPECIAL = re.compile(r'[{}"\\]')


def _scan(text: str, start: int) -> dict[int, int | None]:
    """A string-aware brace scan from the ``{`` at ``start``, stopping when that brace closes.

    Returns, for every ``{`` met outside strings, the index just past its matching ``}``, or
    None if it is still open at the end of the text. A later scan from any of these braces
    would see the same strings and the same matches, so the results can be reused.
    """
    ends: dict[int, int | None] = {}
    stack: list[int] = []
    in_string = False
    pos = start
    while (match := _JSON_SPECIAL.search(text, pos)) is not None:
        ch, i = match.group(), match.start()
        pos = i + 1
        if in_string:
            if ch == "\\":
                pos = i + 2  # skip the escaped character
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            stack.append(i)
            ends[i] = None
        elif ch == "}":
            ends[stack.pop()] = i + 1
            if not stack:
                break
    return ends


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first top-level JSON object in an LLM reply, or ``None``.

    After :func:`strip_think` and :func:`strip_fences`, looks at each ``{`` in turn: if it
    starts a balanced ``{...}`` span (braces inside JSON strings do not count) that parses to
    a dict, that dict is returned; a span that does not parse is skipped whole (objects nested
    in it are not returned); a ``{`` that never closes (a stray brace in prose) is skipped
    alone. Prose before and after is ignored; raw control characters (e.g. newlines) inside
    strings are accepted. Linear in the text for ordinary input; never raises.
    """
    cleaned = strip_fences(strip_think(text))
    ends: dict[int, int | None] = {}
    scans = 0
    pos = 0
    while (start := cleaned.find("{", pos)) >= 0:
        if start not in ends:  # a brace no earlier scan met outside a string
            scans += 1
            if scans > _MAX_SCANS:
                return None
            ends.update(_scan(cleaned, start))
        end = ends[start]
        if end is None:
            pos = start + 1
            continue
        try:
            value = json.loads(cleaned[start:end], strict=False)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value
        pos = end
    return None
