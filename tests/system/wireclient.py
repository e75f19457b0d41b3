"""A small blocking client over raw sockets, for system tests of the node.

It speaks the wire protocol through `laminar.wire` and nothing else, so the
tests check the node and not a client library: `WireConnection` is one socket
(send any message or raw bytes, read frames), `NodeClient` routes partition
requests to the owning shard's port the way a real client does, or through the
node port (`via_node_port=True`) to exercise forwarding.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Sequence
from typing import Any

from laminar.placement import partition_id, shard_for
from laminar.wire import (
    NEED_DATA,
    CreateTopicRequest,
    CreateTopicResponse,
    DeleteTopicRequest,
    ErrorResponse,
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
    Response,
    TopicInfo,
    decode_response,
)


class ServerError(Exception):
    """The node answered with an error response."""

    def __init__(self, response: ErrorResponse) -> None:
        super().__init__(f"{response.code.name}: {response.message}")
        self.response = response
        self.code = response.code


class WireConnection:
    """One blocking connection to a node or shard port."""

    def __init__(self, host: str, port: int, timeout: float = 15.0) -> None:
        self._adopt(socket.create_connection((host, port), timeout=timeout))

    def _adopt(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder(64 << 20)
        self._ids = itertools.count(1)

    @classmethod
    def adopt(cls, sock: socket.socket) -> WireConnection:
        """A connection over a socket already connected (from a chosen source address)."""
        conn = cls.__new__(cls)
        conn._adopt(sock)
        return conn

    def send(self, message: Message, correlation_id: int | None = None) -> int:
        corr = next(self._ids) if correlation_id is None else correlation_id
        self.sock.sendall(message.encode(corr))
        return corr

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> Frame | None:
        """The next frame, or None at end of stream."""
        while True:
            frame = self._decoder.next_frame()
            if frame is not NEED_DATA:
                return frame
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self._decoder.feed(data)

    def read_response(self) -> Response:
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError("the node closed the connection")
        return decode_response(frame)

    def call(self, message: Message) -> Any:
        """Send and wait for the answer; raise `ServerError` for error responses."""
        corr = self.send(message)
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError("the node closed the connection")
        if frame.correlation_id != corr:
            raise AssertionError(f"response for {frame.correlation_id}, expected {corr}")
        response = decode_response(frame)
        if isinstance(response, ErrorResponse):
            raise ServerError(response)
        return response

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True once the node has closed this connection (reads until EOF)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NodeClient:
    """Routes requests like a client library: metadata, then shard-direct."""

    def __init__(self, host: str, port: int, *, via_node_port: bool = False) -> None:
        self.host = host
        self.port = port
        self.via_node_port = via_node_port
        self.node = WireConnection(host, port)
        self.meta: MetadataResponse = self.node.call(MetadataRequest())
        self._shards: dict[int, WireConnection] = {}

    def refresh(self) -> MetadataResponse:
        self.meta = self.node.call(MetadataRequest())
        return self.meta

    def topic(self, name: str) -> TopicInfo:
        for topic in self.meta.topics:
            if topic.name == name:
                return topic
        self.refresh()
        for topic in self.meta.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)

    def pid(self, topic: str, partition: int) -> int:
        return partition_id(self.topic(topic).topic_id, partition)

    def owner(self, pid: int) -> int:
        return shard_for(pid, len(self.meta.shards))

    def conn_for(self, pid: int) -> WireConnection:
        if self.via_node_port:
            return self.node
        shard = self.owner(pid)
        conn = self._shards.get(shard)
        if conn is None:
            info = self.meta.shards[shard]
            conn = self._shards[shard] = WireConnection(info.host, info.port)
        return conn

    def create_topic(self, name: str, partitions: int) -> TopicInfo:
        response: CreateTopicResponse = self.node.call(CreateTopicRequest(name, partitions))
        self.refresh()
        return response.topic

    def delete_topic(self, name: str) -> None:
        self.node.call(DeleteTopicRequest(name))
        self.refresh()

    def list_topics(self) -> tuple[TopicInfo, ...]:
        response: ListTopicsResponse = self.node.call(ListTopicsRequest())
        return response.topics

    def produce(self, topic: str, partition: int, values: Sequence[bytes]) -> ProduceResponse:
        pid = self.pid(topic, partition)
        response: ProduceResponse = self.conn_for(pid).call(ProduceRequest.from_values(pid, values))
        return response

    def fetch(
        self, topic: str, partition: int, index: int, *, max_bytes: int = 1 << 20, wait_ms: int = 0
    ) -> FetchResponse:
        pid = self.pid(topic, partition)
        response: FetchResponse = self.conn_for(pid).call(
            FetchRequest(pid, index, max_bytes=max_bytes, max_wait_ms=wait_ms)
        )
        return response

    def fetch_all(self, topic: str, partition: int) -> list[bytes]:
        """Every value in the partition, in order."""
        values: list[bytes] = []
        index = self.offsets(topic, partition).lowest_index
        while True:
            response = self.fetch(topic, partition, index)
            if not response.records:
                return values
            for record in response.records:
                assert record.index == index, (record.index, index)
                values.append(record.decode()[0])
                index += 1

    def offsets(self, topic: str, partition: int) -> ListOffsetsResponse:
        pid = self.pid(topic, partition)
        response: ListOffsetsResponse = self.conn_for(pid).call(ListOffsetsRequest(pid))
        return response

    def ping(self, pid: int) -> Pong:
        response: Pong = self.conn_for(pid).call(Ping(pid))
        return response

    def close(self) -> None:
        self.node.close()
        for conn in self._shards.values():
            conn.close()

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
