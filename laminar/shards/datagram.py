"""Requests over UDP on the node port: one frame per datagram, one answer back.

Every shard receives on its own SO_REUSEPORT socket of the node's UDP port.
Which shard gets a datagram is the kernel's choice (its hash, or the steering
program of `laminar.xdp`); the frame then goes through the same dispatcher as
TCP, so a datagram for another shard's partition is forwarded and answered
from the receiving socket. Rules:

- A datagram must hold exactly one whole frame. Foreign traffic (bad magic,
  runt datagrams) is dropped silently and counted; other undecodable frames
  get an error datagram when the prefix names a correlation id.
- UDP is for small reads. A datagram's source address can be forged, so by
  default only read-only ops are served (ping, fetch, list offsets, metadata,
  list topics); produce and topic changes get USE_TCP unless the node runs
  with `--udp-writes`. A request datagram larger than `udp_max_bytes`, or an
  answer that would be, gets USE_TCP too (a fetch should ask for `max_bytes`
  that fit). The default, 1472, keeps datagrams within an Ethernet MTU
  (unfragmented).
- No answer is more than `UDP_AMPLIFICATION_MAX` (3) times its request
  datagram, or `UDP_SMALL_ANSWER_BYTES` (100) if that is more, so a forged request reflects
  at most that to its victim (a 25-byte fetch once drew 1,472 bytes: 59x).
  A client that wants a larger answer pads its request with a `pad` header
  field, which every op ignores (`laminar.client.udp` does, as QUIC clients
  pad their first packets); the datagram stays one frame, which the steering
  programs check. An answer over the ratio becomes a short USE_TCP.
- A datagram never waits on purpose: a fetch that asks to long-poll gets
  USE_TCP. So a bounded number of datagrams in service at once (`MAX_IN_FLIGHT`)
  are all being worked on; past that, the socket buffer queues them and the
  kernel drops what overflows (UDP semantics).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, Final

from laminar.shards.dispatch import Dispatcher
from laminar.shards.handlers import RequestContext
from laminar.shards.metrics import ShardMetrics
from laminar.wire import (
    MAGIC,
    PREFIX_BYTES,
    REQUEST_HEADER_LIMITS,
    UDP_AMPLIFICATION_MAX,
    UDP_SMALL_ANSWER_BYTES,
    BadMagic,
    ErrorCode,
    ErrorResponse,
    Frame,
    Op,
    ProtocolError,
    decode_frame,
)
from laminar.wire.codec import OFFSET_MAGIC, PREFIX

logger = logging.getLogger("laminar.shards")

RECEIVE_BYTES: Final = 65536
"""More than any UDP payload (65527 over IPv6), so no datagram is ever truncated."""
MAX_IN_FLIGHT: Final = 512
READ_OPS: Final = frozenset({Op.PING, Op.FETCH, Op.LIST_OFFSETS, Op.METADATA, Op.LIST_TOPICS})
"""What UDP serves by default: nothing that changes state."""
WRITE_OPS: Final = frozenset(
    {Op.PRODUCE, Op.CREATE_TOPIC, Op.DELETE_TOPIC, Op.ALTER_TOPIC, Op.DECOMMISSION_NODE}
)
"""Added with `--udp-writes`."""


class DatagramServer:
    """Serves one shard's UDP socket."""

    def __init__(
        self,
        sock: socket.socket,
        dispatcher: Dispatcher,
        metrics: ShardMetrics,
        shard_id: int,
        max_frame_bytes: int,
        udp_max_bytes: int,
        *,
        writes: bool = False,
    ) -> None:
        self._sock = sock
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._ctx = RequestContext(received_by=shard_id)
        self._max_frame_bytes = max_frame_bytes
        self._udp_max_bytes = udp_max_bytes
        self._ops = READ_OPS | WRITE_OPS if writes else READ_OPS
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            try:
                data, address = await loop.sock_recvfrom(self._sock, RECEIVE_BYTES)
            except OSError as exc:
                self._slots.release()
                logger.debug("udp receive failed: %s", exc)
                continue
            except BaseException:
                self._slots.release()
                raise
            self._metrics.datagrams_in += 1
            self._metrics.bytes_in += len(data)
            task = loop.create_task(self._serve_one(data, address))
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _serve_one(self, data: bytes, address: Any) -> None:
        if len(data) > self._udp_max_bytes:
            await self._refuse_oversized(data, address)
            return
        answer_max = max(UDP_AMPLIFICATION_MAX * len(data), UDP_SMALL_ANSWER_BYTES)
        try:
            frame = decode_frame(data, self._max_frame_bytes, REQUEST_HEADER_LIMITS)
        except BadMagic:
            self._metrics.datagrams_dropped += 1
            return
        except ProtocolError as exc:
            self._metrics.protocol_errors += 1
            reply = b"".join(ErrorResponse.from_error(exc).encode_buffers(exc.correlation_id or 0))
            if exc.correlation_id is None or len(reply) > answer_max:
                self._metrics.datagrams_dropped += 1
                return
            await self._send(reply, address)
            return
        refusal = self._refusal(frame.op, frame.header)
        if refusal is not None:
            use_tcp = self._use_tcp(frame.op, frame.correlation_id, frame.partition_id, refusal)
            await self._send(self._bounded(use_tcp, answer_max, frame), address)
            return
        reply = b"".join(await self._dispatcher.dispatch(frame, self._ctx))
        if len(reply) > self._udp_max_bytes:
            reply = self._use_tcp(
                frame.op,
                frame.correlation_id,
                frame.partition_id,
                f"the answer ({len(reply)} bytes) does not fit a datagram "
                f"({self._udp_max_bytes} bytes here); use TCP or ask for less",
            )
        reply = self._bounded(reply, answer_max, frame)
        await self._send(reply, address)

    def _refusal(self, op: int, header: dict[str, Any]) -> str | None:
        """Why a well-formed request is not served over UDP, or None."""
        if op not in self._ops:
            if op in WRITE_OPS:
                return "a datagram's source can be forged: writes need TCP (or --udp-writes)"
            return f"op {op} is not served over UDP; send it over TCP"
        if op == Op.FETCH and header.get("max_wait_ms"):
            return "a fetch that long-polls holds the request while it waits: long-poll over TCP"
        return None

    async def _refuse_oversized(self, data: bytes, address: Any) -> None:
        """USE_TCP for a laminar request datagram over the limit; drop anything else."""
        if len(data) < PREFIX_BYTES or data[OFFSET_MAGIC] != MAGIC:
            self._metrics.datagrams_dropped += 1
            return
        _, _, _, op, _, corr, pid = PREFIX.unpack_from(data)
        message = (
            f"the request ({len(data)} bytes) does not fit a datagram "
            f"({self._udp_max_bytes} bytes here); send it over TCP"
        )
        await self._send(self._use_tcp(op, corr, pid, message), address)

    def _bounded(self, reply: bytes, answer_max: int, frame: Frame) -> bytes:
        """`reply`, or a short USE_TCP when it is over the amplification bound."""
        if len(reply) <= answer_max:
            return reply
        self._metrics.error("udp_amplification")
        return self._use_tcp(
            frame.op, frame.correlation_id, frame.partition_id, "pad the request or use TCP"
        )

    def _use_tcp(self, op: int, corr: int, pid: int, message: str) -> bytes:
        self._metrics.error("use_tcp")
        return ErrorResponse.for_code(op, ErrorCode.USE_TCP, message, pid).encode(corr)

    async def _send(self, reply: bytes, address: Any) -> None:
        self._metrics.bytes_out += len(reply)
        try:
            await asyncio.get_running_loop().sock_sendto(self._sock, reply, address)
        except OSError as exc:
            logger.debug("udp send to %s failed: %s", address, exc)

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
