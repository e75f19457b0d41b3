"""The few C entry points the ring needs, through ctypes, and buffer addresses.

Facts this module rests on:

- python-liburing's wheel bundles C liburing (2.15) in its extension module and
  exports its symbols. `io_uring_setup`, `io_uring_enter2` and
  `io_uring_register` there are thin syscall wrappers that return `-errno`.
- ctypes releases the GIL around every foreign call. That is the point: the
  binding's own wait holds the GIL, so an executor thread that needs the GIL to
  finish (and wake the loop) deadlocks against a loop sleeping in the kernel.
- The kernel reads buffers by address. We hand it the address of the bytes
  inside a Python object and keep that object alive until the completion:
  `bytes` are immutable and never move (their data sits at a fixed offset in the
  object, checked below at import); writable buffers are pinned with
  `ctypes.c_char.from_buffer`, which also holds a buffer export, so a bytearray
  cannot be resized (and moved) while the kernel writes into it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import liburing

_lib = ctypes.CDLL(liburing.liburing.__file__, use_errno=True)

io_uring_setup = _lib.io_uring_setup
io_uring_setup.restype = ctypes.c_int
io_uring_setup.argtypes = [ctypes.c_uint, ctypes.c_void_p]

io_uring_enter2 = _lib.io_uring_enter2
io_uring_enter2.restype = ctypes.c_int
io_uring_enter2.argtypes = [
    ctypes.c_uint,
    ctypes.c_uint,
    ctypes.c_uint,
    ctypes.c_uint,
    ctypes.c_void_p,
    ctypes.c_size_t,
]

io_uring_register = _lib.io_uring_register
io_uring_register.restype = ctypes.c_int
io_uring_register.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint]


def _bytes_data_offset() -> int:
    probe = b"laminar-probe"
    expected = ctypes.cast(ctypes.c_char_p(probe), ctypes.c_void_p).value
    offset = bytes.__basicsize__ - 1
    if expected != id(probe) + offset:
        raise ImportError("unexpected bytes object layout; cannot pass bytes to io_uring")
    return offset


BYTES_DATA_OFFSET = _bytes_data_offset()


def bytes_address(data: bytes) -> int:
    """Address of the payload of a `bytes` object (valid while it is alive)."""
    return id(data) + BYTES_DATA_OFFSET


def writable_address(buf: Any) -> tuple[int, object]:
    """Address of a writable, non-empty buffer and the pin that keeps it in place.

    Keep the pin alive until the kernel is done with the buffer.
    """
    pin = ctypes.c_char.from_buffer(buf)
    return ctypes.addressof(pin), pin


def readable_address(buf: Any) -> tuple[int, object]:
    """Address of a readable, non-empty buffer and the object to keep alive.

    `bytes` cost nothing; writable buffers are pinned; anything else (a
    read-only memoryview, say) is copied to `bytes` once.
    """
    if type(buf) is bytes:
        return id(buf) + BYTES_DATA_OFFSET, buf
    try:
        pin = ctypes.c_char.from_buffer(buf)
    except TypeError:
        data = bytes(buf)
        return id(data) + BYTES_DATA_OFFSET, data
    return ctypes.addressof(pin), pin
