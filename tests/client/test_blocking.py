"""BlockingConnection against a scripted peer: pipelining, order, failures."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from laminar.client import ConnectionLostError, ProtocolViolationError, RequestTimeoutError
from laminar.client.blocking import BlockingConnection
from laminar.wire import NEED_DATA, Frame, FrameDecoder, Ping, Pong

Script = Callable[[socket.socket], None]


@pytest.fixture
def peer() -> Iterator[Callable[[Script], tuple[str, int]]]:
    """Start a one-connection peer that runs `script(conn)` in a thread."""
    listeners: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def start(script: Script) -> tuple[str, int]:
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        listeners.append(lst)

        def serve() -> None:
            conn, _ = lst.accept()
            with conn:
                script(conn)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        threads.append(t)
        return lst.getsockname()

    yield start
    for lst in listeners:
        lst.close()
    for t in threads:
        t.join(5)


def read_frames(conn: socket.socket, count: int) -> list[Frame]:
    decoder = FrameDecoder()
    frames: list[Frame] = []
    while len(frames) < count:
        data = conn.recv(65536)
        if not data:
            break
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(frame)
    return frames


def answer(frame: Frame) -> bytes:
    return Pong(frame.partition_id, "peer", 0, 0).encode(frame.correlation_id)


def test_pipelined_requests_answered_in_reverse(peer: Callable[[Script], tuple[str, int]]) -> None:
    def script(conn: socket.socket) -> None:
        frames = read_frames(conn, 8)
        assert len(frames) == 8  # all eight were sent before any answer
        conn.sendall(b"".join(answer(f) for f in reversed(frames)))
        read_frames(conn, 1)

    conn = BlockingConnection(peer(script))
    ids = {pid: conn.send(Ping(pid)) for pid in range(1, 9)}
    assert conn.in_flight == 8
    deadline = time.monotonic() + 10
    for pid, corr in ids.items():  # waited for in send order, answered in reverse
        frame = conn.wait(corr, deadline)
        assert frame.correlation_id == corr and frame.partition_id == pid
    assert conn.in_flight == 0
    conn.close()


def test_threads_share_a_connection(peer: Callable[[Script], tuple[str, int]]) -> None:
    n = 40

    def script(conn: socket.socket) -> None:
        decoder = FrameDecoder()
        served = 0
        while served < n:
            decoder.feed(conn.recv(65536))
            while (frame := decoder.next_frame()) is not NEED_DATA:
                conn.sendall(answer(frame))
                served += 1

    conn = BlockingConnection(peer(script))
    got: dict[int, int] = {}

    def worker(pid: int) -> None:
        corr = conn.send(Ping(pid))
        got[pid] = conn.wait(corr, time.monotonic() + 10).partition_id

    threads = [threading.Thread(target=worker, args=(pid,)) for pid in range(1, n + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert got == {pid: pid for pid in range(1, n + 1)}
    conn.close()


def test_a_closed_stream_fails_every_waiter(peer: Callable[[Script], tuple[str, int]]) -> None:
    conn = BlockingConnection(peer(lambda c: read_frames(c, 2)))
    a, b = conn.send(Ping(1)), conn.send(Ping(2))
    with pytest.raises(ConnectionLostError, match="closed the connection"):
        conn.wait(a, time.monotonic() + 10)
    with pytest.raises(ConnectionLostError):
        conn.wait(b, time.monotonic() + 10)
    assert conn.broken
    with pytest.raises(ConnectionLostError):
        conn.send(Ping(3))


def test_timeout_abandons_the_request(peer: Callable[[Script], tuple[str, int]]) -> None:
    """A peer that answers something after a request was sent is slow, not
    silent: the request times out alone and the connection stays."""
    release = threading.Event()

    def script(conn: socket.socket) -> None:
        late, prompt = read_frames(conn, 2)
        conn.sendall(answer(prompt))
        release.wait(10)
        conn.sendall(answer(late))  # dropped
        (again,) = read_frames(conn, 1)
        conn.sendall(answer(again))
        read_frames(conn, 1)

    conn = BlockingConnection(peer(script))
    late, prompt = conn.send(Ping(1)), conn.send(Ping(2))
    assert conn.wait(prompt, time.monotonic() + 10).partition_id == 2
    with pytest.raises(RequestTimeoutError):
        conn.wait(late, time.monotonic() + 0.3)
    assert not conn.broken
    release.set()
    assert conn.wait(conn.send(Ping(3)), time.monotonic() + 10).partition_id == 3
    conn.close()


def test_a_silent_peer_is_closed_at_the_first_deadline(
    peer: Callable[[Script], tuple[str, int]],
) -> None:
    """Nothing at all since a request was sent: at its deadline the connection
    is closed and every request on it fails as lost at once, whatever its own
    deadline (a stopped node would otherwise hold each for its full timeout)."""
    release = threading.Event()

    def script(conn: socket.socket) -> None:
        read_frames(conn, 2)  # taken in, never answered (a SIGSTOPped node's kernel)
        release.wait(10)

    conn = BlockingConnection(peer(script))
    first, second = conn.send(Ping(1)), conn.send(Ping(2))
    with pytest.raises(ConnectionLostError, match="nothing else from it"):
        conn.wait(first, time.monotonic() + 0.3)
    assert conn.broken
    with pytest.raises(ConnectionLostError, match="nothing else from it"):
        conn.wait(second, time.monotonic() + 3600)
    release.set()


def test_garbage_from_the_peer_breaks_the_connection(
    peer: Callable[[Script], tuple[str, int]],
) -> None:
    def script(conn: socket.socket) -> None:
        read_frames(conn, 1)
        conn.sendall(b"\x00\x00\x00\x30" + b"\x00" * 60)
        read_frames(conn, 1)

    conn = BlockingConnection(peer(script))
    with pytest.raises(ProtocolViolationError, match="do not decode"):
        conn.wait(conn.send(Ping(1)), time.monotonic() + 10)
    assert conn.broken


def test_peer_closed_is_seen_before_sending(peer: Callable[[Script], tuple[str, int]]) -> None:
    conn = BlockingConnection(peer(lambda c: None))  # accepts, then closes at once
    deadline = time.monotonic() + 5
    while not conn.peer_closed():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert conn.broken


class _CountingSocket:
    """Delegates to a socket, counting `sendmsg` calls and the frames they carried."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.writes: list[int] = []

    def sendmsg(self, buffers: list[bytes]) -> int:
        self.writes.append(len(buffers))
        return self._sock.sendmsg(buffers)

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def test_sends_queued_while_a_write_is_under_way_leave_in_one_write(
    peer: Callable[[Script], tuple[str, int]],
) -> None:
    """Five threads send while another thread holds the send lock (a write under
    way): their five frames go out together in the next write, and each thread
    still gets its own answer."""
    n = 5

    def script(conn: socket.socket) -> None:
        frames = read_frames(conn, n)
        conn.sendall(b"".join(answer(f) for f in frames))
        read_frames(conn, 1)

    conn = BlockingConnection(peer(script))
    counting = _CountingSocket(conn._sock)
    conn._sock = counting  # type: ignore[assignment]
    got: dict[int, int] = {}

    def worker(pid: int) -> None:
        corr = conn.send(Ping(pid))
        got[pid] = conn.wait(corr, time.monotonic() + 10).partition_id

    with conn._send_lock:
        threads = [threading.Thread(target=worker, args=(pid,)) for pid in range(1, n + 1)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while conn._queued < n and time.monotonic() < deadline:
            time.sleep(0.001)
        assert conn._queued == n
    for t in threads:
        t.join(10)
    assert got == {pid: pid for pid in range(1, n + 1)}
    assert len(counting.writes) == 1  # one sendmsg carried all five frames
    conn.close()


def test_answered_reads_without_blocking_and_says_whether_wait_would(
    peer: Callable[[Script], tuple[str, int]],
) -> None:
    go = threading.Event()

    def script(conn: socket.socket) -> None:
        frames = read_frames(conn, 2)
        go.wait(10)
        conn.sendall(answer(frames[1]))  # the second one only
        read_frames(conn, 1)

    conn = BlockingConnection(peer(script))
    first, second = conn.send(Ping(1)), conn.send(Ping(2))
    started = time.monotonic()
    assert not conn.answered(first) and not conn.answered(second)
    assert time.monotonic() - started < 0.2, "it waited"
    go.set()
    deadline = time.monotonic() + 10
    while not conn.answered(second):
        assert time.monotonic() < deadline
    assert not conn.answered(first)
    assert conn.wait(second, deadline).correlation_id == second
    conn.close()
    assert conn.answered(first), "broken: wait would raise at once"
