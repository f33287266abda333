"""Running the daemon's HTTP server: ``uvicorn.run`` plus a hook at the start of its shutdown.

uvicorn's graceful shutdown waits for every request in flight before the application's own
shutdown runs. A request that waits on background work (a ``wait: true`` session-end waiting
for the LLM judge) would hold the whole shutdown for as long as that work takes, so
``on_shutdown`` runs the moment the server stops accepting connections (SIGTERM, Ctrl-C),
before it waits for those requests: the daemon stops its judge there, and the waiting
requests answer at once.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: uvicorn's exit status when the server did not start (``uvicorn.main.STARTUP_FAILURE``).
STARTUP_FAILURE = 3


def run_server(app: Any, *, host: str, port: int, log_level: str, on_shutdown: Callable[[], None]) -> None:
    """Serve ``app`` like ``uvicorn.run(app, host=..., port=..., log_level=..., access_log=False)``,
    calling ``on_shutdown()`` (on the event loop: it must not block) when a shutdown begins.

    Returns after a graceful shutdown; Ctrl-C returns normally, as with ``uvicorn.run``.

    Raises:
        SystemExit: the server could not start (status 1 from uvicorn for a bind failure, else 3).
    """
    import uvicorn

    class _Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            try:
                on_shutdown()
            except Exception:  # the shutdown itself must go on
                log.exception("the shutdown hook failed")
            await super().shutdown(sockets=sockets)

    server = _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False))
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C, re-raised by uvicorn after its graceful shutdown
        pass
    if not server.started:
        sys.exit(STARTUP_FAILURE)
