"""Writing whole frames to one stream from many concurrent requests.

Responses to pipelined requests finish in any order, from different tasks and
callbacks, and two `sock_sendall` calls in flight on one socket may
interleave their bytes. An `Outbox` serialises them and coalesces them:

- `send` only queues a frame's buffers. The first frame queued in a loop
  iteration schedules one flush with `call_soon`, so it runs once everything
  that was ready in this iteration has run: the responses completed together
  (a group-commit flush acknowledges many produces at once) leave in one
  gathering `sendmsg` (`laminar.stream`: through TLS when the stream is), one
  syscall and one wakeup of the client instead of one per response. A lone
  response is not held back: the flush runs in the very next iteration,
  never on a timer.
- The flush hands the buffers to the kernel directly (a fetch's record blobs
  are never joined into one copy). Whatever does not fit, and everything
  queued behind it, is written by one writer task, which joins small
  buffers that piled up meanwhile into sends of up to `JOIN_BYTES` and sends
  large ones as they are: a client that does not read its answers must not
  make the node hold them twice (a joined copy beside its parts).

`pending_bytes` is what has not reached the socket yet, queued or unsent:
readers stop taking new requests when it grows past their bound (a client that
sends but never reads cannot make the node buffer without limit). `on_written`
hears of every byte that leaves the queue (to the kernel, or dropped when the
connection fails or is aborted), so an owner that charged queued bytes to a
budget releases exactly what it charged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

from laminar.stream import Stream
from laminar.wire.codec import Buffer

JOIN_BYTES: Final = 64 << 10
"""Buffers smaller than this are joined for the writer task's sends; larger ones
go as they are (no copy)."""


def _unsent(buffers: Sequence[Buffer], sent: int) -> list[Buffer]:
    """The buffers after the first `sent` bytes of `buffers` (views, no copy)."""
    rest: list[Buffer] = []
    for buf in buffers:
        if sent >= len(buf):
            sent -= len(buf)
            continue
        rest.append(memoryview(buf)[sent:] if sent else buf)
        sent = 0
    return rest


def _sends(buffers: Sequence[Buffer]) -> list[Buffer]:
    """`buffers` as the writer task sends them: runs of small ones joined (up to
    `JOIN_BYTES` a send), large ones alone."""
    sends: list[Buffer] = []
    run: list[Buffer] = []
    size = 0
    for buf in buffers:
        if len(buf) >= JOIN_BYTES:
            if run:
                sends.append(b"".join(run))
                run, size = [], 0
            sends.append(buf)
            continue
        run.append(buf)
        size += len(buf)
        if size >= JOIN_BYTES:
            sends.append(b"".join(run))
            run, size = [], 0
    if run:
        sends.append(b"".join(run))
    return sends


class Outbox:
    """Ordered, coalescing writer for one stream."""

    __slots__ = (
        "_drained",
        "_error",
        "_flush_handle",
        "_loop",
        "_on_error",
        "_on_written",
        "_queue",
        "_stream",
        "_task",
        "pending_bytes",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        stream: Stream,
        on_error: Callable[[BaseException], None] | None = None,
        on_written: Callable[[int], None] | None = None,
    ) -> None:
        self._loop = loop
        self._stream = stream
        self._on_error = on_error
        self._on_written = on_written
        self._queue: list[Buffer] = []
        self._flush_handle: asyncio.Handle | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._drained: asyncio.Future[None] | None = None
        self.pending_bytes = 0

    @property
    def failed(self) -> bool:
        return self._error is not None

    def send(self, buffers: Sequence[Buffer]) -> int:
        """Queue one frame's buffers; return its size. Never blocks, never raises
        for a broken connection (that is reported once through `on_error`)."""
        size = 0
        for buf in buffers:
            size += len(buf)
        if self._error is not None:
            return size
        self._queue.extend(buffers)
        self.pending_bytes += size
        if self._task is None and self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)
        return size

    def _flush(self) -> None:
        """Everything queued in this iteration, to the kernel in one gathering send."""
        self._flush_handle = None
        if self._task is not None or self._error is not None or not self._queue:
            return
        queue, self._queue = self._queue, []
        try:
            sent = self._stream.send_gathered(queue)
        except OSError as exc:
            self._fail(exc)
            return
        if sent == self.pending_bytes:
            self._left(sent)
            self._wake()
            return
        self._queue = _unsent(queue, sent)  # nothing can have been queued meanwhile
        self._left(sent)
        self._task = self._loop.create_task(self._write())

    async def _write(self) -> None:
        try:
            while self._queue:
                sends = _sends(self._queue)
                self._queue = []
                sends.reverse()  # popped from the end: a sent buffer is let go at once
                while sends:
                    data = sends.pop()
                    await self._stream.sendall(data)
                    self._left(len(data))
                    del data
        except asyncio.CancelledError:
            self._queue.clear()
            self._left(self.pending_bytes)
            raise
        except OSError as exc:
            self._fail(exc)
        finally:
            self._task = None
            self._wake()

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
            self._queue.clear()
            self._left(self.pending_bytes)
            if self._on_error is not None:
                self._on_error(exc)
        self._wake()

    def _left(self, n: int) -> None:
        """`n` bytes left the queue (written, or dropped)."""
        self.pending_bytes -= n
        if n and self._on_written is not None:
            self._on_written(n)

    def _wake(self) -> None:
        waiter, self._drained = self._drained, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drained(self) -> None:
        """Wait until everything queued is written (or the connection failed)."""
        while (self._task is not None or self._flush_handle is not None) and self._error is None:
            if self._drained is None:
                self._drained = self._loop.create_future()
            await self._drained

    def abort(self) -> None:
        """Stop writing; drop what is queued."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._task is not None:
            self._task.cancel()
        self._queue.clear()
        self._left(self.pending_bytes)
        self._wake()
