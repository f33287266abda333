"""Editing Claude Code's settings files for ``connect`` / ``disconnect`` (re-exported by
:mod:`memlane.connectors.claude_code`).

* ``settings.json`` (default ``~/.claude/settings.json``, or ``$CLAUDE_CONFIG_DIR/settings.json``):
  ``{"hooks": {"<Event>": [{"matcher": "", "hooks": [{"type": "command", "command": ...,
  "timeout": <s>}]}]}}``. Each hook runs the light client (:mod:`memlane.hookclient`), for this
  install ``<python> -S -I -c '<import memlane.hookclient from the package's directory; main()>'
  <event>`` (:func:`hook_cmd_for`, :func:`entry_cmd`). Our hooks are the ones whose command
  runs ``from memlane.hookclient import``, ``memlane-hook``, ``-m memlane.hookclient`` or the
  older ``memlane hook``; each is added in a matcher group of its own, so nobody else's group is
  touched, and ``connect`` replaces an older form of ours with the current one.
* ``~/.claude.json``: user-scope MCP servers under the top-level ``"mcpServers"`` object; ours is
  ``"memlane": {"type": "stdio", "command": ..., "args": [..., "mcp", "serve"], "env": {}}``.

Every change is preceded by a timestamped backup beside the file
(``<name>.memlane-backup-YYYYmmdd-HHMMSS``) and written atomically (temp file + rename, mode
kept, symlinks followed). A file that is not a JSON object, or whose ``hooks`` / ``mcpServers``
has an unexpected type, raises :class:`SettingsFileError` and nothing is written.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memlane.connectors.events import normalize_event_name
from memlane.errors import MemlaneError

#: Claude Code's own timeout for each of our hook commands, seconds (written into settings.json).
#: PostToolUse / PostToolUseFailure run after every successful / failed tool call of the agent
#: (matcher "": all tools) and feed the observer; they print nothing, and the client's own request
#: timeout (hook_timeout_s, 4 s) comes first. PreToolUse runs before every tool call (matcher "")
#: and its client waits at most :data:`memlane.hookclient.PRE_TOOL_TIMEOUT_S` for the daemon.
#: Stop and SubagentStop (no matcher: Claude Code ignores one there) mark work-step boundaries.
HOOK_TIMEOUTS_S = {
    "SessionStart": 10,
    "UserPromptSubmit": 10,
    "SessionEnd": 15,
    "PreCompact": 10,
    "PostToolUse": 5,
    "PostToolUseFailure": 5,
    "PreToolUse": 5,
    "Stop": 10,
    "SubagentStop": 10,
}
#: The events whose matcher group carries no ``matcher`` (Claude Code matches those on nothing).
NO_MATCHER_EVENTS = frozenset({"UserPromptSubmit", "Stop", "SubagentStop"})
# Ours: `memlane hook EVENT` (the CLI), `memlane-hook EVENT` (the console script of the light
# client), `python -m memlane.hookclient EVENT` or `python -S -I -c '...from memlane.hookclient
# import main...' EVENT` (entry_cmd), each possibly quoted by shlex.join.
_OUR_HOOK = re.compile(
    r"memlane(?:\.exe)?['\"]?\s+hook\b"
    r"|(?:^|[\s/\\'\"])memlane-hook(?:\.exe)?['\"]?(?:\s|$)"
    r"|\s-m\s+['\"]?memlane\.hookclient\b"
    r"|\bfrom\s+memlane\.hookclient\s+import\s+main\b"
)
#: The light hook client's console script (pyproject.toml [project.scripts]).
HOOK_SCRIPT = "memlane-hook"
#: The program the installed hook command gives ``python -S -I -c`` (:func:`entry_cmd`).
_ENTRY_CODE = "import sys; sys.path.append({root}); from memlane.hookclient import main; sys.exit(main())"
MCP_NAME = "memlane"


class SettingsFileError(MemlaneError):
    """A Claude Code settings file that cannot be edited safely (bad JSON, unexpected shape)."""

    status = 400
    code = "settings_file_error"


@dataclass
class ConnectResult:
    """What ``connect``/``disconnect`` did. Actions: added, updated, unchanged, removed, absent,
    skipped (a ``memlane`` MCP entry memlane did not write is left alone)."""

    settings_path: Path
    claude_json_path: Path | None
    hooks: dict[str, str] = field(default_factory=dict)
    mcp: str = "not requested"
    backups: list[Path] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(a in ("added", "updated", "removed") for a in [*self.hooks.values(), self.mcp])


def claude_config_dir() -> Path:
    """``$CLAUDE_CONFIG_DIR`` if set, else ``~/.claude``."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env).expanduser() if env else Path.home() / ".claude"


def default_settings_path() -> Path:
    """``settings.json`` in :func:`claude_config_dir`."""
    return claude_config_dir() / "settings.json"


def default_claude_json_path() -> Path:
    """``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json`` when that variable is set)."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env).expanduser() / ".claude.json" if env else Path.home() / ".claude.json"


def default_memlane_cmd() -> list[str]:
    """An absolute command that runs memlane: the ``memlane`` script beside this interpreter,
    else the one on PATH, else ``[python, -m, memlane]``."""
    for name in ("memlane", "memlane.exe"):
        cand = Path(sys.executable).parent / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return [str(cand)]
    found = shutil.which("memlane")
    return [os.path.abspath(found)] if found else [sys.executable, "-m", "memlane"]


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def entry_cmd(python: str, package_root: str) -> list[str]:
    """The light hook client run by ``python`` without ``site`` (the event name is appended):
    ``[python, -S, -I, -c, "import sys; sys.path.append(<package_root>); from
    memlane.hookclient import main; sys.exit(main())"]``.

    ``-S`` skips ``site`` (the venv's ``.pth`` files and site-packages scan, ~2-3 ms of every
    call, docs/hooks.md); ``-I`` (isolated: ``-E -P -s``) ignores ``PYTHON*`` variables and
    puts neither the working directory nor a script directory on ``sys.path``, so no file there
    can shadow a standard-library module. ``package_root`` (the directory holding the
    ``memlane`` package: the venv's site-packages, or ``src/`` of an editable install) is
    appended after the standard library. A program given with ``-c`` rather than a file:
    Claude Code reads exit code 2 as "block this prompt", and ``python FILE`` exits 2 when the
    file is gone (a venv rebuilt for another Python version); here a missing package is an
    ``ImportError``, exit 1, which Claude Code only reports.
    """
    return [python, "-S", "-I", "-c", _ENTRY_CODE.format(root=json.dumps(package_root, ensure_ascii=False))]


def default_hook_cmd() -> list[str]:
    """The absolute command that runs this install's light hook client (the event name is
    appended): :func:`entry_cmd` of this interpreter and the directory holding this
    ``memlane`` package. Without an interpreter path (``sys.executable`` empty, an embedded
    Python): the ``memlane-hook`` script on PATH, else ``[python, -m, memlane.hookclient]``."""
    if sys.executable:
        import memlane

        return entry_cmd(sys.executable, os.path.dirname(os.path.dirname(os.path.abspath(memlane.__file__))))
    found = shutil.which(HOOK_SCRIPT)
    return [os.path.abspath(found)] if found else [sys.executable, "-m", "memlane.hookclient"]


def _is_this_install(memlane_cmd: Sequence[str]) -> bool:
    """``memlane_cmd`` runs the memlane of this interpreter: the ``memlane`` script beside
    ``sys.executable``, or ``[sys.executable, -m, memlane]``."""
    cmd = list(memlane_cmd)
    if not sys.executable:
        return False
    here = Path(sys.executable).parent
    if len(cmd) == 1:
        exe = Path(cmd[0])
        return exe.name in ("memlane", "memlane.exe") and exe.parent == here
    return len(cmd) == 3 and cmd[1:] == ["-m", "memlane"] and Path(cmd[0]) == Path(sys.executable)


def hook_cmd_for(memlane_cmd: Sequence[str]) -> list[str]:
    """The light hook command that goes with ``memlane_cmd`` (the event name is appended):

    * this install (``memlane`` beside this interpreter, or ``[this python, -m, memlane]``) ->
      :func:`default_hook_cmd`, the interpreter without ``site`` running the client;
    * ``[<dir>/memlane]`` of another install -> ``[<dir>/memlane-hook]`` when that script
      exists (pip installs the two side by side);
    * ``[<python>, -m, memlane]`` with another interpreter -> ``[<python>, -m, memlane.hookclient]``;
    * anything else, or no ``memlane-hook`` beside it -> ``[*memlane_cmd, hook]``: the CLI's
      ``memlane hook EVENT``, which does the same but starts the full CLI first.
    """
    cmd = list(memlane_cmd)
    if _is_this_install(cmd):
        return default_hook_cmd()
    if len(cmd) == 1:
        exe = Path(cmd[0])
        stem, suffix = (exe.name[:-4], ".exe") if exe.name.endswith(".exe") else (exe.name, "")
        if stem == "memlane" and _executable(exe.with_name(HOOK_SCRIPT + suffix)):
            return [str(exe.with_name(HOOK_SCRIPT + suffix))]
    if len(cmd) == 3 and cmd[1:] == ["-m", "memlane"]:
        return [cmd[0], "-m", "memlane.hookclient"]
    return [*cmd, "hook"]


def _is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and isinstance(hook.get("command"), str) and bool(_OUR_HOOK.search(hook["command"]))


def _load(path: Path) -> tuple[dict[str, Any], bool]:
    if not path.exists():
        return {}, False
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if text.strip() else {}
    except (OSError, ValueError) as exc:
        raise SettingsFileError(f"{path}: cannot be read as JSON ({exc}); nothing was changed") from exc
    if not isinstance(data, dict):
        raise SettingsFileError(f"{path}: the top level is not a JSON object; nothing was changed")
    return data, True


def _sig(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
        return st.st_mtime_ns, st.st_size, st.st_ino
    except OSError:
        return None


def _edit_json(path: Path, mutate: Callable[[dict[str, Any]], Any]) -> tuple[Any, Path | None]:
    """Read ``path`` (through symlinks), apply ``mutate`` to a copy, and if it changed, back the
    file up and write it atomically, re-reading if the file changed meanwhile (up to 3 times).

    Returns ``(what mutate returned, backup path or None)``.

    Raises:
        SettingsFileError: malformed file or shape, or it kept changing under us.
    """
    real = Path(os.path.realpath(path))
    for _ in range(3):
        before = _sig(real)
        data, existed = _load(real)
        new = copy.deepcopy(data)
        result = mutate(new)
        if new == data:
            return result, None
        if _sig(real) != before:
            continue
        backup = None
        if existed:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            backup = real.with_name(f"{real.name}.memlane-backup-{stamp}")
            n = 1
            while backup.exists():
                backup, n = real.with_name(f"{real.name}.memlane-backup-{stamp}-{n}"), n + 1
            shutil.copy2(real, backup)
        real.parent.mkdir(parents=True, exist_ok=True)
        mode = (real.stat().st_mode & 0o777) if existed else 0o600
        fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(new, indent=2, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, real)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return result, backup
    raise SettingsFileError(f"{path} kept changing while memlane edited it; try again")


def _dry_run(path: Path, mutate: Callable[[dict[str, Any]], Any]) -> None:
    """Check that ``path`` parses and ``mutate`` accepts its shape, writing nothing."""
    data, _ = _load(Path(os.path.realpath(path)))
    mutate(data)


def _hooks_of(data: dict[str, Any], path: Path) -> dict[str, Any]:
    hooks = data.get("hooks")
    if hooks is None:
        return {}
    if not isinstance(hooks, dict):
        raise SettingsFileError(f"{path}: 'hooks' is not an object; nothing was changed")
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise SettingsFileError(f"{path}: 'hooks.{event}' is not a list; nothing was changed")
    return hooks


def _strip_ours(groups: list[Any]) -> tuple[list[Any], int]:
    kept_groups, removed = [], 0
    for group in groups:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            kept = [h for h in group["hooks"] if not _is_ours(h)]
            if len(kept) != len(group["hooks"]):
                removed += len(group["hooks"]) - len(kept)
                if not kept:
                    continue
                group["hooks"] = kept
        kept_groups.append(group)
    return kept_groups, removed


def _connect_hooks(path: Path, hook_cmd: Sequence[str]) -> Callable[[dict[str, Any]], dict[str, str]]:
    def mutate(data: dict[str, Any]) -> dict[str, str]:
        hooks = _hooks_of(data, path)
        actions = {}
        for cc_event, timeout in HOOK_TIMEOUTS_S.items():
            cmd = shlex.join([*hook_cmd, normalize_event_name(cc_event)])
            groups = hooks.get(cc_event, [])
            ours = [
                h
                for g in groups
                if isinstance(g, dict) and isinstance(g.get("hooks"), list)
                for h in g["hooks"]
                if _is_ours(h)
            ]
            if (
                len(ours) == 1
                and ours[0].get("type") == "command"
                and ours[0]["command"] == cmd
                and ours[0].get("timeout") == timeout
            ):
                actions[cc_event] = "unchanged"
                continue
            groups, _ = _strip_ours(groups)
            group: dict[str, Any] = {} if cc_event in NO_MATCHER_EVENTS else {"matcher": ""}
            group["hooks"] = [{"type": "command", "command": cmd, "timeout": timeout}]
            groups.append(group)
            hooks[cc_event] = groups
            actions[cc_event] = "updated" if ours else "added"
        if hooks:
            data["hooks"] = hooks
        return actions

    return mutate


def _disconnect_hooks(path: Path) -> Callable[[dict[str, Any]], dict[str, str]]:
    def mutate(data: dict[str, Any]) -> dict[str, str]:
        hooks = _hooks_of(data, path)
        actions = {e: "absent" for e in HOOK_TIMEOUTS_S}
        for event in list(hooks):
            groups, removed = _strip_ours(hooks[event])
            if removed:
                actions[event] = "removed"
                if groups:
                    hooks[event] = groups
                else:
                    del hooks[event]
        if "hooks" in data and not hooks and any(a == "removed" for a in actions.values()):
            del data["hooks"]
        return actions

    return mutate


def _is_our_mcp(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("args"), list):
        return False
    words = [str(entry.get("command", "")), *map(str, entry["args"])]
    return entry["args"][-2:] == ["mcp", "serve"] and any("memlane" in w for w in words)


def _servers_of(data: dict[str, Any], path: Path) -> dict[str, Any]:
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise SettingsFileError(f"{path}: 'mcpServers' is not an object; nothing was changed")
    return servers


def _connect_mcp(path: Path, memlane_cmd: Sequence[str]) -> Callable[[dict[str, Any]], str]:
    def mutate(data: dict[str, Any]) -> str:
        servers = _servers_of(data, path)
        desired = {"type": "stdio", "command": memlane_cmd[0], "args": [*memlane_cmd[1:], "mcp", "serve"], "env": {}}
        existing = servers.get(MCP_NAME)
        if existing == desired:
            return "unchanged"
        if existing is not None and not _is_our_mcp(existing):
            return "skipped"
        servers[MCP_NAME] = desired
        data["mcpServers"] = servers
        return "updated" if existing is not None else "added"

    return mutate


def _disconnect_mcp(path: Path) -> Callable[[dict[str, Any]], str]:
    def mutate(data: dict[str, Any]) -> str:
        servers = _servers_of(data, path)
        if MCP_NAME not in servers:
            return "absent"
        if not _is_our_mcp(servers[MCP_NAME]):
            return "skipped"
        del servers[MCP_NAME]
        if not servers:
            data.pop("mcpServers", None)
        return "removed"

    return mutate


def connect(
    settings_path: Path,
    memlane_cmd: Sequence[str],
    *,
    claude_json_path: Path | None = None,
    register_mcp: bool = True,
    hook_cmd: Sequence[str] | None = None,
) -> ConnectResult:
    """Add our SessionStart, UserPromptSubmit, SessionEnd, PreCompact, PostToolUse and
    PostToolUseFailure hooks (each running ``<hook_cmd> <event>``; ``hook_cmd`` defaults to :func:`hook_cmd_for` ``(memlane_cmd)``, the
    light client) to ``settings_path`` and, if ``register_mcp``, the user-scope MCP server
    ``memlane`` (``<memlane_cmd> mcp serve``, stdio) to ``claude_json_path`` (default
    ``~/.claude.json``). Idempotent; other hooks, servers and keys are kept; an older form of
    our hook command is replaced.

    Raises:
        SettingsFileError: a file is not valid JSON or has an unexpected shape (nothing written
            to that file; the settings file is checked and written before ``~/.claude.json``).
        OSError: a file could not be written.
    """
    if not memlane_cmd:
        raise ValueError("memlane_cmd must name the memlane command")
    hook_cmd = list(hook_cmd) if hook_cmd else hook_cmd_for(memlane_cmd)
    claude_json = Path(claude_json_path or default_claude_json_path())
    _dry_run(Path(settings_path), _connect_hooks(Path(settings_path), hook_cmd))
    if register_mcp:
        _dry_run(claude_json, _connect_mcp(claude_json, memlane_cmd))
    result = ConnectResult(Path(settings_path), None)
    result.hooks, backup = _edit_json(Path(settings_path), _connect_hooks(Path(settings_path), hook_cmd))
    result.backups += [backup] if backup else []
    if register_mcp:
        result.claude_json_path = claude_json
        result.mcp, backup = _edit_json(result.claude_json_path, _connect_mcp(result.claude_json_path, memlane_cmd))
        result.backups += [backup] if backup else []
    return result


def disconnect(
    settings_path: Path, *, claude_json_path: Path | None = None, unregister_mcp: bool = True
) -> ConnectResult:
    """Remove only our hooks (commands running ``from memlane.hookclient import main``,
    ``memlane-hook``, ``-m memlane.hookclient`` or ``memlane hook``) from ``settings_path``,
    dropping groups, event lists and the ``hooks`` object that become empty, and our
    ``memlane`` MCP server from ``claude_json_path``. Same backups, atomicity and errors as
    :func:`connect`; a missing file is left missing."""
    claude_json = Path(claude_json_path or default_claude_json_path())
    _dry_run(Path(settings_path), _disconnect_hooks(Path(settings_path)))
    if unregister_mcp:
        _dry_run(claude_json, _disconnect_mcp(claude_json))
    result = ConnectResult(Path(settings_path), None)
    result.hooks, backup = _edit_json(Path(settings_path), _disconnect_hooks(Path(settings_path)))
    result.backups += [backup] if backup else []
    if unregister_mcp:
        result.claude_json_path = claude_json
        result.mcp, backup = _edit_json(result.claude_json_path, _disconnect_mcp(result.claude_json_path))
        result.backups += [backup] if backup else []
    return result
