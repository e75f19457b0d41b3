"""Prometheus text exposition of the node: a pure function of shard snapshots.

The supervisor asks every live shard for `ShardMetrics.snapshot()` (plus the
shard's own fields, see `Shard.stats`) and renders them here, one sample per
shard (label `shard`). Format: text exposition 0.0.4, every family with
`# HELP` and `# TYPE`, counters ending in `_total`, units last
(`_seconds`, `_bytes`). Latencies are summaries (quantiles from the shard's
log-scale histogram, plus `_sum` and `_count`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class ShardSample:
    """What the supervisor knows about one shard at scrape time."""

    shard_id: int
    up: bool
    restarts: int
    stats: Mapping[str, Any] | None
    """None when the shard is down or did not answer in time."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, object]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _number(value: float) -> str:
    if value != value:  # NaN
        return "NaN"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: Mapping[str, object], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# (snapshot key, metric name, type, help)
_SCALARS: tuple[tuple[str, str, str, str], ...] = (
    ("bytes_in", "laminar_received_bytes_total", "counter", "Bytes received."),
    ("bytes_out", "laminar_sent_bytes_total", "counter", "Bytes of responses sent."),
    ("records_in", "laminar_records_produced_total", "counter", "Records appended."),
    ("records_out", "laminar_records_fetched_total", "counter", "Records returned by fetches."),
    ("forwarded_out", "laminar_forwarded_out_total", "counter",
     "Requests this shard received for another shard's partition and forwarded."),
    ("forwarded_in", "laminar_forwarded_in_total", "counter",
     "Requests another shard forwarded to this one."),
    ("forward_failures", "laminar_forward_failures_total", "counter",
     "Forwarded requests that got no answer from the owning shard."),
    ("connections_total", "laminar_connections_accepted_total", "counter", "Connections accepted."),
    ("connections_open", "laminar_connections_open", "gauge", "Connections open now."),
    ("connections_closed_idle", "laminar_connections_closed_idle_total", "counter",
     "Connections closed for being idle (or stalled mid-frame) past the idle timeout."),
    ("connections_closed_slow", "laminar_connections_closed_slow_total", "counter",
     "Connections closed for taking longer than the frame timeout to send one frame."),
    ("connections_shed", "laminar_connections_shed_total", "counter",
     "Connections closed holding more than a fair share of the input budget while "
     "another waited for its share."),
    ("connections_refused", "laminar_connections_refused_total", "counter",
     "Client connections refused at the per-shard connection cap or per-address limit."),
    ("connections_refused_address", "laminar_connections_refused_address_total", "counter",
     "Client connections refused at the per-address limit (--max-connections-per-address)."),
    ("client_connections", "laminar_client_connections", "gauge", "Client connections open now."),
    ("channel_refused", "laminar_channel_connections_refused_total", "counter",
     "Connections to a shard's inter-shard channel refused: the peer was not a shard."),
    ("handshakes", "laminar_peer_handshakes", "gauge",
     "Peer handshakes under way (counted as client connections until they end)."),
    ("handshakes_refused", "laminar_peer_handshakes_refused_total", "counter",
     "Peer handshakes refused: too many under way on the shard."),
    ("tls_refused", "laminar_tls_refused_total", "counter",
     "Client connections closed for a failed TLS handshake or a broken TLS stream."),
    ("retention_segments_deleted", "laminar_retention_deleted_segments_total", "counter",
     "Segments removed by retention (topic configs retention.ms and retention.bytes)."),
    ("retention_bytes_deleted", "laminar_retention_deleted_bytes_total", "counter",
     "Record bytes removed by retention."),
    ("input_bytes", "laminar_input_bytes", "gauge",
     "Bytes clients make the shard hold now (requests buffered or in flight, answers "
     "reserved or queued), against its budget."),
    ("input_bytes_peak", "laminar_input_bytes_peak", "gauge",
     "The most bytes clients made the shard hold at once since it started."),
    ("input_bytes_limit", "laminar_input_bytes_limit", "gauge",
     "The shard's budget for request and answer bytes it holds (--max-input-bytes)."),
    ("answer_bytes", "laminar_answer_bytes", "gauge",
     "Answer bytes reserved (fetches in flight) or queued and not yet written, part of "
     "input_bytes."),
    ("protocol_errors", "laminar_protocol_errors_total", "counter",
     "Connections or datagrams dropped for undecodable framing."),
    ("datagrams_in", "laminar_datagrams_received_total", "counter", "UDP datagrams received."),
    ("datagrams_dropped", "laminar_datagrams_dropped_total", "counter",
     "UDP datagrams dropped by the shard as not laminar frames (no answer sent)."),
    ("flushes", "laminar_flushes_total", "counter", "Group-commit flushes of partition logs."),
    ("core", "laminar_shard_core", "gauge", "The CPU core the shard process is pinned to."),
    ("partitions_owned", "laminar_partitions_owned", "gauge",
     "Partitions this shard owns by placement."),
    ("partitions_open", "laminar_partitions_open", "gauge", "Partition logs open now."),
    ("segment_files_open", "laminar_segment_files_open", "gauge",
     "Segment files the shard holds open now (its file pool)."),
    ("segment_files_open_max", "laminar_segment_files_open_max", "gauge",
     "The shard's budget of open segment files (its share of --max-open-files)."),
    ("segment_files_open_peak", "laminar_segment_files_open_peak", "gauge",
     "The most segment files the shard has held open at once."),
    ("segment_file_reopens", "laminar_segment_file_reopens_total", "counter",
     "Segment files opened again after the pool closed them."),
    ("segment_file_evictions", "laminar_segment_file_evictions_total", "counter",
     "Idle segment files the pool closed to stay within its budget."),
    ("segment_file_eviction_syncs", "laminar_segment_file_eviction_syncs_total", "counter",
     "Evictions that synced the file first (it held unsynced writes)."),
    ("raft_groups", "laminar_raft_groups", "gauge", "Raft groups this shard runs a member of."),
    ("raft_groups_active", "laminar_raft_groups_active", "gauge",
     "Raft groups ticked each tick (not quiesced): new or busy ones."),
    ("metadata_applied_index", "laminar_metadata_applied_index", "gauge",
     "Entries of the metadata log applied by this shard."),
    # Atomic writes (laminar.writes).
    ("staged_bytes", "laminar_staged_bytes", "gauge",
     "Bytes of staged, uncommitted atomic writes on this shard."),
    ("staged_bytes_max", "laminar_staged_bytes_max", "gauge",
     "The bound on staged bytes per shard (--staging-bytes-max)."),
    ("staged_attempts", "laminar_staged_attempts", "gauge",
     "Task attempts with staged data on this shard's partitions."),
    ("staged_batches_total", "laminar_staged_batches_total", "counter", "Batches staged."),
    ("staged_bytes_total", "laminar_staged_bytes_total", "counter", "Bytes staged."),
    ("staging_refused_full_total", "laminar_staging_refused_full_total", "counter",
     "Batches refused because the staging area was full."),
    ("staged_expired_total", "laminar_staged_expired_total", "counter",
     "Task attempts whose staged data expired (never committed)."),
    ("staged_expired_bytes_total", "laminar_staged_expired_bytes_total", "counter",
     "Bytes of staged data that expired."),
    ("staged_dropped_total", "laminar_staged_dropped_total", "counter",
     "Task attempts whose staged data a finished or aborted commit dropped."),
    ("publishes_total", "laminar_publishes_total", "counter",
     "Partition publishes of committed writes."),
    ("publishes_resumed_total", "laminar_publishes_resumed_total", "counter",
     "Publishes resumed after a crash (chunks found in the log were not appended again)."),
    ("published_records_total", "laminar_published_records_total", "counter",
     "Records appended by publishes of committed writes."),
    ("writes_committed_total", "laminar_writes_committed_total", "counter",
     "Commit decisions made by this shard's coordinator buckets."),
    ("writes_aborted_total", "laminar_writes_aborted_total", "counter",
     "Abort decisions made by this shard's coordinator buckets."),
    ("writes_rolled_forward_total", "laminar_writes_rolled_forward_total", "counter",
     "Committed writes this shard finished publishing on its own (after a crash or failure)."),
    ("writes_pending", "laminar_writes_pending", "gauge",
     "Committed writes not yet published everywhere."),
)  # fmt: skip


def _summary(w: _Writer, name: str, labels: dict[str, object], snap: Mapping[str, float]) -> None:
    for key, value in snap.items():
        if key in ("count", "sum", "max"):
            continue
        w.sample(name, {**labels, "quantile": key}, value)
    w.sample(f"{name}_sum", labels, snap.get("sum", 0.0))
    w.sample(f"{name}_count", labels, snap.get("count", 0.0))


def render_family(
    name: str,
    kind: str,
    help_text: str,
    samples: Iterable[tuple[Mapping[str, object], float]],
) -> str:
    """One metric family as an exposition block, for plug-ins' `extra` blocks."""
    w = _Writer()
    w.family(name, kind, help_text)
    for labels, value in samples:
        w.sample(name, labels, value)
    return w.text()


def render(
    node: Mapping[str, Any], shards: Iterable[ShardSample], extra: Iterable[str] = ()
) -> str:
    """The /metrics page. `node` holds node_id, routing_mode, runtime, cores;
    `extra` are exposition blocks from plug-ins (e.g. XDP counters)."""
    shards = list(shards)
    live = [(s.shard_id, s.stats) for s in shards if s.stats is not None]
    w = _Writer()
    w.family("laminar_node_info", "gauge", "The node's identity and modes (always 1).")
    w.sample(
        "laminar_node_info",
        {
            "node_id": node.get("node_id", ""),
            "runtime": node.get("runtime", ""),
            "routing_mode": node.get("routing_mode", ""),
            "peer_auth": node.get("peer_auth", ""),
        },
        1,
    )
    w.family("laminar_routing_mode", "gauge", "1 for the active request routing mode.")
    w.sample("laminar_routing_mode", {"mode": node.get("routing_mode", "")}, 1)
    w.family("laminar_shards", "gauge", "Shard processes configured (--cores).")
    w.sample("laminar_shards", {}, len(shards))
    w.family("laminar_shard_up", "gauge", "1 if the shard process is running and ready.")
    for s in shards:
        w.sample("laminar_shard_up", {"shard": s.shard_id}, 1 if s.up else 0)
    w.family("laminar_shard_restarts_total", "counter", "Times the shard was restarted.")
    for s in shards:
        w.sample("laminar_shard_restarts_total", {"shard": s.shard_id}, s.restarts)

    w.family("laminar_requests_total", "counter", "Requests served, by op.")
    for shard_id, stats in live:
        for op, n in sorted(stats.get("requests", {}).items()):
            w.sample("laminar_requests_total", {"shard": shard_id, "op": op}, n)
    w.family("laminar_request_errors_total", "counter", "Error responses sent, by code.")
    for shard_id, stats in live:
        for code, n in sorted(stats.get("errors", {}).items()):
            w.sample("laminar_request_errors_total", {"shard": shard_id, "code": code}, n)
    w.family("laminar_auth_failures_total", "counter", "Client logins refused, by reason.")
    for shard_id, stats in live:
        for reason, n in sorted(stats.get("auth_failures", {}).items()):
            w.sample("laminar_auth_failures_total", {"shard": shard_id, "reason": reason}, n)
    w.family(
        "laminar_peer_refused_total",
        "counter",
        "What peers sent that no correct node sends, by reason (laminar.replication.refusals).",
    )
    for shard_id, stats in live:
        for reason, n in sorted(stats.get("peer_refused", {}).items()):
            w.sample("laminar_peer_refused_total", {"shard": shard_id, "reason": reason}, n)
    w.family("laminar_request_latency_seconds", "summary", "Time to serve a request, by op.")
    for shard_id, stats in live:
        for op, snap in sorted(stats.get("latency", {}).items()):
            _summary(w, "laminar_request_latency_seconds", {"shard": shard_id, "op": op}, snap)
    w.family(
        "laminar_fsync_latency_seconds",
        "summary",
        "Durable write (write linked to fdatasync) and sync latency of partition logs.",
    )
    for shard_id, stats in live:
        if "fsync" in stats:
            _summary(w, "laminar_fsync_latency_seconds", {"shard": shard_id}, stats["fsync"])

    for key, name, kind, help_text in _SCALARS:
        w.family(name, kind, help_text)
        for shard_id, stats in live:
            if key in stats:
                w.sample(name, {"shard": shard_id}, stats[key])

    w.family(
        "laminar_partition_offline",
        "gauge",
        "1 for each partition its shard cannot serve now (the reason is a label).",
    )
    for shard_id, stats in live:
        for part in stats.get("partitions_offline", ()):
            labels = {
                "shard": shard_id,
                "topic_id": part["topic_id"],
                "partition": part["partition"],
                "reason": part["reason"],
            }
            w.sample("laminar_partition_offline", labels, 1)

    _moves(w, live)
    _group_lag(w, live)

    w.family(
        "laminar_task_queue_runtime_seconds_total",
        "counter",
        "CPU time spent in each task queue of the shard's event loop.",
    )
    for shard_id, stats in live:
        for queue, qs in sorted(stats.get("task_queues", {}).items()):
            w.sample(
                "laminar_task_queue_runtime_seconds_total",
                {"shard": shard_id, "queue": queue},
                qs.get("runtime_s", 0.0),
            )
    text = w.text()
    for block in extra:
        text += block if block.endswith("\n") else block + "\n"
    return text


def _group_lag(w: _Writer, live: list[tuple[int, Mapping[str, Any]]]) -> None:
    """Consumer group lag, from the shards coordinating the groups
    (`laminar.groups.lag`: refreshed every 5 s, at most 1,000 series a shard)."""
    w.family(
        "laminar_group_lag_records",
        "gauge",
        "Records of a partition after its consumer group's committed position "
        "(reported by the node coordinating the group).",
    )
    for _, stats in live:
        for group, topic, partition, lag in (stats.get("group_lag") or {}).get("series", ()):
            w.sample(
                "laminar_group_lag_records",
                {"group": group, "topic": topic, "partition": partition},
                lag,
            )
    w.family(
        "laminar_group_lag_series_dropped",
        "gauge",
        "Group partitions left out of laminar_group_lag_records (past 1,000 a shard).",
    )
    for shard_id, stats in live:
        dropped = (stats.get("group_lag") or {}).get("dropped", 0)
        w.sample("laminar_group_lag_series_dropped", {"shard": shard_id}, dropped)


def _moves(w: _Writer, live: list[tuple[int, Mapping[str, Any]]]) -> None:
    """Partition moves (`laminar.replication.placer`) each shard drives as leader."""
    w.family(
        "laminar_partition_moving",
        "gauge",
        "Records a moving partition's new replica (a learner) still lacks, per "
        "partition whose leader is this shard.",
    )
    for shard_id, stats in live:
        for move in (stats.get("moves") or {}).get("moving", ()):
            labels = {
                "shard": shard_id,
                "topic_id": move["pid"] >> 32,
                "partition": move["pid"] & 0xFFFF_FFFF,
                "learner": move["learner"],
            }
            w.sample("laminar_partition_moving", labels, move["records_to_go"])
    w.family(
        "laminar_move_bytes_total",
        "counter",
        "Bytes this shard's leaders sent to the new replicas of moving partitions.",
    )
    w.family(
        "laminar_move_steps_total",
        "counter",
        "Placement steps (add learner, promote, transfer, remove) started, and refused by Raft.",
    )
    for shard_id, stats in live:
        moves = stats.get("moves")
        if moves:
            w.sample("laminar_move_bytes_total", {"shard": shard_id}, moves["bytes_sent"])
            for outcome in ("started", "refused"):
                labels = {"shard": shard_id, "outcome": outcome}
                w.sample("laminar_move_steps_total", labels, moves[f"steps_{outcome}"])
    w.family(
        "laminar_decommission_replicas",
        "gauge",
        "For each decommissioned node, the groups this shard leads that it is still in "
        "(summed over every node: what is left to move off it; 0 everywhere: done).",
    )
    for shard_id, stats in live:
        left = (stats.get("moves") or {}).get("decommissioning", {})
        for node, count in sorted(left.items()):
            w.sample("laminar_decommission_replicas", {"shard": shard_id, "node": node}, count)
