"""A small synchronous UDP client for the node port: one request per datagram.

    from laminar.client.udp import UdpClient
    with UdpClient("127.0.0.1:7070") as udp:
        pong = udp.ping(pid)                       # Pong: shard_id served, received_by
        produced = udp.produce(pid, [b"a", b"b"])  # ProduceResponse
        fetched = udp.fetch(pid, 0)                # FetchResponse, sized to fit a datagram
        answers = udp.call_many([Ping(p) for p in pids])   # pipelined, in order

The node port's UDP path is for small requests: the kernel (eBPF or classic
BPF reuseport steering) delivers each datagram straight to the shard that
owns its partition. Rules this client keeps:

- Datagrams get lost. Requests that are safe to repeat (ping, fetch, offsets,
  metadata) are resent after `timeout_s`, up to `retries` times, then fail
  with `RequestTimeoutError`; a produce is sent once and fails with
  `OutcomeUnknownError` when no answer comes (it may have been appended).
- A request that does not fit `max_datagram_bytes` is refused here, and one
  the node finds too big (or whose answer would be) comes back as USE_TCP:
  both raise `InvalidRequestError` with `.code` USE_TCP. Use `Client` (TCP)
  for those.
- The node answers no more than 3 times a request's size (so a forged
  request cannot be amplified against a victim): every request is padded
  (a `pad` header field) to a third of `max_answer_bytes`.
- Answers are matched by correlation id; duplicates and late answers to
  requests already resolved are dropped.

It is a helper for tests, benchmarks and small tools, not a second client
library: no metadata cache, no routing (the kernel routes), no asyncio.
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, TypeVar

from laminar.client.errors import (
    InvalidRequestError,
    LaminarError,
    OutcomeUnknownError,
    RequestTimeoutError,
    server_error,
)
from laminar.client.routing import parse_address
from laminar.wire import (
    UDP_AMPLIFICATION_MAX,
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    Frame,
    Message,
    Op,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    ProtocolError,
    Response,
    decode_frame,
    decode_response,
    encode_frame,
)

UDP_PAYLOAD_BYTES_MAX: Final = 65507
UDP_ANSWER_BYTES: Final = 1472
"""The node's default `--udp-max-bytes`: the largest answer it sends."""
RECEIVE_BUFFER_BYTES: Final = 1 << 20
FETCH_OVERHEAD_BYTES: Final = 256
"""Room a fetch answer needs beyond its records' bytes (prefix, header, record table)."""
_T = TypeVar("_T")
_REPEATABLE: Final = frozenset({Op.PING, Op.FETCH, Op.LIST_OFFSETS, Op.METADATA, Op.LIST_TOPICS})


def padded(frame: Frame, size: int) -> bytes:
    """`frame` encoded, with a `pad` header field (which no op reads) that brings
    it to `size` bytes when it is shorter."""

    def encode(header: dict[str, Any]) -> bytes:
        op, corr, pid = frame.op, frame.correlation_id, frame.partition_id
        return encode_frame(op, corr, pid, header, frame.payload, flags=frame.flags)

    data = encode(frame.header)
    short = size - len(data)
    if short <= 0:
        return data
    overshoot = len(encode({**frame.header, "pad": bytes(short)})) - size
    return encode({**frame.header, "pad": bytes(max(0, short - overshoot))})


@dataclass(slots=True)
class _Pending:
    index: int
    data: bytes
    op: int
    deadline: float
    tries: int


class UdpClient:
    """Requests to one node port over UDP (see the module docstring)."""

    def __init__(
        self,
        address: str | tuple[str, int],
        *,
        timeout_s: float = 1.0,
        retries: int = 3,
        max_datagram_bytes: int = UDP_PAYLOAD_BYTES_MAX,
        max_answer_bytes: int = UDP_ANSWER_BYTES,
    ) -> None:
        host, port = parse_address(address) if isinstance(address, str) else address
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_datagram_bytes = max_datagram_bytes
        self._pad_to = min(max_datagram_bytes, -(-max_answer_bytes // UDP_AMPLIFICATION_MAX))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        # Room for a window of answers even when each costs a page (generic XDP).
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
        self._sock.connect((host, port))  # only the node's answers, and ICMP errors
        self._sock.setblocking(False)
        self._ids = itertools.count(1)
        self.datagrams_sent = 0
        """Request datagrams sent, resends included (to match the node's counters)."""

    # -- one request -------------------------------------------------------------

    def ping(self, partition_id: int) -> Pong:
        return self._expect(self.call(Ping(partition_id)), Pong)

    def produce(self, partition_id: int, values: Sequence[bytes]) -> ProduceResponse:
        request = ProduceRequest.from_values(partition_id, list(values))
        return self._expect(self.call(request), ProduceResponse)

    def fetch(self, partition_id: int, index: int, max_bytes: int | None = None) -> FetchResponse:
        """Records from `index` on; `max_bytes` defaults to what fits a datagram."""
        if max_bytes is None:
            max_bytes = max(1, self.max_datagram_bytes - FETCH_OVERHEAD_BYTES)
        request = FetchRequest(partition_id, index, max_bytes=max_bytes)
        return self._expect(self.call(request), FetchResponse)

    def call(self, request: Message) -> Response:
        """Send one request and return its answer; raise the server's error."""
        answer = self.call_many([request], window=1)[0]
        if isinstance(answer, LaminarError):
            raise answer
        return answer

    # -- many requests -----------------------------------------------------------

    def call_many(
        self, requests: Sequence[Message], window: int = 64
    ) -> list[Response | LaminarError]:
        """Answers (or the error each got) in request order, `window` in flight."""
        datagrams = [self._encode(r) for r in requests]
        results: list[Response | LaminarError | None] = [None] * len(datagrams)
        pending: dict[int, _Pending] = {}
        next_index = 0
        while next_index < len(datagrams) or pending:
            while next_index < len(datagrams) and len(pending) < window:
                data = datagrams[next_index]
                if isinstance(data, LaminarError):
                    results[next_index] = data
                else:
                    corr, op = int.from_bytes(data[8:12], "big"), data[6]
                    pending[corr] = _Pending(next_index, data, op, 0.0, 0)
                    self._send(pending[corr])
                next_index += 1
            if not pending:
                continue
            wait_s = max(0.0, min(p.deadline for p in pending.values()) - time.monotonic())
            if select.select([self._sock], [], [], wait_s)[0]:
                self._receive(pending, results)
            self._expire(pending, results)
        return [r for r in results if r is not None]

    def _encode(self, request: Message) -> bytes | LaminarError:
        data = padded(request.to_frame(next(self._ids) & 0xFFFF_FFFF), self._pad_to)
        if len(data) > self.max_datagram_bytes:
            return InvalidRequestError(
                f"the request ({len(data)} bytes) does not fit a datagram "
                f"({self.max_datagram_bytes} bytes); send it over TCP",
                code=ErrorCode.USE_TCP,
            )
        return data

    def _send(self, item: _Pending) -> None:
        item.tries += 1
        item.deadline = time.monotonic() + self.timeout_s
        # The resend timer covers a full buffer or an ICMP error, like a loss.
        with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
            self._sock.send(item.data)
            self.datagrams_sent += 1

    def _receive(
        self, pending: dict[int, _Pending], results: list[Response | LaminarError | None]
    ) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except (BlockingIOError, ConnectionRefusedError):
                return
            try:
                frame = decode_frame(data, 1 << 20)
                answer = decode_response(frame)
            except ProtocolError:
                continue  # not an answer we can read: the timer resends
            item = pending.pop(frame.correlation_id, None)
            if item is None:
                continue  # a duplicate, or late
            if isinstance(answer, ErrorResponse):
                results[item.index] = server_error(answer.code, answer.message)
            else:
                results[item.index] = answer

    def _expire(
        self, pending: dict[int, _Pending], results: list[Response | LaminarError | None]
    ) -> None:
        now = time.monotonic()
        for corr, item in list(pending.items()):
            if item.deadline > now:
                continue
            if item.op in _REPEATABLE and item.tries <= self.retries:
                self._send(item)
                continue
            del pending[corr]
            if item.op in _REPEATABLE:
                results[item.index] = RequestTimeoutError(
                    f"no answer over UDP after {item.tries} tries of {self.timeout_s} s"
                )
            else:
                results[item.index] = OutcomeUnknownError(
                    f"no answer over UDP in {self.timeout_s} s; the request may have been applied"
                )

    @staticmethod
    def _expect(answer: Response, kind: type[_T]) -> _T:
        if not isinstance(answer, kind):
            raise InvalidRequestError(f"expected {kind.__name__}, got {type(answer).__name__}")
        return answer

    # -- lifetime ----------------------------------------------------------------

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> UdpClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
