"""Inter-shard channels: one pipelined connection from this shard to each peer.

A shard talks to another over a Unix stream socket (the peer's channel
listener, `listeners.channel_address`), with the network's frame codec. It
sends two kinds of requests: FORWARD frames wrapping a client's request for a
partition the peer owns, and the peer's metadata-log fetches when the peer
owns the metadata partition. Requests are pipelined on one connection and
matched to responses by correlation id.

Failure rules: a connection that breaks fails every request in flight on it
(`ChannelError`: each may or may not have been served), and the next request
connects again; a request that could not even be sent fails with
`ChannelUnreachable`. Because the supervisor
holds every shard's listener, connecting to a shard that is restarting does
not fail: the request waits in the backlog until the new process serves it,
bounded by the request's timeout. Nothing is retried here: the caller knows
whether its request is safe to repeat (a produce is not).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket

from laminar.channels.sockets import channel_address
from laminar.outbox import Outbox
from laminar.stream import PlainStream
from laminar.wire import NEED_DATA, Frame, FrameDecoder, Message, ProtocolError

logger = logging.getLogger("laminar.shards")

_READ_BYTES = 256 << 10


class ChannelError(Exception):
    """A request to a peer shard failed (unreachable, connection lost, timed out):
    it may have been served."""


class ChannelUnreachable(ChannelError):
    """The peer could not be reached: the request was never sent."""


class PeerChannel:
    """The connection from this shard to peer shard `peer`."""

    def __init__(self, run_dir: str, peer: int, max_frame_bytes: int) -> None:
        self.peer = peer
        self._address = channel_address(run_dir, peer)
        self._max_frame_bytes = max_frame_bytes
        self._sock: socket.socket | None = None
        self._outbox: Outbox | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None
        self._pending: dict[int, asyncio.Future[Frame]] = {}
        self._ids = itertools.count(1)
        self._closed = False

    async def request(self, message: Message, timeout_s: float) -> Frame:
        """Send `message` and return the peer's response frame."""
        loop = asyncio.get_running_loop()
        outbox = await self._connected()
        corr = next(self._ids) & 0xFFFF_FFFF
        fut: asyncio.Future[Frame] = loop.create_future()
        self._pending[corr] = fut
        timer = loop.call_later(timeout_s, self._expire, corr, timeout_s)
        try:
            outbox.send(message.encode_buffers(corr))
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(corr, None)

    def _expire(self, corr: int, timeout_s: float) -> None:
        fut = self._pending.pop(corr, None)
        if fut is not None and not fut.done():
            fut.set_exception(
                ChannelError(f"shard {self.peer} did not answer within {timeout_s:.1f} s")
            )

    async def _connected(self) -> Outbox:
        if self._closed:
            raise ChannelUnreachable("the channel is closed (shard draining)")
        if self._outbox is not None and not self._outbox.failed:
            return self._outbox
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._outbox is not None and not self._outbox.failed:
                return self._outbox
            self._disconnect(None)
            loop = asyncio.get_running_loop()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, self._address)
            except OSError as exc:
                sock.close()
                raise ChannelUnreachable(f"cannot reach shard {self.peer}: {exc}") from None
            self._sock = sock
            self._outbox = Outbox(loop, PlainStream(loop, sock), self._on_write_error)
            self._reader = loop.create_task(self._read(sock))
            return self._outbox

    def _on_write_error(self, exc: BaseException) -> None:
        self._disconnect(ChannelError(f"connection to shard {self.peer} failed: {exc}"))

    async def _read(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        decoder = FrameDecoder(self._max_frame_bytes)
        error: ChannelError
        try:
            while True:
                data = await loop.sock_recv(sock, min(_READ_BYTES, decoder.room))
                if not data:
                    error = ChannelError(f"shard {self.peer} closed the channel")
                    break
                decoder.feed(data)
                while True:
                    frame = decoder.next_frame()
                    if frame is NEED_DATA:
                        break
                    fut = self._pending.pop(frame.correlation_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(frame)
        except asyncio.CancelledError:
            return
        except (OSError, ProtocolError) as exc:
            error = ChannelError(f"channel to shard {self.peer} broke: {exc}")
        if self._sock is sock:
            self._reader = None  # this task is ending: do not cancel it
            self._disconnect(error)

    def _disconnect(self, error: ChannelError | None) -> None:
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        if self._outbox is not None:
            self._outbox.abort()
            self._outbox = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error or ChannelError(f"channel to shard {self.peer} closed"))

    def close(self) -> None:
        self._closed = True
        self._disconnect(None)


class Channels:
    """This shard's channels to every peer, made on first use."""

    def __init__(self, run_dir: str, shard_id: int, shard_count: int, max_frame_bytes: int):
        self.shard_id = shard_id
        self._channels = {
            peer: PeerChannel(run_dir, peer, max_frame_bytes)
            for peer in range(shard_count)
            if peer != shard_id
        }

    def to(self, peer: int) -> PeerChannel:
        return self._channels[peer]

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
