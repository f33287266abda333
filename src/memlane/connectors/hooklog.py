"""The connector's log (``$MEMLANE_HOME/logs/hooks.log``), without importing ``logging`` up front.

The hook modules (:mod:`memlane.hookclient`, :mod:`memlane.connectors.transcript`,
:mod:`memlane.connectors.spool`) log through a :class:`LazyLogger`. Where records go:

* in the light hook process (``memlane-hook``), :func:`direct_to` points every logger at a
  :class:`LogFile`: each record is formatted here, as logging's
  ``"%(asctime)s %(levelname)s %(name)s: %(message)s"`` would, and appended to the file.
  ``logging`` (with traceback, threading, string, weakref) is never imported: it was the
  largest import of the hook's start-up;
* anywhere else (the daemon, ``memlane hook``, the tests) a record goes to
  ``logging.getLogger(name)``, imported on the first record, so handlers and ``caplog`` see it
  as before; :func:`file_handler` gives the ``logging`` handler that writes the same file.

The file: created with mode 0600 in a 0700 directory, opened on the first record (a hook that
logs nothing touches no file), appended with ``O_APPEND`` (hooks running at once each add whole
lines), rotated to ``.1`` / ``.2`` past 1 MB (``RotatingFileHandler``'s names). Paths are
strings handled with ``os.path`` (``pathlib`` is kept out of the hook's start-up).
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging

#: Rotation: the file's size before it is rotated (bytes) and the rotated copies kept.
MAX_BYTES = 1_000_000
BACKUPS = 2
_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}
#: Least level written in direct mode (logging's logger is set to the same level by the client).
DIRECT_LEVEL = _LEVELS["INFO"]


class LogFile:
    """Appends text to one log file (mode 0600), rotating it past ``max_bytes``.

    Errors are swallowed: a log must never break a hook.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> None:
        self.path = os.fspath(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fd: int | None = None

    def _open(self) -> int:
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)

    def write(self, text: str) -> None:
        """Append ``text`` (one or more whole lines, newline included)."""
        try:
            data = text.encode("utf-8", errors="replace")
            if self._fd is None:
                self._fd = self._open()
            if os.fstat(self._fd).st_size + len(data) > self.max_bytes:
                self._rotate()
                self._fd = self._open()
            os.write(self._fd, data)
        except Exception:  # noqa: BLE001 - logging must not break the hook
            pass

    def _rotate(self) -> None:
        self.close()
        for i in range(self.backups - 1, 0, -1):
            src = f"{self.path}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")

    def close(self) -> None:
        """Close the file (a later write opens it again)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


_sink: LogFile | None = None
_direct = False


def direct_to(sink: LogFile | None) -> None:
    """From now on, send every :class:`LazyLogger`'s records straight to ``sink``, never through
    ``logging`` (``None``: drop them, e.g. before the home is known, so nothing reaches
    logging's last-resort handler on stderr)."""
    global _sink, _direct
    if _sink is not None and _sink is not sink:
        _sink.close()
    _sink, _direct = sink, True


def format_line(level: str, name: str, message: str, *, now: float | None = None, exc_text: str = "") -> str:
    """One record as logging's ``"%(asctime)s %(levelname)s %(name)s: %(message)s"`` formats it
    (local time, ``YYYY-mm-dd HH:MM:SS,mmm``), the traceback on the following lines, newline-ended."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    line = f"{stamp},{int(now * 1000) % 1000:03d} {level} {name}: {message}"
    return line + ("\n" + exc_text.rstrip("\n") if exc_text else "") + "\n"


class LazyLogger:
    """A stand-in for ``logging.getLogger(name)`` with ``debug``/``info``/``warning``/``error``/
    ``exception`` (logging's ``msg % args`` formatting). See the module docstring for where a
    record goes."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: logging.Logger | None = None

    def _log(self, level: str, msg: object, args: tuple[object, ...], exc_info: bool = False) -> None:
        if _direct:
            if _sink is None or _LEVELS[level] < DIRECT_LEVEL:
                return
            try:
                message = str(msg) % args if args else str(msg)
            except (TypeError, ValueError):
                message = f"{msg} {args!r}"
            exc_text = ""
            if exc_info and sys.exc_info()[0] is not None:
                import traceback

                exc_text = traceback.format_exc()
            _sink.write(format_line(level, self.name, message, exc_text=exc_text))
            return
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self.name)
        self._logger.log(_LEVELS[level], msg, *args, exc_info=exc_info)

    def debug(self, msg: object, *args: object) -> None:
        """Log at DEBUG."""
        self._log("DEBUG", msg, args)

    def info(self, msg: object, *args: object) -> None:
        """Log at INFO."""
        self._log("INFO", msg, args)

    def warning(self, msg: object, *args: object) -> None:
        """Log at WARNING."""
        self._log("WARNING", msg, args)

    def error(self, msg: object, *args: object) -> None:
        """Log at ERROR."""
        self._log("ERROR", msg, args)

    def exception(self, msg: object, *args: object) -> None:
        """Log at ERROR with the exception being handled."""
        self._log("ERROR", msg, args, exc_info=True)


def file_handler(path: str | os.PathLike[str]) -> logging.Handler:
    """A ``logging`` handler writing ``path`` through a :class:`LogFile` in the same format (for
    processes that use ``logging``: ``memlane hook``, the tests). Imports ``logging``."""
    import logging

    class _Handler(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.file = LogFile(path)
            self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

        def emit(self, record: logging.LogRecord) -> None:
            try:
                self.file.write(self.format(record) + "\n")
            except Exception:  # noqa: BLE001 - logging must not break the hook
                pass

        def close(self) -> None:
            self.file.close()
            super().close()

    return _Handler()
