"""sock_* operations on both loops: results, errors, cancellation, no leaks."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import threading
from pathlib import Path

import pytest

from laminar.reactor import UringEventLoop

from .conftest import LOOPS, Runner, needs_uring, open_fds


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


async def connected_pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    """(listener, client, server-side connection), all non-blocking."""
    loop = asyncio.get_running_loop()
    lst = listener()
    client = socket.socket()
    client.setblocking(False)
    accept = asyncio.ensure_future(loop.sock_accept(lst))
    await loop.sock_connect(client, lst.getsockname())
    conn, address = await accept
    assert address == client.getsockname()
    assert conn.gettimeout() == 0.0  # non-blocking, as the stock loop returns it
    return lst, client, conn


def test_echo_over_tcp(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        lst, client, conn = await connected_pair()
        with lst, client, conn:
            for size in (1, 64, 5000):
                payload = os.urandom(size)
                await loop.sock_sendall(client, payload)
                got = b""
                while len(got) < size:
                    got += await loop.sock_recv(conn, 65536)
                assert got == payload
            buf = bytearray(10)
            await loop.sock_sendall(conn, memoryview(b"0123456789abc")[:10])
            n = await loop.sock_recv_into(client, buf)
            assert buf[:n] == b"0123456789"[:n]
            client.shutdown(socket.SHUT_WR)
            assert await loop.sock_recv(conn, 100) == b""

    run(main())


def test_large_sendall_completes_while_peer_reads(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        lst, client, conn = await connected_pair()
        with lst, client, conn:
            payload = os.urandom(8 << 20)

            async def reader() -> bytes:
                chunks = []
                remaining = len(payload)
                while remaining:
                    chunk = await loop.sock_recv(conn, 1 << 16)
                    assert chunk
                    chunks.append(chunk)
                    remaining -= len(chunk)
                return b"".join(chunks)

            read = asyncio.create_task(reader())
            await loop.sock_sendall(client, payload)
            assert await read == payload

    run(main())


def test_unix_sockets_and_udp(run: Runner, tmp_path: Path) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        path = str(tmp_path / "sock")
        lst = socket.socket(socket.AF_UNIX)
        lst.bind(path)
        lst.listen()
        lst.setblocking(False)
        client = socket.socket(socket.AF_UNIX)
        client.setblocking(False)
        with lst, client:
            accept = asyncio.ensure_future(loop.sock_accept(lst))
            await loop.sock_connect(client, path)
            conn, _ = await accept
            with conn:
                await loop.sock_sendall(client, b"unix")
                assert await loop.sock_recv(conn, 10) == b"unix"

        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with a, b:
            a.bind(("127.0.0.1", 0))
            b.bind(("127.0.0.1", 0))
            a.setblocking(False)
            b.setblocking(False)
            receive = asyncio.ensure_future(loop.sock_recvfrom(b, 100))
            await asyncio.sleep(0.001)
            await loop.sock_sendto(a, b"datagram", b.getsockname())
            data, address = await receive
            assert (data, address) == (b"datagram", a.getsockname())

    run(main())


def test_closed_sockets_raise_what_the_stock_loop_raises(run: Runner) -> None:
    async def main() -> list[tuple[str, type[BaseException], int | None]]:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.setblocking(False)
        sock.close()
        outcomes = []
        calls = {
            "recv": lambda: loop.sock_recv(sock, 10),
            "recv_into": lambda: loop.sock_recv_into(sock, bytearray(10)),
            "sendall": lambda: loop.sock_sendall(sock, b"x"),
            "accept": lambda: loop.sock_accept(sock),
        }
        for name, call in calls.items():
            with pytest.raises(OSError) as info:
                await call()
            outcomes.append((name, type(info.value), info.value.errno))
        return outcomes

    outcomes = run(main())
    for _name, kind, err in outcomes:
        assert kind is OSError and err == errno.EBADF


def test_refused_and_reset_connections(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        lst = listener()
        address = lst.getsockname()
        lst.close()
        client = socket.socket()
        client.setblocking(False)
        with client, pytest.raises(ConnectionRefusedError):
            await loop.sock_connect(client, address)

        lst, client, conn = await connected_pair()
        with lst, client:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            await loop.sock_sendall(client, b"unread")
            await asyncio.sleep(0.01)
            conn.close()  # unread data + linger 0: the peer gets a reset
            with pytest.raises(ConnectionResetError):
                while await loop.sock_recv(client, 10):
                    pass

    run(main())


def test_cancelled_recv_and_accept_leak_nothing(loop_kind: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        lst, client, conn = await connected_pair()
        pending_recv = asyncio.create_task(loop.sock_recv(conn, 100))
        pending_accept = asyncio.create_task(loop.sock_accept(lst))
        await asyncio.sleep(0.01)
        pending_recv.cancel()
        pending_accept.cancel()
        for task in (pending_recv, pending_accept):
            with pytest.raises(asyncio.CancelledError):
                await task
        # The recv was cancelled in the kernel too: closing the socket really
        # closes it, and the peer sees end of stream.
        conn.close()
        assert await asyncio.wait_for(loop.sock_recv(client, 10), 5) == b""
        client.close()
        lst.close()

    before = open_fds()
    with asyncio.Runner(loop_factory=LOOPS[loop_kind]) as runner:
        runner.run(main())
    assert open_fds() == before


def test_closing_the_loop_with_operations_in_flight_leaks_nothing(loop_kind: str) -> None:
    before = open_fds()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(3):
            asyncio.create_task(loop.sock_recv(a, 10))  # noqa: RUF006 - abandoned on purpose
        await asyncio.sleep(0.01)

    with asyncio.Runner(loop_factory=LOOPS[loop_kind]) as runner:
        runner.run(main())  # Runner.close() cancels the tasks and closes the loop
    a.close()
    b.settimeout(2)
    assert b.recv(10) == b""
    b.close()
    assert open_fds() == before


@needs_uring
@pytest.mark.parametrize("eager_send", [False, True])
def test_socket_io_goes_through_the_ring(eager_send: bool) -> None:
    """The loop's counters show one SQE and one completion per ring operation.

    Every recv is a ring operation; so is every send unless `eager_send` let
    the socket take the data at once (as the stock loop does).
    """
    messages = 200
    ops_per_message = 1 if eager_send else 2

    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, UringEventLoop)
        lst, client, conn = await connected_pair()
        with lst, client, conn:
            before = loop.stats()
            for i in range(messages):
                await loop.sock_sendall(client, b"%08d" % i)
                assert await loop.sock_recv(conn, 8) == b"%08d" % i
            after = loop.stats()
        return (
            after.sqes_submitted - before.sqes_submitted,
            after.completions - before.completions,
            after.enter_calls - before.enter_calls,
        )

    with asyncio.Runner(loop_factory=lambda: UringEventLoop(eager_send=eager_send)) as runner:
        sqes, completions, enters = runner.run(main())
    assert sqes >= ops_per_message * messages
    assert completions >= ops_per_message * messages
    assert enters >= messages  # at least one io_uring_enter per round trip


@needs_uring
def test_idle_loop_sleeps_in_the_kernel() -> None:
    """No busy polling: an idle second costs a handful of iterations."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, UringEventLoop)
        before = loop.stats().iterations
        await asyncio.sleep(0.2)
        return loop.stats().iterations - before

    with asyncio.Runner(loop_factory=UringEventLoop) as runner:
        assert runner.run(main()) <= 5


def test_blocking_client_thread_does_not_deadlock(run: Runner) -> None:
    """A client thread in the same process needs the GIL while the loop waits."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lst = listener()
        with lst:
            port = lst.getsockname()[1]

            def client() -> bytes:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(b"ping")
                    return s.recv(4)

            reply = loop.run_in_executor(None, client)
            conn, _ = await loop.sock_accept(lst)
            with conn:
                assert await loop.sock_recv(conn, 4) == b"ping"
                await loop.sock_sendall(conn, b"pong")
                assert await asyncio.wait_for(reply, 5) == b"pong"

    run(main())


def test_thread_wakes_a_sleeping_loop(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        threading.Timer(0.02, loop.call_soon_threadsafe, (event.set,)).start()
        await asyncio.wait_for(event.wait(), 5)

    run(main())


@needs_uring
def test_more_operations_than_ring_entries_are_all_submitted() -> None:
    """A tiny ring with many operations in flight: none is dropped."""

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        pairs = [socket.socketpair() for _ in range(50)]
        for a, b in pairs:
            a.setblocking(False)
            b.setblocking(False)
        try:
            recvs = [asyncio.ensure_future(loop.sock_recv(a, 10)) for a, _ in pairs]
            await asyncio.sleep(0.01)
            for i, (_, b) in enumerate(pairs):
                await loop.sock_sendall(b, b"%d" % i)
            return await asyncio.wait_for(asyncio.gather(*recvs), 5)
        finally:
            for a, b in pairs:
                a.close()
                b.close()

    with asyncio.Runner(loop_factory=lambda: UringEventLoop(ring_entries=8)) as runner:
        assert runner.run(main()) == [b"%d" % i for i in range(50)]


def test_recv_timeouts_lose_no_data(run: Runner) -> None:
    """wait_for around a recv, timing out again and again, then data arrives whole."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lst, client, conn = await connected_pair()
        with lst, client, conn:
            for _ in range(20):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(loop.sock_recv(conn, 100), 0.001)
            await loop.sock_sendall(client, b"after the timeouts")
            assert await asyncio.wait_for(loop.sock_recv(conn, 100), 5) == b"after the timeouts"

    run(main())


def test_data_and_connections_racing_a_cancel_are_kept(run: Runner) -> None:
    """A recv or accept cancelled just as it completes loses nothing."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lst, client, conn = await connected_pair()
        with lst, client, conn:
            for i in range(20):
                pending = asyncio.create_task(loop.sock_recv(conn, 100))
                await asyncio.sleep(0.002)
                client.send(b"raced-%d " % i)  # completes the recv in the kernel...
                pending.cancel()  # ...while its task is being cancelled
                with contextlib.suppress(asyncio.CancelledError):
                    assert await pending == b"raced-%d " % i
                    continue
                assert await asyncio.wait_for(loop.sock_recv(conn, 100), 5) == b"raced-%d " % i

            into = bytearray(100)
            pending_into = asyncio.create_task(loop.sock_recv_into(conn, into))
            await asyncio.sleep(0.002)
            client.send(b"into")
            pending_into.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending_into
            if not pending_into.cancelled():
                assert into[:4] == b"into"
            else:
                n = await asyncio.wait_for(loop.sock_recv_into(conn, into), 5)
                assert into[:n] == b"into"

            accept = asyncio.create_task(loop.sock_accept(lst))
            await asyncio.sleep(0.002)
            late = socket.create_connection(lst.getsockname())
            accept.cancel()
            with late:
                try:
                    accepted, _ = await accept
                except asyncio.CancelledError:
                    accepted, _ = await asyncio.wait_for(loop.sock_accept(lst), 5)
                with accepted:
                    late.sendall(b"hello")
                    assert await asyncio.wait_for(loop.sock_recv(accepted, 10), 5) == b"hello"

    run(main())
