"""`laminar.outbox.Outbox`: frames queued in one loop iteration leave in one write."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest


class RecordingSocket:
    """A socket stand-in that records each sendmsg and takes up to `room` bytes."""

    def __init__(self, room: int = 1 << 30, error: OSError | None = None) -> None:
        self.room = room
        self.error = error
        self.writes: list[bytes] = []

    def sendmsg(self, buffers: list[Any]) -> int:
        if self.error is not None:
            raise self.error
        data = b"".join(bytes(b) for b in buffers)[: self.room]
        if not data:
            raise BlockingIOError
        self.room -= len(data)
        self.writes.append(data)
        return len(data)


def _plain(sock: Any) -> Any:
    """The stream a connection would give its outbox over `sock`."""
    from laminar.stream import PlainStream

    return PlainStream(asyncio.get_running_loop(), sock)


async def _iterations(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_frames_queued_in_one_iteration_leave_in_one_write() -> None:
    from laminar.outbox import Outbox

    async def main() -> None:
        sock = RecordingSocket()
        box = Outbox(asyncio.get_running_loop(), _plain(sock))
        for n in range(64):
            box.send([b"head%d|" % n, b"body"])
        assert sock.writes == [] and box.pending_bytes > 0  # nothing before the iteration ends
        await _iterations(2)
        assert sock.writes == [b"".join(b"head%d|body" % n for n in range(64))]
        assert box.pending_bytes == 0
        await box.drained()

    asyncio.run(main())


def test_a_lone_frame_leaves_in_the_next_iteration() -> None:
    from laminar.outbox import Outbox

    async def main() -> None:
        sock = RecordingSocket()
        box = Outbox(asyncio.get_running_loop(), _plain(sock))
        box.send([b"alone"])
        await _iterations(2)
        assert sock.writes == [b"alone"]
        box.send([b"again"])
        await _iterations(2)
        assert sock.writes == [b"alone", b"again"]

    asyncio.run(main())


def test_what_the_socket_does_not_take_is_written_in_order_later() -> None:
    from laminar.outbox import Outbox

    async def main() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        try:
            box = Outbox(asyncio.get_running_loop(), _plain(a))
            frames = [bytes([n]) * 100_000 for n in range(8)]
            for frame in frames:
                box.send([frame[:10], frame[10:]])
            await _iterations(2)
            assert box.pending_bytes > 0  # the writer task holds the rest
            got = bytearray()
            loop = asyncio.get_running_loop()
            while len(got) < 800_000:
                got += await loop.sock_recv(b, 1 << 16)
            await box.drained()
            assert bytes(got) == b"".join(frames) and box.pending_bytes == 0
        finally:
            a.close()
            b.close()

    asyncio.run(main())


def test_a_broken_socket_is_reported_once_and_later_frames_are_dropped() -> None:
    from laminar.outbox import Outbox

    async def main() -> None:
        errors: list[BaseException] = []
        sock = RecordingSocket(error=BrokenPipeError(32, "Broken pipe"))
        box = Outbox(asyncio.get_running_loop(), _plain(sock), errors.append)
        box.send([b"x"])
        await _iterations(2)
        assert box.failed and len(errors) == 1
        assert box.send([b"later"]) == 5
        await _iterations(2)
        assert len(errors) == 1 and box.pending_bytes == 0
        await box.drained()

    asyncio.run(main())


@pytest.mark.parametrize("abort_before_flush", [True, False])
def test_abort_drops_what_is_queued(abort_before_flush: bool) -> None:
    from laminar.outbox import Outbox

    async def main() -> None:
        sock = RecordingSocket(room=3)
        box = Outbox(asyncio.get_running_loop(), _plain(sock))
        box.send([b"abcdef"])
        if not abort_before_flush:
            await _iterations(2)  # 3 bytes out, the rest with the writer task
        box.abort()
        await _iterations(3)
        assert box.pending_bytes == 0
        assert sock.writes == ([] if abort_before_flush else [b"abc"])
        await box.drained()

    asyncio.run(main())
