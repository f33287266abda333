"""The Claude Code CLI as an LLM: one ``claude -p`` subprocess per ``generate``.

Command line: ``claude -p <prompt> --model <model> --no-session-persistence --output-format text``
with stdin on ``/dev/null``; the reply is stdout, stripped. The prompt goes on **stdin** instead
(``claude -p`` with no prompt argument reads it from stdin) when it is larger than
:data:`ARGV_PROMPT_LIMIT_BYTES` (Linux caps one argv string at 128 KiB), contains a NUL byte
(not representable in argv) or starts with ``-`` (it would be parsed as an option).

The child runs in its own session / process group (POSIX); on a timeout the whole group is
killed with SIGKILL, so tools the CLI spawned do not outlive the call. :meth:`ClaudeCodeProvider.close`
does the same to every call in flight (a daemon shutting down never waits on the CLI).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from typing import Any

from memlane.httpjson import BODY_EXCERPT_CHARS
from memlane.providers.base import LlmError, LlmTimeout, check_timeout

DEFAULT_MODEL = "haiku"
DEFAULT_COMMAND = "claude"
#: Prompts above this many UTF-8 bytes are passed on stdin rather than in argv.
ARGV_PROMPT_LIMIT_BYTES = 100_000


def prompt_via_stdin(prompt: str) -> bool:
    """Whether ``prompt`` must go on stdin: > 100 KB in UTF-8, has a NUL, or starts with ``-``."""
    return prompt.startswith("-") or "\x00" in prompt or len(prompt.encode("utf-8")) > ARGV_PROMPT_LIMIT_BYTES


#: Set in the environment of the judge's subprocess; memlane's hook command then does nothing.
HOOKS_DISABLED_ENV = "MEMLANE_HOOKS_DISABLED"


class ClaudeCodeProvider:
    """Text from the Claude Code CLI (uses the CLI's own login; no API key here).

    Args:
        model: passed as ``--model`` (``"haiku"``, ``"sonnet"``, a full model id);
            ``name`` is ``"claude-code:{model}"``.
        command: the executable, a name looked up on PATH or a path.
        timeout_s: default per-call timeout, seconds (> 0); covers the whole process run.

    ``max_tokens`` is accepted by ``generate`` for interface compatibility and ignored (the
    CLI has no such option). Thread-safe: every call is its own process; :meth:`close` kills
    the process groups of the calls in flight.
    """

    kind = "claude-code"

    def __init__(self, model: str = DEFAULT_MODEL, command: str = DEFAULT_COMMAND, timeout_s: float = 60.0) -> None:
        self.model = model or DEFAULT_MODEL
        self.command = command or DEFAULT_COMMAND
        self.timeout_s = check_timeout(timeout_s)
        self.name = f"{self.kind}:{self.model}"
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def argv(self, prompt: str) -> list[str]:
        """The command line for ``prompt`` (without it when it goes on stdin)."""
        head = [self.command, "-p"] + ([] if prompt_via_stdin(prompt) else [prompt])
        return head + ["--model", self.model, "--no-session-persistence", "--output-format", "text"]

    def _fail(self, message: str, cls: type[LlmError] = LlmError, **details: Any) -> LlmError:
        return cls(f"{self.name}: {message}", details={"provider": self.name, "command": self.command, **details})

    def generate(
        self,
        prompt: str,
        *,
        timeout_s: float | None = None,
        max_tokens: int | None = None,
        schema: dict[str, Any] | None = None,
    ) -> str:
        """Run the CLI on ``prompt`` and return its stdout, stripped (think blocks left in).

        Args:
            timeout_s: seconds for this call (> 0); ``None`` = the constructor's ``timeout_s``.
            max_tokens: ignored.
            schema: ignored (no structured output here: the caller's tolerant parser reads
                the JSON the prompt asks for).

        Raises:
            LlmTimeout: the process did not finish in time (it and its group are killed);
                the message names the provider and the timeout in seconds.
            LlmError: the command cannot be started, or it exits non-zero (message has the
                exit code and the first 200 characters of stderr, or of stdout if stderr is empty).
            ValueError: a non-positive ``timeout_s``.
        """
        timeout = check_timeout(timeout_s) if timeout_s is not None else self.timeout_s
        stdin_data = prompt.encode("utf-8") if prompt_via_stdin(prompt) else None
        if self._closed:
            raise self._fail("the provider was closed (shutting down); not started")
        try:
            # Trigger: the judge is itself a Claude Code session.
            # Why: run in the daemon's directory it could load that project's CLAUDE.md and hooks,
            #      and memlane's own hooks would record the judge as a user session (recursion).
            # Outcome: a neutral working directory, and MEMLANE_HOOKS_DISABLED=1 so our hook
            #          command answers empty without calling the daemon.
            proc = subprocess.Popen(
                self.argv(prompt),
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                cwd=tempfile.gettempdir(),
                env={**os.environ, HOOKS_DISABLED_ENV: "1"},
            )
        except OSError as exc:
            raise self._fail(f"cannot run {self.command!r}: {type(exc).__name__}: {exc}") from exc
        with self._lock:
            self._running.add(proc)
            closed = self._closed
        if closed:  # close() ran while the process was starting
            _signal_group(proc)
        try:
            out, err = proc.communicate(input=stdin_data, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            raise self._fail(
                f"timed out after {timeout:g} s (timeout_s={timeout:g}); {self.command!r} was killed",
                LlmTimeout,
                timeout_s=timeout,
            ) from exc
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
        stdout = out.decode("utf-8", errors="replace")
        if self._closed and proc.returncode != 0:
            raise self._fail(
                f"{self.command!r} was killed: the provider was closed (shutting down)", exit_code=proc.returncode
            )
        if proc.returncode != 0:
            stderr = err.decode("utf-8", errors="replace").strip() or stdout.strip()
            excerpt = stderr[:BODY_EXCERPT_CHARS]
            raise self._fail(
                f"{self.command!r} exited with code {proc.returncode}: {excerpt}",
                exit_code=proc.returncode,
                stderr=excerpt,
            )
        return stdout.strip()

    def available(self) -> bool:
        """``command`` is an executable found on PATH (or an executable path). Never raises."""
        try:
            return shutil.which(self.command) is not None
        except Exception:  # noqa: BLE001 - a probe never raises
            return False

    def close(self) -> None:
        """Kill the process group of every call in flight (SIGKILL; the calls raise
        :class:`LlmError` saying so) and refuse new calls. Does not wait; idempotent."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for proc in running:
            if proc.returncode is None:  # not reaped yet: its pid is still its own
                _signal_group(proc)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, command={self.command!r})"


def _signal_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group (POSIX; just ``proc`` elsewhere) without waiting."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: the group id is the pid
        else:  # pragma: no cover - Windows
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group (POSIX; just ``proc`` elsewhere), reap it, close its pipes."""
    _signal_group(proc)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
