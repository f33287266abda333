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
own ``http.client`` sender; :func:`replay_spool` does the same through an httpx client, so
either path replays what the other spooled.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from memlane.connectors.hooklog import LazyLogger

# The light hook client (memlane.hookclient) imports this module: typing and httpx stay out of
# its start-up (TYPE_CHECKING = False is the idiom type checkers read as typing.TYPE_CHECKING).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import httpx

# logging is imported on the first record only (memlane.connectors.hooklog)
log = LazyLogger(__name__)

MAX_FILES = 1000
MAX_BYTES = 50 * 1024 * 1024
MAX_ATTEMPTS = 5
REJECTED = "rejected"

#: How a replay sends one event: ``post(endpoint, body_bytes, timeout_s) -> (status, text)``.
#: Raises :class:`DeliveryTimeout` when the request went out but no answer came in time, and
#: :class:`DeliveryError` for any other transport failure (refused, reset, connect timeout).
Post = Callable[[str, bytes, float], "tuple[int, str]"]


class DeliveryError(Exception):
    """The event could not be delivered (no HTTP answer); the spooled file is kept as it is."""


class DeliveryTimeout(DeliveryError):
    """The request was sent but the answer did not come within the timeout (counts as an attempt)."""


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (mode 0600): a hidden temp file in the same directory, then
    a rename, so a reader sees the whole old file or the whole new one. No fsync (module
    docstring). Raises OSError (the temp file is removed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _utc_iso(time_ns: int) -> str:
    """``time_ns`` (ns since the epoch) as ``datetime.now(timezone.utc).isoformat()`` prints it."""
    secs, ns = divmod(time_ns, 1_000_000_000)
    micros = ns // 1000
    stamp = "%04d-%02d-%02dT%02d:%02d:%02d" % time.gmtime(secs)[:6]
    return f"{stamp}.{micros:06d}+00:00" if micros else f"{stamp}+00:00"


def spool_dir_for(home: Path) -> Path:
    """``{home}/spool``."""
    return Path(home) / "spool"


def spooled_files(spool_dir: Path) -> list[Path]:
    """The spooled event files in time order (temp files and ``rejected/`` excluded)."""
    try:
        names = [n for n in os.listdir(spool_dir) if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return []
    return [Path(spool_dir) / n for n in sorted(names)]


def enforce_caps(spool_dir: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> int:
    """Drop the oldest files until at most ``max_files`` files and ``max_bytes`` bytes remain.

    Returns the number of files dropped (each logged)."""
    files = spooled_files(spool_dir)
    sizes = []
    for f in files:
        try:
            sizes.append(f.stat().st_size)
        except OSError:
            sizes.append(0)
    total, count, dropped = sum(sizes), len(files), 0
    for f, size in zip(files, sizes):
        if count <= max_files and total <= max_bytes:
            break
        try:
            f.unlink()
            log.warning("spool full (%d files, %d bytes): dropped the oldest event %s", count, total, f.name)
            dropped += 1
        except OSError as exc:
            log.warning("spool: cannot drop %s (%s)", f.name, exc)
        count -= 1
        total -= size
    return dropped


def spool_event(spool_dir: Path, endpoint: str, body: dict[str, Any], *,
                max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> Path | None:
    """Save one event for later delivery; returns its file, or ``None`` if it could not be saved
    (an event larger than ``max_bytes`` on its own, or an I/O error; logged, never raised)."""
    try:
        now_ns = time.time_ns()
        data = json.dumps({"endpoint": endpoint, "body": body, "attempts": 0, "spooled_at": _utc_iso(now_ns)},
                          ensure_ascii=False).encode("utf-8", "replace")  # a lone surrogate: "?"
        if len(data) > max_bytes:
            log.warning("spool: an event of %d bytes is over the %d-byte cap; not spooled", len(data), max_bytes)
            return None
        spool_dir = Path(spool_dir)
        spool_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = spool_dir / f"{now_ns:020d}-{os.getpid()}-{os.urandom(4).hex()}.json"
        _write_atomic(path, data)
        enforce_caps(spool_dir, max_files, max_bytes)
        return path
    except (OSError, TypeError, ValueError) as exc:
        log.warning("spool: cannot save an event for %s (%s)", endpoint, exc)
        return None


def _reject(path: Path, why: str) -> None:
    target_dir = path.parent / REJECTED
    try:
        target_dir.mkdir(mode=0o700, exist_ok=True)
        os.replace(path, target_dir / path.name)
        log.warning("spool: %s moved to %s/ (%s)", path.name, REJECTED, why)
        enforce_caps(target_dir)
    except OSError as exc:
        log.warning("spool: cannot move %s to %s/ (%s); deleting it", path.name, REJECTED, exc)
        path.unlink(missing_ok=True)


def replay_spool(client: httpx.Client, spool_dir: Path, *, budget_s: float | None = None,
                 timeout_s: float = 4.0, max_attempts: int = MAX_ATTEMPTS) -> tuple[int, int]:
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


def replay_with(post: Post, spool_dir: Path, *, budget_s: float | None = None,
                timeout_s: float = 4.0, max_attempts: int = MAX_ATTEMPTS) -> tuple[int, int]:
    """Send the spooled events oldest first through ``post`` (see :data:`Post`), stopping at
    the first transient failure so that order is kept.

    * 2xx: delivered, the file is deleted.
    * 4xx: the daemon rejected it; moved to ``spool/rejected/``.
    * 5xx or a read timeout (:class:`DeliveryTimeout`): kept with ``attempts + 1``; after
      ``max_attempts`` moved to ``rejected/``. Replay stops.
    * connection refused / connect timeout / other transport errors (:class:`DeliveryError`):
      kept as is; replay stops.
    * an unreadable or malformed file: moved to ``rejected/``.

    Args:
        budget_s: wall-clock budget for the whole replay, seconds (``None``: no limit); each
            request's timeout is cut to what is left.
        timeout_s: per-request timeout, seconds.

    Returns:
        ``(sent, failed)``: events delivered, and events rejected or kept after a failed try.
    """
    if not spooled_files(spool_dir):
        return 0, 0
    with _replay_lock(Path(spool_dir)) as locked:
        if not locked:  # another hook process is replaying right now
            return 0, 0
        return _replay(post, Path(spool_dir), budget_s, timeout_s, max_attempts)


@contextlib.contextmanager
def _replay_lock(spool_dir: Path):  # noqa: ANN202
    """A non-blocking exclusive lock on ``spool/.replay.lock`` (no-op where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield True
        return
    try:
        # created 0600 like every file in the home (open() would make it 0644 less the umask)
        f = os.fdopen(os.open(spool_dir / ".replay.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                              0o600), "r+b")
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        f.close()


def _replay(post: Post, spool_dir: Path, budget_s: float | None, timeout_s: float,
            max_attempts: int) -> tuple[int, int]:
    deadline = None if budget_s is None else time.monotonic() + budget_s
    sent = failed = 0
    for path in spooled_files(spool_dir):
        left = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
        if left <= 0.01:
            break
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
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
            status, text = post(endpoint, json.dumps(body, ensure_ascii=False).encode("utf-8"), left)
        except DeliveryTimeout:
            _count_attempt(path, record, max_attempts, "read timeout")
            return sent, failed + 1
        except DeliveryError as exc:
            log.info("spool replay stopped: %s (%s)", exc, endpoint)
            return sent, failed + 1
        if 200 <= status < 300:
            path.unlink(missing_ok=True)
            sent += 1
        elif 400 <= status < 500:
            _reject(path, f"HTTP {status} from {endpoint}: {text[:200]}")
            failed += 1
        else:
            _count_attempt(path, record, max_attempts, f"HTTP {status}")
            return sent, failed + 1
    return sent, failed


def _count_attempt(path: Path, record: dict[str, Any], max_attempts: int, why: str) -> None:
    attempts = int(record.get("attempts", 0) or 0) + 1
    if attempts >= max_attempts:
        _reject(path, f"{why}, {attempts} attempts")
        return
    record["attempts"] = attempts
    try:
        if path.exists():
            _write_atomic(path, json.dumps(record, ensure_ascii=False).encode("utf-8"))
    except OSError as exc:
        log.warning("spool: cannot update %s (%s)", path.name, exc)
    log.info("spool replay stopped: %s (%s, attempt %d)", why, path.name, attempts)
