"""A pool of receive buffers whose addresses are computed once.

A recv through the ring needs a buffer the kernel can fill and that stays put
until the completion. Allocating (and zeroing) a fresh 64 KiB bytearray per
recv costs more than the recv itself, and finding a bytearray's address costs
a ctypes call; so buffers are pooled by power-of-two size class, each kept
with a memoryview (which pins it: a bytearray with an export cannot be resized
and so cannot move) and its address.
"""

from __future__ import annotations

from typing import Any

from laminar.iouring.native import writable_address

PooledBuffer = tuple[memoryview, int, list[Any] | None]
"""(view, address, home): the view pins the bytearray; the address is its
data; home is the free list it returns to (None: not pooled)."""

_CLASS_MIN_BITS = 10  # 1 KiB
_CLASS_MAX_BITS = 20  # 1 MiB: larger buffers are not pooled
PER_CLASS = 64


class BufferPool:
    """Reusable receive buffers. `take(n)` gives one of at least n bytes."""

    def __init__(self) -> None:
        self._free: dict[int, list[PooledBuffer]] = {}

    def take(self, nbytes: int) -> PooledBuffer:
        bits = max((nbytes - 1).bit_length(), _CLASS_MIN_BITS)
        if bits > _CLASS_MAX_BITS:
            view = memoryview(bytearray(nbytes))
            return view, writable_address(view)[0], None
        free = self._free.get(bits)
        if free is None:
            free = self._free[bits] = []
        elif free:
            return free.pop()
        view = memoryview(bytearray(1 << bits))
        return view, writable_address(view)[0], free

    @staticmethod
    def give(buffer: PooledBuffer) -> None:
        """Return a buffer the kernel no longer uses."""
        home = buffer[2]
        if home is not None and len(home) < PER_CLASS:
            home.append(buffer)
