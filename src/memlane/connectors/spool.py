"""The fail-open spool: hook events the daemon could not take wait on disk for the next hook.

Layout: one JSON file per event in ``$MEMLANE_HOME/spool/``, named
``<time_ns, 20 digits>-<pid>-<random>.json`` so that name order is time order. Each file holds
``{"endpoint": "/api/hooks/...", "body": {...}, "spooled_at": ISO-8601, "attempts": int}``.
Files are written atomically (a hidden temp file in the same directory, then a rename), mode
0600, and not fsynced: a spooled event survives the hook process or the daemon dying, but a
power loss or OS crash within the kernel's writeback delay (seconds) can lose it (a file left
empty or truncated is moved to ``rejected/`` on replay). Why: the spool is written while a
user waits on a hook, and on a busy disk two fsyncs (file and directory) take a large share
of a hook's budget with the daemon down (docs/hooks.md has the measurement).

Caps (per spool directory): at most :data:`MAX_FILES` files and :data:`MAX_BYTES` bytes; the
oldest files are dropped, each with a log line. Events the daemon rejects (any 4xx) or that
failed :data:`MAX_ATTEMPTS` times with a 5xx or a read timeout move to ``spool/rejected/``
(kept for inspection, capped the same way), so nothing is retried forever.

Standard library only (no httpx at import time): the light hook client
(:mod:`memlane.hookclient`) writes and replays the spool through :func:`replay_with` and its
own HTTP sender; :func:`replay_spool` does the same through an httpx client, so either path
replays what the other spooled. The functions the hook calls work on path strings
(``os.path``) and JSON through :mod:`memlane.connectors.cjson`: ``pathlib``, ``json`` and
``contextlib`` (with ``re``, ``enum``, ``collections``) cost a hook more than its work
(docs/hooks.md). Paths may be given as ``str`` or ``os.PathLike``.
"""

from __future__ import annotations

import os
import time

from memlane.connectors import cjson
from memlane.connectors.hooklog import LazyLogger

# The light hook client (memlane.hookclient) imports this module: typing and httpx stay out of
# its start-up (TYPE_CHECKING = False is the idiom type checkers read as typing.TYPE_CHECKING).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    import httpx

    #: How a replay sends one event: ``post(endpoint, body_bytes, timeout_s) -> (status, text)``.
    #: Raises :class:`DeliveryTimeout` when the request went out but no answer came in time, and
    #: :class:`DeliveryError` for any other transport failure (refused, reset, connect timeout).
    Post = Callable[[str, bytes, float], tuple[int, str]]

# logging is imported on the first record only (memlane.connectors.hooklog)
log = LazyLogger(__name__)

MAX_FILES = 1000
MAX_BYTES = 50 * 1024 * 1024
MAX_ATTEMPTS = 5
REJECTED = "rejected"


class DeliveryError(Exception):
    """The event could not be delivered (no HTTP answer); the spooled file is kept as it is."""


class DeliveryTimeout(DeliveryError):
    """The request was sent but the answer did not come within the timeout (counts as an attempt)."""


def _write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` (mode 0600): a hidden temp file in the same directory, then
    a rename, so a reader sees the whole old file or the whole new one. No fsync (module
    docstring). Raises OSError (the temp file is removed)."""
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _utc_iso(time_ns: int) -> str:
    """``time_ns`` (ns since the epoch) as ``datetime.now(timezone.utc).isoformat()`` prints it."""
    secs, ns = divmod(time_ns, 1_000_000_000)
    micros = ns // 1000
    stamp = "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*time.gmtime(secs)[:6])
    return f"{stamp}.{micros:06d}+00:00" if micros else f"{stamp}+00:00"


def spool_dir_for(home: str | os.PathLike[str]) -> str:
    """``{home}/spool`` (a path string)."""
    return os.path.join(os.fspath(home), "spool")


def _spooled_names(spool_dir: str) -> list[str]:
    """The names of the spooled event files in time order (temp files and ``rejected/`` excluded)."""
    try:
        return sorted(n for n in os.listdir(spool_dir) if n.endswith(".json") and not n.startswith("."))
    except OSError:
        return []


def spooled_files(spool_dir: str | os.PathLike[str]) -> list[Path]:
    """The spooled event files in time order (temp files and ``rejected/`` excluded)."""
    from pathlib import Path  # not on the hook's path, which lists names (_spooled_names)

    return [Path(spool_dir) / n for n in _spooled_names(os.fspath(spool_dir))]


def enforce_caps(spool_dir: str | os.PathLike[str], max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> int:
    """Drop the oldest files until at most ``max_files`` files and ``max_bytes`` bytes remain.

    Returns the number of files dropped (each logged)."""
    spool_dir = os.fspath(spool_dir)
    names = _spooled_names(spool_dir)
    sizes = []
    for name in names:
        try:
            sizes.append(os.stat(os.path.join(spool_dir, name)).st_size)
        except OSError:
            sizes.append(0)
    total, count, dropped = sum(sizes), len(names), 0
    for name, size in zip(names, sizes):
        if count <= max_files and total <= max_bytes:
            break
        try:
            os.unlink(os.path.join(spool_dir, name))
            log.warning("spool full (%d files, %d bytes): dropped the oldest event %s", count, total, name)
            dropped += 1
        except OSError as exc:
            log.warning("spool: cannot drop %s (%s)", name, exc)
        count -= 1
        total -= size
    return dropped


def spool_event(
    spool_dir: str | os.PathLike[str],
    endpoint: str,
    body: dict[str, Any],
    *,
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_BYTES,
) -> str | None:
    """Save one event for later delivery; returns its file's path, or ``None`` if it could not be
    saved (an event larger than ``max_bytes`` on its own, or an I/O error; logged, never raised)."""
    try:
        now_ns = time.time_ns()
        data = cjson.dumps(
            {"endpoint": endpoint, "body": body, "attempts": 0, "spooled_at": _utc_iso(now_ns)}, ensure_ascii=False
        ).encode("utf-8", "replace")  # a lone surrogate: "?"
        if len(data) > max_bytes:
            log.warning("spool: an event of %d bytes is over the %d-byte cap; not spooled", len(data), max_bytes)
            return None
        spool_dir = os.fspath(spool_dir)
        os.makedirs(spool_dir, mode=0o700, exist_ok=True)
        path = os.path.join(spool_dir, f"{now_ns:020d}-{os.getpid()}-{os.urandom(4).hex()}.json")
        _write_atomic(path, data)
        enforce_caps(spool_dir, max_files, max_bytes)
        return path
    except (OSError, TypeError, ValueError) as exc:
        log.warning("spool: cannot save an event for %s (%s)", endpoint, exc)
        return None


def _reject(path: str, why: str) -> None:
    head, name = os.path.split(path)
    target_dir = os.path.join(head, REJECTED)
    try:
        try:
            os.mkdir(target_dir, 0o700)
        except FileExistsError:
            pass
        os.replace(path, os.path.join(target_dir, name))
        log.warning("spool: %s moved to %s/ (%s)", name, REJECTED, why)
        enforce_caps(target_dir)
    except OSError as exc:
        log.warning("spool: cannot move %s to %s/ (%s); deleting it", name, REJECTED, exc)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def replay_spool(
    client: httpx.Client,
    spool_dir: str | os.PathLike[str],
    *,
    budget_s: float | None = None,
    timeout_s: float = 4.0,
    max_attempts: int = MAX_ATTEMPTS,
) -> tuple[int, int]:
    """:func:`replay_with` through ``client``, an httpx client whose base URL is the daemon
    (its headers, e.g. the token, go with every request). Same arguments and result."""
    import httpx  # only callers that already hold an httpx client get here

    def post(endpoint: str, data: bytes, timeout: float) -> tuple[int, str]:
        try:
            r = client.post(endpoint, content=data, headers={"content-type": "application/json"}, timeout=timeout)
        except httpx.ReadTimeout as exc:
            raise DeliveryTimeout("read timeout") from exc
        except httpx.HTTPError as exc:
            raise DeliveryError(exc.__class__.__name__) from exc
        return r.status_code, r.text

    return replay_with(post, spool_dir, budget_s=budget_s, timeout_s=timeout_s, max_attempts=max_attempts)


def replay_with(
    post: Post,
    spool_dir: str | os.PathLike[str],
    *,
    budget_s: float | None = None,
    timeout_s: float = 4.0,
    max_attempts: int = MAX_ATTEMPTS,
) -> tuple[int, int]:
    """Send the spooled events oldest first through ``post`` (see :data:`Post`), stopping at
    the first transient failure so that order is kept.

    * 2xx: delivered, the file is deleted.
    * 4xx: the daemon rejected it; moved to ``spool/rejected/``.
    * 5xx or a read timeout (:class:`DeliveryTimeout`): kept with ``attempts + 1``; after
      ``max_attempts`` moved to ``rejected/``. Replay stops.
    * connection refused / connect timeout / other transport errors (:class:`DeliveryError`):
      kept as is; replay stops.
    * an unreadable or malformed file: moved to ``rejected/``.

    Only one process replays a spool at a time: a non-blocking exclusive lock on
    ``spool/.replay.lock`` (none where ``fcntl`` is missing); a hook that finds it held skips
    the replay.

    Args:
        budget_s: wall-clock budget for the whole replay, seconds (``None``: no limit); each
            request's timeout is cut to what is left.
        timeout_s: per-request timeout, seconds.

    Returns:
        ``(sent, failed)``: events delivered, and events rejected or kept after a failed try.
    """
    spool_dir = os.fspath(spool_dir)
    if not _spooled_names(spool_dir):
        return 0, 0
    lock_fd = _replay_lock(spool_dir)
    if lock_fd == -1:  # another hook process is replaying right now
        return 0, 0
    try:
        return _replay(post, spool_dir, budget_s, timeout_s, max_attempts)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)  # releases the lock


def _replay_lock(spool_dir: str) -> int | None:
    """Take a non-blocking exclusive lock on ``spool/.replay.lock``: its descriptor (closing it
    releases the lock), ``-1`` when another process holds it, ``None`` when no lock can be had
    here (no fcntl, or the file cannot be opened: the replay goes ahead unlocked)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        # created 0600 like every file in the home
        fd = os.open(
            os.path.join(spool_dir, ".replay.lock"), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600
        )
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return -1
    return fd


def _replay(post: Post, spool_dir: str, budget_s: float | None, timeout_s: float, max_attempts: int) -> tuple[int, int]:
    deadline = None if budget_s is None else time.monotonic() + budget_s
    sent = failed = 0
    for name in _spooled_names(spool_dir):
        path = os.path.join(spool_dir, name)
        left = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
        if left <= 0.01:
            break
        try:
            with open(path, encoding="utf-8") as f:
                record = cjson.loads(f.read())
            endpoint, body = record["endpoint"], record["body"]
            if not isinstance(endpoint, str) or not endpoint.startswith("/") or not isinstance(body, dict):
                raise ValueError("bad endpoint or body")
        except FileNotFoundError:
            continue  # another hook process replayed it meanwhile
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _reject(path, f"unreadable spool file: {exc}")
            failed += 1
            continue
        try:
            status, text = post(endpoint, cjson.dumps(body, ensure_ascii=False).encode("utf-8"), left)
        except DeliveryTimeout:
            _count_attempt(path, record, max_attempts, "read timeout")
            return sent, failed + 1
        except DeliveryError as exc:
            log.info("spool replay stopped: %s (%s)", exc, endpoint)
            return sent, failed + 1
        if 200 <= status < 300:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            sent += 1
        elif 400 <= status < 500:
            _reject(path, f"HTTP {status} from {endpoint}: {text[:200]}")
            failed += 1
        else:
            _count_attempt(path, record, max_attempts, f"HTTP {status}")
            return sent, failed + 1
    return sent, failed


def _count_attempt(path: str, record: dict[str, Any], max_attempts: int, why: str) -> None:
    name = os.path.basename(path)
    attempts = int(record.get("attempts", 0) or 0) + 1
    if attempts >= max_attempts:
        _reject(path, f"{why}, {attempts} attempts")
        return
    record["attempts"] = attempts
    try:
        if os.path.exists(path):
            _write_atomic(path, cjson.dumps(record, ensure_ascii=False).encode("utf-8"))
    except OSError as exc:
        log.warning("spool: cannot update %s (%s)", name, exc)
    log.info("spool replay stopped: %s (%s, attempt %d)", why, name, attempts)
