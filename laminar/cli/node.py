"""`laminar-node`: run a laminar node (a supervisor and one shard per core).

With no flags it runs a single-node cluster on loopback port 7070 with one
shard per core and its data in ./laminar-data. See `laminar-node --help`.
Exit codes: 0 after a clean drain (SIGTERM, SIGINT), 2 for a bad flag or a
fatal start-up problem (port in use, data dir unusable, a forced --routing
mode that cannot load here), 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys

from laminar.log.config import FLUSH_POLICIES
from laminar.shards.config import (
    DEFAULT_DATA_DIR,
    DEFAULT_DECISION_RETENTION_S,
    DEFAULT_FIRST_REQUEST_TIMEOUT_S,
    DEFAULT_FRAME_TIMEOUT_S,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_MAX_INPUT_BYTES,
    DEFAULT_MAX_TOPIC_PARTITIONS,
    DEFAULT_MAX_TOPICS,
    DEFAULT_MAX_WAIT_MS,
    DEFAULT_PORT,
    DEFAULT_PUBLISH_CHUNK_BYTES,
    DEFAULT_RETENTION_CHECK_INTERVAL_S,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_STAGING_BYTES_MAX,
    DEFAULT_STAGING_TIMEOUT_S,
    ROUTING_MODES,
    RUNTIMES,
    UDP_MTU_PAYLOAD_BYTES,
    XDP_MODES,
    ConfigError,
    NodeConfig,
    default_max_partitions,
    default_open_files_max,
)
from laminar.wire import DEFAULT_MAX_FRAME_BYTES

_SIZE_RE = re.compile(r"(\d+)\s*([kmgt]?)(i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from "1048576", "64MiB", "64m", "1g" (binary units)."""
    match = _SIZE_RE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 67108864, 64MiB, 1g)")
    return int(match[1]) * _UNITS[match[2].lower()]


def build_parser() -> argparse.ArgumentParser:
    cpus = os.cpu_count() or 1
    p = argparse.ArgumentParser(
        prog="laminar-node",
        description="Run a laminar node: one pinned shard process per core.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--cores", type=int, default=cpus, help="shard processes, one per core")
    p.add_argument(
        "--allow-oversubscribe",
        action="store_true",
        help="allow --cores above this machine's core count (shards share cores; for tests)",
    )
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where partitions live")
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help="address of the node and shard ports; nothing is authenticated yet, so "
        "anything but loopback lets whoever reaches it produce, consume and change topics "
        "(README: Security)",
    )
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="node port, TCP and UDP (0: ephemeral)"
    )
    p.add_argument(
        "--shard-port-base",
        type=int,
        default=None,
        help="shard i listens on BASE+i (default: port+1; ephemeral if --port 0)",
    )
    p.add_argument(
        "--admin-port",
        type=int,
        default=None,
        help="HTTP /health /metrics /status (default: port+2000; ephemeral if --port 0)",
    )
    p.add_argument(
        "--admin-host",
        default=DEFAULT_HOST,
        help="address of the admin endpoint (loopback unless you mean to expose it)",
    )
    p.add_argument("--runtime", choices=RUNTIMES, default="auto", help="event loop")
    p.add_argument(
        "--routing",
        choices=ROUTING_MODES,
        default="auto",
        help="node-port UDP steering: auto tries ebpf (needs CAP_BPF), then cbpf, then "
        "userspace (shards forward); a forced mode that cannot load stops start-up",
    )
    p.add_argument(
        "--xdp",
        choices=XDP_MODES,
        default="auto",
        help="auto: attach the XDP classifier to the --host interface in native mode when "
        "routing is ebpf (the start-up log says why not otherwise); native/generic: that "
        "mode only (generic works on any interface, lo included, but slows all its "
        "traffic); off: never",
    )
    p.add_argument(
        "--udp-max-bytes",
        type=parse_size,
        default=UDP_MTU_PAYLOAD_BYTES,
        help="largest request or answer datagram on the node port (bigger: use TCP); the "
        "default fits one Ethernet frame, which bounds what a forged request can reflect",
    )
    p.add_argument(
        "--udp-writes",
        action="store_true",
        help="also serve produce and topic changes over UDP (off: a datagram's source can "
        "be forged, so UDP serves reads only)",
    )
    p.add_argument(
        "--flush", choices=FLUSH_POLICIES, default="always", help="when appends are made durable"
    )
    p.add_argument(
        "--segment-bytes",
        type=parse_size,
        default=DEFAULT_SEGMENT_BYTES,
        help="segment size of partition logs (e.g. 64MiB); a topic may set its own (segment.bytes)",
    )
    p.add_argument(
        "--retention-check-interval",
        type=float,
        default=DEFAULT_RETENTION_CHECK_INTERVAL_S,
        help="seconds between retention passes (topic configs retention.ms, "
        "retention.bytes, segment.ms)",
    )
    p.add_argument(
        "--max-frame-bytes",
        type=parse_size,
        default=DEFAULT_MAX_FRAME_BYTES,
        help="largest request frame accepted",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="seconds before an idle (or stalled mid-frame) connection is closed",
    )
    p.add_argument(
        "--first-request-timeout",
        type=float,
        default=DEFAULT_FIRST_REQUEST_TIMEOUT_S,
        help="seconds before an idle connection that has not sent one whole request is closed",
    )
    p.add_argument(
        "--staging-bytes-max",
        type=parse_size,
        default=DEFAULT_STAGING_BYTES_MAX,
        help="staged (uncommitted) atomic-write bytes one shard holds at most (e.g. 1GiB)",
    )
    p.add_argument(
        "--staging-timeout",
        type=float,
        default=DEFAULT_STAGING_TIMEOUT_S,
        help="seconds after which idle staged data no commit claims expires",
    )
    p.add_argument(
        "--decision-retention",
        type=float,
        default=DEFAULT_DECISION_RETENTION_S,
        help="seconds commit decisions are remembered (retried commits are answered, "
        "not published again)",
    )
    p.add_argument(
        "--publish-chunk-bytes",
        type=parse_size,
        default=DEFAULT_PUBLISH_CHUNK_BYTES,
        help="a commit appends each partition's records in appends of at most this size",
    )
    p.add_argument(
        "--frame-timeout",
        type=float,
        default=DEFAULT_FRAME_TIMEOUT_S,
        help="seconds a client may take from a frame's first byte to its last",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="client connections per shard (more are refused with TOO_MANY_CONNECTIONS)",
    )
    p.add_argument(
        "--max-connections-per-address",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
        help="client connections per shard from one address, loopback included (more are "
        "refused with TOO_MANY_CONNECTIONS)",
    )
    p.add_argument(
        "--max-input-bytes",
        type=parse_size,
        default=DEFAULT_MAX_INPUT_BYTES,
        help="per shard: bytes held for clients (requests buffered or in flight, answers "
        "reserved or queued) over all connections",
    )
    p.add_argument(
        "--max-wait-ms",
        type=int,
        default=DEFAULT_MAX_WAIT_MS,
        help="the longest a fetch long-polls, whatever it asks for",
    )
    p.add_argument(
        "--max-topics", type=int, default=DEFAULT_MAX_TOPICS, help="topics the node holds at most"
    )
    p.add_argument(
        "--max-partitions",
        type=int,
        default=default_max_partitions(),
        help="partition replicas the node holds at most; a topic create past it is refused "
        "(the default is 2.5 per descriptor of the fd limit)",
    )
    p.add_argument(
        "--max-topic-partitions",
        type=int,
        default=DEFAULT_MAX_TOPIC_PARTITIONS,
        help="partitions one topic may have",
    )
    p.add_argument(
        "--max-open-files",
        type=int,
        default=default_open_files_max(),
        help="segment files the node keeps open at once, split over its shards; idle ones "
        "are closed and reopened on use (the default is a quarter of the fd limit)",
    )
    p.add_argument(
        "--node-id",
        default="",
        help="this node's id (kept in DATA_DIR/node_id; required with --peers, and must "
        "match what the data dir holds; default: made up once)",
    )
    p.add_argument(
        "--peers",
        default="",
        help="the other nodes of a static cluster: ID=HOST:PORT[@WEIGHT],... (their node "
        "ports); every partition is then a Raft group on its topic's replication factor "
        "of them",
    )
    p.add_argument(
        "--cluster-secret-file",
        default="",
        help="file with the cluster secret (chmod 600, at least 16 bytes, the same on every "
        "node): authenticates every node-to-node connection and membership datagram; "
        "turns membership on; required with --peers and --join",
    )
    p.add_argument(
        "--insecure-peers",
        action="store_true",
        help="let a --peers node run without --cluster-secret-file, on loopback only: any "
        "local process can then claim to be a peer and rewrite or erase the cluster's logs "
        "(logged as a warning, shown in laminar status); for throwaway experiments",
    )
    p.add_argument(
        "--join",
        default="",
        metavar="HOST:PORT,...",
        help="join the cluster through any of these members' membership addresses "
        "(needs --cluster-secret-file)",
    )
    p.add_argument(
        "--weight", type=float, default=1.0, help="this node's capacity weight in placement"
    )
    p.add_argument(
        "--move-rate",
        type=int,
        default=64 << 20,
        metavar="BYTES_PER_S",
        help="bytes per second a shard's leaders copy to new replicas when partitions "
        "move (0: no limit; default 64 MiB/s)",
    )
    p.add_argument(
        "--dead-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a dead member keeps its partitions before they move to the "
        "others (a node that restarts within it catches up instead of being copied)",
    )
    p.add_argument(
        "--metadata-voters",
        type=int,
        default=7,
        metavar="N",
        help="members that vote on the cluster metadata (1, 3, 5 or 7; the same on every "
        "node): the top N by weighted rendezvous; the others observe it (default 7)",
    )
    p.add_argument(
        "--membership-port",
        type=int,
        default=None,
        help="UDP port for membership (default: the node port under ebpf routing, "
        "else port+1000; ephemeral if --port 0)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        type=str.upper,
    )
    return p


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    return NodeConfig(
        cores=args.cores,
        data_dir=os.path.abspath(args.data_dir),
        host=args.host,
        port=args.port,
        shard_port_base=args.shard_port_base,
        admin_port=args.admin_port,
        runtime=args.runtime,
        routing=args.routing,
        xdp=args.xdp,
        udp_max_bytes=args.udp_max_bytes,
        allow_oversubscribe=args.allow_oversubscribe,
        flush=args.flush,
        segment_bytes=args.segment_bytes,
        max_frame_bytes=args.max_frame_bytes,
        idle_timeout_s=args.idle_timeout,
        first_request_timeout_s=args.first_request_timeout,
        staging_bytes_max=args.staging_bytes_max,
        staging_timeout_s=args.staging_timeout,
        decision_retention_s=args.decision_retention,
        publish_chunk_bytes=args.publish_chunk_bytes,
        frame_timeout_s=args.frame_timeout,
        max_connections=args.max_connections,
        max_connections_per_address=args.max_connections_per_address,
        max_input_bytes=args.max_input_bytes,
        max_wait_ms=args.max_wait_ms,
        max_topics=args.max_topics,
        max_partitions=args.max_partitions,
        max_topic_partitions=args.max_topic_partitions,
        open_files_max=args.max_open_files,
        retention_check_interval_s=args.retention_check_interval,
        admin_host=args.admin_host,
        udp_writes=args.udp_writes,
        log_level=args.log_level,
        node_id=args.node_id,
        peers=args.peers,
        cluster_secret_file=(
            os.path.abspath(args.cluster_secret_file) if args.cluster_secret_file else ""
        ),
        insecure_peers=args.insecure_peers,
        join=tuple(a.strip() for a in args.join.split(",") if a.strip()),
        weight=args.weight,
        membership_port=args.membership_port,
        dead_grace_s=args.dead_grace,
        metadata_voters=args.metadata_voters,
        move_bytes_per_s=args.move_rate,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"laminar-node: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s node %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from laminar.node.supervisor import Supervisor

    return Supervisor(config).run()


if __name__ == "__main__":
    sys.exit(main())
