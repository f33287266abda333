"""The light hook client: what Claude Code runs for every hook, started in milliseconds.

Claude Code starts a new process for each hook call (every session start, every prompt the
user sends) and waits for it, so this entry point imports only the standard library's cheapest
modules (``os``, ``sys``, ``_socket``, ``_json``; ``time`` and ``fcntl`` when needed) and
memlane's stdlib-only leaf modules (:mod:`memlane.auth`, :mod:`memlane.connectors.events`,
:mod:`memlane.connectors.cjson`, :mod:`memlane.connectors.spool`,
:mod:`memlane.connectors.hooklog`; :mod:`memlane.connectors.transcript` only for the prompt and
session-end hooks): no pydantic, httpx, typer, yaml, numpy or torch, and neither ``json``,
``re``, ``socket``, ``pathlib``, ``collections`` nor ``typing``. ``tests/test_hookclient.py``
asserts which modules stay out; docs/hooks.md measures each.

Command line (``memlane connect claude-code`` installs the first form, which skips ``site``:
:func:`memlane.connectors.claude_settings.entry_cmd`)::

    <python> -S -I -c '<append the package's directory to sys.path; run main()>' EVENT [--timeout S]
    memlane-hook EVENT [--timeout SECONDS]         # the console script
    python -m memlane.hookclient EVENT [--timeout SECONDS]

``EVENT`` is ``session-start``, ``user-prompt-submit``, ``session-end``, ``pre-compact``,
``post-tool-use`` / ``post-tool-use-failure`` (the observer's feed, ``/api/v3/observer/tool-use``),
``pre-tool-use`` (``/api/v3/observer/pre-tool-use``: the call's start, and a warning about the file
it touches), ``stop`` / ``subagent-stop`` (``/api/v3/observer/step-end``: a work-step boundary), or
Claude Code's ``SessionStart``... One JSON object is read on stdin (at most 16 MB), mapped
exactly as ``memlane hook EVENT`` always did (:func:`memlane.connectors.events.from_claude_code`,
:func:`build_body` with the transcript guard), posted to the daemon with the per-install token
and ``X-Memlane-Client: hook``, and the answer printed: for SessionStart, UserPromptSubmit and
PreToolUse ``{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`` and a
newline when the daemon sent something to inject, else nothing. The process always exits 0 and prints
nothing else; problems go to ``$MEMLANE_HOME/logs/hooks.log`` (mode 0600).

Fail-open: connection refused, a timeout or a 5xx answer spools the event
(:mod:`memlane.connectors.spool`, the same files and caps as before) and prints nothing; the
next hook call replays spooled events first, within :data:`REPLAY_BUDGET_S`. A 4xx answer is
logged and dropped.

Where things are found, without loading the settings machinery (:func:`resolve_target`):

* home: ``$MEMLANE_HOME``, else config.yaml's ``home``, else ``~/.memlane``;
* config.yaml: ``$MEMLANE_CONFIG``, else ``{home}/config.yaml``; only its top-level
  ``key: scalar`` lines for ``home``, ``daemon_url``, ``host``, ``port``, ``hook_timeout_s``
  and ``max_body_bytes`` are read (:func:`read_config_scalars`);
* daemon URL: ``$MEMLANE_DAEMON_URL``; else ``$MEMLANE_HOST`` / ``$MEMLANE_PORT`` (the other
  part from config.yaml or its default); else the URL the running daemon wrote into
  ``{home}/daemon.lock`` (:mod:`memlane.homelock`) when its pid is alive; else config.yaml's
  ``daemon_url``, or its ``host`` / ``port``; else ``http://127.0.0.1:7437``;
* timeout: ``--timeout`` (clamped to 0.1..50 s), else ``$MEMLANE_HOOK_TIMEOUT_S``, else
  config.yaml's ``hook_timeout_s``, else 4 s;
* token: ``{home}/token`` (:func:`memlane.auth.auth_headers`).

``MEMLANE_HOOKS_DISABLED`` set (memlane's own Claude Code judge process) makes every hook a
no-op, as before.
"""

from __future__ import annotations

import _socket
import os
import sys

from memlane.auth import CLIENT_HEADER, auth_headers
from memlane.connectors import cjson
from memlane.connectors.events import CLAUDE_CODE_NAMES, STOP_EVENTS, TOOL_EVENTS, from_claude_code
from memlane.connectors.hooklog import LazyLogger, LogFile, direct_to, file_handler
from memlane.connectors.spool import DeliveryError, DeliveryTimeout, replay_with, spool_dir_for, spool_event

# What the hook's start-up keeps out (each measured in docs/hooks.md): typing, collections,
# pathlib, json (with re and enum) and socket (with enum and selectors). TYPE_CHECKING = False
# is the idiom type checkers read as typing.TYPE_CHECKING.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from memlane.connectors.events import HookEvent
    from memlane.connectors.spool import Post

#: Most bytes read from stdin (Claude Code's hook JSON).
MAX_STDIN_BYTES = 16 * 1024 * 1024
#: Wall clock spent replaying the spool before the live request, seconds.
REPLAY_BUDGET_S = 0.5
#: Defaults of the settings this client reads (the same as :class:`memlane.config.Settings`).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7437
DEFAULT_TIMEOUT_S = 4.0
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
#: Set in the environment of memlane's own Claude Code judge process: hooks do nothing there
#: (equal to ``memlane.providers.claude_cli.HOOKS_DISABLED_ENV``; a test checks it).
HOOKS_DISABLED_ENV = "MEMLANE_HOOKS_DISABLED"
#: The log file inside the home.
LOG_FILE = ("logs", "hooks.log")

ENDPOINTS = {
    "session-start": "/api/hooks/session-start",
    "user-prompt-submit": "/api/hooks/user-prompt-submit",
    "session-end": "/api/hooks/session-end",
    "pre-compact": "/api/hooks/pre-compaction",
    "post-tool-use": "/api/v3/observer/tool-use",
    "post-tool-use-failure": "/api/v3/observer/tool-use",
    "pre-tool-use": "/api/v3/observer/pre-tool-use",
    "stop": "/api/v3/observer/step-end",
    "subagent-stop": "/api/v3/observer/step-end",
}
#: pre-tool-use: longest wait for the daemon's answer, seconds (Claude Code holds the tool call
#: until the hook exits). A late answer spools the call's start like any undelivered event.
PRE_TOOL_TIMEOUT_S = 1.0
#: Events whose daemon answer may be printed for Claude Code (``additionalContext``); every other
#: event prints nothing (a Stop hook's output could keep the agent working; memlane never does).
INJECTING_EVENTS = ("session-start", "user-prompt-submit", "pre-tool-use")
#: post-tool-use: longest string value of ``tool_input`` sent (a Write's whole file, an Edit's
#: old and new text), and of a failed call's error text, characters. The observer reads file
#: paths, the Bash command and the error (memlane.v3.observer), never the contents.
MAX_TOOL_TEXT_CHARS = 2000
#: config.yaml keys this client reads, with their types.
CONFIG_KEYS = {"home": str, "daemon_url": str, "host": str, "port": int, "hook_timeout_s": float, "max_body_bytes": int}

log = LazyLogger("memlane.connectors")
#: True in the ``memlane-hook`` process (set by :func:`main`): records are written straight to
#: hooks.log without importing logging (memlane.connectors.hooklog).
_direct_log = False


# --- the log file -----------------------------------------------------------------------------

_log_path: str | None = None
_handler: Any = None


def setup_log(home: Path | str) -> None:
    """Send the connector loggers' records (``memlane.connectors.*``) to ``{home}/logs/hooks.log``
    (mode 0600, rotated at 1 MB, 2 kept): directly in the ``memlane-hook`` process, through a
    ``logging`` handler elsewhere. Idempotent for the same home; another home replaces it."""
    global _log_path, _handler
    path = os.path.join(os.path.expanduser(os.fspath(home)), *LOG_FILE)
    if _log_path == path and (_handler is not None or _direct_log):
        return
    _log_path = path
    if _direct_log:
        direct_to(LogFile(path))
        return
    import logging  # not in the memlane-hook process: there _direct_log is set

    logger = logging.getLogger(log.name)
    if _handler is not None:
        logger.removeHandler(_handler)
        _handler.close()
    _handler = file_handler(path)
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)


# --- where the daemon is ----------------------------------------------------------------------


class HookTarget:
    """Where a hook call goes and the limits it runs under.

    Attributes:
        home: the data directory (token, spool, log), a path string (``~`` expanded).
        url: the daemon's base URL, e.g. ``http://127.0.0.1:7437``.
        timeout_s: per-request timeout, seconds.
        max_body_bytes: the daemon's request body cap, bytes (a session-end transcript is cut
            to half of it).
    """

    __slots__ = ("home", "url", "timeout_s", "max_body_bytes")

    def __init__(
        self,
        home: Path | str,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.home = os.path.expanduser(os.fspath(home))
        self.url = url
        self.timeout_s = float(timeout_s)
        self.max_body_bytes = int(max_body_bytes)

    def __repr__(self) -> str:
        return (
            f"HookTarget(home={str(self.home)!r}, url={self.url!r}, timeout_s={self.timeout_s!r}, "
            f"max_body_bytes={self.max_body_bytes!r})"
        )


def _yaml_scalar(raw: str) -> str | None:
    """A YAML scalar written on one line, as text: plain (a ``#`` after a space starts a comment),
    single-quoted (``''`` is a quote) or double-quoted without escapes. ``None`` for anything
    else (flow collections, anchors, aliases, tags, block scalars, escapes, null)."""
    raw = raw.strip()
    if not raw:
        return None
    if raw[0] in "'\"":
        quote = raw[0]
        end = raw.find(quote, 1)
        while quote == "'" and end >= 0 and raw[end + 1 : end + 2] == "'":
            end = raw.find(quote, end + 2)
        if end < 0:
            return None
        rest = raw[end + 1 :].strip()
        body = raw[1:end]
        if rest and not rest.startswith("#"):
            return None
        if quote == '"':
            return None if "\\" in body else body
        return body.replace("''", "'")
    cut = raw.find(" #")
    value = (raw if cut < 0 else raw[:cut]).strip()
    if not value or value[0] in "[]{}&*!|>%@`#" or value in ("~", "null", "Null", "NULL"):
        return None
    return value


def read_config_scalars(path: Path | str) -> dict[str, Any]:
    """The few settings this client needs from config.yaml, read without a YAML library.

    Only lines ``key: value`` starting in column 0 are looked at, for the keys in
    :data:`CONFIG_KEYS`; the value must be a one-line scalar (:func:`_yaml_scalar`) of the
    key's type (``port`` and ``max_body_bytes`` decimal integers, ``hook_timeout_s`` a decimal
    number). A value written any other way (e.g. a flow mapping, an anchor, ``0x1d1d``, a key
    under ``memory:``) is skipped and logged, and the default applies, where the daemon's
    full YAML reader would take it or refuse the file. The last occurrence of a key wins, as in
    PyYAML. A missing or unreadable file gives ``{}``.
    """
    try:
        with open(path, "rb") as f:
            text = f.read(1_000_000).decode("utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or key not in CONFIG_KEYS or (rest and rest[0] not in " \t"):
            continue
        value = _yaml_scalar(rest)
        kind = CONFIG_KEYS[key]
        try:
            if value is None:
                raise ValueError("not a one-line scalar")
            if kind is int:
                if not value.isdigit():
                    raise ValueError("not a decimal integer")
                out[key] = int(value)
            elif kind is float:
                if not value.replace(".", "", 1).isdigit():
                    raise ValueError("not a decimal number")
                out[key] = float(value)
            else:
                out[key] = value
        except ValueError as exc:
            out.pop(key, None)
            log.warning("config %s: %s: %s (%r); its default is used by the hooks", path, key, exc, rest.strip())
    return out


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:
        return False
    return True


def lock_url(home: Path | str) -> str | None:
    """The URL the daemon serving ``home`` wrote into ``{home}/daemon.lock``, when the pid it
    wrote there is alive; ``None`` otherwise (no daemon, a stale file, an import holding it).

    The file is only read (never locked: a shared lock taken here could make a daemon starting
    at that instant think the home is held). An unspecified bind address (``0.0.0.0``, ``::``)
    becomes the matching loopback address."""
    try:
        fd = os.open(
            os.path.join(os.path.expanduser(os.fspath(home)), "daemon.lock"), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
        )
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = cjson.loads(raw.decode("utf-8"))
        url, pid = data.get("url"), int(data.get("pid", 0))
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(url, str) or not url or not _pid_alive(pid):
        return None
    try:
        scheme, host, port, path = split_url(url)
    except ValueError:
        return None
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"{scheme}://{_host_for_url(host)}:{port}{path}"


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def split_url(url: str) -> tuple[str, str, int, str]:
    """``http://host:port/prefix`` -> ``("http", "host", port, "/prefix")``; IPv6 hosts in
    brackets or bare (``http://::1:7437``, as an unbracketed bind address gives); the port
    defaults to 80 / 443.

    Raises:
        ValueError: not an http(s) URL, or a bad port.
    """
    scheme, sep, rest = url.strip().partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    hostport, slash, path = rest.partition("/")
    path = ("/" + path).rstrip("/") if slash else ""
    hostport = hostport.rpartition("@")[2]
    port_text = ""
    if hostport.startswith("["):
        host, _, after = hostport[1:].partition("]")
        port_text = after[1:] if after.startswith(":") else ""
    elif hostport.count(":") == 1:
        host, _, port_text = hostport.partition(":")
    elif hostport.count(":") > 1:  # a bare IPv6 address: the last group is the port when it parses
        head, _, tail = hostport.rpartition(":")
        host, port_text = (head, tail) if tail.isdigit() and head.count(":") >= 2 else (hostport, "")
    else:
        host = hostport
    if port_text and not port_text.isdigit():
        raise ValueError(f"bad port in {url!r}")
    port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    if not 0 < port < 65536:
        raise ValueError(f"bad port in {url!r}")
    return scheme, host, port, path


def _env_number(env: Mapping[str, str], name: str, kind: type) -> Any:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        return kind(raw.strip())
    except ValueError:
        log.warning("%s=%r is not a number; ignored by the hooks", name, raw)
        return None


def resolve_target(env: Mapping[str, str] | None = None, *, timeout_s: float | None = None) -> HookTarget:
    """Find the home, the daemon URL, the timeout and the body cap (the order is in the module
    docstring) from the environment, ``$MEMLANE_HOME`` and config.yaml. Missing or odd files
    and values fall back to the defaults (logged); nothing here raises for them."""
    env = os.environ if env is None else env
    env_home = env.get("MEMLANE_HOME")
    home = os.path.expanduser(env_home) if env_home else os.path.join(os.path.expanduser("~"), ".memlane")
    setup_log(home)
    config_path = os.path.expanduser(env.get("MEMLANE_CONFIG") or os.path.join(home, "config.yaml"))
    config = read_config_scalars(config_path)
    if not env_home and config.get("home"):
        home = os.path.expanduser(config["home"])
        setup_log(home)
    url = (env.get("MEMLANE_DAEMON_URL") or "").strip()
    if not url and (env.get("MEMLANE_HOST") or env.get("MEMLANE_PORT")):
        host = (env.get("MEMLANE_HOST") or "").strip() or config.get("host") or DEFAULT_HOST
        port = _env_number(env, "MEMLANE_PORT", int) or config.get("port") or DEFAULT_PORT
        url = f"http://{_host_for_url(host)}:{port}"
    if not url:
        url = lock_url(home) or ""
    if not url:
        url = config.get("daemon_url") or (
            f"http://{_host_for_url(config.get('host') or DEFAULT_HOST)}:{config.get('port') or DEFAULT_PORT}"
        )
    if timeout_s is None:
        timeout_s = _env_number(env, "MEMLANE_HOOK_TIMEOUT_S", float) or config.get("hook_timeout_s")
        if timeout_s is None or not 0 < timeout_s <= 55:
            timeout_s = DEFAULT_TIMEOUT_S
    max_body = _env_number(env, "MEMLANE_MAX_BODY_BYTES", int) or config.get("max_body_bytes")
    if max_body is None or max_body < 1024:
        max_body = DEFAULT_MAX_BODY_BYTES
    return HookTarget(home, url, timeout_s, max_body)


# --- the request ------------------------------------------------------------------------------


def _utf8_tail(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    tail = data[-max_bytes:].decode("utf-8", errors="ignore")
    nl = tail.find("\n")
    return tail[nl + 1 :] if 0 <= nl < len(tail) - 1 else tail


def build_body(
    event: HookEvent,
    *,
    transcript_roots: Sequence[Path | str] | None = None,
    max_transcript_bytes: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    payload_chars: int | None = None,
) -> dict[str, Any]:
    """The JSON body for the daemon endpoint of ``event`` (``None`` fields left out).

    user-prompt-submit gets ``memory_feedback`` from the transcript's latest assistant message
    (last 2 MB read); session-end gets the rendered ``transcript`` (its most recent part, at
    most ``max_body_bytes // 2`` bytes; a transcript file over ``max_transcript_bytes``, default
    :data:`memlane.connectors.transcript.DEFAULT_MAX_BYTES`, is not read); stop gets
    ``context_tokens``, the latest usage in the transcript's last 256 KB. A refused transcript
    path simply adds nothing. :mod:`memlane.connectors.transcript` is imported only for these
    three events. ``payload_chars`` (the hook input's size) goes with a post-tool-use call."""
    body: dict[str, Any]
    if event.event in TOOL_EVENTS or event.event == "pre-tool-use":
        body = tool_use_body(event)
        if payload_chars is not None and event.event in TOOL_EVENTS:
            body["payload_chars"] = payload_chars
        return body
    if event.event in STOP_EVENTS:
        body = step_end_body(event)
        if event.event == "stop":  # a subagent's usage is in its own transcript, not this one
            from memlane.connectors import transcript

            raw = transcript.read_transcript(
                event.transcript_path, transcript_roots, tail_bytes=transcript.USAGE_TAIL_BYTES
            )
            tokens = transcript.last_context_tokens(raw) if raw else None
            if tokens is not None:
                body["context_tokens"] = tokens
        return body
    body = {
        "session_key": event.session_key,
        "project": event.project,
        "cwd": event.cwd,
        "harness": event.harness,
    }
    if event.event == "session-start":
        body["source"] = event.source
        body["permission_mode"] = event.permission_mode
    elif event.event == "user-prompt-submit":
        from memlane.connectors import transcript

        body["prompt"] = event.prompt
        body["permission_mode"] = event.permission_mode
        raw = transcript.read_transcript(
            event.transcript_path, transcript_roots, tail_bytes=transcript.FEEDBACK_TAIL_BYTES
        )
        feedback = transcript.last_memory_feedback(raw) if raw else None
        if feedback:
            body["memory_feedback"] = feedback
    elif event.event == "session-end":
        from memlane.connectors import transcript

        body["reason"] = event.reason
        raw = transcript.read_transcript(
            event.transcript_path,
            transcript_roots,
            transcript.DEFAULT_MAX_BYTES if max_transcript_bytes is None else max_transcript_bytes,
        )
        text = transcript.transcript_text(raw) if raw else ""
        if text:
            body["transcript"] = _utf8_tail(text, max(1024, max_body_bytes // 2))
    elif event.event == "pre-compact":
        body["trigger"] = event.trigger
        body["custom_instructions"] = event.custom_instructions
    return {k: v for k, v in body.items() if v is not None}


def _cut(value: Any) -> Any:
    return value[:MAX_TOOL_TEXT_CHARS] if isinstance(value, str) else value


def _now_ms() -> int:
    import time  # a built-in module: no file is read to import it

    return int(time.time() * 1000)


def tool_use_body(event: HookEvent) -> dict[str, Any]:
    """The observer's body for a tool-call event (``POST /api/v3/observer/tool-use`` after the
    call, ``/api/v3/observer/pre-tool-use`` before it): ``session_id``, ``tool_name``,
    ``tool_input`` with each top-level string cut to :data:`MAX_TOOL_TEXT_CHARS`, ``cwd``,
    ``project``, ``tool_use_id`` when Claude Code sent one, ``ts_ms`` (this process's clock when
    the hook ran, epoch ms: a spooled event replayed later keeps its own time), and, after the call,
    ``tool_response`` only for a failed call (an object with a true ``is_error`` or an ``error``:
    those two keys and ``content``, cut). A successful call's response (a file read, a command's
    output) is not sent: the observer does not read it, and it can be megabytes."""
    body: dict[str, Any] = {
        "session_id": event.session_key,
        "tool_name": event.tool_name,
        "tool_input": {k: _cut(v) for k, v in (event.tool_input or {}).items()},
        "cwd": event.cwd,
        "project": event.project,
        "ts_ms": _now_ms(),
    }
    if event.tool_use_id:
        body["tool_use_id"] = event.tool_use_id
    resp = event.tool_response
    if isinstance(resp, dict) and (resp.get("is_error") or resp.get("error")):
        body["tool_response"] = {
            k: _cut(resp[k]) if isinstance(resp[k], str) else resp[k]
            for k in ("is_error", "error", "content")
            if k in resp
        }
    return body


def step_end_body(event: HookEvent) -> dict[str, Any]:
    """The observer's body for Stop / SubagentStop (``POST /api/v3/observer/step-end``):
    ``session_id``, ``kind`` (``stop`` or ``subagent_stop``), ``cwd``, ``project``, ``ts_ms`` and,
    for a subagent, ``agent_id`` / ``agent_type`` when Claude Code sent them."""
    body: dict[str, Any] = {
        "session_id": event.session_key,
        "kind": event.event.replace("-", "_"),
        "cwd": event.cwd,
        "project": event.project,
        "ts_ms": _now_ms(),
        "agent_id": event.agent_id,
        "agent_type": event.agent_type,
    }
    return {k: v for k, v in body.items() if v is not None}


#: Largest daemon answer read, bytes (a hook answer is a few KB).
MAX_ANSWER_BYTES = 16 * 1024 * 1024
_MAX_HEAD_BYTES = 64 * 1024


def http_poster(url: str, headers: Mapping[str, str]) -> Post:
    """A :data:`memlane.connectors.spool.Post` that sends JSON to ``url`` + endpoint, one
    connection per request (``Connection: close``).

    ``http`` URLs (the daemon) use a minimal HTTP/1.1 exchange over the C socket module
    (``_socket``, what :mod:`socket` wraps; :func:`_connect` is ``socket.create_connection``):
    the request, then a response read to its ``Content-Length``, its last chunk (``chunked``)
    or the close. Why not ``http.client``, nor ``socket``: importing them (``http.client`` with
    ``email.parser`` and ``ssl``; ``socket`` with ``enum`` and ``selectors``) cost more CPU than
    the whole hook call (docs/hooks.md). ``https`` URLs go through ``http.client``. Anything
    that is not a well-formed answer is a :class:`DeliveryError`.

    The function returns ``(status, body text)`` and raises
    :class:`~memlane.connectors.spool.DeliveryTimeout` when the request went out but the answer
    did not come within the timeout (each socket operation waits at most that long),
    :class:`~memlane.connectors.spool.DeliveryError` for any other transport failure (refused,
    reset, connect timeout, a malformed or oversize answer). An endpoint that is not a plain
    path (a spooled file edited by hand) is answered ``(400, reason)`` without being sent.

    Raises:
        ValueError: ``url`` is not an http(s) URL, or a header holds a line break.
    """
    scheme, host, port, prefix = split_url(url)
    fields = {"Content-Type": "application/json", "Accept": "application/json", **headers}
    if any(ch in k + v for k, v in fields.items() for ch in "\r\n\0"):
        raise ValueError("a request header holds a line break")
    if scheme == "https":
        return _https_poster(host, port, prefix, fields)
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    host_header = f"{_host_for_url(host)}:{port}"
    # An ASCII host as bytes: a str goes through the idna codec (another import).
    address = (host.encode("ascii") if host.isascii() else host, port)

    def post(endpoint: str, data: bytes, timeout: float) -> tuple[int, str]:
        if not _plain_path(endpoint):
            return 400, f"not a request path: {endpoint[:100]!r}"
        request = (
            f"POST {prefix}{endpoint} HTTP/1.1\r\nHost: {host_header}\r\n{head}"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1") + data
        try:
            sock = _connect(address, max(timeout, 0.001))
        except OSError as exc:
            raise DeliveryError(exc.__class__.__name__) from exc
        try:
            try:
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
                sock.sendall(request)
            except OSError as exc:
                raise DeliveryError(exc.__class__.__name__) from exc
            try:
                return read_answer(sock)
            except TimeoutError as exc:
                raise DeliveryTimeout("read timeout") from exc
            except OSError as exc:
                raise DeliveryError(exc.__class__.__name__) from exc
        finally:
            sock.close()

    return post


def _connect(address: tuple[str | bytes, int], timeout: float) -> _socket.socket:
    """A TCP connection to ``(host, port)``, each address ``getaddrinfo`` gives tried in turn,
    as ``socket.create_connection(address, timeout)`` does; the socket keeps ``timeout`` for
    every later operation.

    Raises:
        OSError: the last address's error (``ConnectionRefusedError``, ``TimeoutError``...), or
            ``socket.gaierror`` when the host does not resolve.
    """
    host, port = address
    error: OSError | None = None
    for family, kind, proto, _, addr in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error if error is not None else OSError(f"getaddrinfo returned no address for {host!r}")


def _plain_path(endpoint: str) -> bool:
    return endpoint.startswith("/") and all(32 < ord(ch) < 127 for ch in endpoint)


def _recv_more(sock: _socket.socket, buf: bytearray, limit: int) -> None:
    chunk = sock.recv(65536)
    if not chunk:
        raise DeliveryError("the daemon closed the connection before the whole answer")
    buf += chunk
    if len(buf) > limit:
        raise DeliveryError(f"the answer is over {limit} bytes")


def read_answer(sock: _socket.socket, *, max_bytes: int = MAX_ANSWER_BYTES) -> tuple[int, str]:
    """Read one HTTP/1.x response from ``sock``: ``(status, body as UTF-8 text)``.

    The body ends at ``Content-Length``, at the last chunk of a ``chunked`` body (trailers are
    not read), or where the server closes the connection.

    Raises:
        DeliveryError: a malformed status line, header or chunk; an early close; an answer over
            ``max_bytes`` (headers over 64 KiB).
        OSError: from the socket (``TimeoutError`` when a read waits past the socket's timeout).
    """
    buf = bytearray()
    end = -1
    while end < 0:
        _recv_more(sock, buf, _MAX_HEAD_BYTES + max_bytes)
        end = buf.find(b"\r\n\r\n")
        if end < 0 and len(buf) > _MAX_HEAD_BYTES:
            raise DeliveryError("the answer's headers are over 64 KiB")
    status_line, *lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit() or rest[3:4] not in ("", " "):
        raise DeliveryError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    status = int(code)
    if status < 200:  # no Expect header was sent: an interim answer is not expected
        raise DeliveryError(f"unexpected interim answer {status}")
    fields: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise DeliveryError(f"malformed header line: {line[:80]!r}")
        fields[name.lower()] = value.strip()
    body = buf[end + 4 :]
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = _dechunk(sock, body, max_bytes)
    elif "content-length" in fields:
        length_text = fields["content-length"]
        if not length_text.isdigit() or int(length_text) > max_bytes:
            raise DeliveryError(f"bad Content-Length {length_text[:20]!r}")
        length = int(length_text)
        while len(body) < length:
            _recv_more(sock, body, max_bytes)
        del body[length:]
    else:
        while chunk := sock.recv(65536):
            body += chunk
            if len(body) > max_bytes:
                raise DeliveryError(f"the answer is over {max_bytes} bytes")
    return status, bytes(body).decode("utf-8", errors="replace")


def _dechunk(sock: _socket.socket, buf: bytearray, max_bytes: int) -> bytearray:
    """The payload of a ``chunked`` body whose first bytes are ``buf`` (RFC 9112 section 7.1)."""
    out, pos = bytearray(), 0
    limit = 2 * max_bytes + _MAX_HEAD_BYTES  # the payload plus its chunk framing
    while True:
        while (nl := buf.find(b"\r\n", pos)) < 0:
            _recv_more(sock, buf, limit)
        size_text = bytes(buf[pos:nl]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise DeliveryError(f"bad chunk size {size_text[:20]!r}") from None
        if size < 0 or len(out) + size > max_bytes:
            raise DeliveryError(f"bad chunk size {size_text[:20]!r}")
        pos = nl + 2
        if size == 0:
            return out
        while len(buf) < pos + size + 2:
            _recv_more(sock, buf, limit)
        if buf[pos + size : pos + size + 2] != b"\r\n":
            raise DeliveryError("a chunk does not end with CRLF")
        out += buf[pos : pos + size]
        pos += size + 2


def _https_poster(host: str, port: int, prefix: str, fields: Mapping[str, str]) -> Post:
    """:func:`http_poster` for an ``https`` daemon URL, through ``http.client``."""
    import http.client

    def post(endpoint: str, data: bytes, timeout: float) -> tuple[int, str]:
        if not _plain_path(endpoint):
            return 400, f"not a request path: {endpoint[:100]!r}"
        conn = http.client.HTTPSConnection(host, port, timeout=max(timeout, 0.001))
        try:
            try:
                conn.request("POST", prefix + endpoint, body=data, headers=dict(fields))
            except (OSError, http.client.HTTPException) as exc:
                raise DeliveryError(exc.__class__.__name__) from exc
            try:
                resp = conn.getresponse()
                text = resp.read(MAX_ANSWER_BYTES).decode("utf-8", errors="replace")
            except TimeoutError as exc:
                raise DeliveryTimeout("read timeout") from exc
            except (OSError, http.client.HTTPException) as exc:
                raise DeliveryError(exc.__class__.__name__) from exc
            return resp.status, text
        finally:
            conn.close()

    return post


def run(
    event_name: str,
    stdin_text: str,
    target: HookTarget,
    *,
    transcript_roots: Sequence[Path | str] | None = None,
    replay_budget_s: float = REPLAY_BUDGET_S,
    env: Mapping[str, str] | None = None,
) -> str:
    """Handle one hook call; returns what to print on stdout (often ``""``, else one JSON line
    without its newline).

    Args:
        event_name: one of :data:`memlane.connectors.events.EVENTS` (or Claude Code's names).
        stdin_text: the JSON Claude Code wrote on stdin.
        target: home, daemon URL, timeout and body cap (:func:`resolve_target`).
        transcript_roots: where transcripts may be read from (default ``~/.claude/projects``).
        replay_budget_s: wall-clock budget for replaying spooled events first, seconds.
        env: the environment to check for :data:`HOOKS_DISABLED_ENV` (default ``os.environ``).

    Never raises: errors are logged to ``{home}/logs/hooks.log`` and give ``""``.
    """
    try:
        setup_log(target.home)
    except Exception:  # noqa: BLE001 - logging must not break the hook
        pass
    if (os.environ if env is None else env).get(HOOKS_DISABLED_ENV):
        # Trigger: this Claude Code process is memlane's own LLM judge (providers.claude_cli).
        # Why: recording the judge as a user session would feed memlane its own output.
        # Outcome: the hook does nothing.
        return ""
    try:
        return _run(event_name, stdin_text, target, transcript_roots, replay_budget_s)
    except Exception:  # noqa: BLE001 - a hook never fails Claude Code
        log.exception("hook %s failed", event_name)
        return ""


def _run(
    event_name: str, stdin_text: str, target: HookTarget, roots: Sequence[Path | str] | None, replay_budget_s: float
) -> str:
    try:
        event = from_claude_code(event_name, cjson.loads(stdin_text))
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        log.warning("hook %s: bad input ignored: %s", event_name, exc)
        return ""
    body = build_body(
        event, transcript_roots=roots, max_body_bytes=target.max_body_bytes, payload_chars=len(stdin_text)
    )
    endpoint = ENDPOINTS[event.event]
    timeout_s = min(target.timeout_s, PRE_TOOL_TIMEOUT_S) if event.event == "pre-tool-use" else target.timeout_s
    spool_dir = spool_dir_for(target.home)
    try:
        post = http_poster(target.url, {CLIENT_HEADER: "hook", **auth_headers(target.home)})
    except ValueError as exc:
        log.warning("hook %s: %s; event spooled", event.event, exc)
        spool_event(spool_dir, endpoint, body)
        return ""
    try:
        sent, failed = replay_with(post, spool_dir, budget_s=replay_budget_s, timeout_s=timeout_s)
        if sent or failed:
            log.info("spool replay: %d sent, %d failed", sent, failed)
    except Exception:  # noqa: BLE001
        log.exception("spool replay failed")
    try:
        # "replace": a lone surrogate in the hook input (a split emoji) becomes "?" instead of
        # failing the whole event
        status, text = post(endpoint, cjson.dumps(body, ensure_ascii=False).encode("utf-8", "replace"), timeout_s)
    except DeliveryError as exc:
        log.warning("hook %s: daemon at %s unavailable (%s); event spooled", event.event, target.url, exc)
        spool_event(spool_dir, endpoint, body)
        return ""
    if status >= 500:
        log.warning("hook %s: daemon answered HTTP %d; event spooled", event.event, status)
        spool_event(spool_dir, endpoint, body)
        return ""
    if status >= 300:
        log.warning("hook %s: daemon rejected the event: HTTP %d %s", event.event, status, text[:300])
        return ""
    try:
        data = cjson.loads(text)
    except (ValueError, RecursionError):
        log.warning("hook %s: daemon answer is not JSON", event.event)
        return ""
    inject = data.get("inject") if isinstance(data, dict) else None
    if event.event not in INJECTING_EVENTS or not isinstance(inject, str) or not inject.strip():
        return ""
    return cjson.dumps(
        {"hookSpecificOutput": {"hookEventName": CLAUDE_CODE_NAMES[event.event], "additionalContext": inject}}
    )


# --- the command ------------------------------------------------------------------------------


def _parse_args(argv: Sequence[str]) -> tuple[str, float | None]:
    """``EVENT [--timeout S | --timeout=S]`` -> ``(event, timeout or None)``.

    Raises:
        ValueError: no event, an unknown option, or a timeout that is not a number.
    """
    event, timeout, args = None, None, list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--timeout" or arg.startswith("--timeout="):
            value = arg.partition("=")[2] if "=" in arg else (args.pop(0) if args else "")
            timeout = float(value)
            if timeout != timeout:  # NaN
                raise ValueError(f"--timeout {value!r} is not a number")
            timeout = min(max(timeout, 0.1), 50.0)
        elif arg.startswith("-") or event is not None:
            raise ValueError(f"unexpected argument {arg!r}")
        else:
            event = arg
    if event is None:
        raise ValueError("no hook event given")
    return event, timeout


def read_stdin(limit: int = MAX_STDIN_BYTES) -> str:
    """At most ``limit`` bytes of stdin as text (UTF-8, bad bytes replaced); ``""`` for a
    terminal or a closed stdin."""
    stdin = sys.stdin
    if stdin is None or stdin.isatty():
        return ""
    return stdin.buffer.read(limit).decode("utf-8", errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``memlane-hook`` command: read stdin, handle the hook, print the answer; returns 0.

    Nothing but the hook answer is ever written to stdout, and nothing to stderr."""
    global _direct_log
    out = ""
    os.umask(0o077)  # private files: the spool, hooks.log and any directory this hook creates
    _direct_log = True  # records go straight to hooks.log: logging is never imported
    direct_to(None)  # until the home is known, records are dropped (never printed on stderr)
    try:
        target = resolve_target()
        try:
            event, timeout = _parse_args(sys.argv[1:] if argv is None else argv)
        except ValueError as exc:
            log.warning("memlane-hook: %s; usage: memlane-hook EVENT [--timeout SECONDS]", exc)
            return 0
        if timeout is not None:
            target.timeout_s = timeout
        out = run(event, read_stdin(), target)
    except Exception:  # noqa: BLE001 - the hook always exits 0
        try:
            log.exception("memlane-hook failed")
        except Exception:  # noqa: BLE001
            pass
    if out:
        try:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
        except Exception:  # noqa: BLE001 - e.g. Claude Code closed the pipe
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
