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

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Literal

from laminar.log import LogConfig
from laminar.log.config import FLUSH_POLICIES, FlushPolicy
from laminar.wire import DEFAULT_MAX_FRAME_BYTES, MIN_FRAME_BYTES

DEFAULT_PORT: Final = 7070
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_DATA_DIR: Final = "laminar-data"
ADMIN_PORT_OFFSET: Final = 2000
DEFAULT_SEGMENT_BYTES: Final = 64 << 20
DEFAULT_IDLE_TIMEOUT_S: Final = 300.0
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
DEFAULT_MAX_INPUT_BYTES: Final = 256 << 20
DEFAULT_FRAME_TIMEOUT_S: Final = 30.0
DEFAULT_MAX_WAIT_MS: Final = 60_000
DEFAULT_MAX_TOPICS: Final = 10_000
DEFAULT_RETENTION_CHECK_INTERVAL_S: Final = 60.0
RUNTIMES: Final = ("auto", "uring", "asyncio")

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
    frame_timeout_s: float = DEFAULT_FRAME_TIMEOUT_S
    """A connection that takes longer than this from a frame's first byte to its last is closed."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Client connections per shard; past it a new connection is told
    TOO_MANY_CONNECTIONS and closed before anything is read."""
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    """Per shard: request bytes buffered or in flight over all connections
    (`laminar.shards.budget`)."""
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    """The longest a fetch long-polls, whatever it asks for."""
    max_topics: int = DEFAULT_MAX_TOPICS
    """Topics the node holds at most (each is in every metadata answer)."""
    retention_check_interval_s: float = DEFAULT_RETENTION_CHECK_INTERVAL_S
    """How often each shard applies its topics' retention (`laminar.shards.retention`)."""
    admin_host: str = DEFAULT_HOST
    """Address of the admin HTTP endpoint (loopback unless asked: /status and
    /metrics describe the node to whoever can reach them)."""
    log_level: str = "INFO"
    node_id: str = ""
    """Stable identity of the node, kept in `<data-dir>/node_id`; filled in by the supervisor."""
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
        for name in ("port", "shard_port_base", "admin_port"):
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
        if not self.retention_check_interval_s > 0:
            raise ConfigError(
                "--retention-check-interval must be positive, "
                f"got {self.retention_check_interval_s}"
            )
        if not self.frame_timeout_s > 0:
            raise ConfigError(f"--frame-timeout must be positive, got {self.frame_timeout_s}")
        for name, low in (
            ("max_connections", 1),
            ("max_input_bytes", 1 << 20),
            ("max_wait_ms", 0),
            ("max_topics", 1),
        ):
            value = getattr(self, name)
            if value < low:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least {low}, got {value}")
        if self.max_input_bytes < 2 * self.max_frame_bytes:
            raise ConfigError(
                f"--max-input-bytes ({self.max_input_bytes}) must hold two frames of "
                f"--max-frame-bytes ({self.max_frame_bytes})"
            )
        if not os.path.isabs(self.data_dir):
            raise ConfigError(f"data_dir must be absolute, got {self.data_dir!r}")

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
    def run_dir(self) -> str:
        """Where the node keeps its runtime files: node.json, the channel sockets."""
        return os.path.join(self.data_dir, "run")

    @property
    def partitions_dir(self) -> str:
        return os.path.join(self.data_dir, "partitions")

    def with_updates(self, **changes: Any) -> NodeConfig:
        return replace(self, **changes)

    # -- passing to shard processes --------------------------------------------

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeConfig:
        return cls(**json.loads(text))
