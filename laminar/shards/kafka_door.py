"""The Kafka door of one shard: Kafka requests served with the shard's own parts.

A Kafka request arrives on this shard's Kafka port (one broker per shard,
`laminar.kafka.brokers`), decoded by `laminar.kafka.codec`; each API maps onto
what laminar's own door does with the same partitions, so a record produced
through either door is read through both:

- Produce: the batch is checked and split into laminar record blobs
  (`laminar.kafka.batches`) and appended to the partition this shard owns
  (its leader replica on a cluster), through the idempotent producer table
  when the batch carries a producer id. A partition another shard owns
  answers NOT_LEADER_OR_FOLLOWER: Kafka clients then refresh their metadata
  and send it to the right broker (no forwarding on this door).
- Fetch: records read as a `LogBatch` and sent as one RecordBatch v2 per
  partition; a fetch that finds less than `min_bytes` waits (up to
  `max_wait_ms`, capped by `--max-wait-ms`) for any of its partitions to grow.
- Topic changes go to the metadata leader as laminar frames (over the peer
  session when another node leads it; the client's rights checked here):
  one code path decides them whichever door asked.

- With --auth, every API is authorized here by the connection's principal
  (`_denied`: one cached `AclSet.authorize`), with Kafka's mapping of APIs to
  operations and resources (the table in docs/architecture.md, "SASL, ACLs
  and authorization"); the login itself happens before a request reaches
  the door (`kafka_connection`, `laminar.kafka.sasl`). The ACL and
  SCRAM-user APIs are `kafka_admin`'s.

Errors inside a request are Kafka error codes in the answer's own fields;
only a request that cannot be decoded gets the codec's error answer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import struct
from collections.abc import Awaitable, Callable
from typing import Any, Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.groups.positions import POSITIONS_TOPIC
from laminar.kafka import codec
from laminar.kafka import messages as m
from laminar.kafka.batches import decode_produce, encode_fetch
from laminar.kafka.brokers import broker_id, topic_uuid
from laminar.kafka.classic import assignment_bytes
from laminar.kafka.errors import ErrorCode as Kafka
from laminar.kafka.errors import KafkaError
from laminar.lograte import RateLimitedLog
from laminar.placement import partition_id, shard_for
from laminar.replication.calls import PeerCallError, PeerCalls
from laminar.replication.metadata import METADATA_PID, is_internal_topic
from laminar.replication.replica import PartitionReplica
from laminar.replication.routes import NodeRoutes, NodeUnreachable
from laminar.replication.topic_config import TOPIC_CONFIG_KEYS
from laminar.replication.transport import NodeLayout, PeerLinkError
from laminar.security.acls import CLUSTER, Operation, Resource, ResourceType
from laminar.security.state import SecurityState
from laminar.shards.dispatch import Dispatcher
from laminar.shards.errors import error_for
from laminar.shards.handlers import Handlers, RequestContext
from laminar.shards.kafka_admin import KafkaSecurityAdmin
from laminar.shards.kafka_groups import PROTOCOL_TYPE, KafkaGroups, commit_answer, describe_state
from laminar.wire import (
    CreateTopicRequest,
    CreateTopicResponse,
    DeleteTopicRequest,
    ErrorCode,
    ErrorResponse,
    Frame,
    Message,
    ProduceRequest,
    TopicInfo,
    decode_frame,
)
from laminar.wire.errors import ProtocolError, RequestError

logger = logging.getLogger("laminar.kafka")
_refusals = RateLimitedLog(logger)
"""Refused requests are logged at a bounded rate: a client cannot flood the log."""

CLUSTER_ID: Final = "laminar"
READ, WRITE, CREATE, DELETE, DESCRIBE = (
    Operation.READ,
    Operation.WRITE,
    Operation.CREATE,
    Operation.DELETE,
    Operation.DESCRIBE,
)
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
TOPIC_REFUSED: Final = Kafka.TOPIC_AUTHORIZATION_FAILED
GROUP_REFUSED: Final = Kafka.GROUP_AUTHORIZATION_FAILED
PRODUCER_ID_BITS: Final = 47
"""Kafka producer ids the door hands out: random, positive, and with the epoch
(16 bits) still inside laminar's u64 producer id."""
DEFAULT_PARTITIONS: Final = 1
"""What CreateTopics with `num_partitions = -1` gets (Kafka's `num.partitions`)."""
LAYOUT_RECHECK_S: Final = 1.0
"""How often a shard asks a node it never hears from whether it is there
(in the background: one connection a second at most)."""

_LAMINAR_TO_KAFKA: Final = {
    ErrorCode.UNKNOWN_TOPIC: Kafka.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_PARTITION: Kafka.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.TOPIC_EXISTS: Kafka.TOPIC_ALREADY_EXISTS,
    ErrorCode.OFFSET_OUT_OF_RANGE: Kafka.OFFSET_OUT_OF_RANGE,
    ErrorCode.RECORD_TOO_LARGE: Kafka.MESSAGE_TOO_LARGE,
    ErrorCode.CORRUPT_RECORD: Kafka.CORRUPT_MESSAGE,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: Kafka.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ErrorCode.DUPLICATE_SEQUENCE: Kafka.DUPLICATE_SEQUENCE_NUMBER,
    ErrorCode.NOT_OWNER: Kafka.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.NOT_LEADER: Kafka.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.NOT_ENOUGH_REPLICAS: Kafka.NOT_ENOUGH_REPLICAS,
    ErrorCode.STORAGE_ERROR: Kafka.KAFKA_STORAGE_ERROR,
    ErrorCode.SHUTTING_DOWN: Kafka.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_READY: Kafka.LEADER_NOT_AVAILABLE,
    ErrorCode.TIMEOUT: Kafka.REQUEST_TIMED_OUT,
    ErrorCode.OUTCOME_UNKNOWN: Kafka.REQUEST_TIMED_OUT,
    ErrorCode.INVALID_REQUEST: Kafka.INVALID_REQUEST,
    ErrorCode.USER_EXISTS: Kafka.DUPLICATE_RESOURCE,
    ErrorCode.UNKNOWN_USER: Kafka.RESOURCE_NOT_FOUND,
    ErrorCode.LIMIT_REACHED: Kafka.POLICY_VIOLATION,
    ErrorCode.NOT_AUTHORIZED: Kafka.TOPIC_AUTHORIZATION_FAILED,
}
"""A refusal by laminar's own check (`laminar.shards.authorization`) reaching a
partition's answer is the topic's; in a group API's, the group's
(`coordinator_error`)."""


def kafka_error(exc: BaseException) -> tuple[Kafka, str]:
    """The Kafka error code and message for a failure while serving a partition."""
    if isinstance(exc, KafkaError):
        return exc.code, str(exc)
    code, message, expected = error_for(exc)
    if not expected:
        logger.error("Kafka request failed unexpectedly", exc_info=exc)
    return _LAMINAR_TO_KAFKA.get(code, Kafka.UNKNOWN_SERVER_ERROR), message


def coordinator_error(exc: BaseException) -> tuple[Kafka, str]:
    """`kafka_error` for a group API: a coordinator that is not (or no longer)
    here answers NOT_COORDINATOR, so the client asks FindCoordinator again."""
    code, message = kafka_error(exc)
    if code in (Kafka.NOT_LEADER_OR_FOLLOWER, Kafka.UNKNOWN_TOPIC_OR_PARTITION):
        return Kafka.NOT_COORDINATOR, message
    if code in (Kafka.LEADER_NOT_AVAILABLE, Kafka.REQUEST_TIMED_OUT):
        return Kafka.COORDINATOR_NOT_AVAILABLE, message
    if code is Kafka.TOPIC_AUTHORIZATION_FAILED:
        return Kafka.GROUP_AUTHORIZATION_FAILED, message
    return code, message


def laminar_producer_id(producer_id: int, epoch: int) -> int:
    """The laminar producer a Kafka (producer id, epoch) appends as: a new epoch
    is a new producer whose sequence starts again at 0, as in Kafka."""
    return producer_id << 16 | epoch


Handler = Callable[[Any, RequestContext], Awaitable[Any]]


class KafkaDoor:
    """Serves decoded Kafka requests on one shard (see the module docstring)."""

    def __init__(
        self,
        handlers: Handlers,
        dispatcher: Dispatcher,
        routes: NodeRoutes,
        peers: PeerCalls | None = None,
        clock: Clock = SYSTEM_CLOCK,
        authenticated: bool = False,
    ) -> None:
        self.handlers = handlers
        self.authenticated = authenticated
        """Clients must log in (SASL) and every request is authorized."""

        self.dispatcher = dispatcher
        self._peers = peers
        """Other nodes' layouts (their Kafka ports) and the leaders they know:
        None on a single node."""
        self.ident = handlers.ident
        self._clock = clock
        self._table: dict[type, Handler] = {
            m.ApiVersionsRequest: self.api_versions,
            m.MetadataRequest: self.metadata,
            m.ProduceRequest: self.produce,
            m.FetchRequest: self.fetch,
            m.ListOffsetsRequest: self.list_offsets,
            m.InitProducerIdRequest: self.init_producer_id,
            m.CreateTopicsRequest: self.create_topics,
            m.DeleteTopicsRequest: self.delete_topics,
            m.DescribeConfigsRequest: self.describe_configs,
            m.DescribeClusterRequest: self.describe_cluster,
            m.FindCoordinatorRequest: self.find_coordinator,
            m.JoinGroupRequest: self.join_group,
            m.SyncGroupRequest: self.sync_group,
            m.HeartbeatRequest: self.heartbeat,
            m.LeaveGroupRequest: self.leave_group,
            m.OffsetCommitRequest: self.offset_commit,
            m.OffsetFetchRequest: self.offset_fetch,
            m.DescribeGroupsRequest: self.describe_groups,
            m.ListGroupsRequest: self.list_groups,
            m.SaslHandshakeRequest: self.sasl_handshake,
            m.SaslAuthenticateRequest: self.sasl_authenticate,
        }
        self.groups = KafkaGroups(self._laminar, routes)
        self._routes = routes
        admin = KafkaSecurityAdmin(self._security, self._denied, self._to_metadata_leader)
        self._table.update(admin.table())

    @property
    def fetch_bytes_max(self) -> int:
        """The most record bytes one fetch answer carries (what its connection reserves)."""
        return self.handlers.fetch_bytes_max

    async def serve(self, frame: bytes, ctx: RequestContext) -> bytes | None:
        """The answer to one request frame (None: a produce with acks=0, which
        Kafka never answers). Never raises, except CancelledError."""
        try:
            request = codec.decode_request(frame)
        except codec.UnsupportedVersion as exc:
            return codec.unsupported_response(exc)
        except codec.MalformedRequest as exc:
            if exc.correlation_id is None:
                return None  # not even a header: nothing to answer to
            api_key, api_version = struct.unpack_from(">hh", frame)
            _refusals.warning(
                "malformed", "a malformed Kafka request (api key %d): %s", api_key, exc
            )
            return codec.error_response(
                api_key, api_version, exc.correlation_id, Kafka.INVALID_REQUEST
            )
        handler = self._table.get(type(request.body))
        if handler is None:
            return codec.unsupported_response(
                codec.UnsupportedVersion(
                    request.api_key, request.api_version, request.correlation_id
                )
            )
        try:
            body = await handler(request.body, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: the request's own failures are in its fields
            code, _ = kafka_error(exc)
            return codec.error_response(
                request.api_key, request.api_version, request.correlation_id, code
            )
        if body is None:
            return None
        return codec.encode_response(request, body)

    async def sasl_handshake(
        self, req: m.SaslHandshakeRequest, ctx: RequestContext
    ) -> m.SaslHandshakeResponse:
        """Without --auth, or once logged in: no login to make (Kafka's answer)."""
        return m.SaslHandshakeResponse(error_code=Kafka.ILLEGAL_SASL_STATE)

    async def sasl_authenticate(
        self, req: m.SaslAuthenticateRequest, ctx: RequestContext
    ) -> m.SaslAuthenticateResponse:
        return m.SaslAuthenticateResponse(
            error_code=Kafka.ILLEGAL_SASL_STATE,
            error_message="no login to make: not asked for, or done already",
        )

    # -- authorization (the table: docs/architecture.md) ---------------------------

    def _denied(self, ctx: RequestContext, operation: Operation, resource: Resource) -> bool:
        """Whether the connection's principal may not do `operation` on
        `resource` (never, without --auth): one cached AclSet decision."""
        if not self.authenticated:
            return False
        principal = ctx.principal
        if principal is None:
            return True
        return not self.handlers.metadata.state.security.acls.authorize(
            principal, operation, resource
        )

    def _topic_denied(self, ctx: RequestContext, operation: Operation, name: str) -> bool:
        return self.authenticated and self._denied(ctx, operation, Resource(TOPIC, name))

    def _group_denied(self, ctx: RequestContext, operation: Operation, group: str) -> bool:
        return self.authenticated and self._denied(ctx, operation, Resource(GROUP, group))

    # -- the layout -------------------------------------------------------------

    def _host(self, ctx: RequestContext) -> str:
        host = self.ident.host
        if host in ("0.0.0.0", "::", "") and ctx.local_host:
            return ctx.local_host
        return host

    def _broker_of(self, pid: int) -> int:
        return broker_id(self.ident.node_id, shard_for(pid, self.ident.shard_count))

    def _owns(self, pid: int) -> bool:
        return shard_for(pid, self.ident.shard_count) == self.ident.shard_id

    async def _topic(self, name: str) -> TopicInfo | None:
        metadata = self.handlers.metadata
        if not metadata.is_ready:
            await metadata.ready()
        topic = metadata.state.by_name(name)
        if topic is None:
            await metadata.catch_up()
            topic = metadata.state.by_name(name)
        return topic

    async def _partition(self, name: str, index: int, *, write: bool) -> PartitionReplica:
        """The replica of partition `index` of topic `name` this shard serves, or
        the KafkaError a Kafka client expects."""
        topic = await self._topic(name)
        if topic is None or not 0 <= index < topic.partitions:
            raise KafkaError(
                Kafka.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {index} of topic {name[:60]!r}"
            )
        pid = partition_id(topic.topic_id, index)
        if not self._owns(pid):
            raise KafkaError(
                Kafka.NOT_LEADER_OR_FOLLOWER,
                f"partition {index} of {name[:60]!r} is served by broker {self._broker_of(pid)}",
            )
        if write:
            return await self.handlers.write_replica_of(pid)
        return await self.handlers.replica_of(pid)

    # -- APIs ---------------------------------------------------------------------

    async def api_versions(
        self, req: m.ApiVersionsRequest, ctx: RequestContext
    ) -> m.ApiVersionsResponse:
        return m.ApiVersionsResponse(api_keys=codec.advertised_versions())

    async def metadata(self, req: m.MetadataRequest, ctx: RequestContext) -> m.MetadataResponse:
        metadata = self.handlers.metadata
        await metadata.ready()
        kafka_ports = await self._kafka_ports(ctx)
        brokers = [
            m.MetadataResponse.MetadataResponseBroker(node_id=b, host=h, port=p)
            for b, h, p in _brokers(kafka_ports)
        ]
        state = metadata.state
        if req.topics is None:  # every topic the principal may see
            wanted: list[tuple[str, TopicInfo | None]] = [
                (t.name, t) for t in state.topics() if not self._topic_denied(ctx, DESCRIBE, t.name)
            ]
        else:
            wanted = [(t.name or "", state.by_name(t.name or "")) for t in req.topics]
        pids = [
            partition_id(t.topic_id, i)
            for _, t in wanted
            if t is not None
            for i in range(t.partitions)
        ]
        leaders = await self._leaders([*pids, METADATA_PID], kafka_ports, ctx)
        topics = []
        for name, topic in wanted:
            if req.topics is not None and self._topic_denied(ctx, DESCRIBE, name):
                topics.append(  # whether it exists or not: that is not told either
                    m.MetadataResponse.MetadataResponseTopic(
                        error_code=Kafka.TOPIC_AUTHORIZATION_FAILED, name=name
                    )
                )
                continue
            if topic is None:
                topics.append(
                    m.MetadataResponse.MetadataResponseTopic(
                        error_code=Kafka.UNKNOWN_TOPIC_OR_PARTITION, name=name
                    )
                )
                continue
            partitions = [
                self._partition_metadata(topic, index, leaders, kafka_ports)
                for index in range(topic.partitions)
            ]
            topics.append(
                m.MetadataResponse.MetadataResponseTopic(
                    name=topic.name,
                    topic_id=topic_uuid(topic.topic_id),
                    is_internal=is_internal_topic(topic.name),
                    partitions=partitions,
                )
            )
        return m.MetadataResponse(
            brokers=brokers,
            cluster_id=CLUSTER_ID,
            controller_id=self._controller(leaders, kafka_ports),
            topics=topics,
        )

    async def describe_cluster(
        self, req: m.DescribeClusterRequest, ctx: RequestContext
    ) -> m.DescribeClusterResponse:
        kafka_ports = await self._kafka_ports(ctx)
        leaders = await self._leaders([METADATA_PID], kafka_ports, ctx)
        return m.DescribeClusterResponse(
            cluster_id=CLUSTER_ID,
            controller_id=self._controller(leaders, kafka_ports),
            brokers=[
                m.DescribeClusterResponse.DescribeClusterBroker(broker_id=b, host=h, port=p)
                for b, h, p in _brokers(kafka_ports)
            ],
        )

    async def _kafka_ports(self, ctx: RequestContext) -> dict[str, tuple[str, tuple[int, ...]]]:
        """(host, Kafka port per shard) of every live node this shard can name:
        itself and, on a cluster, each member it hears from, or, where it never
        hears from a node, that answered its last layout ask (asked again in
        the background every `LAYOUT_RECHECK_S`: `PeerCalls.live_layout`). A
        node gone quiet or unreachable is left out, as Kafka lists only live
        brokers (no partition leads there, and admin clients send to any
        broker listed, one that refuses included)."""
        ident = self.ident
        out = {ident.node_id: (self._host(ctx), ident.kafka_ports)}
        if self._peers is None:
            return out
        replicas = self.handlers.replicas
        for node in replicas.nodes():
            if node.node_id == ident.node_id or replicas.silent(node.node_id):
                continue
            layout = await self._layout(node.node_id, replicas.heard_from(node.node_id))
            if layout is not None and layout.kafka_ports:
                out[node.node_id] = (layout.host, layout.kafka_ports)
        return out

    async def _layout(self, node_id: str, heard: bool) -> NodeLayout | None:
        """Where a node's shards listen; None if it cannot be reached (one this
        shard never hears from: if its last background ask failed)."""
        assert self._peers is not None
        if not heard:
            return await self._peers.live_layout(node_id, LAYOUT_RECHECK_S)
        try:
            return await self._peers.layout(node_id)
        except (OSError, TimeoutError, ProtocolError, PeerLinkError):
            return None

    async def _leaders(
        self,
        pids: list[int],
        kafka_ports: dict[str, tuple[str, tuple[int, ...]]],
        ctx: RequestContext,
    ) -> dict[int, str]:
        """The leader of each partition of `pids` that can be named: those this
        node knows, then, for a partition it hosts no replica of, what one of its
        replicas says (asked once a second at most per node: `PeerCalls.leaders`)."""
        if self._peers is None:
            return {}
        leaders = dict(await self.handlers.node_leaders(ctx, clustered=True))
        ask: dict[str, list[int]] = {}
        for pid in pids:
            if pid in leaders:
                continue
            topic = self.handlers.metadata.state.by_id(pid >> 32)
            if topic is None:
                continue
            others = [
                n
                for n in self.handlers.replicas.placed_on(pid, topic)
                if n and n != self.ident.node_id and n in kafka_ports
            ]
            if others:
                ask.setdefault(others[0], []).append(pid)
        for node, wanted in ask.items():
            try:
                known = await self._peers.leaders(node)
            except (PeerCallError, ProtocolError, PeerLinkError):
                continue
            leaders.update((pid, known[pid]) for pid in wanted if pid in known)
        return leaders

    def _partition_metadata(
        self,
        topic: TopicInfo,
        index: int,
        leaders: dict[int, str],
        kafka_ports: dict[str, tuple[str, tuple[int, ...]]],
    ) -> m.MetadataResponse.MetadataResponseTopic.MetadataResponsePartition:
        """A partition's leader and replicas as brokers: on a cluster the leader
        this node knows (LEADER_NOT_AVAILABLE while none is known, so clients
        ask again), on a single node the shard that owns it."""
        me = self.ident.node_id
        pid = partition_id(topic.topic_id, index)
        replicas = [n or me for n in self.handlers.replicas.placed_on(pid, topic)]
        leader = leaders.get(pid, replicas[0] if len(replicas) == 1 else None)

        def broker(node: str) -> int | None:
            ports = kafka_ports.get(node)
            return None if ports is None else broker_id(node, shard_for(pid, len(ports[1])))

        replica_brokers = [b for b in map(broker, replicas) if b is not None]
        leader_broker = None if leader is None else broker(leader)
        return m.MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
            error_code=Kafka.NONE if leader_broker is not None else Kafka.LEADER_NOT_AVAILABLE,
            partition_index=index,
            leader_id=-1 if leader_broker is None else leader_broker,
            replica_nodes=replica_brokers,
            isr_nodes=replica_brokers,
        )

    def _controller(
        self, leaders: dict[int, str], kafka_ports: dict[str, tuple[str, tuple[int, ...]]]
    ) -> int:
        """The broker admin clients send topic changes to: the metadata owner's
        shard, on the metadata group's leader when this node knows it (any
        shard takes them: the door carries them to the metadata leader)."""
        node = leaders.get(METADATA_PID, self.ident.node_id)
        if node not in kafka_ports:
            node = self.ident.node_id
        return broker_id(node, shard_for(METADATA_PID, len(kafka_ports[node][1])))

    async def produce(self, req: m.ProduceRequest, ctx: RequestContext) -> m.ProduceResponse | None:
        if req.transactional_id is not None:
            refusal = KafkaError(
                Kafka.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported"
            )
            answers = [
                _refused(
                    m.ProduceResponse.TopicProduceResponse.PartitionProduceResponse(index=p.index),
                    refusal,
                )
                for t in req.topic_data
                for p in t.partition_data
            ]
        else:
            answers = await asyncio.gather(
                *(
                    self._produce_one(t.name, p.index, p.records, ctx)
                    for t in req.topic_data
                    for p in t.partition_data
                )
            )
        if req.acks == 0:
            return None
        at = 0
        responses = []
        for topic in req.topic_data:
            count = len(topic.partition_data)
            responses.append(
                m.ProduceResponse.TopicProduceResponse(
                    name=topic.name, partition_responses=answers[at : at + count]
                )
            )
            at += count
        return m.ProduceResponse(responses=responses)

    async def _produce_one(
        self, name: str, index: int, records: bytes | memoryview | None, ctx: RequestContext
    ) -> m.ProduceResponse.TopicProduceResponse.PartitionProduceResponse:
        answer = m.ProduceResponse.TopicProduceResponse.PartitionProduceResponse(index=index)
        try:
            if self._topic_denied(ctx, WRITE, name):
                raise _not_allowed(WRITE, name)
            if records is None:
                raise KafkaError(Kafka.INVALID_RECORD, "a produce needs a record batch")
            replica = await self._partition(name, index, write=True)
            batch = decode_produce(records, max_bytes=self.ident.max_frame_bytes)
            if batch.producer_id >= 0:
                request = ProduceRequest.stamped(
                    0,
                    batch.blobs,
                    laminar_producer_id(batch.producer_id, batch.producer_epoch),
                    batch.base_sequence,
                )
                first, _, appended = await self.handlers.producers.append(
                    replica, request, ctx.client
                )
            else:
                first, _ = await replica.append_stamped(batch.blobs)
                appended = batch.record_count
            self.handlers.metrics.records_in += appended
            answer.base_offset = first
            answer.log_start_offset = replica.lowest_index
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _refused(answer, exc)
        return answer

    async def fetch(self, req: m.FetchRequest, ctx: RequestContext) -> m.FetchResponse:
        budget = max(1, min(req.max_bytes, self.handlers.fetch_bytes_max))
        wait_s = min(req.max_wait_ms, self.ident.max_wait_ms) / 1000
        deadline = self._clock.monotonic() + wait_s
        while True:
            responses, size, waits = await self._fetch_once(req, budget, ctx)
            remaining = deadline - self._clock.monotonic()
            if size >= max(1, req.min_bytes) or not waits or remaining <= 0:
                return m.FetchResponse(responses=responses)
            await self._wait_any(waits, remaining)  # then read again

    async def _fetch_once(
        self, req: m.FetchRequest, budget: int, ctx: RequestContext
    ) -> tuple[list[Any], int, list[tuple[PartitionReplica, int]]]:
        size = 0
        waits: list[tuple[PartitionReplica, int]] = []
        responses = []
        for topic in req.topics:
            parts = []
            for part in topic.partitions:
                answer = m.FetchResponse.FetchableTopicResponse.PartitionData(
                    partition_index=part.partition, records=b""
                )
                try:
                    if self._topic_denied(ctx, READ, topic.topic):
                        raise _not_allowed(READ, topic.topic)
                    replica = await self._partition(topic.topic, part.partition, write=False)
                    await replica.confirm_reads()
                    answer.high_watermark = replica.highest_index
                    answer.last_stable_offset = replica.highest_index
                    answer.log_start_offset = replica.lowest_index
                    start = replica.next_readable(part.fetch_offset)
                    if not replica.lowest_index <= part.fetch_offset <= replica.highest_index:
                        raise KafkaError(
                            Kafka.OFFSET_OUT_OF_RANGE,
                            f"offset {part.fetch_offset} is outside "
                            f"[{replica.lowest_index}, {replica.highest_index}]",
                        )
                    if start >= replica.highest_index:
                        waits.append((replica, start))
                    elif size < budget:
                        limit = max(1, min(part.partition_max_bytes, budget - size))
                        batch = await replica.read_batch(
                            start, limit, self.handlers.fetch_records_max
                        )
                        records = encode_fetch(batch)
                        answer.records = records
                        size += len(records)
                        self.handlers.metrics.records_out += len(batch)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    answer.error_code, _ = kafka_error(exc)
                parts.append(answer)
            responses.append(
                m.FetchResponse.FetchableTopicResponse(topic=topic.topic, partitions=parts)
            )
        return responses, size, waits

    async def _wait_any(self, waits: list[tuple[PartitionReplica, int]], timeout_s: float) -> None:
        """Until any of the partitions has a record past where it was asked, or
        `timeout_s` pass (or the shard drains)."""
        polls = self.handlers.polls
        tasks = [asyncio.ensure_future(polls.wait(r, i, timeout_s)) for r, i in waits]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def list_offsets(
        self, req: m.ListOffsetsRequest, ctx: RequestContext
    ) -> m.ListOffsetsResponse:
        topics = []
        for topic in req.topics:
            parts = []
            for part in topic.partitions:
                answer = (
                    m.ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=part.partition_index
                    )
                )
                try:
                    if self._topic_denied(ctx, DESCRIBE, topic.name):
                        raise _not_allowed(DESCRIBE, topic.name)
                    replica = await self._partition(topic.name, part.partition_index, write=False)
                    await replica.confirm_reads()
                    answer.offset, answer.timestamp = await self._offset_for(
                        replica, part.timestamp
                    )
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    answer.error_code, _ = kafka_error(exc)
                parts.append(answer)
            topics.append(
                m.ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=parts)
            )
        return m.ListOffsetsResponse(topics=topics)

    @staticmethod
    async def _offset_for(replica: PartitionReplica, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) for ListOffsets: -2 earliest, -1 latest, else the
        first record stamped at or after `timestamp` ((-1, -1) if none)."""
        if timestamp == -2:
            return replica.lowest_index, -1
        if timestamp == -1:
            return replica.highest_index, -1
        if timestamp < 0:
            raise KafkaError(
                Kafka.INVALID_REQUEST, f"unsupported ListOffsets timestamp {timestamp}"
            )
        index = await replica.index_for_timestamp(timestamp)
        if index >= replica.highest_index:
            return -1, -1
        (record,) = await replica.read_range(index, 1, 1)
        return record.index, record.timestamp_ms

    async def init_producer_id(
        self, req: m.InitProducerIdRequest, ctx: RequestContext
    ) -> m.InitProducerIdResponse:
        if req.transactional_id is not None:
            return m.InitProducerIdResponse(error_code=Kafka.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if self._may_not_write(ctx):
            return m.InitProducerIdResponse(error_code=Kafka.CLUSTER_AUTHORIZATION_FAILED)
        return m.InitProducerIdResponse(
            producer_id=secrets.randbits(PRODUCER_ID_BITS), producer_epoch=0
        )

    def _may_not_write(self, ctx: RequestContext) -> bool:
        """Whether the principal may not have an idempotent producer's id, which
        needs WRITE on the cluster (laminar's stand-in for Kafka's
        IDEMPOTENT_WRITE) or on any topic (Kafka >= 2.8)."""
        if not self._denied(ctx, WRITE, CLUSTER):
            return False
        topics = self.handlers.metadata.state.topics()
        return all(self._topic_denied(ctx, WRITE, topic.name) for topic in topics)

    async def create_topics(
        self, req: m.CreateTopicsRequest, ctx: RequestContext
    ) -> m.CreateTopicsResponse:
        results = await asyncio.gather(
            *(self._create_one(t, req.validate_only, ctx) for t in req.topics)
        )
        return m.CreateTopicsResponse(topics=list(results))

    async def _create_one(
        self, want: Any, validate_only: bool, ctx: RequestContext
    ) -> m.CreateTopicsResponse.CreatableTopicResult:
        result = m.CreateTopicsResponse.CreatableTopicResult(name=want.name)
        try:
            if self._denied(ctx, CREATE, CLUSTER) and self._topic_denied(ctx, CREATE, want.name):
                raise _not_allowed(CREATE, want.name)
            if want.assignments:
                raise KafkaError(
                    Kafka.INVALID_REQUEST, "laminar places replicas itself: omit the assignments"
                )
            config: dict[str, int | str] = {}
            for entry in want.configs:
                try:
                    config[entry.name] = int(entry.value or "")
                except ValueError:
                    raise KafkaError(
                        Kafka.INVALID_CONFIG,
                        f"topic config {entry.name[:60]} must be an integer, got {entry.value!r}",
                    ) from None
            partitions = DEFAULT_PARTITIONS if want.num_partitions == -1 else want.num_partitions
            factor = None if want.replication_factor == -1 else want.replication_factor
            if validate_only:
                return result
            request = CreateTopicRequest(want.name, partitions, config, factor)
            answer = await self._to_metadata_leader(request)
            topic = CreateTopicResponse.from_frame(answer).topic
            result.topic_id = topic_uuid(topic.topic_id)
            result.num_partitions = topic.partitions
            result.replication_factor = topic.replication_factor
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result.error_code, result.error_message = kafka_error(exc)
        return result

    async def delete_topics(
        self, req: m.DeleteTopicsRequest, ctx: RequestContext
    ) -> m.DeleteTopicsResponse:
        names = [t.name for t in req.topics] if req.topics else list(req.topic_names)
        results = []
        for name in names:
            result = m.DeleteTopicsResponse.DeletableTopicResult(name=name)
            try:
                if name is None:
                    raise KafkaError(Kafka.UNKNOWN_TOPIC_ID, "delete topics by name")
                if self._topic_denied(ctx, DELETE, name):
                    raise _not_allowed(DELETE, name)
                await self._to_metadata_leader(DeleteTopicRequest(name))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                result.error_code, result.error_message = kafka_error(exc)
            results.append(result)
        return m.DeleteTopicsResponse(responses=results)

    def _security(self) -> SecurityState:
        return self.handlers.metadata.state.security

    async def _to_metadata_leader(self, message: Message) -> Frame:
        """The metadata leader's answer to a laminar request of this node's own
        (topics, users and ACLs: the Kafka door checked the client's rights);
        a failure raised as the KafkaError a Kafka client expects. Kafka clients
        send these to any broker, or to the controller an older metadata named:
        the door takes them where they are decided."""
        try:
            return await self._routes.to_leader(message)
        except NodeUnreachable as exc:
            raise KafkaError(Kafka.REQUEST_TIMED_OUT, str(exc)) from None
        except RequestError as exc:
            raise KafkaError(*kafka_error(exc)) from None

    async def _laminar(self, request: Any, ctx: RequestContext) -> Any:
        """Serve a laminar request through this shard's dispatcher (which takes
        it to the shard that decides it); its answer frame, or the error raised."""
        frame = decode_frame(request.encode(0))
        raw = b"".join(await self.dispatcher.dispatch(frame, ctx))
        answer = decode_frame(raw, len(raw))
        if answer.is_error:
            error = ErrorResponse.from_frame(answer)
            raise KafkaError(
                _LAMINAR_TO_KAFKA.get(error.code, Kafka.UNKNOWN_SERVER_ERROR), error.message
            )
        return answer

    # -- groups (laminar.shards.kafka_groups) -------------------------------------

    async def find_coordinator(
        self, req: m.FindCoordinatorRequest, ctx: RequestContext
    ) -> m.FindCoordinatorResponse:
        if req.key_type != 0:  # a transaction's coordinator
            refused = Kafka.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return m.FindCoordinatorResponse(
                error_code=refused,
                error_message="transactions are not supported",
                coordinators=[
                    m.FindCoordinatorResponse.Coordinator(
                        key=key, node_id=-1, host="", port=-1, error_code=refused
                    )
                    for key in req.coordinator_keys
                ],
            )
        keys = list(req.coordinator_keys) or [req.key]
        found = [await self._find_one(key, ctx) for key in keys]
        first = found[0]
        return m.FindCoordinatorResponse(
            error_code=first.error_code,
            error_message=first.error_message,
            node_id=first.node_id,
            host=first.host,
            port=first.port,
            coordinators=found,
        )

    async def _find_one(self, group: str, ctx: RequestContext) -> Any:
        answer = m.FindCoordinatorResponse.Coordinator(key=group, node_id=-1, host="", port=-1)
        try:
            if self._group_denied(ctx, DESCRIBE, group):
                raise _not_allowed(DESCRIBE, group, "group")
            broker = await self._leader_broker(await self.groups.coordinator(group, ctx), ctx)
            if broker is None:
                raise KafkaError(Kafka.COORDINATOR_NOT_AVAILABLE, "the group has no leader yet")
            answer.node_id, answer.host, answer.port = broker
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answer.error_code, answer.error_message = coordinator_error(exc)
        return answer

    async def _leader_broker(self, pid: int, ctx: RequestContext) -> tuple[int, str, int] | None:
        """(broker id, host, port) of the broker leading partition `pid`, if known."""
        kafka_ports = await self._kafka_ports(ctx)
        node: str | None = self.ident.node_id
        if self._peers is not None:
            node = (await self._leaders([pid], kafka_ports, ctx)).get(pid)
        if node is None or node not in kafka_ports:
            return None
        host, ports = kafka_ports[node]
        shard = shard_for(pid, len(ports))
        return broker_id(node, shard), host, ports[shard]

    async def join_group(self, req: m.JoinGroupRequest, ctx: RequestContext) -> Any:
        if self._group_denied(ctx, READ, req.group_id):
            return m.JoinGroupResponse(error_code=GROUP_REFUSED, member_id=req.member_id)
        try:
            return await self.groups.join_group(req, ctx)
        except KafkaError as exc:
            return m.JoinGroupResponse(
                error_code=coordinator_error(exc)[0], member_id=req.member_id
            )

    async def sync_group(self, req: m.SyncGroupRequest, ctx: RequestContext) -> Any:
        if self._group_denied(ctx, READ, req.group_id):
            return m.SyncGroupResponse(error_code=GROUP_REFUSED, assignment=b"")
        return await self.groups.sync_group(req, ctx)

    async def heartbeat(self, req: m.HeartbeatRequest, ctx: RequestContext) -> Any:
        if self._group_denied(ctx, READ, req.group_id):
            return m.HeartbeatResponse(error_code=GROUP_REFUSED)
        try:
            return await self.groups.heartbeat(req, ctx)
        except KafkaError as exc:
            return m.HeartbeatResponse(error_code=coordinator_error(exc)[0])

    async def leave_group(self, req: m.LeaveGroupRequest, ctx: RequestContext) -> Any:
        if self._group_denied(ctx, READ, req.group_id):
            return m.LeaveGroupResponse(error_code=GROUP_REFUSED)
        try:
            return await self.groups.leave_group(req, ctx)
        except KafkaError as exc:
            return m.LeaveGroupResponse(error_code=coordinator_error(exc)[0])

    async def offset_commit(self, req: m.OffsetCommitRequest, ctx: RequestContext) -> Any:
        if self._group_denied(ctx, READ, req.group_id):
            return _commit_refused(req.topics, GROUP_REFUSED)
        denied = [t for t in req.topics if self._topic_denied(ctx, READ, t.name)]
        if denied:
            req.topics = [t for t in req.topics if all(t is not d for d in denied)]
        answer = m.OffsetCommitResponse()
        if req.topics:
            try:
                answer = await self.groups.offset_commit(req, ctx)
            except KafkaError as exc:
                answer = _commit_refused(req.topics, coordinator_error(exc)[0])
        answer.topics += _commit_refused(denied, TOPIC_REFUSED).topics
        return answer

    async def offset_fetch(
        self, req: m.OffsetFetchRequest, ctx: RequestContext
    ) -> m.OffsetFetchResponse:
        if req.groups:  # v8+: several groups at once
            groups = []
            for group in req.groups:
                wanted = (
                    None
                    if group.topics is None
                    else [(t.name, list(t.partition_indexes)) for t in group.topics]
                )
                code, found = await self._committed(group.group_id, wanted, ctx)
                groups.append(
                    m.OffsetFetchResponse.OffsetFetchResponseGroup(
                        group_id=group.group_id,
                        error_code=code,
                        topics=[
                            m.OffsetFetchResponse.OffsetFetchResponseGroup.OffsetFetchResponseTopics(
                                name=topic,
                                partitions=[
                                    m.OffsetFetchResponse.OffsetFetchResponseGroup.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(
                                        partition_index=p,
                                        committed_offset=offset,
                                        metadata="",
                                        error_code=topic_code,
                                    )
                                    for p, offset in parts
                                ],
                            )
                            for topic, parts, topic_code in found
                        ],
                    )
                )
            return m.OffsetFetchResponse(groups=groups)
        wanted = (
            None
            if req.topics is None
            else [(t.name, list(t.partition_indexes)) for t in req.topics]
        )
        code, found = await self._committed(req.group_id, wanted, ctx)
        return m.OffsetFetchResponse(
            error_code=code,
            topics=[
                m.OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=topic,
                    partitions=[
                        m.OffsetFetchResponse.OffsetFetchResponseTopic.OffsetFetchResponsePartition(
                            partition_index=p,
                            committed_offset=offset,
                            metadata="",
                            error_code=topic_code or code,
                        )
                        for p, offset in parts
                    ],
                )
                for topic, parts, topic_code in found
            ],
        )

    async def _committed(
        self, group: str, wanted: list[tuple[str, list[int]]] | None, ctx: RequestContext
    ) -> tuple[Kafka, list[tuple[str, list[tuple[int, int]], Kafka]]]:
        """A group's committed positions, per topic: (topic, [(partition,
        offset)], the topic's error). Topics the principal may not describe are
        left out of a listing of all, and answered TOPIC_AUTHORIZATION_FAILED
        when named."""
        if self._group_denied(ctx, DESCRIBE, group):
            return GROUP_REFUSED, []
        denied = []
        if wanted is not None:
            denied = [(t, ps) for t, ps in wanted if self._topic_denied(ctx, DESCRIBE, t)]
            wanted = [(t, ps) for t, ps in wanted if not self._topic_denied(ctx, DESCRIBE, t)]
        try:
            code, found = (
                (Kafka.NONE, [])
                if wanted == []
                else await self.groups.committed(group, wanted, ctx)
            )
        except KafkaError as exc:
            return coordinator_error(exc)[0], []
        return code, [
            *(
                (topic, parts, Kafka.NONE)
                for topic, parts in found
                if not self._topic_denied(ctx, DESCRIBE, topic)
            ),
            *((topic, [(p, -1) for p in ps], TOPIC_REFUSED) for topic, ps in denied),
        ]

    async def describe_groups(
        self, req: m.DescribeGroupsRequest, ctx: RequestContext
    ) -> m.DescribeGroupsResponse:
        described = []
        for group in req.groups:
            entry = m.DescribeGroupsResponse.DescribedGroup(
                group_id=group, group_state="Dead", protocol_type="", protocol_data=""
            )
            try:
                if self._group_denied(ctx, DESCRIBE, group):
                    raise _not_allowed(DESCRIBE, group, "group")
                view = await self.groups.describe(group, ctx)
                entry.group_state = describe_state(view)
                if view is not None:
                    entry.protocol_type = PROTOCOL_TYPE
                    entry.protocol_data = view.assignor
                    entry.members = [
                        m.DescribeGroupsResponse.DescribedGroup.DescribedGroupMember(
                            member_id=member.member_id,
                            group_instance_id=member.instance_id,
                            client_id="",
                            client_host="",
                            member_metadata=b"",
                            member_assignment=assignment_bytes(member.assignment),
                        )
                        for member in view.members
                    ]
            except KafkaError as exc:
                entry.error_code, entry.error_message = coordinator_error(exc)
            described.append(entry)
        return m.DescribeGroupsResponse(groups=described)

    async def list_groups(
        self, req: m.ListGroupsRequest, ctx: RequestContext
    ) -> m.ListGroupsResponse:
        """The groups whose coordinator is this broker (admin clients ask every broker)."""
        topic = self.handlers.metadata.state.by_name(POSITIONS_TOPIC)
        pids = []
        if topic is not None:
            pids = [
                partition_id(topic.topic_id, i)
                for i in range(topic.partitions)
                if self._owns(partition_id(topic.topic_id, i))
            ]
        views = await self.groups.list_groups(pids, ctx)
        everything = not self._denied(ctx, DESCRIBE, CLUSTER)
        wanted_states = set(req.states_filter)
        return m.ListGroupsResponse(
            groups=[
                m.ListGroupsResponse.ListedGroup(
                    group_id=view.group,
                    protocol_type=PROTOCOL_TYPE,
                    group_state=describe_state(view),
                    group_type="classic",
                )
                for view in views
                if (not wanted_states or describe_state(view) in wanted_states)
                and (everything or not self._group_denied(ctx, DESCRIBE, view.group))
            ]
        )

    async def describe_configs(
        self, req: m.DescribeConfigsRequest, ctx: RequestContext
    ) -> m.DescribeConfigsResponse:
        results = []
        for resource in req.resources:
            result = m.DescribeConfigsResponse.DescribeConfigsResult(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            if resource.resource_type == RESOURCE_TOPIC:
                if self._topic_denied(ctx, DESCRIBE, resource.resource_name):
                    result.error_code = TOPIC_REFUSED
                    result.error_message = (
                        f"not allowed to describe {resource.resource_name[:60]!r}"
                    )
                    results.append(result)
                    continue
                topic = await self._topic(resource.resource_name)
                if topic is None:
                    result.error_code = Kafka.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    keys = resource.configuration_keys or sorted(TOPIC_CONFIG_KEYS)
                    result.configs = [
                        m.DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult(
                            name=key,
                            value=None if topic.config.get(key) is None else str(topic.config[key]),
                            read_only=False,
                            is_default=key not in topic.config,
                            config_source=SOURCE_TOPIC if key in topic.config else SOURCE_DEFAULT,
                        )
                        for key in keys
                        if key in TOPIC_CONFIG_KEYS
                    ]
            elif resource.resource_type == RESOURCE_BROKER and self._denied(ctx, DESCRIBE, CLUSTER):
                result.error_code = Kafka.CLUSTER_AUTHORIZATION_FAILED
            elif resource.resource_type != RESOURCE_BROKER:
                result.error_code = Kafka.INVALID_REQUEST
                result.error_message = f"resource type {resource.resource_type} has no configs here"
            results.append(result)
        return m.DescribeConfigsResponse(results=results)


def _not_allowed(operation: Operation, name: str, kind: str = "topic") -> KafkaError:
    code = GROUP_REFUSED if kind == "group" else TOPIC_REFUSED
    return KafkaError(code, f"not allowed to {operation.value} {kind} {name[:60]!r}")


def _commit_refused(topics: list[Any], code: Kafka) -> m.OffsetCommitResponse:
    """The OffsetCommit answer refusing every partition of `topics` with `code`."""
    return commit_answer(topics, lambda _: code)


def _refused(answer: Any, exc: BaseException) -> Any:
    """`answer` (a partition's, with error_code and error_message) carrying
    the Kafka error for `exc`."""
    answer.error_code, answer.error_message = kafka_error(exc)
    return answer


def _brokers(kafka_ports: dict[str, tuple[str, tuple[int, ...]]]) -> list[tuple[int, str, int]]:
    """(broker id, host, port) of every shard of every node named."""
    return [
        (broker_id(node, shard), host, port)
        for node, (host, ports) in kafka_ports.items()
        for shard, port in enumerate(ports)
    ]


RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
SOURCE_TOPIC: Final = 1
SOURCE_DEFAULT: Final = 5
