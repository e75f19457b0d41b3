"""The node's settings: one frozen `NodeConfig`, parsed once by the supervisor.

`NodeConfig` is the settings table: each field a flag sets declares, once, its
flag, help, default and range checks (`metadata=setting(...)`, vocabulary in
`laminar.shards.settings`). `laminar-node` builds its parser from these fields
and `__post_init__` runs the same checks, then `_RULES`, the short list of
rules that relate two settings. Fields are keyword-only and listed in the
order `laminar-node --help` shows them.

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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Literal

from laminar.groups.positions import GROUP_PARTITIONS_DEFAULT
from laminar.log import LogConfig
from laminar.log.config import FLUSH_POLICIES, FlushPolicy
from laminar.replication.metadata import MAX_PARTITIONS, TopicLimits
from laminar.replication.nodes import check_node_id, parse_peers
from laminar.security.principal import PrincipalError, check_acl_principal
from laminar.shards.settings import (
    absolute_path,
    at_least,
    at_most,
    between,
    host_ports,
    one_of,
    parse_size,
    positive,
    setting,
    settings_of,
)
from laminar.wire import DEFAULT_MAX_FRAME_BYTES, MIN_FRAME_BYTES

DEFAULT_PORT: Final = 7070
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_DATA_DIR: Final = "laminar-data"
ADMIN_PORT_OFFSET: Final = 2000
KAFKA_PORT_OFFSET: Final = 2022
"""The Kafka listener's default is `port + 2022`: 9092, Kafka's own, for port 7070."""
ROUTING_MODES: Final = ("auto", "ebpf", "cbpf", "userspace")
"""`--routing` choices (`laminar.xdp.routing.REQUESTED_MODES`, kept here so the
config does not import the BPF layer)."""
UDP_OFF: Final = "off"
"""The routing mode a node with TLS or logins reports: it serves no UDP
(`laminar.node.steering`, `NodeConfig.udp_off_reason`)."""
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
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: Final = 512
"""Half a shard's default cap: one address (loopback included) cannot take them
all, and the tests and benchmarks, which open at most a few hundred
connections per shard from 127.0.0.1, stay under it."""
MAX_TOPICS_CEILING: Final = 20_000
"""Every topic is in every metadata answer and in one metadata snapshot entry
(up to ~400 bytes a topic): this keeps both a few MiB."""
OPEN_FILES_PER_SHARD_MIN: Final = 8
"""A shard's file pool must hold a segment's two files, plus room for rollovers."""
RUNTIMES: Final = ("auto", "uring", "asyncio")
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
PORT: Final = between(0, 65535)
"""The range of every port setting (0: ephemeral)."""


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


def _absolute_or_empty(path: str) -> str:
    """--cluster-secret-file: absolute, so shards read the file the supervisor meant."""
    return os.path.abspath(path) if path else ""


def _addresses(text: str) -> tuple[str, ...]:
    """--join: "HOST:PORT,..." -> its addresses."""
    return tuple(a.strip() for a in text.split(",") if a.strip())


Runtime = Literal["auto", "uring", "asyncio"]
AUTH_MODES: Final = ("none", "scram")


class ConfigError(ValueError):
    """A setting is invalid; the message says which and what is allowed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Everything a node and its shards need to know at start-up."""

    cores: int = field(
        metadata=setting(
            "--cores", "shard processes, one per core", flag_default=os.cpu_count() or 1
        )
    )
    allow_oversubscribe: bool = field(
        default=False,
        metadata=setting(
            "--allow-oversubscribe",
            "allow --cores above this machine's core count (shards share cores; for tests)",
        ),
    )
    """Allow more shards than cores (they share cores); for tests and benchmarks."""
    data_dir: str = field(
        metadata=setting(
            "--data-dir",
            "where partitions live",
            checks=(absolute_path,),
            parse=os.path.abspath,
            flag_default=DEFAULT_DATA_DIR,
        )
    )
    """Absolute path; created if missing."""
    host: str = field(
        default=DEFAULT_HOST,
        metadata=setting(
            "--host",
            "address of the node and shard ports; nothing is authenticated yet, so "
            "anything but loopback lets whoever reaches it produce, consume and change topics "
            "(README: Security)",
        ),
    )
    port: int = field(
        default=DEFAULT_PORT,
        metadata=setting("--port", "node port, TCP and UDP (0: ephemeral)", checks=(PORT,)),
    )
    shard_port_base: int | None = field(
        default=None,
        metadata=setting(
            "--shard-port-base",
            "shard i listens on BASE+i (default: port+1; ephemeral if --port 0)",
            checks=(PORT,),
        ),
    )
    """Shard `i` listens on `shard_port_base + i`; None: `port + 1` (ephemeral if port is 0)."""
    admin_port: int | None = field(
        default=None,
        metadata=setting(
            "--admin-port",
            "HTTP /health /metrics /status (default: port+2000; ephemeral if --port 0)",
            checks=(PORT,),
        ),
    )
    """None: `port + 2000` (ephemeral if port is 0)."""
    kafka_port: int | None = field(
        default=None,
        metadata=setting(
            "--kafka-port",
            "Kafka protocol listener: shard i on PORT+i, shard 0's is the bootstrap "
            "(default: port+2022, 9092; ephemeral if --port 0 or past 65535; 0 turns it off)",
            checks=(PORT,),
        ),
    )
    """None: `port + 2022` (ephemeral if port is 0); 0: no Kafka listener."""
    admin_host: str = field(
        default=DEFAULT_HOST,
        metadata=setting(
            "--admin-host",
            "address of the admin endpoint (loopback unless you mean to expose it)",
        ),
    )
    """Address of the admin HTTP endpoint (loopback unless asked: /status and
    /metrics describe the node to whoever can reach them)."""
    runtime: Runtime = field(
        default="auto", metadata=setting("--runtime", "event loop", choices=RUNTIMES)
    )
    routing: str = field(
        default="auto",
        metadata=setting(
            "--routing",
            "node-port UDP steering: auto tries ebpf (needs CAP_BPF), then cbpf, then "
            "userspace (shards forward); a forced mode that cannot load stops start-up",
            choices=ROUTING_MODES,
        ),
    )
    xdp: str = field(
        default="auto",
        metadata=setting(
            "--xdp",
            "auto: attach the XDP classifier to the --host interface in native mode when "
            "routing is ebpf (the start-up log says why not otherwise); native/generic: that "
            "mode only (generic works on any interface, lo included, but slows all its "
            "traffic); off: never",
            choices=XDP_MODES,
        ),
    )
    udp_max_bytes: int = field(
        default=UDP_MTU_PAYLOAD_BYTES,
        metadata=setting(
            "--udp-max-bytes",
            "largest request or answer datagram on the node port (bigger: use TCP); the "
            "default fits one Ethernet frame, which bounds what a forged request can reflect",
            checks=(between(MIN_FRAME_BYTES, UDP_PAYLOAD_BYTES_MAX),),
            parse=parse_size,
        ),
    )
    """Largest request or answer datagram on the node port; bigger ones get USE_TCP.
    The default keeps datagrams within an Ethernet MTU (no IP fragments, which XDP
    cannot check) and bounds what a forged datagram can reflect."""
    udp_writes: bool = field(
        default=False,
        metadata=setting(
            "--udp-writes",
            "also serve produce and topic changes over UDP (off: a datagram's source can "
            "be forged, so UDP serves reads only)",
        ),
    )
    """Serve produce and topic changes over UDP too. Off by default: a datagram's
    source address can be forged, so UDP serves reads only (ping, fetch without
    long-poll, list offsets, metadata, list topics)."""
    flush: FlushPolicy = field(
        default="always",
        metadata=setting("--flush", "when appends are made durable", choices=FLUSH_POLICIES),
    )
    segment_bytes: int = field(
        default=64 << 20,
        metadata=setting(
            "--segment-bytes",
            "segment size of partition logs (e.g. 64MiB); a topic may set its own (segment.bytes)",
            checks=(at_least(4096),),
            parse=parse_size,
        ),
    )
    retention_check_interval_s: float = field(
        default=60.0,
        metadata=setting(
            "--retention-check-interval",
            "seconds between retention passes (topic configs retention.ms, "
            "retention.bytes, segment.ms)",
            checks=(positive(),),
        ),
    )
    """How often each shard applies its topics' retention (`laminar.shards.retention`)."""
    max_frame_bytes: int = field(
        default=DEFAULT_MAX_FRAME_BYTES,
        metadata=setting(
            "--max-frame-bytes",
            "largest request frame accepted",
            checks=(at_least(MIN_FRAME_BYTES),),
            parse=parse_size,
        ),
    )
    idle_timeout_s: float = field(
        default=300.0,
        metadata=setting(
            "--idle-timeout",
            "seconds before an idle (or stalled mid-frame) connection is closed",
            checks=(positive(),),
        ),
    )
    """A connection with no request in flight and no complete frame for this long is closed."""
    first_request_timeout_s: float = field(
        default=10.0,
        metadata=setting(
            "--first-request-timeout",
            "seconds before an idle connection that has not sent one whole request is closed",
            checks=(positive(),),
        ),
    )
    """The idle timeout of a connection that has not sent one whole request yet:
    idle connections cannot hold the connection cap for `idle_timeout_s`."""
    staging_bytes_max: int = field(
        default=1 << 30,
        metadata=setting(
            "--staging-bytes-max",
            "staged (uncommitted) atomic-write bytes one shard holds at most (e.g. 1GiB)",
            checks=(at_least(1 << 16, shown="64KiB"),),
            parse=parse_size,
        ),
    )
    """Bytes of staged (uncommitted) atomic writes one shard holds at most."""
    staging_timeout_s: float = field(
        default=600.0,
        metadata=setting(
            "--staging-timeout",
            "seconds after which idle staged data no commit claims expires",
            checks=(positive(),),
        ),
    )
    """Staged data idle this long (and not claimed by a commit) expires."""
    decision_retention_s: float = field(
        default=7 * 24 * 3600.0,
        metadata=setting(
            "--decision-retention",
            "seconds commit decisions are remembered (retried commits are answered, "
            "not published again)",
            checks=(positive(),),
        ),
    )
    """How long commit decisions are remembered (a commit sent again within it is
    answered, not published again)."""
    publish_chunk_bytes: int = field(
        default=16 << 20,
        metadata=setting(
            "--publish-chunk-bytes",
            "a commit appends each partition's records in appends of at most this size",
            checks=(at_least(4096),),
            parse=parse_size,
        ),
    )
    """A commit appends a partition's records in log appends of at most this size."""
    frame_timeout_s: float = field(
        default=30.0,
        metadata=setting(
            "--frame-timeout",
            "seconds a client may take from a frame's first byte to its last",
            checks=(positive(),),
        ),
    )
    """A connection that takes longer than this from a frame's first byte to its last is closed."""
    max_connections: int = field(
        default=1024,
        metadata=setting(
            "--max-connections",
            "client connections per shard (more are refused with TOO_MANY_CONNECTIONS)",
            checks=(at_least(1),),
        ),
    )
    """Client connections per shard; past it a new connection is told
    TOO_MANY_CONNECTIONS and closed before anything is read."""
    max_connections_per_address: int = field(
        default=DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
        metadata=setting(
            "--max-connections-per-address",
            "client connections per shard from one address, loopback included (more are "
            "refused with TOO_MANY_CONNECTIONS)",
            checks=(at_least(1),),
        ),
    )
    """Client connections per shard from one peer address (loopback included);
    past it a new one is refused like one past `max_connections`."""
    max_input_bytes: int = field(
        default=256 << 20,
        metadata=setting(
            "--max-input-bytes",
            "per shard: bytes held for clients (requests buffered or in flight, answers "
            "reserved or queued) over all connections",
            checks=(at_least(1 << 20),),
            parse=parse_size,
        ),
    )
    """Per shard: bytes held for clients over all connections, requests buffered
    or in flight and answers reserved or queued (`laminar.shards.budget`)."""
    max_wait_ms: int = field(
        default=60_000,
        metadata=setting(
            "--max-wait-ms",
            "the longest a fetch long-polls, whatever it asks for",
            checks=(at_least(0),),
        ),
    )
    max_topics: int = field(
        default=10_000,
        metadata=setting(
            "--max-topics",
            "topics the node holds at most",
            checks=(
                at_least(1),
                at_most(MAX_TOPICS_CEILING, why="every topic is in every metadata answer"),
            ),
        ),
    )
    """Topics the node holds at most (each is in every metadata answer)."""
    max_partitions: int = field(
        default_factory=default_max_partitions,
        metadata=setting(
            "--max-partitions",
            "partition replicas the node holds at most; a topic create past it is refused "
            "(the default is 2.5 per descriptor of the fd limit)",
            checks=(at_least(1),),
        ),
    )
    """Partition replicas the node holds at most; a create past it is refused."""
    max_topic_partitions: int = field(
        default=16_384,
        metadata=setting(
            "--max-topic-partitions",
            "partitions one topic may have",
            checks=(at_least(1), at_most(MAX_PARTITIONS)),
        ),
    )
    group_partitions: int = field(
        default=GROUP_PARTITIONS_DEFAULT,
        metadata=setting(
            "--group-partitions",
            "partitions of the consumer groups' positions topic, made on the first "
            "group's use (a group's coordinator is one partition's leader)",
            checks=(at_least(1), at_most(1024)),
        ),
    )
    open_files_max: int = field(
        default_factory=default_open_files_max,
        metadata=setting(
            "--max-open-files",
            "segment files the node keeps open at once, split over its shards; idle ones "
            "are closed and reopened on use (the default is a quarter of the fd limit)",
        ),
    )
    """Segment files the node keeps open at once, split evenly over its shards
    (`laminar.log.filepool`): idle ones are closed and reopened on use; at least
    `OPEN_FILES_PER_SHARD_MIN` per shard (`_file_pool_fits_every_shard`)."""
    node_id: str = field(
        default="",
        metadata=setting(
            "--node-id",
            "this node's id (kept in DATA_DIR/node_id; required with --peers, and must "
            "match what the data dir holds; default: made up once)",
        ),
    )
    """Stable identity of the node, kept in `<data-dir>/node_id`; filled in by the supervisor."""
    peers: str = field(
        default="",
        metadata=setting(
            "--peers",
            "the other nodes of a static cluster: ID=HOST:PORT[@WEIGHT],... (their node "
            "ports); every partition is then a Raft group on its topic's replication factor "
            "of them",
        ),
    )
    """The other nodes of a static cluster, `ID=HOST:PORT[@WEIGHT],...` (their node
    ports); empty: a single node. `laminar.replication.nodes.parse_peers` reads it."""
    cluster_secret_file: str = field(
        default="",
        metadata=setting(
            "--cluster-secret-file",
            "file with the cluster secret (chmod 600, at least 16 bytes, the same on every "
            "node): authenticates every node-to-node connection and membership datagram "
            "(with TLS between nodes, certificates do); turns membership on; required "
            "with --join or --gossip, and with --peers, unless TLS",
            parse=_absolute_or_empty,
        ),
    )
    """The file holding the cluster secret that authenticates node-to-node connections
    and membership traffic (`laminar.node.gossip`); empty: membership is off,
    and a node with --peers needs `insecure_peers`."""
    insecure_peers: bool = field(
        default=False,
        metadata=setting(
            "--insecure-peers",
            "let a --peers node run without --cluster-secret-file, on loopback only: any "
            "local process can then claim to be a peer and rewrite or erase the cluster's "
            "logs (logged as a warning, shown in laminar status); for throwaway experiments",
        ),
    )
    """Let a --peers node run without a secret (loopback only): any local process
    can then claim any node id, so it is logged as a warning and shown in status."""
    join: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            "--join",
            "join the cluster through any of these members' membership addresses "
            "(needs --cluster-secret-file, or TLS between nodes)",
            checks=(host_ports,),
            parse=_addresses,
            metavar="HOST:PORT,...",
            flag_default="",
        ),
    )
    """Membership addresses (HOST:PORT) of members to join through; needs a secret
    or TLS between nodes (the rule `_membership_is_authenticated`)."""
    gossip: bool = field(
        default=False,
        metadata=setting(
            "--gossip",
            "run membership without --join: the first node of a cluster others --join "
            "(implied by --cluster-secret-file without --peers); needs "
            "--cluster-secret-file, or TLS between nodes",
        ),
    )
    """Run membership though no member is named to join (the seed of a gossip
    cluster); a secret without --peers implies it."""
    weight: float = field(
        default=1.0,
        metadata=setting(
            "--weight",
            "this node's capacity weight in placement",
            checks=(positive(1e9),),
        ),
    )
    """This node's capacity weight in replica placement, gossiped to every member."""
    move_bytes_per_s: int = field(
        default=64 << 20,
        metadata=setting(
            "--move-rate",
            "bytes per second a shard's leaders copy to new replicas when partitions "
            "move (0: no limit; default 64 MiB/s)",
            checks=(at_least(0, shown="0 bytes/s"),),
            metavar="BYTES_PER_S",
        ),
    )
    """What a shard's leaders send the learners of moves, in bytes per second
    (0: no limit)."""
    dead_grace_s: float = field(
        default=30.0,
        metadata=setting(
            "--dead-grace",
            "how long a dead member keeps its partitions before they move to the "
            "others (a node that restarts within it catches up instead of being copied)",
            checks=(between(0, 86_400),),
            metavar="SECONDS",
        ),
    )
    """How long a dead member keeps its place before its partitions move."""
    metadata_voters: int = field(
        default=7,
        metadata=setting(
            "--metadata-voters",
            "members that vote on the cluster metadata (1, 3, 5 or 7; the same on every "
            "node): the top N by weighted rendezvous; the others observe it (default 7)",
            checks=(one_of((1, 3, 5, 7)),),
            metavar="N",
        ),
    )
    """How many members vote on the cluster metadata (the top ones by weighted
    rendezvous); every other member observes it as a learner. The same on
    every node (whichever leads the metadata group places it)."""
    membership_port: int | None = field(
        default=None,
        metadata=setting(
            "--membership-port",
            "UDP port for membership (default: the node port under ebpf routing, "
            "else port+1000; ephemeral if --port 0)",
            checks=(PORT,),
        ),
    )
    """Membership's own UDP port; None: the node port when eBPF steering carries
    membership there, else node port + 1000 (ephemeral with port 0)."""
    tls_cert_file: str = field(
        default="",
        metadata=setting(
            "--tls-cert-file",
            "PEM certificate chain of the node: with --tls-key-file, every client-facing "
            "port (node, shard and Kafka ports, admin endpoint) speaks TLS 1.2+ only, UDP is "
            "off; SIGHUP reloads the files (README: TLS)",
            parse=_absolute_or_empty,
        ),
    )
    """The node's certificate chain (PEM); with `tls_key_file`, TLS on every client port."""
    tls_key_file: str = field(
        default="",
        metadata=setting(
            "--tls-key-file", "PEM private key of --tls-cert-file", parse=_absolute_or_empty
        ),
    )
    tls_ca_file: str = field(
        default="",
        metadata=setting(
            "--tls-ca-file",
            "PEM CA certificates: a client certificate shown is verified against them; "
            "required with peers, whose links are then mutual TLS: every node's certificate "
            "is signed by them and names its node (URI laminar-node:NODE_ID)",
            parse=_absolute_or_empty,
        ),
    )
    """CAs that sign client certificates and, with peers, every node's certificate
    (peer links are then mutual TLS, `laminar.replication.auth`)."""
    auth: str = field(
        default="none",
        metadata=setting(
            "--auth",
            "how clients log in: none, or scram (SASL/SCRAM-SHA-256 and -512 on both doors, "
            "users in the cluster metadata); with scram every request needs a logged-in "
            "principal the ACLs allow",
            choices=AUTH_MODES,
        ),
    )
    """"none" (anyone who reaches a port may do anything) or "scram"."""
    bootstrap_user_file: str = field(
        default="",
        metadata=setting(
            "--bootstrap-user-file",
            "owner-only file holding NAME:PASSWORD: that user is created once, as a "
            "superuser, when the cluster has no user of that name (with --auth scram)",
            parse=_absolute_or_empty,
        ),
    )
    """The first user's file: created as a superuser if the cluster lacks it."""
    superusers: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            "--superusers",
            "principals allowed everything whatever the ACLs say (User:NAME,...), "
            "beside the users created as superusers",
            parse=_addresses,
            metavar="User:NAME,...",
            flag_default="",
        ),
    )
    insecure: bool = field(
        default=False,
        metadata=setting(
            "--insecure",
            "let a node whose --host is not loopback serve without TLS and client "
            "authentication: whoever reaches its ports may read, write and delete "
            "every topic (logged as a warning at every start)",
        ),
    )
    log_level: str = field(
        default="INFO",
        metadata=setting("--log-level", "what the node logs", choices=LOG_LEVELS, parse=str.upper),
    )
    extra: dict[str, Any] = field(default_factory=dict)
    """Settings added by plug-ins (e.g. `laminar.xdp`), passed through to shards untouched."""

    def __post_init__(self) -> None:
        """Refuse a config that a setting's checks or a cross-setting rule rejects."""
        for f, s in settings_of(NodeConfig):
            if complaint := s.complaint(getattr(self, f.name)):
                raise ConfigError(complaint)
        for rule in _RULES:
            if complaint := rule(self):
                raise ConfigError(complaint)

    @property
    def peer_auth(self) -> str:
        """How peers authenticate: "certificates" (TLS with peers), "node-keys",
        "insecure" (--insecure-peers) or "" (a single node)."""
        if self.tls and self.clustered:
            return "certificates"
        if self.cluster_secret_file:
            return "node-keys"
        return "insecure" if self.peers.strip() else ""

    @property
    def tls(self) -> bool:
        """True when the client-facing ports speak TLS."""
        return bool(self.tls_cert_file)

    @property
    def udp_off_reason(self) -> str | None:
        """Why the node serves no UDP (None: it does): a datagram can carry
        neither TLS nor a login."""
        if self.tls:
            return "TLS is on (a datagram cannot carry TLS)"
        if self.authenticated:
            return "logins are on (--auth: a datagram cannot carry one)"
        return None

    @property
    def authenticated(self) -> bool:
        """True when clients must log in (and every request is authorized)."""
        return self.auth != "none"

    @property
    def clustered(self) -> bool:
        """True when the node has peers or runs membership (its partitions
        are Raft groups; a node with a secret and no --join is a seed)."""
        return bool(self.peers.strip()) or self.gossiped

    @property
    def gossiped(self) -> bool:
        """True when the cluster's members come from SWIM, not from --peers."""
        return self.membership and not self.peers.strip()

    @property
    def membership(self) -> bool:
        """True when the node runs SWIM (`laminar.node.gossip`): a secret
        (with --peers too), --join or --gossip."""
        return bool(self.cluster_secret_file or self.join or self.gossip)

    @property
    def gossip_signed(self) -> bool:
        """True when membership datagrams are signed by each node's certificate
        (`laminar.swim.signing`), not tagged with the cluster secret."""
        return self.peer_auth == "certificates" and self.membership

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

    def kafka_shard_port(self, shard_id: int) -> int | None:
        """The Kafka port of shard `shard_id` (0: ephemeral; None: the door is off)."""
        if self.kafka_port == 0:
            return None
        if self.kafka_port is None:
            base = self.port + KAFKA_PORT_OFFSET
            # ephemeral when the default would run past the last port
            return base + shard_id if self.port and base + self.cores <= 65536 else 0
        return self.kafka_port + shard_id

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
        for key in ("join", "superusers"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)


# -- rules that relate two settings ------------------------------------------------
# Each returns what is wrong, naming the flags, or None; `__post_init__` runs them
# in this order after every setting passed its own checks (so the rules after
# `_peers_parse` may parse --peers again without guarding).


def _cores_fit_this_machine(c: NodeConfig) -> str | None:
    cpus = os.cpu_count() or 1
    if c.cores >= 1 and (c.cores <= cpus or c.allow_oversubscribe):
        return None
    return (
        f"--cores {c.cores} is not possible here: this machine has {cpus} "
        f"core{'s' if cpus != 1 else ''}; use 1..{cpus} "
        "(or --allow-oversubscribe to run more shards than cores)"
    )


def _shard_ports_fit(c: NodeConfig) -> str | None:
    kafka_last = c.kafka_shard_port(c.cores - 1)
    if kafka_last is not None and kafka_last > 65535:
        return f"--kafka-port leaves no room for {c.cores} shards (shard i listens on PORT+i)"
    if c.shard_port_base and c.shard_port_base + c.cores - 1 > 65535:
        return f"--shard-port-base {c.shard_port_base} leaves no room for {c.cores} shards"
    return None


def _file_pool_fits_every_shard(c: NodeConfig) -> str | None:
    wrong = at_least(OPEN_FILES_PER_SHARD_MIN * c.cores)(c.open_files_max)
    return f"--max-open-files {wrong}" if wrong else None


def _input_holds_two_frames(c: NodeConfig) -> str | None:
    if c.max_input_bytes >= 2 * c.max_frame_bytes:
        return None
    return (
        f"--max-input-bytes ({c.max_input_bytes}) must hold two frames of "
        f"--max-frame-bytes ({c.max_frame_bytes})"
    )


def _peers_parse(c: NodeConfig) -> str | None:
    try:
        parse_peers(c.peers)
        if c.node_id:
            check_node_id(c.node_id)
    except ValueError as exc:
        return f"--peers / --node-id: {exc}"
    return None


def _peers_know_this_node(c: NodeConfig) -> str | None:
    peers = parse_peers(c.peers)
    if peers and not c.node_id:
        return "a node with --peers needs --node-id (the id its peers know it by)"
    if c.node_id in {p.node_id for p in peers}:
        return f"--peers names this node's own id {c.node_id!r}"
    return None


def _replicas_flush_always(c: NodeConfig) -> str | None:
    if parse_peers(c.peers) and c.flush != "always":
        return (
            "replication acknowledges a write once a majority has it on disk: "
            "a node with --peers needs --flush always"
        )
    return None


def _peers_are_authenticated(c: NodeConfig) -> str | None:
    peers = parse_peers(c.peers)
    if not peers or c.cluster_secret_file or c.tls:  # certificates: `_tls_peers_show_...`
        return None
    exposed = [a for a in (c.host, *(p.host for p in peers)) if not _is_loopback(a)]
    if exposed:
        return (
            f"{exposed[0]} is not a loopback address: node-to-node traffic there must be "
            "authenticated; give every node the same --cluster-secret-file"
        )
    if not c.insecure_peers:
        return (
            "a node with --peers needs --cluster-secret-file (the same on every node; "
            "make one with `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`): "
            "without it any local process can claim to be a peer and rewrite the "
            "cluster's logs. --insecure-peers runs without one (loopback only)"
        )
    return None


def _tls_files_pair(c: NodeConfig) -> str | None:
    if bool(c.tls_cert_file) != bool(c.tls_key_file):
        return "--tls-cert-file and --tls-key-file go together"
    if c.tls_ca_file and not c.tls_cert_file:
        return "--tls-ca-file needs --tls-cert-file and --tls-key-file"
    return None


def _no_udp_no_steering(c: NodeConfig) -> str | None:
    if c.udp_off_reason is None:
        return None
    if c.routing != "auto":
        return f"--routing {c.routing} steers UDP; the node serves none: {c.udp_off_reason}"
    if c.xdp not in ("auto", "off"):
        return f"--xdp {c.xdp} classifies UDP; the node serves none: {c.udp_off_reason}"
    return None


def _membership_is_authenticated(c: NodeConfig) -> str | None:
    if not c.membership or c.cluster_secret_file or c.tls:  # certificates sign it
        return None
    flag = "--join" if c.join else "--gossip"
    return (
        f"{flag} runs membership, whose datagrams must be authenticated: give every node "
        "the same --cluster-secret-file, or TLS between nodes (--tls-cert-file, "
        "--tls-key-file, --tls-ca-file: each node signs its datagrams with its certificate)"
    )


def _tls_peers_show_certificates(c: NodeConfig) -> str | None:
    if not c.tls or c.tls_ca_file or not (c.peers.strip() or c.membership):
        return None
    return (
        "with TLS, peers prove who they are by certificate: give --tls-ca-file, the CA "
        "that signed every node's certificate (each naming its node as the subjectAltName "
        "URI laminar-node:NODE_ID; README: TLS between nodes)"
    )


def _auth_settings(c: NodeConfig) -> str | None:
    if c.bootstrap_user_file and not c.authenticated:
        return "--bootstrap-user-file needs --auth scram"
    for principal in c.superusers:
        try:
            check_acl_principal(principal)
        except PrincipalError as exc:
            return f"--superusers: {exc}"
    if c.superusers and not c.authenticated:
        return "--superusers needs --auth scram"
    return None


def _exposed_needs_security(c: NodeConfig) -> str | None:
    if _is_loopback(c.host) or c.insecure or (c.tls and c.authenticated):
        return None
    missing = " and ".join(
        what
        for what, given in (
            ("TLS (--tls-cert-file, --tls-key-file)", c.tls),
            ("client authentication (--auth scram)", c.authenticated),
        )
        if not given
    )
    return (
        f"--host {c.host} is not a loopback address: a node facing a network needs "
        f"{missing}, or whoever reaches its ports may read, write and delete every "
        "topic. --insecure runs it without (logged at every start; README: Security)"
    )


_RULES: Final[tuple[Callable[[NodeConfig], str | None], ...]] = (
    _cores_fit_this_machine,
    _shard_ports_fit,
    _file_pool_fits_every_shard,
    _input_holds_two_frames,
    _peers_parse,
    _peers_know_this_node,
    _replicas_flush_always,
    _peers_are_authenticated,
    _tls_files_pair,
    _no_udp_no_steering,
    _membership_is_authenticated,
    _tls_peers_show_certificates,
    _auth_settings,
    _exposed_needs_security,
)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
