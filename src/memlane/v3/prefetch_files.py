"""Reading the contents of pre-fetched files (seed memory-system-v3-design.md section 8, "Predictive
Pre-Fetching": ``buildInitialMessageWithPrefetch`` pre-loads up to 5 of a prefetch pattern's
``alwaysReadFiles``, each cut to 3,000 characters, only files under the project root; docs/v3.md
"Active loop").

A file is read only when all of these hold, else it is skipped (and counted in the report):

* its path is relative and, joined to the root and with every symlink resolved, still lies under
  the root's own resolved path (no ``..``, no absolute path, no symlink leading out);
* it is a regular file (not a directory, FIFO or device), opened without following a symlink at
  its last component, so a file swapped for a link after the check is not read;
* its name does not mark a secret store (:data:`SECRET_NAMES`: ``.env`` files, keys and
  certificates, credential files, ``.netrc``, ``.pgpass``...);
* its first bytes hold no NUL (not a binary file).

The text read (at most 4 bytes per character of :data:`MAX_FILE_CHARS`) is passed through
:func:`memlane.redact.redact`, always, as transcripts and session context are (``redact.memories``
governs stored memories; nothing here is stored), then cut to :data:`MAX_FILE_CHARS` characters.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from memlane.redact import redact

#: Seed: ``content.length > 3000 ? content.slice(0, 3000) + '... [truncated]'``.
MAX_FILE_CHARS = 3000
#: Seed: ``alwaysReadFiles.slice(0, 5)``.
MAX_FILES = 5
#: File names never read: environment files, private keys and certificates, credential stores.
SECRET_NAMES = re.compile(
    r"(^|/)(\.env(\..*)?|.*\.(pem|key|p12|pfx|jks|keystore|kdbx|asc|gpg)|id_(rsa|dsa|ecdsa|ed25519)(\.pub)?"
    r"|\.netrc|\.pgpass|\.npmrc|\.pypirc|\.git-credentials|credentials(\..*)?|secrets?(\..*)?)$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class FileText:
    """One pre-fetched file: its path as given, its text (redacted, cut) and whether it was cut."""

    path: str
    text: str
    truncated: bool


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_file(root: str, rel: str, max_chars: int = MAX_FILE_CHARS) -> FileText | None:
    """The text of ``rel`` under ``root`` (rules in the module docstring), or None when it is
    skipped. Never raises for a missing, unreadable or refused file."""
    if not rel or os.path.isabs(rel) or SECRET_NAMES.search(rel.replace(os.sep, "/")):
        return None
    try:
        real_root = os.path.realpath(root, strict=True)
        target = os.path.realpath(os.path.join(real_root, rel), strict=True)
    except (OSError, ValueError):
        return None
    if not _inside(real_root, target) or SECRET_NAMES.search(target.replace(os.sep, "/")):
        return None
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, max_chars * 4 + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\x00" in raw[:8192]:
        return None
    # redacted before the cut, so a secret across the cut is still recognised whole
    text = redact(raw.decode("utf-8", errors="replace"))
    return FileText(rel, text[:max_chars], len(text) > max_chars or len(raw) > max_chars * 4)


#: Fewest characters worth showing of a file cut to the budget's rest.
MIN_FILE_CHARS = 200


def read_files(roots: list[str], paths: list[str], *, budget_chars: int, max_files: int = MAX_FILES) -> list[FileText]:
    """The texts of the first readable ``paths``, each read under the first of ``roots`` where it
    passes :func:`read_file`, at most ``max_files``, together at most ``budget_chars`` characters
    (a file is cut to what is left when at least :data:`MIN_FILE_CHARS` are)."""
    out: list[FileText] = []
    left = budget_chars
    for rel in paths:
        if len(out) >= max_files or left < MIN_FILE_CHARS:
            break
        for root in roots:
            got = read_file(root, rel, min(MAX_FILE_CHARS, left))
            if got is not None:
                out.append(got)
                left -= len(got.text)
                break
    return out
