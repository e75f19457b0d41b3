"""laminar's interface to the kernel's io_uring.

Layers point one way: `abi` (numbers and layouts, from python-liburing) and
`native` (three syscalls through ctypes, buffer addresses) -> `ring` (one ring:
prepare, submit, wait, reap, keep buffers alive) -> the reactor.
"""

from . import abi
from .errors import IoUringUnavailable
from .ring import Completion, Ring, WrongThread, check_available, supports

__all__ = [
    "Completion",
    "IoUringUnavailable",
    "Ring",
    "WrongThread",
    "abi",
    "check_available",
    "supports",
]
