"""A small HTTP client for the CLI: talks to a running daemon, turns errors into clear messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from memlane.auth import CLIENT_HEADER, auth_headers
from memlane.config import default_home
from memlane.errors import MemlaneError


class DaemonUnavailable(MemlaneError):
    """No daemon answers at the configured URL."""

    status = 503
    code = "daemon_unavailable"


class DaemonError(MemlaneError):
    """The daemon answered with an error (its code and message are kept)."""


class Client:
    """JSON over HTTP to the daemon at ``base_url``; timeouts in seconds.

    Every request carries the token of ``home`` (``$MEMLANE_HOME/token``, see
    :mod:`memlane.auth`) and the ``X-Memlane-Client`` header, so the user never types either.
    """

    def __init__(self, base_url: str, timeout_s: float = 30.0, *, home: Path | None = None,
                 client_name: str = "cli") -> None:
        self.base_url = base_url.rstrip("/")
        headers = {CLIENT_HEADER: client_name, **auth_headers(home if home is not None else default_home())}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers, trust_env=False)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request; returns the decoded JSON.

        Raises:
            DaemonUnavailable: connection refused or timed out.
            DaemonError: a 4xx/5xx answer (message from the error shape).
        """
        try:
            r = self._http.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise DaemonUnavailable(
                f"no memlane daemon at {self.base_url} ({exc.__class__.__name__}); start it with `memlane serve`"
            ) from exc
        except httpx.TimeoutException as exc:
            raise DaemonUnavailable(f"the daemon at {self.base_url} did not answer in time") from exc
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
                e = DaemonError(f"{err['code']}: {err['message']}", details=err.get("details"))
            except Exception:
                e = DaemonError(f"HTTP {r.status_code}: {r.text[:200]}")
            e.status = r.status_code
            raise e
        return r.json()

    def close(self) -> None:
        self._http.close()
