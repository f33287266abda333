"""What a memlane process costs: resident memory of the daemon and of its predictor sidecar.

Read from ``/proc/<pid>/status`` (Linux): ``VmRSS`` (resident now) and ``VmHWM`` (the peak
resident set). Elsewhere, or for a process that is gone, the values are None. Standard
library only: ``memlane status`` and ``GET /health`` report them, so a user can see what
memlane costs (docs/architecture.md, "Footprint").
"""

from __future__ import annotations

import os

__all__ = ["MMAP_THRESHOLD_BYTES", "memory_of", "process_info", "return_large_blocks"]

#: Allocations of this many bytes or more get a mapping of their own (glibc), unmapped when freed.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)

_FIELDS = {"VmRSS": "rss_bytes", "VmHWM": "peak_rss_bytes"}


def memory_of(pid: int | None = None) -> dict[str, int | None]:
    """Resident memory of process ``pid`` (None: this process).

    Returns:
        ``{"rss_bytes": int | None, "peak_rss_bytes": int | None}`` in bytes; None for a value
        the system does not report (not Linux, no such process, no permission).
    """
    out: dict[str, int | None] = {name: None for name in _FIELDS.values()}
    path = f"/proc/{'self' if pid is None else int(pid)}/status"
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in _FIELDS:
                    parts = rest.split()
                    if parts and parts[0].isdigit():  # "  123456 kB"
                        out[_FIELDS[key]] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def process_info(pid: int | None = None) -> dict[str, int | None]:
    """``{"pid", "rss_bytes", "peak_rss_bytes"}`` of ``pid`` (None: this process); memory in bytes."""
    return {"pid": os.getpid() if pid is None else int(pid), **memory_of(pid)}


def return_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Make glibc return freed blocks of ``threshold`` bytes or more to the system at once.

    glibc serves a large allocation from a mapping of its own and unmaps it when freed, but
    raises that threshold (up to 32 MiB) each time such a block is freed, after which blocks of
    that size come from the heap, whose free space stays resident. Loading the embedding model
    frees many large temporaries, which the daemon would keep resident while idle
    (docs/architecture.md, "Footprint", has the numbers). ``mallopt(M_MMAP_THRESHOLD)`` fixes the
    threshold (and turns its raising off). Call early, before the model loads.

    Returns:
        True when set; False off glibc (nothing changes).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))
