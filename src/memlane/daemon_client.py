"""The one HTTP client of the daemon for the CLI and the MCP stdio server.

Every request carries the token of the home (``$MEMLANE_HOME/token``, :mod:`memlane.auth`) and
the ``X-Memlane-Client`` header naming the surface. Failures come out as two exceptions:

* :class:`DaemonUnavailable` (HTTP-like status 503, code ``daemon_unavailable``): nothing answers
  at the URL, or it did not answer in time;
* :class:`DaemonError`: the daemon answered 4xx/5xx; its code, message and details are kept.

The hook commands use the stdlib client of :mod:`memlane.hookclient` instead (they must start
without importing httpx).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from memlane.auth import CLIENT_HEADER, auth_headers
from memlane.errors import MemlaneError

__all__ = ["DaemonClient", "DaemonError", "DaemonUnavailable"]


class DaemonUnavailable(MemlaneError):
    """No memlane daemon answers at the configured URL (refused, unreachable or too slow)."""

    status = 503
    code = "daemon_unavailable"


class DaemonError(MemlaneError):
    """The daemon answered with an error.

    Attributes:
        status: the HTTP status of the answer.
        daemon_code: the ``error.code`` of the daemon's error shape, or None when the answer
            was not in that shape.
        daemon_message: the ``error.message`` verbatim (or the description of the odd answer).
        details: the ``error.details`` object, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        daemon_code: str | None,
        daemon_message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, details=details)
        self.status = status
        self.daemon_code = daemon_code
        self.daemon_message = daemon_message


class DaemonClient:
    """JSON over HTTP to the daemon at ``base_url``.

    Args:
        base_url: e.g. ``http://127.0.0.1:7437``.
        timeout_s: per-request timeout, seconds.
        home: the home whose token is sent (default: the configured home).
        client_name: the ``X-Memlane-Client`` value (``cli``, ``mcp``, ...).
        transport: an httpx transport (default: the network).
    """

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 30.0,
        *,
        home: Path | None = None,
        client_name: str = "cli",
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if home is None:
            from memlane.config import default_home

            home = default_home()
        self.base_url = base_url.rstrip("/")
        headers = {CLIENT_HEADER: client_name, **auth_headers(home)}
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout_s, headers=headers, transport=transport, trust_env=False
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request (``kwargs`` as for :meth:`httpx.Client.request`); returns the decoded JSON.

        Raises:
            DaemonUnavailable: connection refused, timed out or broken.
            DaemonError: a 4xx/5xx answer, or a 2xx answer that is not JSON.
        """
        try:
            r = self._http.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise DaemonUnavailable(
                f"memlane daemon not reachable at {self.base_url}; start it with `memlane serve`"
            ) from exc
        except httpx.TimeoutException as exc:
            raise DaemonUnavailable(
                f"memlane daemon at {self.base_url} did not answer in time ({type(exc).__name__}); try again"
            ) from exc
        except httpx.HTTPError as exc:
            raise DaemonUnavailable(f"memlane daemon at {self.base_url} failed: {type(exc).__name__}: {exc}") from exc
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code >= 400:
            err = body.get("error") if isinstance(body, dict) else None
            if isinstance(err, dict) and isinstance(err.get("message"), str):
                code = str(err.get("code"))
                details = err.get("details") if isinstance(err.get("details"), dict) else None
                raise DaemonError(
                    f"{code}: {err['message']}",
                    status=r.status_code,
                    daemon_code=code,
                    daemon_message=err["message"],
                    details=details,
                )
            text = f"memlane daemon at {self.base_url} answered HTTP {r.status_code}: {r.text[:200]}"
            raise DaemonError(text, status=r.status_code, daemon_code=None, daemon_message=text)
        if body is None:
            text = f"unexpected answer from {self.base_url}{path} (not JSON): is this a memlane daemon?"
            raise DaemonError(text, status=r.status_code, daemon_code=None, daemon_message=text)
        return body

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()
