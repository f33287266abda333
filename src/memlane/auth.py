"""The per-install API token: created on first start in ``$MEMLANE_HOME/token`` (mode 0600).

Every HTTP route except ``GET /health`` requires ``Authorization: Bearer <token>``
(:mod:`memlane.api.guard`). Local clients (the CLI, the hook commands, the MCP stdio server,
the benchmarks) read the token from the home they are pointed at, so a user never types it;
anyone who can read the file can already read the database, so the file's mode is the access
control. The token is 32 random bytes (256 bits) from :func:`secrets.token_urlsafe`.

This module is a leaf: standard library only, so the light hook path can import it; what the
hook calls (:func:`auth_headers`, :func:`read_token`) works on path strings, so ``pathlib`` is
imported only where a :class:`~pathlib.Path` is returned or a token written.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

#: File name of the token inside the home.
TOKEN_FILE = "token"
#: Request header carrying the token (RFC 6750 bearer scheme).
AUTH_HEADER = "Authorization"
#: Header memlane's own clients send; it marks a state-changing request as a non-browser
#: client's, since a cross-site browser request carrying it needs a CORS preflight.
CLIENT_HEADER = "X-Memlane-Client"
_SCHEME = "Bearer "
_TOKEN_BYTES = 32


def token_path(home: Path | str) -> Path:
    """``{home}/token``."""
    from pathlib import Path  # here: the light hook client reads the token through _token_file

    return Path(_token_file(home))


def _token_file(home: Path | str) -> str:
    """``{home}/token`` as a string (``~`` expanded)."""
    return os.path.join(os.path.expanduser(os.fspath(home)), TOKEN_FILE)


def read_token(home: Path | str) -> str | None:
    """The token stored in ``home``, or None when there is none (or it cannot be read).

    A token file that exists but is empty or unreadable counts as none: the caller then
    sends no header, and the daemon answers 401 with a message saying where the token lives.
    """
    try:
        with open(_token_file(home), encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def _write_private(path: Path, token: str) -> None:
    """Write ``token`` to ``path`` atomically with mode 0600 (the mode is set before any byte)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (token + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def ensure_token(home: Path | str) -> str:
    """The home's token, created (0600) when missing.

    Raises:
        OSError: the home is not writable.
    """
    existing = read_token(home)
    if existing:
        path = token_path(home)
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return existing
    return rotate_token(home)


def rotate_token(home: Path | str) -> str:
    """Replace the home's token with a new random one and return it.

    A running daemon reads the file on every check it cannot answer from its cache (see
    :class:`TokenStore`), so the old token stops working without a restart.

    Raises:
        OSError: the home is not writable.
    """
    import secrets  # here: reading a token (the light hook client) needs neither secrets nor hmac

    token = secrets.token_urlsafe(_TOKEN_BYTES)
    _write_private(token_path(home), token)
    return token


def auth_headers(home: Path | str) -> dict[str, str]:
    """``{"Authorization": "Bearer <token>"}`` for the home's token, or ``{}`` when it has none."""
    token = read_token(home)
    return {AUTH_HEADER: _SCHEME + token} if token else {}


def bearer_value(header: str | None) -> str | None:
    """The token in an ``Authorization`` header value (``Bearer <token>``, scheme in any case)."""
    if not header or len(header) <= len(_SCHEME) or header[: len(_SCHEME)].lower() != _SCHEME.lower():
        return None
    return header[len(_SCHEME) :].strip() or None


class TokenStore:
    """The daemon's view of the token: checked in constant time, re-read when the file changes.

    ``matches`` compares with :func:`hmac.compare_digest`. The file's (mtime_ns, size, inode) is
    looked at no more than once per ``recheck_s`` seconds, so ``memlane token rotate`` takes
    effect on a running daemon within that time without a stat per request.
    """

    def __init__(self, home: Path | str, *, recheck_s: float = 1.0) -> None:
        import hmac  # here, not at the top: the light hook client imports this module to read the token

        self._compare = hmac.compare_digest
        self.path = token_path(home)
        self._recheck_s = recheck_s
        self._token = ensure_token(home).encode("ascii")
        self._stamp = self._file_stamp()
        self._checked = time.monotonic()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self._recheck_s:
            return
        self._checked = now
        stamp = self._file_stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            fresh = read_token(self.path.parent)
            if fresh:
                self._token = fresh.encode("ascii")

    def matches(self, presented: str | None) -> bool:
        """True when ``presented`` is the current token (constant-time comparison)."""
        self._refresh()
        if presented is None:
            return False
        try:
            candidate = presented.encode("ascii")
        except UnicodeEncodeError:
            return False
        return self._compare(candidate, self._token)
