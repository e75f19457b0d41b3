"""The requests a shard serves itself, one method per op.

A handler gets a decoded request that the router has already placed on this
shard (it owns the partition, or the op is node-level) and returns the
response frame's buffers. It raises to refuse (`RequestError`,
`MetadataError`, log errors); the dispatcher turns that into an error
response. Handlers never touch sockets.

Partitions are reached through the replica seam (`laminar.replication.replica`):
a single node's log, or this node's member of the partition's Raft group.
Produce stores each record blob of the request as one log record, unchanged, so
a fetch returns the stored blobs as they are; a batch is one `append`, so it is
in the log entirely or not at all. Fetch is bounded by the frame limit as well
as by the request (a response must fit the frame a client or a forwarder can
take), serves committed records only, and long-polls with the replica's
`wait_for_append`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from laminar.channels.siblings import ChannelError, Channels
from laminar.log import LogBatch, LogClosed, LogConfig, SegmentedLog
from laminar.log.partitions import LongPolls, PartitionManager
from laminar.placement import U32_MAX
from laminar.replication.metadata import (
    METADATA_TOPIC_ID,
    is_internal_topic,
    refuse_internal_topic,
)
from laminar.replication.metalog import MetadataService
from laminar.replication.replica import LocalReplica, PartitionReplica
from laminar.replication.topic_config import log_config
from laminar.shards.metrics import ShardMetrics
from laminar.shards.producers import IdempotentProducers
from laminar.shards.replicas import Replicas
from laminar.wire import (
    AlterTopicRequest,
    AlterTopicResponse,
    CreateTopicRequest,
    CreateTopicResponse,
    DecommissionNodeRequest,
    DecommissionNodeResponse,
    DeleteTopicRequest,
    DeleteTopicResponse,
    ErrorCode,
    FetchRequest,
    Flags,
    ForwardRequest,
    ForwardResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataTailRequest,
    Op,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    ProtocolError,
    ShardInfo,
    TopicInfo,
    decode_frame,
    encode_frame_buffers,
)
from laminar.wire.codec import Buffer
from laminar.wire.errors import RequestError
from laminar.wire.records import encode_fetch_columns

if TYPE_CHECKING:  # authorization imports this module's RequestContext
    from laminar.shards.authorization import Authorizer

_UNSPECIFIED_HOSTS: Final = frozenset({"0.0.0.0", "::", ""})
SIBLING_LEADERS_TIMEOUT_S: Final = 1.0
"""How long a metadata answer waits for a sibling shard's leaders."""
logger = logging.getLogger("laminar.shards")


@dataclass(frozen=True, slots=True)
class ShardIdentity:
    """Who this shard is, as metadata and pings report it."""

    node_id: str
    shard_id: int
    shard_count: int
    host: str
    port: int
    shard_ports: tuple[int, ...]
    admin_port: int | None
    routing_mode: str
    max_frame_bytes: int
    max_wait_ms: int
    """The longest a fetch long-polls, whatever it asks for."""
    kafka_ports: tuple[int, ...] = ()
    """Each shard's Kafka port, in shard order (empty: the Kafka door is off)."""


@dataclass(slots=True)
class RequestContext:
    """Where a request came from."""

    received_by: int
    """The shard whose socket received it (the origin, for forwarded requests)."""
    internal: bool = False
    """It arrived on the inter-shard channel or an authenticated peer session."""
    forwarded: bool = False
    """It was unwrapped from a FORWARD."""
    origin_shard: int | None = None
    local_host: str | None = None
    """The address the client connected to (for metadata on wildcard binds)."""
    peer: str | None = None
    """The node that sent it over a peer session (authenticated)."""
    client: int | None = None
    """The client connection it came from (unique per node; carried by a
    FORWARD): owns the idempotent producers it introduces."""
    principal: str | None = None
    """Who the client connection logged in as (`User:NAME`); None on a node
    without --auth, and on internal traffic. With --auth the connection serves
    nothing before its login succeeded. A FORWARD carries it to the owner."""

    @property
    def from_client(self) -> bool:
        """Whether a client sent it (authorized, owners checked), not the node
        itself (sibling channels, peer sessions, the shard's own requests). A
        forwarded client frame keeps its client id and principal, so the shard
        that serves it checks it."""
        return not self.internal or self.client is not None or self.principal is not None


class Handlers:
    """The ops this shard answers (see the module docstring)."""

    def __init__(
        self,
        ident: ShardIdentity,
        metadata: MetadataService,
        partitions: PartitionManager,
        metrics: ShardMetrics,
        polls: LongPolls,
        replicas: Replicas,
        channels: Channels | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.ident = ident
        self.authorizer = authorizer
        """The ACL checks of a node with logins (None: nothing is checked)."""
        self.channels = channels
        """To sibling shards (for the leaders a metadata answer names)."""
        self.metadata = metadata
        self.partitions = partitions
        self.metrics = metrics
        self.polls = polls
        self.replicas = replicas
        self.producers = IdempotentProducers()
        # A fetch response must fit a frame: bound the bytes and the per-record table.
        self.fetch_bytes_max = max(1, ident.max_frame_bytes // 2)
        """The most record bytes a fetch answer carries (past one record); what a
        connection reserves for a fetch in flight (`laminar.shards.budget`)."""
        self.fetch_records_max = max(1, ident.max_frame_bytes // 64)
        """The most records a fetch answer carries (its per-record columns stay bounded)."""

    # -- partition resolution --------------------------------------------------

    async def _topic_of(self, pid: int) -> TopicInfo:
        """The topic partition `pid` belongs to; waits for this shard's metadata
        (NOT_READY if it takes too long) and catches up with the metadata owner
        once before calling a topic id unknown."""
        topic_id, idx = pid >> 32, pid & U32_MAX
        if topic_id == METADATA_TOPIC_ID:
            raise RequestError(
                ErrorCode.UNKNOWN_TOPIC, "topic id 0 is the node's internal metadata log"
            )
        if not self.metadata.is_ready:
            await self.metadata.ready()
        state = self.metadata.state
        topic = state.by_id(topic_id)
        if topic is None and not state.knows_id(topic_id):
            await self.metadata.catch_up()
            topic = state.by_id(topic_id)
        if topic is None and self.metadata.clustered and not state.knows_id(topic_id):
            # Ids only grow: one past what this node applied comes from a client
            # that saw the topic's creation on a node further ahead.
            raise RequestError(
                ErrorCode.NOT_READY,
                f"this node has not applied the creation of topic id {topic_id} yet "
                f"(partition id {pid}); retry shortly",
            )
        if topic is None:
            raise RequestError(
                ErrorCode.UNKNOWN_TOPIC, f"no topic with id {topic_id} (partition id {pid})"
            )
        if idx >= topic.partitions:
            raise RequestError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic.name!r} has partitions 0..{topic.partitions - 1}; "
                f"there is no partition {idx}",
            )
        return topic

    async def _replica_of(self, pid: int) -> PartitionReplica:
        return await self._replica_in(pid, await self._topic_of(pid))

    async def _replica_in(self, pid: int, topic: TopicInfo) -> PartitionReplica:
        return await self.replicas.replica(
            pid, topic, log_config(self.partitions.config, topic.config)
        )

    async def _writable_topic_of(self, pid: int) -> TopicInfo:
        """`_topic_of` for a client's write: never an internal topic."""
        topic = await self._topic_of(pid)
        refuse_internal_topic(topic.name, "write to")
        return topic

    async def _writable_replica_of(self, pid: int) -> PartitionReplica:
        return await self._replica_in(pid, await self._writable_topic_of(pid))

    # The write protocol (`laminar.writes`) resolves partitions the same way:
    # what it stages and publishes is a client's write. Group coordinators
    # (`laminar.groups`) write the node's own positions topic.
    write_topic_of = _writable_topic_of
    write_replica_of = _writable_replica_of
    replica_of = _replica_of
    topic_of = _topic_of

    # -- partition ops ---------------------------------------------------------

    async def produce(self, req: ProduceRequest, corr: int, ctx: RequestContext) -> list[Buffer]:
        if not req.blobs:
            raise RequestError(ErrorCode.INVALID_REQUEST, "a produce request needs a record")
        replica = await self._writable_replica_of(req.partition_id)
        if req.producer_id is not None:  # idempotent: deduplicated by laminar.shards.producers
            first, timestamp_ms, appended = await self.producers.append(replica, req, ctx.client)
            self.metrics.records_in += appended
            return ProduceResponse(
                req.partition_id, first, len(req.blobs), timestamp_ms
            ).encode_buffers(corr)
        first, timestamp_ms = await replica.append_stamped(req.blobs)
        self.metrics.records_in += len(req.blobs)
        return ProduceResponse(
            req.partition_id, first, len(req.blobs), timestamp_ms
        ).encode_buffers(corr)

    def place_produce(
        self, req: ProduceRequest, client: int | None = None
    ) -> tuple[int, int, asyncio.Future[None]] | None:
        """`produce` up to the wait for its flush, when nothing before that has to
        wait: a plain produce to a known partition whose log is open, placed now
        (`SegmentedLog.place_nowait`). Returns (first index, timestamp_ms, the
        flush future), or None when `produce` must serve it (anything that
        waits, an idempotent produce that is not simply the next of its
        producer (`IdempotentProducers.place_nowait`), anything `produce` would
        refuse, and every produce of a clustered node: replication decides
        there)."""
        if not req.blobs:
            return None
        topic = self._applied_topic(req.partition_id)
        if topic is None or is_internal_topic(topic.name):
            return None
        log = self.replicas.log_nowait(req.partition_id)
        if log is None:
            return None
        if req.producer_id is not None:
            return self.producers.place_nowait(log, req, client)
        return log.place_nowait(req.blobs)

    def _open_local_log(self, pid: int) -> SegmentedLog | None:
        """The open log of a known partition of this node alone (not
        replicated: Raft decides there), for the paths that answer without
        waiting; None when the general path must serve the request."""
        if self._applied_topic(pid) is None:
            return None
        return self.replicas.log_nowait(pid)

    def _applied_topic(self, pid: int) -> TopicInfo | None:
        """The topic of `pid` if this shard's metadata has it and the partition (no wait)."""
        topic_id = pid >> 32
        topic = self.metadata.state.by_id(topic_id)
        if topic is None or topic_id == METADATA_TOPIC_ID or pid & U32_MAX >= topic.partitions:
            return None
        return topic

    def replicated_log_config(self, pid: int) -> LogConfig | None:
        """The log settings of `pid` if it is a replicated partition this
        shard's metadata knows (a move may make this node one of its replicas)."""
        topic = self._applied_topic(pid)
        if topic is None or not self.replicas.replicated(topic):
            return None
        return log_config(self.partitions.config, topic.config)

    async def fetch(self, req: FetchRequest, corr: int, ctx: RequestContext) -> list[Buffer]:
        pid = req.partition_id
        if req.max_bytes == 0 or req.max_records == 0:
            raise RequestError(ErrorCode.INVALID_REQUEST, "max_bytes and max_records must be >= 1")
        replica = await self._replica_of(pid)
        if not req.any_replica:
            await replica.confirm_reads()
        self._check_range(replica, req.index)
        if req.index == replica.highest_index and req.max_wait_ms:
            wait_ms = min(req.max_wait_ms, self.ident.max_wait_ms)
            await self._long_poll(pid, replica, req.index, wait_ms)
        batch = await replica.read_batch(req.index, *self._fetch_limits(req))
        return self._fetch_answer(req, corr, replica, batch)

    def fetch_nowait(self, req: FetchRequest, corr: int) -> list[Buffer] | None:
        """`fetch` when nothing in it has to wait: a known partition of this node
        alone (not replicated: Raft decides what is readable there) whose log is
        open, an index in range that is not a long-poll at the end, records whose
        bytes are in the page cache (`LocalReplica.read_batch_nowait`). None when
        `fetch` must serve it (it then gives the same answer, or the error)."""
        if req.max_bytes == 0 or req.max_records == 0:
            return None
        log = self._open_local_log(req.partition_id)
        if log is None or (req.index == log.highest_index and req.max_wait_ms):
            return None
        replica = LocalReplica(log)
        batch = replica.read_batch_nowait(req.index, *self._fetch_limits(req))
        if batch is None:
            return None
        return self._fetch_answer(req, corr, replica, batch)

    def _fetch_limits(self, req: FetchRequest) -> tuple[int, int]:
        """A fetch response must fit a frame: the request's limits, capped."""
        return (
            min(req.max_bytes, self.fetch_bytes_max),
            min(req.max_records, self.fetch_records_max),
        )

    def _fetch_answer(
        self, req: FetchRequest, corr: int, replica: PartitionReplica, batch: LogBatch
    ) -> list[Buffer]:
        """The answer frame: the stored blobs go out as one buffer, exactly as
        the store holds them, behind the entry table."""
        self.metrics.records_out += len(batch)
        payload = encode_fetch_columns(
            batch.first_index, batch.timestamps_ms, batch.lengths, batch.payload
        )
        header = {
            "lowest_index": replica.lowest_index,
            "highest_index": replica.highest_index,
            "next_index": replica.next_readable(batch.end_index),
        }
        return encode_frame_buffers(
            Op.FETCH, corr, req.partition_id, header, payload, flags=Flags.RESPONSE
        )

    @staticmethod
    def _check_range(replica: PartitionReplica, index: int) -> None:
        if not replica.lowest_index <= index <= replica.highest_index:
            raise RequestError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"index {index} is outside the partition's range [{replica.lowest_index}, "
                f"{replica.highest_index}]",
            )

    async def _long_poll(
        self, pid: int, replica: PartitionReplica, index: int, wait_ms: int
    ) -> None:
        """Wait for a record at `index`, until `wait_ms` pass or the shard drains."""
        try:
            await self.polls.wait(replica, index, wait_ms / 1000)
        except LogClosed:
            await self._topic_of(pid)  # UNKNOWN_TOPIC if it was deleted meanwhile
            raise

    async def list_offsets(
        self, req: ListOffsetsRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        replica = await self._replica_of(req.partition_id)
        if not req.any_replica:
            await replica.confirm_reads()
        at = None
        if req.timestamp_ms is not None:
            at = await replica.index_for_timestamp(req.timestamp_ms)
        committed = replica.highest_index
        highest = replica.log_end
        voters, learners = replica.members
        records = None
        if req.count_from is not None:
            records = replica.records_between(req.count_from, committed)
        return ListOffsetsResponse(
            req.partition_id,
            replica.lowest_index,
            highest,
            committed,
            at,
            replica.leader,
            voters,
            learners,
            records,
        ).encode_buffers(corr)

    async def ping(self, req: Ping, corr: int, ctx: RequestContext) -> list[Buffer]:
        ident = self.ident
        return Pong(
            req.partition_id, ident.node_id, ident.shard_id, ctx.received_by
        ).encode_buffers(corr)

    # -- node ops --------------------------------------------------------------

    async def metadata_request(
        self, req: MetadataRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        if not req.layout_only:  # never a topic list it has not finished loading
            await self.metadata.ready()
        ident = self.ident
        host = ident.host
        if host in _UNSPECIFIED_HOSTS and ctx.local_host:
            host = ctx.local_host
        kafka: tuple[int | None, ...] = ident.kafka_ports or (None,) * len(ident.shard_ports)
        shards = tuple(
            ShardInfo(i, host, port, kafka_port)
            for i, (port, kafka_port) in enumerate(zip(ident.shard_ports, kafka, strict=True))
        )
        nodes = self.replicas.nodes()
        return MetadataResponse(
            ident.node_id,
            host,
            ident.port,
            ident.routing_mode,
            shards,
            () if req.layout_only else self._visible_topics(ctx),
            ident.admin_port,
            nodes,
            () if req.layout_only else await self.node_leaders(ctx, clustered=bool(nodes)),
            ident.max_frame_bytes,
            tuple(sorted(self.metadata.state.decommissioned)),
        ).encode_buffers(corr)

    async def node_leaders(
        self, ctx: RequestContext, *, clustered: bool
    ) -> tuple[tuple[int, str], ...]:
        """The partition leaders this node knows: those of this shard's Raft
        groups and, unless the request was forwarded here by a sibling, those
        of every sibling shard's, asked over the channel. A sibling that does
        not answer in time adds none: leaders are routing hints."""
        own = self.replicas.leaders()
        # A single node's shards lead no group: nothing to ask the siblings.
        if ctx.forwarded or self.channels is None or not clustered:
            return own
        me = self.ident.shard_id
        asked = [
            self._sibling_leaders(peer) for peer in range(self.ident.shard_count) if peer != me
        ]
        found = dict(own)
        for leaders in await asyncio.gather(*asked):
            found.update(leaders)
        return tuple(sorted(found.items()))

    async def _sibling_leaders(self, peer: int) -> tuple[tuple[int, str], ...]:
        assert self.channels is not None
        inner = MetadataRequest().encode(0)
        try:
            answer = await self.channels.to(peer).request(
                ForwardRequest(0, self.ident.shard_id, inner), SIBLING_LEADERS_TIMEOUT_S
            )
            if answer.is_error:
                return ()
            raw = ForwardResponse.from_frame(answer).frame  # bounded by the channel
            return MetadataResponse.from_frame(decode_frame(raw, len(raw))).leaders
        except (ChannelError, ProtocolError) as exc:
            logger.debug("shard %d: no leaders from shard %d: %s", self.ident.shard_id, peer, exc)
            return ()

    async def list_topics(
        self, req: ListTopicsRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        await self.metadata.ready()
        return ListTopicsResponse(self._visible_topics(ctx)).encode_buffers(corr)

    def _visible_topics(self, ctx: RequestContext) -> tuple[TopicInfo, ...]:
        """The topics a metadata answer lists: with logins, those the client may describe."""
        topics = self.metadata.state.topics()
        if self.authorizer is None or not ctx.from_client:
            return topics
        return self.authorizer.visible(ctx.principal, topics)

    async def create_topic(
        self, req: CreateTopicRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        refuse_internal_topic(req.name, "create")
        topic = await self.metadata.create_topic(
            req.name, req.partitions, req.config, req.replication_factor
        )
        return CreateTopicResponse(topic).encode_buffers(corr)

    async def delete_topic(
        self, req: DeleteTopicRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        refuse_internal_topic(req.name, "delete")
        topic = await self.metadata.delete_topic(req.name)
        return DeleteTopicResponse(topic.name, topic.topic_id).encode_buffers(corr)

    async def alter_topic(
        self, req: AlterTopicRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        refuse_internal_topic(req.name, "alter")
        topic = await self.metadata.alter_topic(req.name, req.config, req.remove)
        return AlterTopicResponse(topic).encode_buffers(corr)

    async def decommission_node(
        self, req: DecommissionNodeRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        decommissioned = await self.metadata.decommission(req.node_id, req.cancel)
        return DecommissionNodeResponse(tuple(sorted(decommissioned))).encode_buffers(corr)

    async def metadata_tail(
        self, req: MetadataTailRequest, corr: int, ctx: RequestContext
    ) -> list[Buffer]:
        """A follower shard's tail of the metadata log (the router lets only the
        inter-shard channel send this op)."""
        return (await self.metadata.serve_tail(req)).encode_buffers(corr)
