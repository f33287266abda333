"""The dashboard's login: one-time codes and cookie sessions, held in the daemon's memory.

``memlane dashboard`` asks the daemon (with the token) for a login code
(``POST /api/dashboard/login-code``) and opens ``http://127.0.0.1:PORT/login?code=...``. The
code is 32 random bytes (:func:`secrets.token_urlsafe`), valid for :data:`CODE_TTL_S`
seconds and once. ``GET /login`` with a valid code starts a session: a random session id (32
bytes) in an ``HttpOnly; SameSite=Strict; Path=/`` cookie, valid for :data:`SESSION_TTL_S`
seconds, then redirects to ``/``: neither the token nor the code appears in a page URL after
that. The request guard (:mod:`memlane.api.guard`) accepts the cookie as the one alternative
to the token, on every route; Host, Origin and CSRF checks apply to it as to the token.

A session is bound to the token it was opened under: ``memlane token rotate`` ends every
dashboard session (within :data:`TOKEN_RECHECK_S`), as it ends every client holding the old
token. Codes and sessions live only in this process: a daemon restart logs every browser out. Ids are
compared in constant time after a dictionary lookup by their SHA-256 (the lookup never sees the
raw id); at most :data:`MAX_CODES` codes and :data:`MAX_SESSIONS` sessions are kept (the oldest
go first).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

#: The session cookie's name.
COOKIE_NAME = "memlane_session"
#: Seconds a login code stays valid.
CODE_TTL_S = 120.0
#: Seconds a dashboard session stays valid.
SESSION_TTL_S = 12 * 3600.0
#: Outstanding login codes kept (the oldest dropped first).
MAX_CODES = 32
#: Live sessions kept (the oldest dropped first).
MAX_SESSIONS = 64
_BYTES = 32
#: Seconds between two reads of the token the sessions are bound to.
TOKEN_RECHECK_S = 1.0


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


class DashboardAuth:
    """One-time login codes and cookie sessions (thread-safe).

    Args:
        token: returns the daemon's current token (None without one); sessions opened under one
            token are refused once it changes. Read at most once per :data:`TOKEN_RECHECK_S`.
        clock: monotonic seconds (tests pass their own to expire codes and sessions).
    """

    def __init__(
        self, *, token: Callable[[], str | None] = lambda: None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._token = token
        self._clock = clock
        self._lock = threading.Lock()
        self._codes: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._sessions: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._bound: dict[str, str] = {}  # session digest -> digest of the token it was opened under
        self._token_digest = ""
        self._token_read = -1e18

    def _current_token(self, now: float) -> str:
        if now - self._token_read >= TOKEN_RECHECK_S:
            self._token_read = now
            self._token_digest = _digest(self._token() or "")
        return self._token_digest

    @staticmethod
    def _put(table: OrderedDict[str, tuple[str, float]], value: str, expires: float, cap: int) -> None:
        table[_digest(value)] = (value, expires)
        while len(table) > cap:
            table.popitem(last=False)

    @staticmethod
    def _find(table: OrderedDict[str, tuple[str, float]], value: str | None, now: float, *, pop: bool) -> bool:
        if not value or len(value) > 200:
            return False
        key = _digest(value)
        entry = table.get(key)
        if entry is None:
            return False
        stored, expires = entry
        if expires <= now:
            table.pop(key, None)
            return False
        if not hmac.compare_digest(stored.encode("utf-8", "surrogatepass"), value.encode("utf-8", "surrogatepass")):
            return False
        if pop:
            table.pop(key, None)
        return True

    def issue_code(self) -> tuple[str, float]:
        """A new login code and its lifetime, s."""
        code = secrets.token_urlsafe(_BYTES)
        with self._lock:
            self._put(self._codes, code, self._clock() + CODE_TTL_S, MAX_CODES)
        return code, CODE_TTL_S

    def redeem(self, code: str | None) -> str | None:
        """Use up ``code``: a new session id when it was valid (issued, unexpired, unused), else None."""
        with self._lock:
            now = self._clock()
            if not self._find(self._codes, code, now, pop=True):
                return None
            sid = secrets.token_urlsafe(_BYTES)
            self._put(self._sessions, sid, now + SESSION_TTL_S, MAX_SESSIONS)
            self._bound = {k: v for k, v in self._bound.items() if k in self._sessions}
            self._bound[_digest(sid)] = self._current_token(now)
            return sid

    def valid(self, sid: str | None) -> bool:
        """True when ``sid`` names a live session opened under the current token."""
        with self._lock:
            now = self._clock()
            if not self._find(self._sessions, sid, now, pop=False):
                return False
            if self._bound.get(_digest(sid or "")) != self._current_token(now):
                self._sessions.pop(_digest(sid or ""), None)  # the token was rotated: sign out
                return False
            return True

    def end(self, sid: str | None) -> bool:
        """End the session ``sid`` (logout); True when it was live."""
        with self._lock:
            return self._find(self._sessions, sid, self._clock(), pop=True)

    def session_count(self) -> int:
        """Live sessions (expired ones are dropped first)."""
        with self._lock:
            now = self._clock()
            for key in [k for k, (_, exp) in self._sessions.items() if exp <= now]:
                del self._sessions[key]
            return len(self._sessions)


def cookie_value(cookie_header: str) -> str | None:
    """The session id in a ``Cookie`` header value (the first ``memlane_session``), or None."""
    for part in cookie_header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == COOKIE_NAME:
            return value.strip().strip('"') or None
    return None


def session_cookie(sid: str) -> str:
    """The ``Set-Cookie`` value that starts a dashboard session."""
    return f"{COOKIE_NAME}={sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age={int(SESSION_TTL_S)}"


def expired_cookie() -> str:
    """The ``Set-Cookie`` value that ends it in the browser."""
    return f"{COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"


#: A small page for a refused browser request (no token, no valid cookie, or a bad login code).
UNAUTHORIZED_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>memlane: sign-in needed</title></head>
<body><main><h1>memlane: sign-in needed</h1>
<p>{reason}</p>
<p>Run <code>memlane dashboard</code> in a terminal: it prints and opens a one-time sign-in link.</p>
</main></body></html>
"""
