"""Shards of one node in one process, for authorization tests: real handlers,
dispatchers, fast path, partition logs, atomic writes and groups, a real metadata state whose users
and ACLs are applied from encoded metadata entries, and the inter-shard
channel replaced by a direct call that encodes and decodes the FORWARD as the
channel would. A client is a `RequestContext` with a principal (the seam the
login door fills on a real node)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from laminar.groups.service import GroupService
from laminar.log import LogConfig
from laminar.log.partitions import LongPolls, PartitionManager
from laminar.log.storage import SyscallBackend
from laminar.placement import partition_id, shard_for
from laminar.replication.metadata import MetadataState, encode_entry
from laminar.replication.routes import NodeRoutes
from laminar.security.acls import Acl, Operation, PatternType, Permission, ResourceType
from laminar.shards.authorization import Authorizer
from laminar.shards.dispatch import Dispatcher
from laminar.shards.fastpath import RequestFastPath
from laminar.shards.handlers import Handlers, RequestContext, ShardIdentity
from laminar.shards.metrics import ShardMetrics
from laminar.shards.replicas import NodeReplicas
from laminar.wire import (
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    Frame,
    Message,
    ProduceRequest,
    TopicInfo,
    decode_frame,
    decode_response,
)
from laminar.wire.codec import Buffer
from laminar.writes.decision_logs import LocalDecisionLogs
from laminar.writes.service import WriteService, WriteSettings

CONFIG = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0, flush="always")
FRAME_BYTES = 1 << 20
ALICE = "User:alice"
BOB = "User:bob"


def acl(
    operation: Operation,
    name: str,
    resource_type: ResourceType = ResourceType.TOPIC,
    principal: str = ALICE,
    permission: Permission = Permission.ALLOW,
) -> Acl:
    return Acl(principal, resource_type, PatternType.LITERAL, name, operation, permission)


class Metadata:
    """The part of `MetadataService` handlers use, over a real `MetadataState`
    fed encoded entries (as the metadata log feeds every shard)."""

    clustered = False
    is_ready = True

    def __init__(self) -> None:
        self.state = MetadataState()
        self._index = 0

    def apply(self, entry: Any) -> None:
        self.state.apply_value(self._index, encode_entry(entry))
        self._index += 1

    def allow(self, *acls: Acl) -> None:
        self.apply(self.state.security.acls.plan_add(acls))

    def revoke(self, *acls: Acl) -> None:
        self.apply(self.state.security.acls.plan_remove(acls))

    async def ready(self) -> None:
        pass

    async def catch_up(self) -> None:
        pass

    async def create_topic(
        self, name: str, partitions: int, config: Any = None, rf: Any = None
    ) -> TopicInfo:
        self.apply(self.state.plan_create(name, partitions))
        topic = self.state.by_name(name)
        assert topic is not None
        return topic


class Channel:
    """A sibling channel that serves the request on the target shard's
    dispatcher as internal traffic, through the FORWARD's bytes."""

    def __init__(self, shards: Shards, target: int) -> None:
        self._shards = shards
        self._target = target

    async def request(self, message: Message, timeout_s: float) -> Frame:
        frame = decode_frame(message.encode(1), FRAME_BYTES * 2)
        ctx = RequestContext(received_by=self._target, internal=True)
        out = await self._shards.dispatchers[self._target].dispatch(frame, ctx)
        return decode_frame(b"".join(out), FRAME_BYTES * 2)


class Channels:
    def __init__(self, shards: Shards) -> None:
        self._shards = shards

    def to(self, peer: int) -> Channel:
        return Channel(self._shards, peer)


class Shards:
    """`count` shards of one node sharing one metadata state."""

    def __init__(
        self,
        root: Path,
        count: int = 2,
        authenticated: bool = True,
        metadata: Metadata | None = None,
    ) -> None:
        """`metadata`: a restarted node's (what its metadata log replays)."""
        self.count = count
        self.metadata = metadata or Metadata()
        self.dispatchers: list[Dispatcher] = []
        self.fast_paths: list[RequestFastPath] = []
        self.writes: list[WriteService] = []
        self.groups: list[GroupService] = []
        self._clients = itertools.count(1)
        self._partitions: list[PartitionManager] = []
        ports = tuple(range(1, count + 1))
        for i in range(count):
            partitions = PartitionManager(
                str(root / str(i)),
                CONFIG,
                SyscallBackend(),
                owns=functools.partial(_owns, i, count),
            )
            self._partitions.append(partitions)
            ident = ShardIdentity(
                "n1", i, count, "127.0.0.1", 7070, ports, None, "userspace", FRAME_BYTES, 1000
            )
            metrics = ShardMetrics()
            handlers = Handlers(
                ident,
                self.metadata,  # type: ignore[arg-type]
                partitions,
                metrics,
                LongPolls(),
                NodeReplicas(partitions),
                None,
                Authorizer(self.metadata.state) if authenticated else None,
            )
            dispatcher = Dispatcher(i, count, handlers, Channels(self), metrics, FRAME_BYTES)  # type: ignore[arg-type]
            self.dispatchers.append(dispatcher)
            self.fast_paths.append(RequestFastPath(dispatcher))
            owns = functools.partial(_owns, i, count)
            writes = WriteService(
                WriteSettings(str(root / f"staging-{i}"), 1 << 26, 60.0, 3_600_000, 1 << 20),
                SyscallBackend(),
                owns,
                handlers.write_replica_of,
                handlers.write_topic_of,
                functools.partial(self._internal_request, i),
                LocalDecisionLogs(str(root / f"decisions-{i}"), SyscallBackend(), owns, 3_600_000),
            )
            dispatcher.add_handlers(writes.table())
            self.writes.append(writes)
            send = functools.partial(self._internal_request, i)
            groups = GroupService(
                self.metadata,  # type: ignore[arg-type]
                4,
                handlers.replica_of,
                NodeRoutes("n1", send, None),
                handlers.replicas.placed_on,
                lists_group=None
                if handlers.authorizer is None
                else handlers.authorizer.lists_group,
            )
            dispatcher.add_handlers(groups.table())
            self.groups.append(groups)

    async def _internal_request(self, shard: int, message: Message) -> Frame:
        """A write protocol request of the node's own (as `Shard._internal_request`)."""
        out = await self.dispatchers[shard].dispatch(message.to_frame(0), self.internal(shard))
        return decode_frame(b"".join(out), FRAME_BYTES * 2)

    async def start(self) -> None:
        for partitions in self._partitions:
            await partitions.recover()
        for writes in self.writes:
            await writes.start()

    async def close(self) -> None:
        for writes in self.writes:
            await writes.close()
        for groups in self.groups:
            await groups.close()
        for partitions in self._partitions:
            await partitions.close_all()

    def client(self, principal: str | None, shard: int = 0) -> RequestContext:
        """A client connection to `shard` logged in as `principal`."""
        return RequestContext(received_by=shard, client=next(self._clients), principal=principal)

    def internal(self, shard: int) -> RequestContext:
        return RequestContext(received_by=shard, internal=True)

    def owner(self, pid: int) -> int:
        return shard_for(pid, self.count)

    def pid_on(self, topic: str, shard: int) -> int:
        """A partition of `topic` that `shard` owns."""
        info = self.metadata.state.by_name(topic)
        assert info is not None
        for idx in range(info.partitions):
            pid = partition_id(info.topic_id, idx)
            if self.owner(pid) == shard:
                return pid
        raise AssertionError(f"no partition of {topic} on shard {shard}")

    async def ask(self, message: Message, ctx: RequestContext) -> Any:
        """Send `message` on `ctx`'s shard through its dispatcher; the decoded answer."""
        return decode_response(await self.ask_frame(message, ctx))

    async def ask_frame(self, message: Message, ctx: RequestContext) -> Frame:
        """`ask`, the answer frame undecoded."""
        frame = decode_frame(message.encode(7), FRAME_BYTES)
        raw = b"".join(await self.dispatchers[ctx.received_by].dispatch(frame, ctx))
        return decode_frame(raw, len(raw))

    async def values(self, pid: int) -> list[bytes]:
        """What the partition holds, read as the node itself (unchecked)."""
        got = await self.ask(FetchRequest(pid, 0), self.internal(self.owner(pid)))
        assert isinstance(got, FetchResponse), got
        return [r.decode()[0] or b"" for r in got.records]


def _owns(shard: int, count: int, pid: int) -> bool:
    return shard_for(pid, count) == shard


def answer(out: Sequence[Buffer]) -> Any:
    raw = b"".join(out)
    return decode_response(decode_frame(raw, len(raw)))


def produce(pid: int, *values: bytes) -> ProduceRequest:
    return ProduceRequest.from_values(pid, list(values))


def refused(got: Any, *words: str) -> bool:
    """Is `got` a NOT_AUTHORIZED answer whose message names every word?"""
    from laminar.wire import ErrorCode

    return (
        isinstance(got, ErrorResponse)
        and got.code is ErrorCode.NOT_AUTHORIZED
        and all(w in got.message for w in words)
    )
