"""UringEventLoop: the asyncio event loop laminar's shards run on.

It is assembled from three parts, each in its own module: `core` (iteration,
task queues, wake-ups, signals, shutdown), `sockets` (sock_* over io_uring)
and `files` (file operations for the storage backend).
"""

from __future__ import annotations

from .files import FileOps
from .sockets import SocketOps


class UringEventLoop(SocketOps, FileOps):
    """An asyncio event loop driven by io_uring, with CPU-share task queues.

    `UringEventLoop(ring_entries=256, slice_s=0.002, default_shares=1000,
    eager_send=True, single_issuer=True)`: `slice_s` bounds a contended queue's
    turn; `eager_send` lets sock_sendall try the socket before the ring;
    `single_issuer` binds the ring to the first thread that runs the loop
    (faster completions); pass False to move a loop between threads.
    Raises `laminar.iouring.IoUringUnavailable` when the kernel refuses a ring;
    `laminar.reactor.loop_factory("auto")` falls back to the stock loop then.
    """
