"""Raft traffic between the shards of different nodes: authenticated TCP links.

Outbound (`PeerLinks`, the `Transport` a `RaftHost` sends through): one task
per remote node takes everything queued for that node since it last ran and
writes it as one RAFT_BATCH frame per remote shard (the shard that owns each
partition on that node: `shard_for(pid, its core count)`), so the heartbeats
of every group two shards share travel as one frame per tick. A link learns
the remote node's shards from its metadata (one METADATA request to its node
port), opens a TCP connection to each shard it needs and authenticates it
(`laminar.replication.auth`: hello, challenge, proof) before the first batch.
In certificate mode every connection to a peer, the METADATA request's
included, is TLS first (`open_stream`): the peer must show a certificate the
CA file verifies that names the node id dialed, or nothing is sent.
When nothing went to a node during a tick, a keepalive (an empty batch) goes
instead, so the receiving host knows the node is alive even when every group
is quiesced. A link that fails drops what was queued (Raft resends) and
reconnects with backoff; queued bytes are bounded.

Inbound (`PeerSession`): a shard connection whose first frame is PEER_HELLO is
handed over by `laminar.shards.connection` (its stream: after the TLS
handshake, in certificate mode, with the certificate the peer showed) to a
session that answers the handshake (in certificate mode only for the node id
that certificate names; reading frames of a header's size at most until the peer is
authenticated, so an unauthenticated peer cannot make the shard buffer a
large frame; its refusals logged at a bounded rate, `laminar.lograte`; the
shard counts the session against its caps until `on_handshake_done`) and then
reads RAFT_BATCH frames (one way, never answered),
stepping each message into the shard's host, and the requests of
`laminar.replication.calls` (only the ops the shard lets peers ask,
`laminar.shards.router.PEER_OPS`), each answered when served, at most
`PEER_REQUESTS_IN_FLIGHT` at a time. A peer that fails the handshake gets
one error frame, a log line, and a closed socket; no other op is accepted on
a peer connection, and RAFT_BATCH is accepted nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Final, NamedTuple

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.placement import shard_for
from laminar.raft import Message
from laminar.replication.auth import Initiator, PeerAuth, PeerAuthError, Responder
from laminar.replication.codec import RaftCodecError, decode_batch, encode_batch
from laminar.replication.nodes import NodeView
from laminar.replication.refusals import HANDSHAKE, IMPERSONATION, PeerRefusals
from laminar.security.principal import PrincipalError, node_id_from_certificate
from laminar.security.tls import TlsSession
from laminar.stream import PlainStream, Stream, TlsStream
from laminar.wire import (
    NEED_DATA,
    REQUEST_HEADER_LIMITS,
    ErrorCode,
    ErrorResponse,
    Flags,
    Frame,
    FrameDecoder,
    MetadataRequest,
    MetadataResponse,
    ProtocolError,
    decode_response,
    encode_frame,
)
from laminar.wire.codec import HEADER_OFFSET, Buffer

logger = logging.getLogger("laminar.replication")
"""Handshake failures are caused by whoever connects: their lines are rate-limited."""

CONNECT_TIMEOUT_S: Final = 2.0
HANDSHAKE_TIMEOUT_S: Final = 5.0
BACKOFF_S: Final = (0.05, 0.1, 0.2, 0.5, 1.0)
QUEUED_BYTES_MAX: Final = 64 << 20
"""Per remote node; beyond it new messages are dropped (Raft resends)."""
BATCH_BYTES_MAX: Final = 4 << 20
"""A frame is cut when its messages' payloads pass this."""
READ_BYTES: Final = 256 << 10
PEER_REQUESTS_IN_FLIGHT: Final = 64
HANDSHAKE_FRAME_BYTES: Final = HEADER_OFFSET + REQUEST_HEADER_LIMITS.max_header_bytes
"""The largest frame read before the peer is authenticated (hello and proof carry
a header only)."""
"""Requests one peer session serves at once; it reads no more until one is answered."""

# Op codes of node-to-node connections (`laminar.wire.ops` reserves 32-63 for
# internal ops and 64-95 for Raft). They have no `laminar.wire.Message`
# classes: only this module reads and writes them.
PEER_HELLO: Final = 41
"""Opens a peer connection; answered (RESPONSE flag) with the responder's challenge."""
PEER_PROOF: Final = 42
"""The initiator's proof; an empty answer means the connection is authenticated."""
RAFT_BATCH: Final = 64
"""Raft messages of many groups (`laminar.replication.codec`); one way, never answered."""

Receive = Callable[[int, Message], None]
ServeRequest = Callable[[Frame, str], Awaitable[list[Buffer]]]
"""A peer's request frame and its node id -> the answer frame's buffers."""


class PeerLinkError(Exception):
    """A remote shard cannot be reached or refused us."""


def _size(message: Message) -> int:
    return 64 + len(message.data) + sum(len(e.data) + 16 for e in message.entries)


# -- frames on a socket -------------------------------------------------------------


async def read_frame(stream: Stream, decoder: FrameDecoder) -> Frame:
    while True:
        frame = decoder.next_frame()
        if frame is not NEED_DATA:
            return frame
        data = await stream.recv(READ_BYTES)
        if not data:
            raise ConnectionResetError("the peer closed the connection")
        decoder.feed(data)


def peer_decoder(max_frame_bytes: int) -> FrameDecoder:
    return FrameDecoder(max_frame_bytes, header_limits=REQUEST_HEADER_LIMITS)


# -- outbound -----------------------------------------------------------------------


class ShardConnection:
    """One authenticated connection to one shard of a remote node."""

    def __init__(self, stream: Stream, peer_id: str) -> None:
        self.stream = stream
        self.peer_id = peer_id

    @classmethod
    async def open(
        cls, host: str, port: int, auth: PeerAuth, expected: str, max_frame_bytes: int
    ) -> ShardConnection:
        """Connect (TLS in certificate mode) and authenticate; or raise."""

        async def opened() -> Stream:
            stream = await open_stream(host, port, auth, expected)
            try:
                await _initiate(stream, auth, expected, max_frame_bytes)
            except BaseException:
                close_stream(stream)
                raise
            return stream

        return cls(await asyncio.wait_for(opened(), HANDSHAKE_TIMEOUT_S), expected)

    async def send(self, payload: bytes) -> None:
        await self.stream.sendall(encode_frame(RAFT_BATCH, 0, 0, {}, payload))

    def close(self) -> None:
        close_stream(self.stream)


async def _initiate(stream: Stream, auth: PeerAuth, expected: str, max_frame: int) -> None:
    decoder = peer_decoder(max_frame)
    initiator = Initiator(auth)
    await stream.sendall(encode_frame(PEER_HELLO, 1, 0, initiator.hello()))
    challenge = await read_frame(stream, decoder)
    _raise_refusal(challenge)
    try:
        proof = initiator.on_challenge(challenge.header)
    except PeerAuthError as exc:
        raise PeerLinkError(str(exc)) from None
    if initiator.peer_id != expected:
        raise PeerLinkError(f"expected node {expected!r} there, found {initiator.peer_id!r}")
    await stream.sendall(encode_frame(PEER_PROOF, 2, 0, proof))
    _raise_refusal(await read_frame(stream, decoder))


def _raise_refusal(frame: Frame) -> None:
    if frame.is_error:
        refusal = decode_response(frame)
        message = refusal.message if isinstance(refusal, ErrorResponse) else "refused"
        raise PeerLinkError(f"the peer refused the handshake: {message}")


class _NodeLink:
    """Everything this shard sends to one remote node."""

    def __init__(self, links: PeerLinks, node_id: str) -> None:
        self.links = links
        self.node_id = node_id
        self.queue: list[tuple[int, Message]] = []
        self.queued_bytes = 0
        self.wake = asyncio.Event()
        self.layout: NodeLayout | None = None
        self.connections: dict[int, ShardConnection] = {}
        self.sent_this_tick = False
        self.failures = 0
        self.last_logged: str | None = None
        """The last failure logged (a new one is logged at once)."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    def put(self, pid: int, message: Message) -> None:
        size = _size(message)
        if self.queued_bytes + size > QUEUED_BYTES_MAX:
            self.links.dropped += 1
            return
        self.queue.append((pid, message))
        self.queued_bytes += size
        self.wake.set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch, self.queue, self.queued_bytes = self.queue, [], 0
            try:
                await self._deliver(batch)
                self.failures = 0
            except (OSError, PeerLinkError, TimeoutError, ProtocolError) as exc:
                self._broken(exc)
                delay = BACKOFF_S[min(self.failures, len(BACKOFF_S) - 1)]
                self.failures += 1
                await asyncio.sleep(delay)

    async def _deliver(self, batch: list[tuple[int, Message]]) -> None:
        host, ports, _ = await self._layout()
        by_shard: dict[int, list[tuple[int, Message]]] = defaultdict(list)
        for pid, message in batch:
            by_shard[shard_for(pid, len(ports))].append((pid, message))
        if not batch:  # a keepalive: to every shard already connected, else shard 0
            by_shard = {shard: [] for shard in (self.connections or (0,))}
        for shard, messages in by_shard.items():
            conn = self.connections.get(shard)
            if conn is None:
                conn = await ShardConnection.open(
                    host, ports[shard], self.links.auth, self.node_id, self.links.max_frame_bytes
                )
                self.connections[shard] = conn
                logger.info("raft link to node %s shard %d is up", self.node_id, shard)
            for chunk in _chunks(messages):
                await conn.send(encode_batch(chunk))
        self.sent_this_tick = True

    async def _layout(self) -> NodeLayout:
        if self.layout is None:
            member = self.links.view().get(self.node_id)
            if member is None:
                raise PeerLinkError(f"node {self.node_id!r} is not a member")
            self.layout = await fetch_layout(
                member.host, member.port, self.links.auth, member.node_id
            )
        return self.layout

    def _broken(self, exc: BaseException) -> None:
        """Log the failure when it is new (another reason than the last one
        logged), else at the 1st, 6th and every 50th in a row."""
        reason = f"{type(exc).__name__}: {exc}"
        if self.failures in (0, 5) or self.failures % 50 == 49 or reason != self.last_logged:
            self.last_logged = reason
            logger.warning("raft link to node %s: %s", self.node_id, exc)
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()
        self.layout = None  # the node may have restarted with other ports

    def close(self) -> None:
        self.task.cancel()
        for conn in self.connections.values():
            conn.close()


def _chunks(messages: list[tuple[int, Message]]) -> list[list[tuple[int, Message]]]:
    out: list[list[tuple[int, Message]]] = [[]]
    size = 0
    for item in messages:
        item_size = _size(item[1])
        if out[-1] and size + item_size > BATCH_BYTES_MAX:
            out.append([])
            size = 0
        out[-1].append(item)
        size += item_size
    return out


async def _connect(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket connected to host:port (closed if that fails)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), CONNECT_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


async def open_stream(host: str, port: int, auth: PeerAuth, expected: str) -> Stream:
    """A connection to node `expected` at host:port: in certificate mode after
    a TLS handshake whose certificate names `expected` (else `PeerLinkError`);
    plain TCP otherwise."""
    sock = await _connect(host, port)
    loop = asyncio.get_running_loop()
    if auth.dial_context is None:
        return PlainStream(loop, sock)
    try:
        stream = TlsStream(loop, sock, TlsSession(auth.dial_context(), server_side=False))
        await stream.handshake()
        certified = certified_node(stream)
        if certified != expected:
            named = "no node" if certified is None else f"node {certified!r}"
            raise PeerLinkError(f"expected node {expected!r} there, its certificate names {named}")
    except BaseException:
        sock.close()
        raise
    return stream


def certified_node(stream: Stream) -> str | None:
    """The node id the verified certificate of the stream's other end names
    (None: none, or no TLS). Raises `PeerAuthError` for one naming several."""
    certificate = stream.peer_certificate()
    if certificate is None:
        return None
    try:
        return node_id_from_certificate(certificate)
    except PrincipalError as exc:
        raise PeerAuthError(str(exc)) from None


def close_stream(stream: Stream) -> None:
    stream.close()
    stream.sock.close()


class NodeLayout(NamedTuple):
    """Where a node's shards listen, from its metadata: its host, each shard's
    port and each shard's Kafka port (empty: its Kafka door is off)."""

    host: str
    shard_ports: tuple[int, ...]
    kafka_ports: tuple[int, ...]


async def fetch_layout(host: str, port: int, auth: PeerAuth, node_id: str) -> NodeLayout:
    """The layout of node `node_id` at host:port, from its metadata."""
    response = await _layout_metadata(host, port, auth, node_id)
    shards = sorted(response.shards, key=lambda s: s.shard_id)
    kafka = tuple(s.kafka_port for s in shards if s.kafka_port is not None)
    return NodeLayout(
        host, tuple(s.port for s in shards), kafka if len(kafka) == len(shards) else ()
    )


async def _layout_metadata(host: str, port: int, auth: PeerAuth, node_id: str) -> MetadataResponse:
    """The layout-only metadata answer of node `node_id` at host:port (its node
    id and shard ports, which it serves before any login; over TLS in
    certificate mode, `open_stream`): where the peer session is opened."""

    async def ask() -> Frame:
        stream = await open_stream(host, port, auth, node_id)
        try:
            await stream.sendall(MetadataRequest(layout_only=True).encode(1))
            return await read_frame(stream, FrameDecoder(16 << 20))
        finally:
            close_stream(stream)

    frame = await asyncio.wait_for(ask(), HANDSHAKE_TIMEOUT_S)
    response = decode_response(frame)
    if not isinstance(response, MetadataResponse):
        raise PeerLinkError(f"{host}:{port} answered metadata with {type(response).__name__}")
    return response


class PeerLinks:
    """This shard's outbound Raft links, one per remote node (see the module docstring)."""

    def __init__(
        self,
        auth: PeerAuth,
        view: Callable[[], NodeView],
        max_frame_bytes: int,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.auth = auth
        self.view = view
        self.max_frame_bytes = max_frame_bytes
        self._clock = clock
        self._nodes: dict[str, _NodeLink] = {}
        self._heard: dict[str, float] = {}
        """The clock's monotonic() when each node was last heard from."""
        self.dropped = 0

    def send(self, node_id: str, pid: int, message: Message) -> None:
        link = self._nodes.get(node_id)
        if link is None:
            if node_id == self.auth.node_id or self.view().get(node_id) is None:
                self.dropped += 1
                return
            link = self._nodes[node_id] = _NodeLink(self, node_id)
        link.put(pid, message)

    def tick(self) -> None:
        """Once per tick: a keepalive (empty batch) to every node nothing was sent to."""
        for link in self._nodes.values():
            if not link.sent_this_tick and not link.queue:
                link.wake.set()
            link.sent_this_tick = False

    def shard_ports(self, node_id: str) -> tuple[int, ...]:
        """The shard ports of `node_id` as learned from its metadata (() until then)."""
        link = self._nodes.get(node_id)
        if link is None or link.layout is None:
            return ()
        return link.layout.shard_ports

    def heard(self, node_id: str) -> None:
        self._heard[node_id] = self._clock.monotonic()

    def last_heard(self, node_id: str) -> float | None:
        return self._heard.get(node_id)

    def close(self) -> None:
        for link in self._nodes.values():
            link.close()
        self._nodes.clear()


# -- inbound ------------------------------------------------------------------------


class PeerSession:
    """The accepting side of a peer connection (see the module docstring)."""

    def __init__(
        self,
        stream: Stream,
        auth: PeerAuth,
        receive: Receive,
        heard: Callable[[str], None],
        max_frame_bytes: int,
        serve: ServeRequest | None = None,
        request_ops: frozenset[int] = frozenset(),
        refusals: PeerRefusals | None = None,
        on_handshake_done: Callable[[], None] | None = None,
    ) -> None:
        self.stream = stream
        self._refusals = refusals or PeerRefusals()
        self._on_handshake_done = on_handshake_done
        self._auth = auth
        self._receive = receive
        self._heard = heard
        self._max_frame_bytes = max_frame_bytes
        self._serve = serve
        self._request_ops = request_ops if serve is not None else frozenset()
        self._in_flight = asyncio.Semaphore(PEER_REQUESTS_IN_FLIGHT)
        self._answering: set[asyncio.Task[None]] = set()
        self._send_lock = asyncio.Lock()
        self.peer_id: str | None = None

    async def serve(self, hello: Frame) -> None:
        """Answer the handshake that `hello` opened, then read batches until EOF."""
        loop = asyncio.get_running_loop()
        stream = self.stream
        try:
            try:
                peer = await asyncio.wait_for(self._handshake(hello), HANDSHAKE_TIMEOUT_S)
            except (PeerAuthError, TimeoutError) as exc:
                self._refusals.note(HANDSHAKE, f"refused a peer connection: {exc}")
                refusal = ErrorResponse.for_code(hello.op, ErrorCode.INVALID_REQUEST, str(exc))
                with contextlib.suppress(OSError):
                    await stream.sendall(refusal.encode(0))
                return
            except (OSError, ProtocolError) as exc:
                # The initiator checks our proof first: one with another secret
                # hangs up (in certificate mode it checked our certificate before).
                who = hello.header.get("node_id")
                name = who if isinstance(who, str) else "?"
                hint = "" if self._auth.certificates else ": does it have another cluster secret?"
                self._refusals.note(HANDSHAKE, f"peer {name!r} gave up the handshake ({exc}){hint}")
                return
            finally:
                if self._on_handshake_done is not None:
                    self._on_handshake_done()
            self.peer_id = peer
            decoder = peer_decoder(self._max_frame_bytes)
            await stream.sendall(encode_frame(PEER_PROOF, 0, 0, {}, flags=Flags.RESPONSE))
            while True:
                frame = await read_frame(stream, decoder)
                if frame.op in self._request_ops and not frame.flags & Flags.RESPONSE:
                    await self._in_flight.acquire()
                    task = loop.create_task(self._answer(frame, peer))
                    self._answering.add(task)
                    task.add_done_callback(self._answering.discard)
                    continue
                if frame.op != RAFT_BATCH:
                    raise PeerAuthError(f"op {frame.op} on a peer connection")
                self._heard(peer)
                batch = decode_batch(frame.payload, self._max_frame_bytes)
                forged = next((m.src for _, m in batch if m.src != peer), None)
                if forged is not None:  # a peer may only speak for itself: none of it is taken
                    self._refusals.note(
                        IMPERSONATION,
                        f"closed the session of node {peer!r}: it sent raft messages "
                        f"as node {forged!r}",
                    )
                    return
                for pid, message in batch:
                    self._receive(pid, message)
        except (OSError, ProtocolError, RaftCodecError, PeerAuthError) as exc:
            if self.peer_id is not None and not isinstance(exc, ConnectionResetError):
                logger.warning("peer connection from %s closed: %s", self.peer_id, exc)
        finally:
            for task in self._answering:
                task.cancel()
            close_stream(stream)

    async def _answer(self, frame: Frame, peer: str) -> None:
        """Serve one request of the peer and send its answer (any order)."""
        assert self._serve is not None
        try:
            answer = b"".join(await self._serve(frame, peer))
            async with self._send_lock:
                await self.stream.sendall(answer)
        except OSError:
            pass  # the connection is gone; the reading side ends the session
        finally:
            self._in_flight.release()

    async def _handshake(self, hello: Frame) -> str:
        """Answer `hello`, read the proof (a header-sized frame at most) and check it."""
        decoder = FrameDecoder(HANDSHAKE_FRAME_BYTES, header_limits=REQUEST_HEADER_LIMITS)
        responder = Responder(self._auth, certified=certified_node(self.stream))
        challenge = responder.on_hello(hello.header)
        await self.stream.sendall(encode_frame(PEER_HELLO, 0, 0, challenge, flags=Flags.RESPONSE))
        proof = await read_frame(self.stream, decoder)
        if proof.op != PEER_PROOF:
            raise PeerAuthError(f"expected the handshake's proof, got op {proof.op}")
        if decoder.buffered_bytes:
            raise PeerAuthError("a peer sent more than its proof before it was answered")
        return responder.on_proof(proof.header)
