"""The CLI's daemon client: :class:`memlane.daemon_client.DaemonClient` (re-exported here with
its two errors), with a missing daemon worded for a terminal."""

from __future__ import annotations

from typing import Any

import httpx

from memlane.config import load_settings
from memlane.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

__all__ = ["Client", "DaemonError", "DaemonUnavailable", "client_for"]


class Client(DaemonClient):
    """:class:`DaemonClient` for the CLI (``X-Memlane-Client: cli`` by default).

    When nothing listens at the URL, :meth:`request` raises :class:`DaemonUnavailable` saying
    ``no memlane daemon at URL (ConnectError); start it with `memlane serve```; every other
    failure is the shared client's.
    """

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """As :meth:`DaemonClient.request`.

        Raises:
            DaemonUnavailable: connection refused, timed out or broken.
            DaemonError: a 4xx/5xx answer, or a 2xx answer that is not JSON.
        """
        try:
            return super().request(method, path, **kwargs)
        except DaemonUnavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, (httpx.ConnectError, httpx.ConnectTimeout)):
                raise DaemonUnavailable(
                    f"no memlane daemon at {self.base_url} ({type(cause).__name__}); start it with `memlane serve`"
                ) from cause
            raise


def client_for(url: str | None) -> Client:
    """The CLI's client of the daemon at ``url``, or of the configured one (``settings.url``:
    ``daemon_url``, else ``http://{host}:{port}``) when ``url`` is None; authenticated with the
    token of the configured home.

    Raises:
        ConfigError: the settings are invalid.
    """
    settings = load_settings()
    return Client(url or settings.url, home=settings.home)
