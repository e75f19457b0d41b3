"""A pool of receive buffers whose addresses are computed once.

A recv through the ring needs a buffer the kernel can fill and that stays put
until the completion. Allocating (and zeroing) a fresh 64 KiB bytearray per
recv costs more than the recv itself, and finding a bytearray's address costs
a ctypes call; so buffers are pooled by power-of-two size class, each kept
with a memoryview (which pins it: a bytearray with an export cannot be resized
and so cannot move) and its address.
"""

from __future__ import annotations

from laminar.iouring.native import writable_address

PooledBuffer = tuple[memoryview, int]
"""(view, address): the view pins the bytearray; the address is its data."""

_CLASS_MIN_BITS = 10  # 1 KiB
_CLASS_MAX_BITS = 20  # 1 MiB: larger buffers are not pooled
_PER_CLASS = 64


class BufferPool:
    """Reusable receive buffers. `take(n)` gives one of at least n bytes."""

    def __init__(self) -> None:
        self._free: dict[int, list[PooledBuffer]] = {}

    def take(self, nbytes: int) -> PooledBuffer:
        bits = max((nbytes - 1).bit_length(), _CLASS_MIN_BITS)
        free = self._free.get(bits)
        if free:
            return free.pop()
        view = memoryview(bytearray(1 << bits if bits <= _CLASS_MAX_BITS else nbytes))
        address, _pin = writable_address(view)
        return view, address

    def give(self, buffer: PooledBuffer) -> None:
        """Return a buffer the kernel no longer uses."""
        bits = (len(buffer[0]) - 1).bit_length()
        if bits > _CLASS_MAX_BITS:
            return
        free = self._free.setdefault(bits, [])
        if len(free) < _PER_CLASS:
            free.append(buffer)
