"""The node's settings: one frozen `NodeConfig`, parsed once by the supervisor.

The supervisor hands the same config to every shard process as JSON on its
command line (`to_json` / `from_json`), so a shard never re-reads flags or the
environment: what the supervisor logged at start-up is what every shard runs.

Cores: one shard per core, at most `os.cpu_count()` of them, unless
`allow_oversubscribe` is set (tests and benchmarks that need more shards than
this machine has cores: shards then share cores round-robin).

Port rules: the node port (`port`, default 7070) is bound by every shard with
SO_REUSEPORT; shard `i` also listens alone on `shard_port_base + i` (default
`port + 1 + i`). With `port == 0` every port is ephemeral (tests), and the
node reports the ports it got in `<data-dir>/run/node.json`. The admin HTTP
port defaults to `port + 2000` (9070), or ephemeral with `port == 0`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import resource
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Literal

from laminar.log import LogConfig
from laminar.log.config import FLUSH_POLICIES, FlushPolicy
from laminar.replication.members import check_node_id, parse_peers
from laminar.shards.metadata import MAX_PARTITIONS, TopicLimits
from laminar.wire import DEFAULT_MAX_FRAME_BYTES, MIN_FRAME_BYTES

DEFAULT_PORT: Final = 7070
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_DATA_DIR: Final = "laminar-data"
ADMIN_PORT_OFFSET: Final = 2000
DEFAULT_SEGMENT_BYTES: Final = 64 << 20
DEFAULT_IDLE_TIMEOUT_S: Final = 300.0
DEFAULT_FIRST_REQUEST_TIMEOUT_S: Final = 10.0
ROUTING_MODES: Final = ("auto", "ebpf", "cbpf", "userspace")
"""`--routing` choices (`laminar.xdp.routing.REQUESTED_MODES`, kept here so the
config does not import the BPF layer)."""
XDP_MODES: Final = ("auto", "native", "generic", "off")
"""`--xdp`: auto attaches the classifier in native mode when the node can;
native/generic insist on that mode; off never attaches. Generic (skb) mode is
never chosen by itself: it copies every packet of the interface, the node's
or not, into a new page (measured: loopback TCP 2.5 -> 1.9-2.3 GB/s)."""
UDP_PAYLOAD_BYTES_MAX: Final = 65507
"""The largest UDP payload over IPv4: the ceiling of `udp_max_bytes`."""
UDP_MTU_PAYLOAD_BYTES: Final = 1472
"""A UDP payload that fits one Ethernet frame (1500 - 20 IP - 8 UDP): the default
`udp_max_bytes`, so an answer is one unfragmented datagram and a forged request
cannot draw more than that."""
DEFAULT_MAX_CONNECTIONS: Final = 1024
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: Final = 512
"""Half a shard's default cap: one address (loopback included) cannot take them
all, and the tests and benchmarks, which open at most a few hundred
connections per shard from 127.0.0.1, stay under it."""
DEFAULT_MAX_INPUT_BYTES: Final = 256 << 20
DEFAULT_FRAME_TIMEOUT_S: Final = 30.0
DEFAULT_MAX_WAIT_MS: Final = 60_000
DEFAULT_MAX_TOPICS: Final = 10_000
DEFAULT_MAX_TOPIC_PARTITIONS: Final = 16_384
MAX_TOPICS_CEILING: Final = 20_000
"""Every topic is in every metadata answer and in one metadata snapshot entry
(up to ~400 bytes a topic): this keeps both a few MiB."""
DEFAULT_RETENTION_CHECK_INTERVAL_S: Final = 60.0
OPEN_FILES_PER_SHARD_MIN: Final = 8
"""A shard's file pool must hold a segment's two files, plus room for rollovers."""


def _fd_limit() -> int:
    """The hard descriptor limit every shard raises itself to (`shard_main`)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY else hard


def default_open_files_max() -> int:
    """A quarter of the fd limit (capped at 10,000) for segment files, node-wide:
    the rest stays for connections, channels and the runtime."""
    return max(64, min(10_000, _fd_limit() // 4))


def default_max_partitions() -> int:
    """Two and a half partitions per descriptor of the fd limit (capped at 100,000):
    with the file pool an idle partition holds no descriptor, only memory
    (about 10 KiB open), so the fd limit no longer bounds partitions; 50,000
    at the usual limit of 20,000."""
    return max(100, min(100_000, _fd_limit() * 5 // 2))


RUNTIMES: Final = ("auto", "uring", "asyncio")
DEFAULT_STAGING_BYTES_MAX: Final = 1 << 30
DEFAULT_STAGING_TIMEOUT_S: Final = 600.0
DEFAULT_DECISION_RETENTION_S: Final = 7 * 24 * 3600.0
DEFAULT_PUBLISH_CHUNK_BYTES: Final = 16 << 20

Runtime = Literal["auto", "uring", "asyncio"]


class ConfigError(ValueError):
    """A setting is invalid; the message says which and what is allowed."""


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything a node and its shards need to know at start-up."""

    cores: int
    data_dir: str
    """Absolute path; created if missing."""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    shard_port_base: int | None = None
    """Shard `i` listens on `shard_port_base + i`; None: `port + 1` (ephemeral if port is 0)."""
    admin_port: int | None = None
    """None: `port + 2000` (ephemeral if port is 0)."""
    runtime: Runtime = "auto"
    routing: str = "auto"
    xdp: str = "auto"
    udp_max_bytes: int = UDP_MTU_PAYLOAD_BYTES
    """Largest request or answer datagram on the node port; bigger ones get USE_TCP.
    The default keeps datagrams within an Ethernet MTU (no IP fragments, which XDP
    cannot check) and bounds what a forged datagram can reflect."""
    udp_writes: bool = False
    """Serve produce and topic changes over UDP too. Off by default: a datagram's
    source address can be forged, so UDP serves reads only (ping, fetch without
    long-poll, list offsets, metadata, list topics)."""
    allow_oversubscribe: bool = False
    """Allow more shards than cores (they share cores); for tests and benchmarks."""
    flush: FlushPolicy = "always"
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    """A connection with no request in flight and no complete frame for this long is closed."""
    first_request_timeout_s: float = DEFAULT_FIRST_REQUEST_TIMEOUT_S
    """The idle timeout of a connection that has not sent one whole request yet:
    idle connections cannot hold the connection cap for `idle_timeout_s`."""
    staging_bytes_max: int = DEFAULT_STAGING_BYTES_MAX
    """Bytes of staged (uncommitted) atomic writes one shard holds at most."""
    staging_timeout_s: float = DEFAULT_STAGING_TIMEOUT_S
    """Staged data idle this long (and not claimed by a commit) expires."""
    decision_retention_s: float = DEFAULT_DECISION_RETENTION_S
    """How long commit decisions are remembered (a commit sent again within it is
    answered, not published again)."""
    publish_chunk_bytes: int = DEFAULT_PUBLISH_CHUNK_BYTES
    """A commit appends a partition's records in log appends of at most this size."""
    frame_timeout_s: float = DEFAULT_FRAME_TIMEOUT_S
    """A connection that takes longer than this from a frame's first byte to its last is closed."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Client connections per shard; past it a new connection is told
    TOO_MANY_CONNECTIONS and closed before anything is read."""
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    """Client connections per shard from one peer address (loopback included);
    past it a new one is refused like one past `max_connections`."""
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    """Per shard: bytes held for clients over all connections, requests buffered
    or in flight and answers reserved or queued (`laminar.shards.budget`)."""
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    """The longest a fetch long-polls, whatever it asks for."""
    max_topics: int = DEFAULT_MAX_TOPICS
    """Topics the node holds at most (each is in every metadata answer)."""
    max_partitions: int = field(default_factory=default_max_partitions)
    """Partition replicas the node holds at most; a create past it is refused."""
    max_topic_partitions: int = DEFAULT_MAX_TOPIC_PARTITIONS
    """Partitions one topic may have."""
    open_files_max: int = field(default_factory=default_open_files_max)
    """Segment files the node keeps open at once, split evenly over its shards
    (`laminar.log.filepool`): idle ones are closed and reopened on use."""
    retention_check_interval_s: float = DEFAULT_RETENTION_CHECK_INTERVAL_S
    """How often each shard applies its topics' retention (`laminar.shards.retention`)."""
    admin_host: str = DEFAULT_HOST
    """Address of the admin HTTP endpoint (loopback unless asked: /status and
    /metrics describe the node to whoever can reach them)."""
    log_level: str = "INFO"
    node_id: str = ""
    """Stable identity of the node, kept in `<data-dir>/node_id`; filled in by the supervisor."""
    peers: str = ""
    """The other nodes of a static cluster, `ID=HOST:PORT[@WEIGHT],...` (their node
    ports); empty: a single node. `laminar.replication.members.parse_peers` reads it."""
    join: tuple[str, ...] = ()
    """Membership addresses (HOST:PORT) of members to join through; needs a secret."""
    weight: float = 1.0
    """This node's capacity weight in replica placement, gossiped to every member."""
    cluster_secret_file: str = ""
    """The file holding the cluster secret that authenticates node-to-node connections
    and membership traffic (`laminar.node.membership`); empty: membership is off,
    and a node with --peers needs `insecure_peers`."""
    insecure_peers: bool = False
    """Let a --peers node run without a secret (loopback only): any local process
    can then claim any node id, so it is logged as a warning and shown in status."""
    membership_port: int | None = None
    """Membership's own UDP port; None: the node port when eBPF steering carries
    membership there, else node port + 1000 (ephemeral with port 0)."""
    move_bytes_per_s: int = 64 << 20
    """What a shard's leaders send the learners of moves, in bytes per second
    (0: no limit)."""
    dead_grace_s: float = 30.0
    """How long a dead member keeps its place before its partitions move."""
    metadata_voters: int = 7
    """How many members vote on the cluster metadata (the top ones by weighted
    rendezvous); every other member observes it as a learner. The same on
    every node (whichever leads the metadata group places it)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Settings added by plug-ins (e.g. `laminar.xdp`), passed through to shards untouched."""

    def __post_init__(self) -> None:
        cpus = os.cpu_count() or 1
        if self.cores < 1 or (self.cores > cpus and not self.allow_oversubscribe):
            raise ConfigError(
                f"--cores {self.cores} is not possible here: this machine has {cpus} "
                f"core{'s' if cpus != 1 else ''}; use 1..{cpus} "
                "(or --allow-oversubscribe to run more shards than cores)"
            )
        for name in ("port", "shard_port_base", "admin_port", "membership_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ConfigError(f"--{name.replace('_', '-')} must be in 0..65535, got {value}")
        if self.shard_port_base and self.shard_port_base + self.cores - 1 > 65535:
            raise ConfigError(
                f"--shard-port-base {self.shard_port_base} leaves no room for {self.cores} shards"
            )
        if self.routing not in ROUTING_MODES:
            raise ConfigError(f"--routing must be one of {', '.join(ROUTING_MODES)}")
        if self.xdp not in XDP_MODES:
            raise ConfigError(f"--xdp must be one of {', '.join(XDP_MODES)}")
        if not MIN_FRAME_BYTES <= self.udp_max_bytes <= UDP_PAYLOAD_BYTES_MAX:
            raise ConfigError(
                f"--udp-max-bytes must be in {MIN_FRAME_BYTES}..{UDP_PAYLOAD_BYTES_MAX}, "
                f"got {self.udp_max_bytes}"
            )
        if self.runtime not in RUNTIMES:
            raise ConfigError(f"--runtime must be one of {', '.join(RUNTIMES)}")
        if self.flush not in FLUSH_POLICIES:
            raise ConfigError(f"--flush must be one of {', '.join(FLUSH_POLICIES)}")
        if self.segment_bytes < 4096:
            raise ConfigError(f"--segment-bytes must be at least 4096, got {self.segment_bytes}")
        if self.max_frame_bytes < MIN_FRAME_BYTES:
            raise ConfigError(f"--max-frame-bytes must be at least {MIN_FRAME_BYTES}")
        if not self.idle_timeout_s > 0:
            raise ConfigError(f"--idle-timeout must be positive, got {self.idle_timeout_s}")
        if not self.first_request_timeout_s > 0:
            raise ConfigError(
                f"--first-request-timeout must be positive, got {self.first_request_timeout_s}"
            )
        if self.staging_bytes_max < 1 << 16:
            raise ConfigError(
                f"--staging-bytes-max must be at least 64KiB, got {self.staging_bytes_max}"
            )
        if not self.staging_timeout_s > 0:
            raise ConfigError(f"--staging-timeout must be positive, got {self.staging_timeout_s}")
        if not self.decision_retention_s > 0:
            raise ConfigError(
                f"--decision-retention must be positive, got {self.decision_retention_s}"
            )
        if self.publish_chunk_bytes < 4096:
            raise ConfigError(
                f"--publish-chunk-bytes must be at least 4096, got {self.publish_chunk_bytes}"
            )
        if not self.retention_check_interval_s > 0:
            raise ConfigError(
                "--retention-check-interval must be positive, "
                f"got {self.retention_check_interval_s}"
            )
        if not self.frame_timeout_s > 0:
            raise ConfigError(f"--frame-timeout must be positive, got {self.frame_timeout_s}")
        if self.max_topics > MAX_TOPICS_CEILING:
            raise ConfigError(
                f"--max-topics must be at most {MAX_TOPICS_CEILING} (every topic is in every "
                f"metadata answer), got {self.max_topics}"
            )
        for name, low in (
            ("max_connections", 1),
            ("max_connections_per_address", 1),
            ("max_input_bytes", 1 << 20),
            ("max_wait_ms", 0),
            ("max_topics", 1),
            ("max_partitions", 1),
            ("max_topic_partitions", 1),
            ("open_files_max", OPEN_FILES_PER_SHARD_MIN * self.cores),
        ):
            value = getattr(self, name)
            if value < low:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least {low}, got {value}")
        if self.max_topic_partitions > MAX_PARTITIONS:
            raise ConfigError(
                f"--max-topic-partitions must be at most {MAX_PARTITIONS}, "
                f"got {self.max_topic_partitions}"
            )
        if self.max_input_bytes < 2 * self.max_frame_bytes:
            raise ConfigError(
                f"--max-input-bytes ({self.max_input_bytes}) must hold two frames of "
                f"--max-frame-bytes ({self.max_frame_bytes})"
            )
        if self.move_bytes_per_s < 0:
            raise ConfigError(f"--move-rate must be >= 0 bytes/s, got {self.move_bytes_per_s}")
        if self.metadata_voters not in (1, 3, 5, 7):
            raise ConfigError(f"--metadata-voters must be 1, 3, 5 or 7, got {self.metadata_voters}")
        if not 0 <= self.dead_grace_s <= 86_400:
            raise ConfigError(f"--dead-grace must be 0..86400 seconds, got {self.dead_grace_s}")
        if not (isinstance(self.weight, int | float) and 0 < self.weight <= 1e9):
            raise ConfigError(f"--weight must be a number in (0, 1e9], got {self.weight}")
        for address in self.join:
            host, sep, port = address.rpartition(":")
            if not (sep and host and port.isdigit() and 0 < int(port) <= 65535):
                raise ConfigError(f"--join wants HOST:PORT addresses, got {address!r}")
        if not os.path.isabs(self.data_dir):
            raise ConfigError(f"data_dir must be absolute, got {self.data_dir!r}")
        self._check_cluster()

    def _check_cluster(self) -> None:
        try:
            peers = parse_peers(self.peers)
            if self.node_id:
                check_node_id(self.node_id)
        except ValueError as exc:
            raise ConfigError(f"--peers / --node-id: {exc}") from None
        if not peers:
            return
        if not self.node_id:
            raise ConfigError("a node with --peers needs --node-id (the id its peers know it by)")
        if self.node_id in {p.node_id for p in peers}:
            raise ConfigError(f"--peers names this node's own id {self.node_id!r}")
        if self.flush != "always":
            raise ConfigError(
                "replication acknowledges a write once a majority has it on disk: "
                "a node with --peers needs --flush always"
            )
        if self.cluster_secret_file:
            return
        exposed = [a for a in (self.host, *(p.host for p in peers)) if not _is_loopback(a)]
        if exposed:
            raise ConfigError(
                f"{exposed[0]} is not a loopback address: node-to-node traffic there must be "
                "authenticated; give every node the same --cluster-secret-file"
            )
        if not self.insecure_peers:
            raise ConfigError(
                "a node with --peers needs --cluster-secret-file (the same on every node; "
                "make one with `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`): "
                "without it any local process can claim to be a peer and rewrite the "
                "cluster's logs. --insecure-peers runs without one (loopback only)"
            )

    @property
    def peer_auth(self) -> str:
        """How peers authenticate: "node-keys", "insecure" (--insecure-peers) or
        "" (a single node)."""
        if self.cluster_secret_file:
            return "node-keys"
        return "insecure" if self.peers.strip() else ""

    @property
    def clustered(self) -> bool:
        """True when the node has peers or runs membership (its partitions
        are Raft groups; a node with a secret and no --join is a seed)."""
        return bool(self.peers.strip()) or self.gossiped

    @property
    def gossiped(self) -> bool:
        """True when the cluster's members come from SWIM, not from --peers."""
        return bool(self.cluster_secret_file) and not self.peers.strip()

    # -- derived settings ------------------------------------------------------

    def shard_port(self, shard_id: int) -> int:
        """The port shard `shard_id` listens on alone (0: ephemeral)."""
        if self.shard_port_base is not None:
            return self.shard_port_base + shard_id if self.shard_port_base else 0
        return self.port + 1 + shard_id if self.port else 0

    @property
    def admin_port_resolved(self) -> int:
        """The admin port to bind (0: ephemeral)."""
        if self.admin_port is not None:
            return self.admin_port
        return self.port + ADMIN_PORT_OFFSET if self.port else 0

    def log_config(self, *, pipelined: bool) -> LogConfig:
        """The settings of every partition log. `pipelined` (io_uring) keeps several
        group-commit flushes in flight, which is where that backend gains."""
        return LogConfig(
            segment_bytes=self.segment_bytes,
            flush=self.flush,
            preallocate_bytes=min(4 << 20, self.segment_bytes),
            max_flushes_in_flight=4 if pipelined else 2,
        )

    @property
    def topic_limits(self) -> TopicLimits:
        return TopicLimits(self.max_topics, self.max_partitions, self.max_topic_partitions)

    @property
    def open_files_per_shard(self) -> int:
        """Each shard's share of `open_files_max`."""
        return self.open_files_max // self.cores

    @property
    def run_dir(self) -> str:
        """Where the node keeps its runtime files: node.json, the channel sockets."""
        return os.path.join(self.data_dir, "run")

    @property
    def partitions_dir(self) -> str:
        return os.path.join(self.data_dir, "partitions")

    @property
    def publish_append_bytes(self) -> int:
        """The largest append a publish makes: the chunk size, within a segment."""
        return min(self.publish_chunk_bytes, self.segment_bytes)

    @property
    def staging_dir(self) -> str:
        """Staged data of atomic writes, per partition (`laminar.writes`)."""
        return os.path.join(self.data_dir, "staging")

    @property
    def decisions_dir(self) -> str:
        """The commit decision logs, per coordinator bucket."""
        return os.path.join(self.data_dir, "writes")

    def with_updates(self, **changes: Any) -> NodeConfig:
        return replace(self, **changes)

    # -- passing to shard processes --------------------------------------------

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeConfig:
        data = json.loads(text)
        data["join"] = tuple(data.get("join", ()))
        return cls(**data)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
