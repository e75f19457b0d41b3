"""One shard process: its sockets, its partitions, its metadata view, its drain.

Start-up, in order (each step depends on the one before):

1. task queues (requests 1000, flush 800, background 100) where the loop has
   them; signal handlers (SIGTERM, SIGINT: drain; SIGHUP: reload the TLS
   certificate, which the supervisor forwards);
2. the inter-shard channel listener, so peers can reach this shard (the
   metadata owner must serve followers before it is "ready" itself);
3. the metadata: replay (owner) or catch up with the owner (followers);
4. the client listeners: the shard's own port, the node port (TCP, and UDP
   unless TLS or logins are on: a datagram can carry neither);
5. READY to the supervisor over the control socket.

Drain (SIGTERM, SIGINT, or the supervisor's end of the control socket closing):
hand this shard's Raft leaderships to followers (a cluster node); stop
accepting; stop reading new requests; end long-polls (they answer with what
there is); let in-flight requests finish, bounded by `DRAIN_TIMEOUT_S`;
close every log (which completes in-flight flushes and syncs); exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import secrets
import signal
import socket
from collections import Counter
from typing import TYPE_CHECKING, Any, Final

from laminar.channels.siblings import Channels
from laminar.channels.sockets import ShardSockets, is_sibling_shard, peer_credentials
from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.groups.service import GroupService
from laminar.log import LogConfig
from laminar.log.filepool import FilePool
from laminar.log.partitions import LongPolls, PartitionManager
from laminar.log.storage import StorageBackend, SyscallBackend
from laminar.lograte import RateLimitedLog
from laminar.memory import trim_heap
from laminar.placement import U32_MAX, replica_nodes, shard_for
from laminar.replication.auth import PeerAuth, load_secret
from laminar.replication.metadata import METADATA_PID, Applied
from laminar.replication.metadata_home import ClusteredMetadata, LocalMetadata
from laminar.replication.metalog import METADATA_FRAME_BYTES_MIN, MetadataService
from laminar.replication.nodes import Node, StaticView, parse_peers
from laminar.replication.routes import NodeRoutes
from laminar.replication.shard_groups import ShardGroups
from laminar.replication.topic_config import log_config
from laminar.replication.transport import HANDSHAKE_FRAME_BYTES, close_stream
from laminar.replication.transport import READ_BYTES as TRANSPORT_READ_BYTES
from laminar.security.login import Login
from laminar.security.state import DECOY_KEY_BYTES
from laminar.security.tls import ServerTls, TlsFiles
from laminar.shards.authorization import Authorizer
from laminar.shards.bootstrap_user import keep_bootstrap_user, read_user_file
from laminar.shards.budget import InputBudget
from laminar.shards.config import NodeConfig
from laminar.shards.connection import Connection
from laminar.shards.control import (
    CONTROL_MAX_FRAME_BYTES,
    CONTROL_STATS,
    CONTROL_VIEW,
    ready_frame,
    stats_response,
    view_from_header,
)
from laminar.shards.datagram import DatagramServer
from laminar.shards.dispatch import CHANNEL_FRAME_SLACK, Dispatcher
from laminar.shards.handlers import Handlers, RequestContext, ShardIdentity
from laminar.shards.metrics import ShardMetrics, TimedBackend
from laminar.shards.replicas import ClusterReplicas, NodeReplicas, Replicas
from laminar.shards.retention import Retention
from laminar.shards.router import PEER_OPS
from laminar.shards.security_ops import SecurityOps
from laminar.stream import Stream
from laminar.swim import MembershipView
from laminar.wire import (
    NEED_DATA,
    ErrorCode,
    ErrorResponse,
    Frame,
    FrameDecoder,
    Message,
    ProtocolError,
    TopicInfo,
    decode_frame,
)
from laminar.wire.codec import Buffer
from laminar.wire.errors import RequestError
from laminar.wire.writes import DECISION_REPLICAS, DECISIONS_PID
from laminar.writes.decision_logs import (
    LocalDecisionLogs,
    ReplicatedDecisionLogs,
    decision_log_config,
)
from laminar.writes.service import WriteService, WriteSettings

if TYPE_CHECKING:  # imported at the first Kafka connection (`Shard._kafka_door`)
    from laminar.shards.kafka_door import KafkaDoor

logger = logging.getLogger("laminar.shards")
_refusals = RateLimitedLog(logger)
"""Lines an outsider can provoke (failed accepts, refused peers): rate-limited."""

DRAIN_TIMEOUT_S: Final = 10.0
PEER_DRAIN_TIMEOUT_S: Final = 3.0
SWEEP_INTERVAL_S: Final = 1.0
HANDSHAKES_MAX: Final = 16
"""Peer handshakes under way at once on one shard; more are closed unanswered
(a node opens one connection per remote shard, retried with backoff)."""
HANDSHAKE_BYTES: Final = HANDSHAKE_FRAME_BYTES + TRANSPORT_READ_BYTES
"""What a handshake may make the shard hold: one header-sized frame and a read."""
SHED_GRACE_S: Final = 0.2
"""A partial frame younger than this is not shed for a starved connection."""
TRIM_AFTER_BYTES: Final = 16 << 20
"""A burst of held bytes past which the heap is trimmed once they are released."""
QUEUE_SHARES: Final = {"requests": 1000, "flush": 800, "background": 100}
OPEN_CHUNK: Final = 64
"""A topic's groups open this many at a time (`_open_replicas`)..."""
ACTIVE_GROUPS_OPENING_MAX: Final = 512
"""...and the next chunk waits while this many groups are still active."""


def _describe_peer(sock: socket.socket) -> str:
    try:
        pid, uid, _ = peer_credentials(sock)
    except OSError:
        return "(credentials unknown)"
    return f"(pid {pid}, uid {uid})"


def _storage_backend(runtime: str) -> StorageBackend:
    if runtime == "uring":
        from laminar.reactor.storage import UringBackend

        return UringBackend()
    return SyscallBackend()


class Shard:
    """Everything one shard process runs (see the module docstring)."""

    def __init__(
        self,
        config: NodeConfig,
        shard_id: int,
        sockets: ShardSockets,
        control: socket.socket,
        *,
        runtime: str,
        routing_mode: str,
        node_port: int,
        shard_ports: list[int],
        admin_port: int | None = None,
        kafka_ports: list[int] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.clock = clock
        """Handed to every part that decides by elapsed time (`laminar.clock`)."""
        self.shard_id = shard_id
        self.sockets = sockets
        self.control = control
        self.runtime = runtime
        self.routing_mode = routing_mode
        self.membership: MembershipView | None = None
        """The latest membership view the supervisor pushed (None: membership off)."""
        self.metrics = ShardMetrics()
        self.ident = ShardIdentity(
            node_id=config.node_id,
            shard_id=shard_id,
            shard_count=config.cores,
            host=config.host,
            port=node_port,
            shard_ports=tuple(shard_ports),
            admin_port=admin_port,
            kafka_ports=tuple(kafka_ports or ()),
            routing_mode=routing_mode,
            max_frame_bytes=config.max_frame_bytes,
            max_wait_ms=config.max_wait_ms,
        )
        self.budget = InputBudget(config.max_input_bytes)
        self.connections: set[Connection] = set()
        self._client_connections = 0
        self._handshakes = 0
        self._client_ids = itertools.count()
        self._trim_armed = False
        self._shed_handle: asyncio.Handle | None = None
        self.budget.on_starved = self._starved
        self._per_address: Counter[str] = Counter()
        """Client connections (handshakes included) per peer address."""
        self._address_of: dict[Connection, str] = {}
        self._serving: set[asyncio.Task[None]] = set()
        self._internal_tasks: dict[asyncio.Task[None], bool] = {}
        self._listeners: list[asyncio.Task[None]] = []
        self._queues: dict[str, Any] = {}
        self._drain_requested: asyncio.Event | None = None
        self._owned_partitions = 0
        self._started_at = self.clock.monotonic()
        self.kafka: KafkaDoor | None = None
        """The Kafka door (None until the first Kafka connection, and when --kafka-port is 0)."""
        self.tls: ServerTls | None = None
        """The client ports' TLS context (None: plaintext); SIGHUP reloads it."""
        self._decoy_key = secrets.token_bytes(DECOY_KEY_BYTES)
        """Unknown users' salts before the cluster writes its decoy key (no users yet)."""

    # -- helpers ---------------------------------------------------------------

    def _owns(self, pid: int) -> bool:
        return shard_for(pid, self.config.cores) == self.shard_id

    def _replicated_owned(self, pid: int) -> LogConfig | None:
        """A replicated partition of this shard the metadata knows (or the write
        decisions group): its log settings."""
        if not self._owns(pid):
            return None
        if pid == DECISIONS_PID:
            return decision_log_config()
        return self.handlers.replicated_log_config(pid)

    def _describe_partition(self, pid: int) -> str:
        """A partition as error messages name it."""
        topic = self.metadata.state.by_id(pid >> 32)
        if topic is None:
            return f"partition {pid:#x}"
        return f"partition {pid & U32_MAX} of topic {topic.name!r}"

    async def _serve_peer(self, frame: Frame, peer: str) -> list[Buffer]:
        """A request another node sent over an authenticated peer session."""
        ctx = RequestContext(received_by=self.shard_id, internal=True, peer=peer)
        return await self.dispatcher.dispatch(frame, ctx)

    def _spawn(self, coro: Any, queue: str = "requests") -> asyncio.Task[Any]:
        loop = asyncio.get_running_loop()
        tq = self._queues.get(queue)
        if tq is not None:
            return loop.create_task(coro, queue=tq)  # type: ignore[call-arg]
        return loop.create_task(coro)

    async def _internal_request(self, message: Message) -> Frame:
        """Serve a request of this node's own (the write protocol's) here or on
        the shard that owns its partition; the answer frame."""
        ctx = RequestContext(received_by=self.shard_id, internal=True)
        answer = await self.dispatcher.dispatch(message.to_frame(0), ctx)
        return decode_frame(b"".join(answer), self.config.max_frame_bytes + CHANNEL_FRAME_SLACK)

    def request_drain(self) -> None:
        if self._drain_requested is not None:
            self._drain_requested.set()

    # -- main ------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._drain_requested = asyncio.Event()
        create_queue = getattr(loop, "create_task_queue", None)
        if create_queue is not None:
            for name, shares in QUEUE_SHARES.items():
                self._queues[name] = create_queue(name, shares)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_drain)

        config = self.config
        if config.tls:
            self.tls = ServerTls(
                TlsFiles(config.tls_cert_file, config.tls_key_file, config.tls_ca_file)
            )
            loop.add_signal_handler(signal.SIGHUP, self.tls.reload)
        self.files = FilePool(config.open_files_per_shard)
        backend = self.files.backend(
            TimedBackend(_storage_backend(self.runtime), self.metrics.fsync)
        )
        self.partitions = PartitionManager(
            config.partitions_dir,
            config.log_config(pipelined=self.runtime == "uring"),
            backend,
            self._owns,
            spawn=lambda coro: self._spawn(coro, "flush"),
            clock=self.clock,
        )
        await self.partitions.recover()
        self.polls = LongPolls()
        self.channels = Channels(
            config.run_dir,
            self.shard_id,
            config.cores,
            # Answers from peers include metadata snapshots, which hold every topic.
            max(config.max_frame_bytes, METADATA_FRAME_BYTES_MIN) + CHANNEL_FRAME_SLACK,
        )
        self.replication = self._replication() if config.clustered else None
        self.metadata = MetadataService(
            self.shard_id,
            shard_for(METADATA_PID, config.cores),
            self.partitions,
            self.channels,
            self._on_metadata_applied,
            config.cores,
            self.polls,
            LocalMetadata(self.partitions)
            if self.replication is None
            else ClusteredMetadata(self.replication),
            config.topic_limits,
            self.clock,
        )
        self.metadata.state.security.set_flagged_superusers(config.superusers)
        self._bootstrap_user: asyncio.Task[None] | None = None
        self.replicas: Replicas = (
            NodeReplicas(self.partitions)
            if self.replication is None
            else ClusterReplicas(self.partitions, self.replication)
        )
        self.handlers = Handlers(
            self.ident,
            self.metadata,
            self.partitions,
            self.metrics,
            self.polls,
            self.replicas,
            self.channels,
            Authorizer(self.metadata.state) if config.authenticated else None,
        )
        if self.replication is not None:
            self.replication.adopt_known(self._replicated_owned)
        self.dispatcher = Dispatcher(
            self.shard_id,
            config.cores,
            self.handlers,
            self.channels,
            self.metrics,
            config.max_frame_bytes,
            clustered=config.clustered,
        )
        publish_bytes = config.publish_append_bytes
        if self.replication is not None:  # a chunk may go to the leader in one peer frame
            publish_bytes = min(publish_bytes, config.max_frame_bytes - CHANNEL_FRAME_SLACK)
        retention_ms = round(config.decision_retention_s * 1000)
        self.writes = WriteService(
            WriteSettings(
                config.staging_dir,
                config.staging_bytes_max,
                config.staging_timeout_s,
                retention_ms,
                publish_bytes,
            ),
            backend,
            self._owns,
            self.handlers.write_replica_of,
            self.handlers.write_topic_of,
            self._internal_request,
            LocalDecisionLogs(config.decisions_dir, backend, self._owns, retention_ms)
            if self.replication is None
            else ReplicatedDecisionLogs(
                self.replication, self._owns, retention_ms, config.gossiped
            ),
            node_id=config.node_id,
            peer_calls=None if self.replication is None else self.replication.calls,
            describe=self._describe_partition,
            clock=self.clock,
        )
        self.dispatcher.add_handlers(self.writes.table())
        self.groups = GroupService(
            self.metadata,
            config.group_partitions,
            self.handlers.replica_of,
            NodeRoutes(
                config.node_id,
                self._internal_request,
                None if self.replication is None else self.replication.calls,
                self.clock,
            ),
            self.replicas.placed_on,
            self.clock,
            None if self.handlers.authorizer is None else self.handlers.authorizer.lists_group,
        )
        self.dispatcher.add_handlers(self.groups.table())
        self.dispatcher.add_handlers(SecurityOps(self.metadata, config.authenticated).table())
        if self.replication is not None:
            self.replication.serve_peers(self._serve_peer, PEER_OPS)
        self.retention = Retention(
            self.partitions,
            self.metadata.state.topics,
            self._owns,
            self.metrics,
            config.retention_check_interval_s,
            self.replication.retention_keeps_from if self.replication is not None else None,
            self.clock,
            self.groups.positions_floor,
        )
        control_task = self._spawn(self._serve_control(), "background")
        self._listen(self.sockets.channel, internal=True)
        await self.metadata.start()
        await self.writes.start()
        self._listen(self.sockets.shard_tcp, internal=False)
        self._listen(self.sockets.node_tcp, internal=False)
        if self.sockets.kafka_tcp is not None:
            self._listen(self.sockets.kafka_tcp, internal=False, kafka=True)
        self.datagrams = None
        if (
            self.sockets.node_udp is not None
        ):  # None with TLS or logins (`NodeConfig.udp_off_reason`)
            self.datagrams = DatagramServer(
                self.sockets.node_udp,
                self.dispatcher,
                self.metrics,
                self.shard_id,
                config.max_frame_bytes,
                config.udp_max_bytes,
                writes=config.udp_writes,
            )
            self._listeners.append(self._spawn(self.datagrams.serve()))
        sweeper = self._spawn(self._sweep_idle(), "background")
        retention = self._spawn(self.retention.run(), "background")
        if config.bootstrap_user_file and self.metadata.is_owner:
            name, password = read_user_file(config.bootstrap_user_file)
            self._bootstrap_user = self._spawn(
                keep_bootstrap_user(self.metadata, name, password), "background"
            )
        self._send_control(
            ready_frame(
                {
                    "shard_id": self.shard_id,
                    "pid": os.getpid(),
                    "runtime": self.runtime,
                    "routing_mode": self.routing_mode,
                }
            )
        )
        logger.info(
            "shard %d serving on port %d (runtime %s, metadata %s)",
            self.shard_id,
            self.ident.shard_ports[self.shard_id],
            self.runtime,
            "owner" if self.metadata.is_owner else f"from shard {self.metadata.owner}",
        )
        await self._drain_requested.wait()
        sweeper.cancel()
        retention.cancel()
        await self._drain()
        control_task.cancel()
        return 0

    def _replication(self) -> ShardGroups:
        """This shard's Raft groups and peer links: the members are --peers,
        or whoever SWIM says is live (starting with this node alone)."""
        config = self.config
        me = Node(config.node_id, config.host, self.ident.port, config.weight)
        peers = () if config.gossiped else parse_peers(config.peers)
        view = StaticView(me, peers).view()
        replication = ShardGroups(
            view,
            self._peer_auth(),
            self.shard_id,
            config.cores,
            self.partitions,
            config.max_frame_bytes,
            self.ident.shard_ports,
            config.move_bytes_per_s,
            self.clock,
        )
        replication.start()
        replication.joining = bool(config.join)
        if config.gossiped:
            replication.follow_membership(
                self._replication_factor,
                round(config.dead_grace_s * 1000),
                lambda: self.metadata.state.decommissioned,
            )
        return replication

    def _peer_auth(self) -> PeerAuth:
        """Certificates when the node has TLS (`NodeConfig` then requires the
        CA file), else the cluster secret's node keys (or none: insecure)."""
        config = self.config
        if self.tls is not None:
            return PeerAuth.with_certificates(config.node_id, self.tls.dial_context)
        secret = load_secret(config.cluster_secret_file) if config.cluster_secret_file else None
        return PeerAuth.from_secret(config.node_id, secret)

    def _replication_factor(self, pid: int) -> int | None:
        """What the placement controller places `pid` on: the metadata group on
        --metadata-voters voters (every other member observes it), a replicated
        topic's partitions on its replication factor, nothing else."""
        if pid == METADATA_PID:
            return self.config.metadata_voters
        if pid == DECISIONS_PID:
            return DECISION_REPLICAS
        topic = self.metadata.state.by_id(pid >> 32)
        replication = self.replication
        if topic is None or replication is None:
            return None
        if not replication.replicated(topic.replication_factor):
            return None
        return topic.replication_factor

    # -- listening -------------------------------------------------------------

    def _kafka_door(self) -> KafkaDoor:
        """The Kafka door, made at the first Kafka connection: its generated
        codec costs a few hundred milliseconds of CPU to import, which a shard
        that never meets a Kafka client does not pay at each start."""
        if self.kafka is None:
            from laminar.shards.kafka_door import KafkaDoor

            calls = None if self.replication is None else self.replication.calls
            routes = NodeRoutes(self.config.node_id, self._internal_request, calls, self.clock)
            self.kafka = KafkaDoor(
                self.handlers,
                self.dispatcher,
                routes,
                calls,
                self.clock,
                authenticated=self.config.authenticated,
            )
        return self.kafka

    def _listen(self, sock: socket.socket, *, internal: bool, kafka: bool = False) -> None:
        self._listeners.append(self._spawn(self._accept_loop(sock, internal, kafka)))

    async def _accept_loop(self, listener: socket.socket, internal: bool, kafka: bool) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listener)
            except OSError as exc:
                _refusals.warning("accept", "shard %d: accept failed: %s", self.shard_id, exc)
                await asyncio.sleep(0.1)  # EMFILE and friends: let connections close
                continue
            sock.setblocking(False)
            if internal and not is_sibling_shard(sock):
                self.metrics.channel_refused += 1
                _refusals.warning(
                    "channel",
                    "shard %d: refused a channel connection from a non-shard peer %s",
                    self.shard_id,
                    _describe_peer(sock),
                )
                sock.close()
                continue
            host = "" if internal else str(address[0])
            if not internal and self._client_connections >= self.config.max_connections:
                self._refuse(sock)
                continue
            if not internal and self._per_address[host] >= self.config.max_connections_per_address:
                self.metrics.connections_refused_address += 1
                self._refuse(sock)
                continue
            local_host = None
            if not internal:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with contextlib.suppress(OSError):
                    local_host = sock.getsockname()[0]
            ctx = RequestContext(
                received_by=self.shard_id,
                internal=internal,
                local_host=local_host,
                client=None if internal else (self.shard_id << 48) | next(self._client_ids),
            )
            max_frame = self.config.max_frame_bytes + (CHANNEL_FRAME_SLACK if internal else 0)
            tls = None if internal or self.tls is None else self.tls.context
            login = None
            if not internal and self.config.authenticated:
                login = Login(self.metadata.state.security, self._decoy_key)
            conn: Connection
            if kafka:
                from laminar.shards.kafka_connection import KafkaConnection

                conn = KafkaConnection(
                    sock,
                    self._kafka_door(),
                    self.dispatcher,
                    self.metrics,
                    ctx,
                    max_frame,
                    self._closed,
                    self.budget,
                    self.clock,
                    tls,
                    login,
                )
            else:
                on_peer = None
                if not internal and self.replication is not None:
                    on_peer = functools.partial(self._accept_peer, host)
                conn = Connection(
                    sock,
                    self.dispatcher,
                    self.metrics,
                    ctx,
                    max_frame,
                    self._closed,
                    self.budget,
                    on_peer,
                    self.clock,
                    tls,
                    login,
                )
            self.connections.add(conn)
            if not internal:
                self._client_connections += 1
                self._per_address[host] += 1
                self._address_of[conn] = host
            task = self._spawn(conn.serve())
            self._serving.add(task)
            self._internal_tasks[task] = internal
            task.add_done_callback(self._served)

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        host = self._address_of.pop(conn, None)
        if host is not None and not conn.handed_over:  # a handshake counts until it ends
            self._client_gone(host)

    def _client_gone(self, host: str) -> None:
        self._client_connections -= 1
        self._per_address[host] -= 1
        if not self._per_address[host]:
            del self._per_address[host]

    def _accept_peer(self, host: str, stream: Stream, hello: Frame) -> None:
        """A client connection that opened with PEER_HELLO: hand it to the
        replication, still counted as a client connection and charged to the
        budget until its handshake ends, and at most `HANDSHAKES_MAX` at once."""
        assert self.replication is not None
        if self._handshakes >= HANDSHAKES_MAX:
            self.metrics.handshakes_refused += 1
            self._client_gone(host)
            _refusals.warning(
                "handshakes",
                "shard %d: refused a peer handshake: %d under way",
                self.shard_id,
                self._handshakes,
            )
            close_stream(stream)
            return
        self._handshakes += 1
        self.budget.charge(HANDSHAKE_BYTES)
        self.replication.accept_peer(stream, hello, functools.partial(self._handshake_done, host))

    def _handshake_done(self, host: str) -> None:
        self._handshakes -= 1
        self._client_gone(host)
        self.budget.release(HANDSHAKE_BYTES)

    def _refuse(self, sock: socket.socket) -> None:
        """Tell a client over the connection cap so, before reading anything (its
        requests were not applied), and close."""
        self.metrics.connections_refused += 1
        reply = ErrorResponse.for_code(0, ErrorCode.TOO_MANY_CONNECTIONS).encode(0)
        with contextlib.suppress(OSError):
            sock.send(reply)
        sock.close()

    def _served(self, task: asyncio.Task[None]) -> None:
        self._serving.discard(task)
        self._internal_tasks.pop(task, None)

    async def _sweep_idle(self) -> None:
        """Close client connections idle too long (a connection that never sent a
        whole request: sooner), or too slow to finish a frame; give the heap back
        after a burst."""
        config = self.config
        timeout, first_timeout = config.idle_timeout_s, config.first_request_timeout_s
        frame_timeout = config.frame_timeout_s
        interval = min(SWEEP_INTERVAL_S, first_timeout / 4, timeout / 4, frame_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            now = self.clock.monotonic()
            for conn in list(self.connections):
                if conn.internal or conn.closed:
                    continue
                idle = conn.idle_for(now)
                if conn.partial_since is not None and now - conn.partial_since > frame_timeout:
                    self.metrics.connections_closed_slow += 1
                    conn.stop()
                elif idle > timeout or (conn.before_first_request and idle > first_timeout):
                    self.metrics.connections_closed_idle += 1
                    conn.stop()
            self._shed_for_starved()
            self._trim_after_burst()

    def _starved(self) -> None:
        """A connection under its fair share waits for budget: shed soon (once)."""
        if self._shed_handle is None:
            self._shed_handle = asyncio.get_running_loop().call_soon(self._shed_for_starved)

    def _shed_for_starved(self) -> None:
        """While a client under its fair share waits for budget, close the client
        connections holding more than a share of partial input begun over
        `SHED_GRACE_S` ago (a fast sender finishes its frame first), largest
        first, until the shard is under budget (`laminar.shards.budget`)."""
        self._shed_handle = None
        budget = self.budget
        clients = [c for c in self.connections if not c.internal and not c.closed]
        if not budget.exhausted or not any(c.starved for c in clients):
            return
        share = budget.fair_share_bytes
        over = sorted((c for c in clients if c.input_bytes > share), key=lambda c: -c.input_bytes)
        now = self.clock.monotonic()
        held = budget.used
        for conn in over:
            if held < budget.limit_bytes:
                return
            since = conn.partial_since
            if since is None or now - since < SHED_GRACE_S:
                continue
            held -= conn.input_bytes
            self.metrics.connections_shed += 1
            conn.stop()
        if held >= budget.limit_bytes and over:  # some were within their grace
            loop = asyncio.get_running_loop()
            self._shed_handle = loop.call_later(SHED_GRACE_S, self._shed_for_starved)

    def _trim_after_burst(self) -> None:
        """Once what clients made the shard hold has come down from a high mark
        and stayed down for a sweep (the objects of closing connections are
        freed a few loop iterations after their bytes are released), give the
        freed heap back (`laminar.memory.trim_heap`): glibc keeps it."""
        budget = self.budget
        if not (
            budget.recent_peak_bytes >= TRIM_AFTER_BYTES
            and budget.used <= budget.recent_peak_bytes // 4
        ):
            self._trim_armed = False
        elif not self._trim_armed:
            self._trim_armed = True
        else:
            self._trim_armed = False
            budget.recent_peak_bytes = budget.used
            trim_heap()

    # -- metadata changes ------------------------------------------------------

    async def _on_metadata_applied(self, applied: Applied) -> None:
        for topic in applied.created:
            self._owned_partitions += self._owned_count(topic)
            if self.replication is not None:
                self._spawn(self._open_replicas(self.replication, topic), "flush")
        for topic in applied.deleted:
            self._owned_partitions -= self._owned_count(topic)
            if self.replication is not None:
                for pid in self._owned_pids(topic):
                    await self.replication.close_group(pid)
            await self.partitions.drop_topic(topic.topic_id, topic.partitions)
            await self.writes.drop_topic(topic.topic_id)
        for topic in applied.altered:
            self.retention.apply_config(topic)
        changed = {t.name: t.partitions for t in applied.created}
        changed.update({t.name: 0 for t in applied.deleted})
        if changed:
            self.groups.topics_changed(changed)

    def _owned_count(self, topic: TopicInfo) -> int:
        return len(self._owned_pids(topic))

    def _owned_pids(self, topic: TopicInfo) -> list[int]:
        pids = ((topic.topic_id << 32) | idx for idx in range(topic.partitions))
        return [pid for pid in pids if self._owns(pid)]

    async def _open_replicas(self, replication: ShardGroups, topic: TopicInfo) -> None:
        """Open this shard's members of a replicated topic's groups, so followers
        vote and take appends before any client names the partition: those
        the creation placed here (unless a move took them away since: a
        retired mark), and those a move gave this node (its files are here;
        the group's recorded membership says what it is now)."""
        rf = topic.replication_factor
        if not replication.replicated(rf):
            return
        config = log_config(self.partitions.config, topic.config)
        placed_on = self.metadata.state.placed_on(topic.topic_id)
        for n, pid in enumerate(self._owned_pids(topic)):
            if n % OPEN_CHUNK == 0:
                # Back-pressure: new groups tick and campaign until they settle,
                # so open them a chunk at a time, never far ahead of that.
                await replication.host.wait_active_below(ACTIVE_GROUPS_OPENING_MAX)
            # Every node derives the same first replicas from the creation entry.
            first = (
                replica_nodes(pid, placed_on, rf)
                if placed_on
                else replication.replica_nodes(pid, rf)
            )
            here = os.path.isdir(self.partitions.directory(pid))
            placed = replication.node_id in first and not self.partitions.retired(pid)
            if (here or placed) and self.metadata.state.by_id(topic.topic_id):
                try:
                    await replication.ensure_open(pid, first, config)
                except RequestError:
                    pass  # offline: the replication reported why, once
                except Exception:
                    logger.exception("could not open partition %d's replica", pid)

    # -- control channel -------------------------------------------------------

    def _send_control(self, data: bytes) -> None:
        try:
            self.control.sendall(data)
        except OSError:
            self.request_drain()

    async def _serve_control(self) -> None:
        loop = asyncio.get_running_loop()
        decoder = FrameDecoder(CONTROL_MAX_FRAME_BYTES)
        try:
            while True:
                data = await loop.sock_recv(self.control, 65536)
                if not data:
                    break
                decoder.feed(data)
                while True:
                    frame = decoder.next_frame()
                    if frame is NEED_DATA:
                        break
                    if frame.op == CONTROL_STATS:
                        reply = stats_response(frame.correlation_id, self.stats())
                        await loop.sock_sendall(self.control, reply)
                    elif frame.op == CONTROL_VIEW:
                        self._on_view(frame.header)
        except (OSError, ProtocolError) as exc:
            logger.warning("shard %d: control channel failed: %s", self.shard_id, exc)
        logger.info("shard %d: supervisor gone; draining", self.shard_id)
        self.request_drain()

    def _on_view(self, header: dict[str, Any]) -> None:
        try:
            view = view_from_header(header)
        except ValueError as exc:
            logger.warning("shard %d: bad membership view: %s", self.shard_id, exc)
            return
        if self.membership is None or view.version >= self.membership.version:
            self.membership = view
            if self.replication is not None and self.config.gossiped:
                self.replication.on_membership(view)

    def stats(self) -> dict[str, Any]:
        """The snapshot the supervisor renders into /metrics."""
        snap = self.metrics.snapshot()
        snap.update(
            {
                "shard_id": self.shard_id,
                "pid": os.getpid(),
                "core": min(os.sched_getaffinity(0)),
                "runtime": self.runtime,
                "routing_mode": self.routing_mode,
                "membership_version": None if self.membership is None else self.membership.version,
                "partitions_owned": self._owned_partitions,
                "partitions_open": self.partitions.open_count,
                **self.files.stats(),
                "partitions_offline": [
                    o.describe()
                    for o in self.partitions.offline
                    + (list(self.replication.offline.values()) if self.replication else [])
                ],
                "moves": self.replication.move_stats() if self.replication is not None else None,
                "raft_groups": len(self.replication.host.groups) if self.replication else 0,
                "raft_groups_active": (
                    self.replication.host.active_groups() if self.replication else 0
                ),
                "peer_refused": (
                    dict(self.replication.refusals.counts) if self.replication is not None else {}
                ),
                "metadata_group": (
                    self.replication.group_members(METADATA_PID)
                    if self.replication is not None
                    else None
                ),
                "decisions_group": (
                    self.replication.group_members(DECISIONS_PID)
                    if self.replication is not None
                    else None
                ),
                "flushes": self.partitions.flushes,
                "metadata_applied_index": self.metadata.state.applied_index,
                "input_bytes": self.budget.used,
                "input_bytes_peak": self.budget.peak_bytes,
                "input_bytes_limit": self.budget.limit_bytes,
                "answer_bytes": sum(c.answer_bytes for c in self.connections),
                "client_connections": self._client_connections,
                "handshakes": self._handshakes,
                "topics": len(self.metadata.state.topics()),
                "uptime_s": self.clock.monotonic() - self._started_at,
                "task_queues": self._queue_stats(),
                "group_lag": self.groups.lag.snapshot(),
                **self.writes.stats(),
            }
        )
        return snap

    def _queue_stats(self) -> dict[str, dict[str, float]]:
        loop = asyncio.get_running_loop()
        queues = getattr(loop, "task_queues", None)
        if queues is None:
            return {}
        out = {}
        for queue in queues():
            s = queue.stats()
            out[s.name] = {
                "shares": float(s.shares),
                "runtime_s": s.runtime_s,
                "runs": float(s.runs),
                "queue_delay_s_max": s.queue_delay_s_max,
                "queue_delay_s_mean": s.queue_delay_s_mean,
            }
        return out

    # -- drain -----------------------------------------------------------------

    async def _drain(self) -> None:
        logger.info("shard %d draining", self.shard_id)
        if self.replication is not None:  # still serving: clients are told where to go
            await self.replication.hand_over_leaderships()
        for task in self._listeners:
            task.cancel()
        if self.datagrams is not None:
            self.datagrams.stop()
        self.polls.cancel_all()
        self.metadata.stop()
        clients = [c for c in self.connections if not c.internal]
        for conn in clients:
            conn.stop()
        await self._wait_serving(lambda t: not self._internal_tasks.get(t, False), DRAIN_TIMEOUT_S)
        # Peers may still be forwarding requests of their own clients here: keep
        # serving the channel until they close it (they do once drained).
        self.channels.close()
        await self._wait_serving(lambda t: True, PEER_DRAIN_TIMEOUT_S)
        for conn in list(self.connections):
            conn.stop()
        await self._wait_serving(lambda t: True, 1.0)
        if self.replication is not None:
            await self.replication.close()
        await self.writes.close()
        await self.groups.close()
        await self.partitions.close_all()
        logger.info("shard %d drained", self.shard_id)

    async def _wait_serving(self, which: Any, timeout_s: float) -> None:
        tasks = [t for t in self._serving if which(t)]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        if pending:
            logger.warning(
                "shard %d: %d connections still busy after %.0f s; closing them",
                self.shard_id,
                len(pending),
                timeout_s,
            )
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=1.0)
