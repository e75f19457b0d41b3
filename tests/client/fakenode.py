"""A scripted laminar peer for client unit tests: the wire protocol, in threads.

`FakeNode(shards=N)` listens on a node port and one port per shard, keeps
topics and records in memory, and serves every client op the way the real
node does. It records which listener received each request, so tests can
check shard-direct routing, and takes faults on demand: close a connection
before or after applying a request, answer with an error code, stop and
restart a shard's listener, answer pipelined requests in reverse order, or
freeze as a SIGSTOPped node does (its kernel still completes connects and
takes in requests; nothing is read or answered until it thaws).
It is a test peer, not a model of the node's internals.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from laminar.placement import shard_for
from laminar.wire import (
    NEED_DATA,
    CreateTopicRequest,
    CreateTopicResponse,
    DeleteTopicRequest,
    DeleteTopicResponse,
    ErrorCode,
    ErrorResponse,
    FetchedRecord,
    FetchRequest,
    FetchResponse,
    Frame,
    FrameDecoder,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    ShardInfo,
    TopicInfo,
    decode_request,
)

NODE = -1
"""The `listener` of a request that arrived on the node port."""


@dataclass
class Fault:
    """What to do to the next request with op `op` (any op when None)."""

    action: str  # "close_before" | "close_after" | "error" | "ignore" (never answer)
    op: int | None = None
    code: ErrorCode = ErrorCode.INTERNAL
    shard: int | None = None  # only requests arriving on this listener
    times: int = 1


@dataclass
class Received:
    listener: int
    op: int
    partition_id: int


@dataclass
class _State:
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    logs: dict[int, list[tuple[int, bytes]]] = field(default_factory=lambda: defaultdict(list))
    next_topic_id: int = 1


class FakeNode:
    """A fake laminar node on 127.0.0.1 (see the module docstring)."""

    def __init__(self, shards: int = 2, routing_mode: str = "userspace") -> None:
        self.shards = shards
        self.routing_mode = routing_mode
        self.received: list[Received] = []
        self.faults: list[Fault] = []
        self.reverse_pipelined = False
        self.connections_accepted = 0
        self._state = _State()
        self._cond = threading.Condition()
        self._listeners: dict[int, socket.socket] = {}
        self._ports: dict[int, int] = {}
        self._conns: dict[int, set[socket.socket]] = defaultdict(set)
        self._closed = False
        self._thawed = threading.Event()
        self._thawed.set()
        for listener in [NODE, *range(shards)]:
            self._listen(listener, 0)

    # --- lifetime and faults ----------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self._ports[NODE]}"

    def port(self, listener: int) -> int:
        return self._ports[listener]

    def __enter__(self) -> FakeNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._thawed.set()
        for listener in list(self._listeners):
            self.stop(listener)

    def freeze(self) -> None:
        """Stop accepting, reading and answering, like a SIGSTOPped node."""
        self._thawed.clear()

    def thaw(self) -> None:
        """Carry on (SIGCONT): what arrived meanwhile is read and served."""
        self._thawed.set()

    def stop(self, listener: int) -> None:
        """Close a listener and every connection it accepted (a crashed shard)."""
        sock = self._listeners.pop(listener, None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for conn in list(self._conns[listener]):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._conns[listener].clear()

    def start(self, listener: int) -> None:
        """Listen again on the same port (the shard came back)."""
        self._listen(listener, self._ports[listener])

    def drop_connections(self, listener: int) -> None:
        """Close the accepted connections of `listener` but keep listening."""
        for conn in list(self._conns[listener]):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def inject(self, fault: Fault) -> None:
        with self._cond:
            self.faults.append(fault)

    def records(self, pid: int) -> list[bytes]:
        with self._cond:
            return [blob for _, blob in self._state.logs[pid]]

    def partition_requests(self) -> list[Received]:
        return [r for r in self.received if r.partition_id]

    def count(self, op: int) -> int:
        """How many requests of kind `op` arrived (a test waits on it to know one is in hand)."""
        return sum(r.op == op for r in list(self.received))

    # --- sockets ----------------------------------------------------------------------

    def _listen(self, listener: int, port: int) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
        self._listeners[listener] = sock
        self._ports[listener] = sock.getsockname()[1]
        threading.Thread(target=self._accept_loop, args=(listener, sock), daemon=True).start()

    def _accept_loop(self, listener: int, sock: socket.socket) -> None:
        while True:
            self._thawed.wait()
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            self.connections_accepted += 1
            self._conns[listener].add(conn)
            threading.Thread(target=self._serve, args=(listener, conn), daemon=True).start()

    def _serve(self, listener: int, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = conn.recv(1 << 16)
                self._thawed.wait()  # (a read under way when frozen is served after)
                if not data:
                    return
                decoder.feed(data)
                frames = []
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    frames.append(frame)
                if self.reverse_pipelined:
                    frames.reverse()
                for frame in frames:
                    out = self._handle(listener, frame)
                    if out is None:
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    if out:
                        conn.sendall(out)
        except OSError:
            return
        finally:
            self._conns[listener].discard(conn)
            conn.close()

    # --- requests ---------------------------------------------------------------------

    def _take_fault(self, listener: int, op: int) -> Fault | None:
        with self._cond:
            for fault in self.faults:
                if (fault.op is None or fault.op == op) and (
                    fault.shard is None or fault.shard == listener
                ):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def _handle(self, listener: int, frame: Frame) -> bytes | None:
        """The bytes to answer with, or None to close the connection."""
        self.received.append(Received(listener, frame.op, frame.partition_id))
        fault = self._take_fault(listener, frame.op)
        if fault is not None and fault.action == "close_before":
            return None
        if fault is not None and fault.action == "ignore":
            return b""
        if fault is not None and fault.action == "error":
            err = ErrorResponse.for_code(frame.op, fault.code, None, frame.partition_id)
            return err.encode(frame.correlation_id)
        try:
            response: Message = self._apply(listener, decode_request(frame))
        except _Refusal as exc:
            response = ErrorResponse.for_code(frame.op, exc.code, exc.message, frame.partition_id)
        if fault is not None and fault.action == "close_after":
            return None
        return response.encode(frame.correlation_id)

    def _apply(self, listener: int, request: Any) -> Message:
        state = self._state
        if isinstance(request, MetadataRequest):
            return self.metadata()
        if isinstance(request, CreateTopicRequest):
            with self._cond:
                if request.name in state.topics:
                    raise _Refusal(ErrorCode.TOPIC_EXISTS, f"topic {request.name!r} exists")
                info = TopicInfo(request.name, state.next_topic_id, request.partitions)
                state.next_topic_id += 1
                state.topics[request.name] = info
            return CreateTopicResponse(info)
        if isinstance(request, DeleteTopicRequest):
            with self._cond:
                info = state.topics.pop(request.name, None)
            if info is None:
                raise _Refusal(ErrorCode.UNKNOWN_TOPIC, f"no topic {request.name!r}")
            return DeleteTopicResponse(info.name, info.topic_id)
        if isinstance(request, ListTopicsRequest):
            return ListTopicsResponse(tuple(state.topics.values()))
        if isinstance(request, Ping):
            owner = shard_for(request.partition_id, self.shards)
            received_by = owner if listener == NODE else listener
            return Pong(request.partition_id, "fake-node", owner, received_by)
        pid = request.partition_id
        self._check_partition(pid)
        if isinstance(request, ProduceRequest):
            with self._cond:
                log = state.logs[pid]
                first = len(log)
                now = int(time.time() * 1000)
                log.extend((now, blob) for blob in request.blobs)
                self._cond.notify_all()
            return ProduceResponse(pid, first, len(request.blobs), now)
        if isinstance(request, FetchRequest):
            return self._fetch(request)
        if isinstance(request, ListOffsetsRequest):
            with self._cond:
                log = state.logs[pid]
                ts_index = None
                if request.timestamp_ms is not None:
                    ts_index = next(
                        (i for i, (ts, _) in enumerate(log) if ts >= request.timestamp_ms),
                        len(log),
                    )
                return ListOffsetsResponse(pid, 0, len(log), len(log), ts_index)
        raise _Refusal(ErrorCode.UNKNOWN_OP, "not served by the fake node")

    def _check_partition(self, pid: int) -> None:
        topic_id, idx = pid >> 32, pid & 0xFFFFFFFF
        for info in self._state.topics.values():
            if info.topic_id == topic_id:
                if idx >= info.partitions:
                    raise _Refusal(ErrorCode.UNKNOWN_PARTITION, f"no partition {idx}")
                return
        raise _Refusal(ErrorCode.UNKNOWN_TOPIC, f"no topic with id {topic_id}")

    def _fetch(self, request: FetchRequest) -> FetchResponse:
        pid = request.partition_id
        deadline = time.monotonic() + request.max_wait_ms / 1000
        with self._cond:
            log = self._state.logs[pid]
            if request.index > len(log):
                raise _Refusal(ErrorCode.OFFSET_OUT_OF_RANGE, f"index {request.index} > end")
            while request.index == len(log) and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            out = []
            size = 0
            for i in range(request.index, len(log)):
                ts, blob = log[i]
                full = size + len(blob) > request.max_bytes or len(out) >= request.max_records
                if out and full:
                    break
                out.append(FetchedRecord(i, ts, blob))
                size += len(blob)
            return FetchResponse(
                pid, tuple(out), 0, len(log), out[-1].index + 1 if out else request.index
            )

    def metadata(self) -> MetadataResponse:
        shards = tuple(ShardInfo(i, "127.0.0.1", self._ports[i]) for i in range(self.shards))
        return MetadataResponse(
            "fake-node",
            "127.0.0.1",
            self._ports[NODE],
            self.routing_mode,
            shards,
            tuple(self._state.topics.values()),
        )


class _Refusal(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
