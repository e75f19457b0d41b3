"""`laminar.stream`: TLS under the Outbox and the readers, over real sockets.

Both ends run on the stock asyncio loop over a socket pair; the system tests
(tests/system/test_tls.py) run the same seam in real shards on io_uring."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.certs import Pem, make_ca, make_cert
from laminar.outbox import Outbox
from laminar.security.tls import TlsFiles, TlsSession, client_context, server_context
from laminar.shards.budget import InputBudget
from laminar.stream import CHUNK_BYTES, TlsStream, _chunks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    tmp = tmp_path_factory.mktemp("certs")
    ca = make_ca(tmp, "ca")
    node: Pem = make_cert(tmp, ca, "node")
    server = server_context(TlsFiles(node.cert, node.key))
    client = client_context(True, ca.cert)
    assert client is not None
    return server, client


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    yield a, b
    a.close()
    b.close()


def _streams(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    pair: tuple[socket.socket, socket.socket],
    budget: InputBudget | None = None,
) -> tuple[TlsStream, TlsStream]:
    loop = asyncio.get_running_loop()
    server_ctx, client_ctx = contexts
    server = TlsStream(loop, pair[0], TlsSession(server_ctx, server_side=True), budget)
    session = TlsSession(client_ctx, server_side=False, server_hostname="127.0.0.1")
    return server, TlsStream(loop, pair[1], session)


async def _read_exactly(stream: TlsStream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = await stream.recv(n - len(got))
        assert data, f"end of stream after {len(got)} of {n} bytes"
        got += data
    return bytes(got)


def test_chunks_join_small_buffers_and_cut_large_ones() -> None:
    parts = [b"a" * 10, b"b" * 25, b"c" * 3]
    chunks = [bytes(c) for c in _chunks(parts, 16)]
    assert b"".join(chunks) == b"".join(parts)
    assert [len(c) for c in chunks] == [16, 16, 6]


@given(
    st.lists(st.binary(max_size=40).map(lambda b: [b, bytearray(b), memoryview(b)]), max_size=12),
    st.integers(0, 2),
    st.integers(1, 48),
)
def test_chunks_are_the_buffers_in_order_in_full_runs_of_the_size(
    forms: list[list[bytes | bytearray | memoryview]], kind: int, size: int
) -> None:
    parts = [form[kind] for form in forms]
    chunks = [bytes(c) for c in _chunks(parts, size)]
    assert b"".join(chunks) == b"".join(bytes(p) for p in parts)
    assert all(len(c) == size for c in chunks[:-1])
    assert all(0 < len(c) <= size for c in chunks)


def test_frames_through_an_outbox_arrive_whole_and_in_order_both_ways(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], pair: tuple[socket.socket, socket.socket]
) -> None:
    # A small send buffer: the kernel takes part of a chunk, the rest is the tail.
    pair[1].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    frames = [bytes([n % 251]) * size for n, size in enumerate([1, 50, 3 * CHUNK_BYTES + 7] * 20)]

    async def main() -> None:
        server, client = _streams(contexts, pair)
        await asyncio.gather(server.handshake(), client.handshake())
        assert server.session.version == "TLSv1.3"
        box = Outbox(asyncio.get_running_loop(), client)
        for frame in frames:
            box.send([frame[:1], frame[1:]])
        expected = b"".join(frames)
        got = await _read_exactly(server, len(expected))
        await box.drained()
        assert got == expected and box.pending_bytes == 0
        _, answer = await asyncio.gather(
            server.sendall(b"answer" * 50_000), _read_exactly(client, 300_000)
        )
        assert answer == b"answer" * 50_000

    asyncio.run(main())


def test_handshake_input_is_charged_to_the_budget_until_released(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], pair: tuple[socket.socket, socket.socket]
) -> None:
    """A client that sends part of a handshake and stalls holds those bytes on the
    node: they count against the shard's input budget until the connection ends."""
    hello_session = TlsSession(contexts[1], server_side=False, server_hostname="127.0.0.1")
    assert not hello_session.handshake()
    hello = hello_session.take_output()
    part = hello[: len(hello) // 2]

    async def main() -> None:
        budget = InputBudget(1 << 20)
        server, _ = _streams(contexts, pair, budget)
        handshake = asyncio.ensure_future(server.handshake())
        pair[1].send(part)
        for _ in range(1000):
            if budget.used:
                break
            await asyncio.sleep(0.001)
        assert budget.used == len(part)
        pair[1].close()
        with pytest.raises(ssl.SSLError):
            await handshake
        server.close()
        assert budget.used == 0

    asyncio.run(main())


def test_bytes_after_close_notify_break_the_stream(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], pair: tuple[socket.socket, socket.socket]
) -> None:
    async def main() -> None:
        server, client = _streams(contexts, pair)
        await asyncio.gather(server.handshake(), client.handshake())
        await client.sendall(b"last words")
        # close_notify, then bytes that should never come, in one write
        obj = client.session._obj
        with pytest.raises(ssl.SSLWantReadError):
            obj.unwrap()
        pair[1].send(client.session.take_output() + b"junk after the end")
        assert await _read_exactly(server, 10) == b"last words"
        with pytest.raises(ssl.SSLError, match="after the peer's close_notify"):
            await server.recv(100)

    asyncio.run(main())


def test_end_says_close_notify_once_and_the_peer_reads_a_clean_end(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], pair: tuple[socket.socket, socket.socket]
) -> None:
    """The socket stays open: only close_notify can end the peer's read."""

    async def main() -> None:
        server, client = _streams(contexts, pair)
        await asyncio.gather(server.handshake(), client.handshake())
        await server.sendall(b"answer")
        server.end()
        server.end()  # said once
        assert await _read_exactly(client, 6) == b"answer"
        assert await asyncio.wait_for(client.recv(100), 5) == b""
        assert server.session.close_notify() == b""

    asyncio.run(main())


def test_a_plaintext_peer_fails_the_handshake(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], pair: tuple[socket.socket, socket.socket]
) -> None:
    async def main() -> None:
        server, _ = _streams(contexts, pair)
        pair[1].send(b"LAMR\x00\x01 a laminar frame, not TLS")
        with pytest.raises(ssl.SSLError):
            await server.handshake()

    asyncio.run(main())


def test_a_client_with_another_ca_refuses_the_node(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    pair: tuple[socket.socket, socket.socket],
    tmp_path: Path,
) -> None:
    other = client_context(True, make_ca(tmp_path, "other").cert)
    assert other is not None

    async def main() -> None:
        server, _ = _streams(contexts, pair)
        loop = asyncio.get_running_loop()
        session = TlsSession(other, server_side=False, server_hostname="127.0.0.1")
        client = TlsStream(loop, pair[1], session)
        results = await asyncio.gather(
            server.handshake(), client.handshake(), return_exceptions=True
        )
        assert isinstance(results[1], ssl.SSLCertVerificationError)
        assert isinstance(results[0], ssl.SSLError) and "UNKNOWN_CA" in str(results[0])

    asyncio.run(main())


def test_a_handshake_longer_than_its_bound_fails(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], pair: tuple[socket.socket, socket.socket]
) -> None:
    """A ClientHello may be up to 128 KiB, which OpenSSL buffers whole before
    parsing it: the stream stops at `HANDSHAKE_BYTES_MAX` instead."""
    body = (1).to_bytes(1, "big") + (100_000).to_bytes(3, "big") + bytes(100_000)
    records = b"".join(
        b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
        for part in (body[i : i + 16_384] for i in range(0, len(body), 16_384))
    )

    async def main() -> None:
        budget = InputBudget(1 << 20)
        server, _ = _streams(contexts, pair, budget)
        sender = asyncio.ensure_future(asyncio.get_running_loop().sock_sendall(pair[1], records))
        with pytest.raises(ssl.SSLError, match="handshake sent over"):
            await server.handshake()
        sender.cancel()
        server.close()
        assert budget.used == 0

    asyncio.run(main())
