"""The one starter of ``memlane serve`` child processes, for the benchmarks and the tests.

:class:`Daemon` runs ``python -m memlane serve`` (the interpreter running the caller) on a
loopback port with ``MEMLANE_HOME`` set, its output appended to a log file; :meth:`Daemon.wait_ready`
polls ``GET /health``. The benchmarks that need a daemon call :func:`start_daemon`; the tests'
``start_daemon`` fixture (tests/conftest.py) builds an isolated :class:`Daemon` (no ``MEMLANE_*``
variable of the caller, no config.yaml).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from memlane.auth import CLIENT_HEADER, auth_headers

#: Characters of the daemon's log quoted in a start-up failure.
LOG_TAIL = 4000


class DaemonStartError(RuntimeError):
    """The daemon exited, or did not answer ``GET /health``, before it was ready (the message
    ends with the tail of its log)."""


def free_port() -> int:
    """A loopback TCP port nobody listened on a moment ago (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """One ``python -m memlane serve`` child process on ``127.0.0.1``, started by the constructor
    (not yet ready: call :meth:`wait_ready`).

    Args:
        home: the data directory (``MEMLANE_HOME``); must exist.
        log: file the daemon's stdout and stderr are appended to (default ``home/daemon.log``).
        port: TCP port (0 = a free one, :func:`free_port`).
        env: extra environment variables for the child (applied last).
        isolated: drop the caller's ``MEMLANE_*`` variables and point ``MEMLANE_CONFIG`` at a
            file that does not exist, so no config.yaml is read (tests); otherwise the caller's
            environment is inherited (benchmarks: the user's settings apply).
    """

    def __init__(
        self,
        home: Path,
        log: Path | None = None,
        *,
        port: int = 0,
        env: dict[str, str] | None = None,
        isolated: bool = False,
    ) -> None:
        self.home = home
        self.log_path = log if log is not None else home / "daemon.log"
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        child = {k: v for k, v in os.environ.items() if not (isolated and k.startswith("MEMLANE_"))}
        child.update(MEMLANE_HOME=str(home), MEMLANE_LOG_LEVEL="warning")
        if isolated:
            child["MEMLANE_CONFIG"] = str(home / "no-such-config.yaml")
        child.update(env or {})
        with open(self.log_path, "ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memlane", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=child,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def headers(self) -> dict[str, str]:
        """The token header for this daemon's home (as memlane's own clients send it)."""
        return {CLIENT_HEADER: "test", **auth_headers(self.home)}

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx.Client on this daemon with the token header (the caller closes it)."""
        kwargs.setdefault("timeout", 30)
        return httpx.Client(base_url=self.url, headers=self.headers, **kwargs)

    def log(self) -> str:
        """The daemon's log so far."""
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Poll ``GET /health`` every 0.1 s until it answers 200.

        Raises:
            DaemonStartError: the process exited, or no 200 within ``timeout_s`` seconds (the
                process is then killed).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DaemonStartError(
                    f"daemon exited with {self.proc.returncode} before it was ready:\n{self.log()[-LOG_TAIL:]}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise DaemonStartError(f"daemon not ready after {timeout_s:.0f} s:\n{self.log()[-LOG_TAIL:]}")

    def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 30.0) -> None:
        """Send ``sig`` (if still running) and wait for the exit; SIGKILL after ``timeout_s`` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)


def start_daemon(
    home: Path, port: int, timeout_s: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start a :class:`Daemon` on ``home`` and ``port`` with the caller's environment plus ``env``,
    wait until it is ready, and return its process (the caller terminates it).

    Raises:
        DaemonStartError: it exited or did not become ready within ``timeout_s`` seconds.
    """
    daemon = Daemon(home, port=port, env=env)
    daemon.wait_ready(timeout_s)
    return daemon.proc
