"""The ring layer: submission, completion, lifetimes, links, cancellation."""

from __future__ import annotations

import errno
import gc
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from laminar.iouring import IoUringUnavailable, Ring, abi
from laminar.iouring.errors import unavailable_from_errno
from laminar.iouring.native import bytes_address, readable_address, writable_address
from tests.support import wait_until


def wait_for(ring: Ring, count: int, timeout: float = 5.0) -> list[tuple[object, int, int]]:
    out: list[tuple[object, int, int]] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out += ring.wait(0.1)
    return out


@pytest.fixture
def ring() -> Ring:
    r = Ring(16)
    yield r
    r.close()


def test_nops_complete_with_their_tokens(ring: Ring) -> None:
    for i in range(10):
        ring.prep_nop(i)
    done = wait_for(ring, 10)
    assert sorted(token for token, _, _ in done) == list(range(10))
    assert all(res == 0 for _, res, _ in done)
    assert ring.sqes_prepared == 10 and ring.completions == 10
    assert ring.in_flight == 0


def test_a_full_submission_queue_never_drops_an_entry(ring: Ring) -> None:
    count = ring.sq_entries * 5
    for i in range(count):
        ring.prep_nop(i)
    done = wait_for(ring, count)
    assert sorted(token for token, _, _ in done) == list(range(count))


def test_buffers_stay_alive_until_the_completion(ring: Ring) -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        for _ in range(8):
            buf = bytearray(64)
            address, pin = writable_address(buf)
            ring.prep_recv(a.fileno(), address, 64, 0, buf, pin)
            del buf, pin  # only the ring holds the buffer now
        ring.wait(0)
        gc.collect()
        garbage = [bytearray(b"x" * 64) for _ in range(1000)]  # reuse freed memory
        for i in range(8):
            b.send(b"message-%d" % i)
        done = wait_for(ring, 8)
        del garbage
        assert sorted(bytes(buf[:res]) for buf, res, _ in done) == [
            b"message-%d" % i for i in range(8)
        ]


def test_send_keeps_bytes_alive(ring: Ring) -> None:
    a, b = socket.socketpair()
    with a, b:
        data = os.urandom(1000)
        expected = bytes(data)
        ring.prep_send(a.fileno(), bytes_address(data), len(data), 0, "send", data)
        del data
        gc.collect()
        assert wait_for(ring, 1) == [("send", 1000, 0)]
        assert b.recv(2000) == expected


def test_errors_come_back_as_negative_results_not_exceptions(ring: Ring) -> None:
    buf = bytearray(8)
    address, pin = writable_address(buf)
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    ring.prep_read(r, address, 8, 0, "read", pin)
    assert wait_for(ring, 1) == [("read", -errno.EBADF, 0)]


def test_cancel_ends_an_in_flight_recv(ring: Ring) -> None:
    a, b = socket.socketpair()
    with a, b:
        buf = bytearray(8)
        address, pin = writable_address(buf)
        ud = ring.prep_recv(a.fileno(), address, 8, 0, "recv", pin)
        assert ring.wait(0) == []
        assert ring.is_pending(ud)
        ring.cancel(ud)
        assert wait_for(ring, 1) == [("recv", -errno.ECANCELED, 0)]
        assert not ring.is_pending(ud)


def test_timeout_entry_completes_with_etime(ring: Ring) -> None:
    ring.prep_timeout(0.01, "timer")
    assert wait_for(ring, 1) == [("timer", -errno.ETIME, 0)]


def test_wait_timeout_returns_without_completions(ring: Ring) -> None:
    start = time.monotonic()
    assert ring.wait(0.02) == []
    assert time.monotonic() - start >= 0.015


def test_linked_writev_and_fdatasync(ring: Ring, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        chunks = [b"a" * 10, bytearray(b"b" * 20), b"c" * 30]
        pins = [readable_address(c) for c in chunks]
        iov = b"".join(
            abi.IOVEC.pack(addr, len(c)) for (addr, _), c in zip(pins, chunks, strict=True)
        )
        ring.reserve(2)
        ring.prep_writev(fd, bytes_address(iov), 3, 0, "writev", (pins, iov), abi.IOSQE_IO_LINK)
        ring.prep_fdatasync(fd, "sync")
        done = dict((token, res) for token, res, _ in wait_for(ring, 2))
        assert done == {"writev": 60, "sync": 0}
        assert os.pread(fd, 100, 0) == b"a" * 10 + b"b" * 20 + b"c" * 30
    finally:
        os.close(fd)


def test_a_failed_link_cancels_the_rest_of_the_chain(ring: Ring) -> None:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    data = b"x"
    ring.reserve(2)
    ring.prep_write(w, bytes_address(data), 1, 0, "write", data, abi.IOSQE_IO_LINK)
    ring.prep_fdatasync(w, "sync")
    done = dict((token, res) for token, res, _ in wait_for(ring, 2))
    assert done == {"write": -errno.EBADF, "sync": -errno.ECANCELED}


def test_wait_releases_the_gil(ring: Ring) -> None:
    counter = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        wait_until(lambda: counter[0], "the spinning thread running")
        before = counter[0]
        ring.wait(0.2)
        during = counter[0] - before
    finally:
        stop.set()
        thread.join()
    # Holding the GIL through the wait would leave the thread at a standstill
    # (at most one switch interval of progress).
    assert during > 10_000


def test_close_with_operations_in_flight_releases_everything() -> None:
    before = set(os.listdir("/proc/self/fd"))
    a, b = socket.socketpair()
    ring = Ring(8)
    buf = bytearray(8)
    address, pin = writable_address(buf)
    ring.prep_recv(a.fileno(), address, 8, 0, "recv", pin)
    ring.wait(0)
    ring.close()
    ring.close()  # idempotent
    assert ring.closed
    a.close()
    b.settimeout(1)
    assert b.recv(1) == b""  # the recv let go of the socket: the peer sees EOF
    b.close()
    assert set(os.listdir("/proc/self/fd")) == before


def test_unavailable_errors_name_the_cause_and_the_fallback() -> None:
    exc = unavailable_from_errno(errno.ENOMEM, 4096)
    assert isinstance(exc, IoUringUnavailable)
    assert "locked memory" in str(exc) and 'runtime="asyncio"' in str(exc)
    assert "ENOSYS" in str(unavailable_from_errno(errno.ENOSYS, 8))
    assert unavailable_from_errno(errno.EPERM, 8).errno == errno.EPERM


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop privileges in a child")
def test_unavailable_for_real_when_memlock_is_exhausted() -> None:
    """An unprivileged process with no locked memory allowance cannot map a big ring."""
    import subprocess
    import sys

    code = (
        "import os, resource, sys\n"
        "from laminar.iouring import Ring, IoUringUnavailable\n"
        "resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        "    Ring(4096)\n"
        "except IoUringUnavailable as exc:\n"
        "    print('UNAVAILABLE', exc)\n"
        "else:\n"
        "    print('AVAILABLE')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    if out.stdout.strip() == "AVAILABLE":
        pytest.skip("this kernel accounts ring memory without RLIMIT_MEMLOCK")
    assert out.stdout.startswith("UNAVAILABLE"), out.stderr
    assert 'runtime="asyncio"' in out.stdout
