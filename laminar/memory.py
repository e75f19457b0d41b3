"""Allocator settings for processes that move megabytes per request.

A fetch answer is one buffer of up to a few MiB, allocated and freed for every
frame, on both the shard (the store read) and the client (the frame payload).
glibc serves such sizes with mmap and hands them back with munmap, or trims
the heap top after the free; either way the next buffer faults in fresh
zeroed pages: measured here, decoding a 1 MiB frame took 730 us instead of
50 us, and a consumer went from ~320k to ~390-460k records/s once glibc kept
its freed memory. `tune_allocator` raises glibc's mmap and trim thresholds so
freed buffers are reused. The cost is that the process keeps its peak heap
(a few tens of MiB here) instead of returning it to the system.

That cost is bounded by what a client could make the process hold, and after a
burst (answers a client never read, large frames) the memory is not given back
by itself: 3 connections of unread fetches left a shard +957 MiB after they
closed (the bytes were freed; glibc kept them). `trim_heap` gives free heap
memory back; a shard calls it once what clients made it hold has come down
from a high mark (`laminar.shards.shard`), not per request.
"""

from __future__ import annotations

import ctypes
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for its dynamic threshold
_TRIM_THRESHOLD_BYTES = 256 << 20
_tuned: list[bool] = []
_libc: list[ctypes.CDLL | None] = []


def _glibc() -> ctypes.CDLL | None:
    if not _libc:
        lib: ctypes.CDLL | None = ctypes.CDLL(None)
        if not hasattr(lib, "malloc_trim"):
            lib = None  # not glibc
        _libc.append(lib)
    return _libc[0]


def tune_allocator() -> bool:
    """Keep large freed buffers in the process (glibc only; once per process).

    Returns whether the settings are in force. Skipped when the user set
    glibc's own `MALLOC_*` variables or `LAMINAR_MALLOC_TUNING=0`.
    """
    if not _tuned:
        _tuned.append(_tune())
    return _tuned[0]


def _tune() -> bool:
    if os.environ.get("LAMINAR_MALLOC_TUNING") == "0" or any(
        name.startswith("MALLOC_") for name in os.environ
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    )


def trim_heap() -> bool:
    """Give the process's free heap memory back to the system (glibc's
    `malloc_trim`; a no-op elsewhere); True if any was returned."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))
