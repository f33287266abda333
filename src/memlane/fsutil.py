"""Atomic file writes: a temporary file in the same directory, fsync, rename, fsync the directory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path | str, data: bytes, *, mode: int | None = None, sync_dir: bool = True) -> Path:
    """Replace ``path`` with ``data`` so that readers see the old file or the new one, never a mix.

    Args:
        path: the destination; its directory must exist.
        data: the whole new content (bytes).
        mode: permission bits for the new file (default: mkstemp's 0o600).
        sync_dir: also fsync the directory so the rename itself survives a power loss.
    Returns:
        ``path`` as a Path.
    Raises:
        OSError: the file could not be written (the temporary file is removed).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path
