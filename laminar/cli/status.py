"""`laminar status`: the node, its shards, routing mode, ownership and load.

Everything comes from the wire protocol except the request counters: the
metadata names the node, its shards, their ports and the routing mode; a ping
to each shard's own port shows it answers (and how fast); the offsets of
every partition, asked for in one pipelined burst, give each shard's
partitions and records. Request and byte counters and each shard's core come
from the node's admin endpoint (`/metrics`, Prometheus text), when it can be
reached: the metadata names its port (`--admin` to say where otherwise).
Without it the table shows "-" for those columns and says so. The same page
gives the kernel's side of routing: what the eBPF steering program did with
the node port's datagrams, and whether the XDP classifier is attached (or why
not) with its packet counts per class. Cluster members (id, membership
address, state, incarnation, weight) come from the admin endpoint's /status,
as the node's membership agent sees them. Decommissioned nodes are listed
(the cluster keeps the decision, also once a node is gone, so a node started
again with that id gets no partition) with whether they still run and the
partitions they still hold (as each partition's leader reports its replicas).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import ssl
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from laminar.cli.common import address
from laminar.cli.decommission import partitions_held
from laminar.cli.output import ENTRIES_NOTE, print_json, ranges, say, table
from laminar.client import Client, LaminarError, RetryPolicy, parse_address
from laminar.client.login import login_options
from laminar.client.results import TopicDescription
from laminar.client.routing import Address, ClusterView, format_address
from laminar.shards.config import UDP_OFF
from laminar.wire import ListOffsetsResponse

ADMIN_PORT_OFFSET = 2000
GROUPS_LAGGED_MAX = 50
"""Groups whose lag `status` counts (the rest are listed without it)."""
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "status",
        parents=[common],
        help="show the node, its shards, routing mode, partition owners and load",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_admin_argument(parser)
    parser.set_defaults(run=status)


def add_admin_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--admin",
        metavar="HOST:PORT",
        type=address,
        help="the node's admin endpoint (default: the bootstrap host and the admin port "
        "the node's metadata names)",
    )


# --- the admin endpoint -------------------------------------------------------------


Sample = tuple[str, dict[str, str], float]


def parse_prometheus(text: str) -> list[Sample]:
    """`(name, labels, value)` for every sample line of Prometheus text format."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels_text, value_text = match.groups()
        try:
            value = float(value_text)
        except ValueError:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(labels_text or "")}
        samples.append((name, labels, value))
    return samples


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


@dataclass
class ShardLoad:
    """What /metrics says about one shard."""

    up: bool | None = None
    restarts: int | None = None
    core: int | None = None
    requests: float = 0.0
    bytes_in: float = 0.0
    bytes_out: float = 0.0
    forwarded: float = 0.0


def shard_loads(samples: list[Sample]) -> dict[int, ShardLoad]:
    """Per-shard figures from the node's /metrics samples labelled `shard="i"`
    (`laminar.node.prometheus` names them): up, restarts, requests by any op,
    bytes received and sent, requests forwarded to their owner, and the core
    the shard is pinned to when the node reports it (a `laminar_shard_core`
    gauge, or a `core` label)."""
    loads: dict[int, ShardLoad] = defaultdict(ShardLoad)
    for name, labels, value in samples:
        shard_text = labels.get("shard")
        if shard_text is None or not shard_text.isdigit():
            continue
        load = loads[int(shard_text)]
        core = labels.get("core")
        if core is not None and core.isdigit():
            load.core = int(core)
        if name == "laminar_shard_core":
            load.core = int(value)
        elif name == "laminar_shard_up":
            load.up = value == 1
        elif name == "laminar_shard_restarts_total":
            load.restarts = int(value)
        elif name == "laminar_requests_total":
            load.requests += value
        elif name == "laminar_received_bytes_total":
            load.bytes_in += value
        elif name == "laminar_sent_bytes_total":
            load.bytes_out += value
        elif name == "laminar_forwarded_out_total":
            load.forwarded += value
    return dict(loads)


_MALFORMED_REASONS = ("short", "bad_magic", "bad_version", "bad_length")


def steering_counts(samples: list[Sample]) -> dict[str, int] | None:
    """The eBPF steering program's counters (None: the node runs another mode)."""
    counts: dict[str, int] = {}
    for name, labels, value in samples:
        if name != "laminar_steering_datagrams_total":
            continue
        key = labels.get("reason") or labels.get("outcome", "")
        counts[key] = counts.get(key, 0) + int(value)
    if not counts:
        return None
    counts["malformed"] = sum(counts.get(r, 0) for r in _MALFORMED_REASONS)
    return counts


def peer_auth(samples: list[Sample]) -> str | None:
    """How the node's peers authenticate ("node-keys", "insecure", "" alone)."""
    for name, labels, _value in samples:
        if name == "laminar_node_info":
            return labels.get("peer_auth", "")
    return None


def xdp_state(samples: list[Sample]) -> dict[str, Any] | None:
    """Whether the XDP classifier is attached (or why not), and its packet counts
    summed over CPUs; None when the node does not report XDP at all."""
    state: dict[str, Any] | None = None
    counts: dict[str, int] = {}
    for name, labels, value in samples:
        if name == "laminar_xdp_attached":
            state = {
                "attached": value == 1,
                "interface": labels.get("interface") or None,
                "mode": labels.get("mode") or None,
                "reason": labels.get("reason", ""),
            }
        elif name == "laminar_xdp_packets_total":
            reason = labels.get("reason")
            key = f"malformed_{reason}" if reason else labels.get("class", "")
            counts[key] = counts.get(key, 0) + int(value)
    if state is None:
        return None
    if counts:
        counts["malformed"] = sum(counts.get(f"malformed_{r}", 0) for r in _MALFORMED_REASONS)
    state["counters"] = counts or None
    return state


def offline_partitions(samples: list[Sample]) -> list[dict[str, Any]]:
    """Partitions the node reports it cannot serve now, with the reason
    (`laminar_partition_offline`)."""
    return [
        {
            "shard": int(labels.get("shard", "-1")),
            "topic_id": int(labels.get("topic_id", "-1")),
            "partition": int(labels.get("partition", "-1")),
            "reason": labels.get("reason", ""),
        }
        for name, labels, value in samples
        if name == "laminar_partition_offline" and value == 1
    ]


def moving_partitions(samples: list[Sample]) -> list[dict[str, Any]]:
    """Partitions moving to a new replica, led by this node, and how many
    records that replica still lacks (`laminar_partition_moving`)."""
    return [
        {
            "shard": int(labels.get("shard", "-1")),
            "topic_id": int(labels.get("topic_id", "-1")),
            "partition": int(labels.get("partition", "-1")),
            "to": labels.get("learner", ""),
            "records_to_go": int(value),
        }
        for name, labels, value in samples
        if name == "laminar_partition_moving"
    ]


def describe_what_answers(client: Client, names: list[str]) -> tuple[list[Any], list[str]]:
    """`describe_topic` of each topic, skipping those that cannot be described
    now (a partition offline), each after the client's retries: (descriptions,
    the names skipped). One topic at a time, so a topic that does not answer
    costs one retry budget, not one per pass."""
    described, skipped = [], []
    for name in names:
        try:
            described += client.describe_topics([name])
        except LaminarError:
            skipped.append(name)
    return described, skipped


def admin_open(
    address: Address,
    path: str,
    timeout_s: float,
    tls: ssl.SSLContext | None,
    request: urllib.request.Request | None = None,
) -> Any:
    """Open `path` on the admin endpoint: over HTTPS with the client's TLS
    context when it has one (the node then serves HTTPS only). With
    `request`, that request (its URL is replaced)."""
    url = f"{'https' if tls else 'http'}://{format_address(address)}{path}"
    if request is not None:
        request.full_url = url
    return urllib.request.urlopen(request or url, timeout=timeout_s, context=tls)


def scrape(
    address: Address, timeout_s: float, tls: ssl.SSLContext | None = None
) -> list[Sample] | None:
    """The node's /metrics samples, or None when the endpoint cannot be read."""
    try:
        with admin_open(address, "/metrics", timeout_s, tls) as response:
            return parse_prometheus(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def fetch_membership(
    address: Address, timeout_s: float, tls: ssl.SSLContext | None = None
) -> tuple[list[dict[str, Any]], str | None] | None:
    """The members the node's membership agent knows ([] when membership is off)
    and how their datagrams are authenticated ("certificates", "cluster-secret",
    None when off), or None when the admin endpoint cannot be read."""
    try:
        with admin_open(address, "/status", timeout_s, tls) as response:
            doc = json.loads(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return [], None
    members = doc.get("members")
    membership = doc.get("membership")
    auth = membership.get("auth") if isinstance(membership, dict) else None
    return (members if isinstance(members, list) else []), auth


# --- gathering ----------------------------------------------------------------------


@dataclass
class ShardStatus:
    shard_id: int
    host: str
    port: int
    ping_ms: float | None = None
    partitions: int = 0
    records: int = 0
    load: ShardLoad | None = None
    owned: dict[str, list[int]] = field(default_factory=dict)


def gather(client: Client, admin: Address, timeout_s: float) -> dict[str, Any]:
    """The whole status as a JSON-ready document."""
    view = client.refresh_metadata_view()
    md = view.metadata
    shards = [ShardStatus(i, *view.shard_addresses[i]) for i in range(view.shard_count)]
    for s in shards:
        try:
            s.ping_ms = client.ping(shard=s.shard_id).round_trip_ms
        except LaminarError:
            s.ping_ms = None
    partitions = []
    descriptions, undescribed = describe_what_answers(client, sorted(view.topics))
    for desc in descriptions:
        for part in desc.partitions:
            shard = shards[part.shard_id]
            shard.partitions += 1
            shard.records += part.records
            shard.owned.setdefault(desc.topic.name, []).append(part.index)
            partitions.append(
                {
                    "topic": desc.topic.name,
                    "partition": part.index,
                    "partition_id": part.partition_id,
                    "shard": part.shard_id,
                    "lowest_index": part.lowest,
                    "highest_index": part.highest,
                }
            )
    replication = replication_status(client, view, descriptions) if view.nodes else None
    leaving = [
        {
            "node_id": node,
            "running": node in view.nodes,
            "partitions_left": len(partitions_held(descriptions, node)),
        }
        for node in md.decommissioned
    ]
    samples = scrape(admin, min(timeout_s, 3.0), client.tls)
    membership = (
        fetch_membership(admin, min(timeout_s, 3.0), client.tls) if samples is not None else None
    )
    loads = shard_loads(samples) if samples is not None else {}
    for s in shards:
        s.load = loads.get(s.shard_id)
    return {
        "node_id": md.node_id,
        "host": md.host,
        "port": md.port,
        "routing_mode": md.routing_mode,
        "shard_count": len(shards),
        "shards": [_shard_json(s) for s in shards],
        "topics": [
            {"name": d.topic.name, "topic_id": d.topic.topic_id, "partitions": d.topic.partitions}
            for d in descriptions
        ],
        "partitions": partitions,
        "topics_undescribed": undescribed,
        "partitions_offline": offline_partitions(samples) if samples is not None else [],
        "partitions_moving": moving_partitions(samples) if samples is not None else [],
        "steering": steering_counts(samples) if samples is not None else None,
        "xdp": xdp_state(samples) if samples is not None else None,
        "peer_auth": peer_auth(samples) if samples is not None else None,
        "members": membership[0] if membership is not None else None,
        "membership_auth": membership[1] if membership is not None else None,
        "cluster": replication,
        "groups": group_status(client),
        "decommissioning": leaving,
        "admin": {"address": format_address(admin), "reachable": samples is not None},
    }


def group_status(client: Client) -> list[dict[str, Any]] | None:
    """Consumer groups: state, members and total lag (records not yet
    committed) of the first `GROUPS_LAGGED_MAX` by name (lag None past them:
    each costs a count per partition); None if the groups did not answer."""
    try:
        views = client.list_groups()
    except LaminarError:
        return None
    out = []
    for n, view in enumerate(views):
        lag = None
        if n < GROUPS_LAGGED_MAX:
            with contextlib.suppress(LaminarError):
                lag = client.describe_group(view.group).lag
        out.append(
            {"group": view.group, "state": view.state, "members": len(view.members), "lag": lag}
        )
    return out


def replication_status(
    client: Client, view: ClusterView, descriptions: list[TopicDescription]
) -> dict[str, Any]:
    """Each node (up: its replicas answer) and each partition's leader, replicas,
    commit index and the lag of each follower (records its log is behind the
    leader's), asked of every replica itself."""
    reachable: dict[str, bool] = {}
    partitions = []
    for desc in descriptions:
        for part in desc.partitions:
            seen: dict[str, ListOffsetsResponse | None] = {}
            for node in part.replicas:
                if reachable.get(node) is False:
                    seen[node] = None
                    continue
                try:
                    seen[node] = client.replica_offsets(desc.topic.name, part.index, node)
                    reachable[node] = True
                except LaminarError:
                    seen[node] = None
                    reachable[node] = False
            leader = next((r.leader for r in seen.values() if r is not None and r.leader), None)
            lead = seen.get(leader) if leader is not None else None
            partitions.append(
                {
                    "topic": desc.topic.name,
                    "partition": part.index,
                    "leader": leader,
                    "replicas": list(part.replicas),
                    "commit_index": lead.committed_index if lead is not None else None,
                    "lag": {
                        node: None
                        if r is None or lead is None
                        else max(0, lead.highest_index - r.highest_index)
                        for node, r in seen.items()
                        if node != leader
                    },
                }
            )
    nodes = [
        {
            "node_id": n.node_id,
            "address": format_address((n.host, n.port)),
            "up": reachable.get(n.node_id, _node_answers(client, (n.host, n.port))),
        }
        for n in view.nodes.values()
    ]
    return {"nodes": nodes, "partitions": partitions}


def _node_answers(client: Client, address: Address) -> bool:
    """True if a node answers a metadata request (a node holding no partition)."""
    try:
        with Client(
            format_address(address),
            timeout_s=2.0,
            retry=RetryPolicy(budget_s=0),
            tls=client.tls or False,
            **login_options(client.credentials),
        ):
            return True
    except LaminarError:
        return False


def _shard_json(s: ShardStatus) -> dict[str, Any]:
    load = s.load
    return {
        "shard_id": s.shard_id,
        "host": s.host,
        "port": s.port,
        "core": load.core if load else None,
        "reachable": s.ping_ms is not None,
        "up": load.up if load else None,
        "restarts": load.restarts if load else None,
        "ping_ms": s.ping_ms,
        "partitions": s.partitions,
        "records": s.records,
        "requests": int(load.requests) if load else None,
        "bytes_in": int(load.bytes_in) if load else None,
        "bytes_out": int(load.bytes_out) if load else None,
        "forwarded": int(load.forwarded) if load else None,
        "owned": s.owned,
    }


# --- printing -----------------------------------------------------------------------


def admin_address(client: Client, admin: str | None) -> Address:
    """`--admin` if given, else the bootstrap host at the admin port the
    node's metadata names."""
    if admin is not None:
        return parse_address(admin)
    # Nodes too old to name it keep it at their default offset.
    port = client.metadata().admin_port or client.bootstrap[1] + ADMIN_PORT_OFFSET
    return (client.bootstrap[0], port)


def status(client: Client, args: argparse.Namespace) -> int:
    doc = gather(client, admin_address(client, args.admin), args.timeout)
    if args.json:
        print_json(doc)
        return 0
    print(
        f"node {doc['node_id']} at {doc['host']}:{doc['port']}   "
        f"routing {doc['routing_mode']}   {doc['shard_count']} shards   "
        f"{len(doc['topics'])} topics   {len(doc['partitions'])} partitions"
    )
    for line in _kernel_lines(doc):
        print(line)
    rows = [
        (
            s["shard_id"],
            f"{s['host']}:{s['port']}",
            s["core"],
            "up" if s["reachable"] else "DOWN",
            s["ping_ms"],
            s["partitions"],
            s["records"],
            s["requests"],
            _size(s["bytes_in"]),
            _size(s["bytes_out"]),
            s["forwarded"],
            s["restarts"],
        )
        for s in doc["shards"]
    ]
    replicated = doc.get("cluster") is not None
    counted = "ENTRIES" if replicated else "RECORDS"
    headers = ["SHARD", "ENDPOINT", "CORE", "STATE", "PING_MS", "PARTITIONS", counted]
    headers += ["REQUESTS", "IN", "OUT", "FORWARDED", "RESTARTS"]
    print()
    print(table(headers, rows))
    if replicated:
        say(f"note: {ENTRIES_NOTE}")
    if doc.get("cluster"):
        _print_cluster(doc["cluster"])
    if doc["decommissioning"]:
        print()
        print("decommissioned nodes (their partitions move to the others; stop one at 0)")
        leaving = [
            (d["node_id"], "up" if d["running"] else "stopped", d["partitions_left"])
            for d in doc["decommissioning"]
        ]
        print(table(["NODE", "STATE", "PARTITIONS LEFT"], leaving))
    if doc.get("members"):
        print()
        signed = {"certificates": "signed by certificate", "cluster-secret": "cluster secret"}
        how = signed.get(doc.get("membership_auth") or "", "")
        print(f"members ({len(doc['members'])}{'; datagrams: ' + how if how else ''})")
        members = [
            (m["node_id"], m["address"], m["state"], m["incarnation"], m["weight"])
            for m in doc["members"]
        ]
        print(table(["NODE", "ADDRESS", "STATE", "INCARNATION", "WEIGHT"], members))
    if doc.get("groups"):
        print()
        print(f"consumer groups ({len(doc['groups'])})")
        groups = [(g["group"], g["state"], g["members"], g["lag"]) for g in doc["groups"]]
        print(table(["GROUP", "STATE", "MEMBERS", "LAG"], groups))
    if doc["topics"]:
        print()
        headers = ["TOPIC"] + [f"SHARD {s['shard_id']}" for s in doc["shards"]]
        ownership = [
            [t["name"]] + [ranges(s["owned"].get(t["name"], [])) for s in doc["shards"]]
            for t in doc["topics"]
        ]
        print("partition ownership")
        print(table(headers, ownership))
    _print_partitions(
        doc,
        "partitions_offline",
        "OFFLINE partitions (requests to them are refused)",
        {"SHARD": "shard", "REASON": "reason"},
    )
    _print_partitions(
        doc,
        "partitions_moving",
        "moving partitions (led here; a new replica catching up)",
        {"TO": "to", "RECORDS TO GO": "records_to_go"},
    )
    if doc["topics_undescribed"]:
        say(f"note: could not describe {', '.join(doc['topics_undescribed'])} (see above)")
    if not doc["admin"]["reachable"]:
        say(
            f"note: the admin endpoint {doc['admin']['address']} did not answer, so cores and "
            "request counts are not shown (pass --admin HOST:PORT if it is elsewhere)"
        )
    return 0


def _print_partitions(doc: dict[str, Any], key: str, title: str, columns: dict[str, str]) -> None:
    """A table of the partitions `doc[key]` lists (topic, partition, `columns`), if any."""
    if not doc[key]:
        return
    names = {t["topic_id"]: t["name"] for t in doc["topics"]}
    print()
    print(title)
    rows = [
        (names.get(p["topic_id"], f"topic id {p['topic_id']}"), p["partition"],
         *(p[field] for field in columns.values()))
        for p in doc[key]
    ]  # fmt: skip
    print(table(["TOPIC", "PARTITION", *columns], rows))


def _print_cluster(cluster: dict[str, Any]) -> None:
    print()
    rows = [(n["node_id"], n["address"], "up" if n["up"] else "DOWN") for n in cluster["nodes"]]
    print(f"nodes ({len(rows)})")
    print(table(["NODE", "ADDRESS", "STATE"], rows))
    if cluster["partitions"]:
        print()
        parts = [
            (
                p["topic"],
                p["partition"],
                p["leader"] or "(none)",
                ",".join(p["replicas"]),
                p["commit_index"],
                " ".join(f"{node}:{'?' if lag is None else lag}" for node, lag in p["lag"].items()),
            )
            for p in cluster["partitions"]
        ]
        headers = ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "COMMIT", "FOLLOWER LAG"]
        print(table(headers, parts))


def _kernel_lines(doc: dict[str, Any]) -> list[str]:
    """The peer-authentication warning, the steering program's and the XDP
    classifier's lines of the human view."""
    lines = []
    if doc.get("peer_auth") == "insecure":
        lines.append(
            "WARNING   peers are not authenticated (--insecure-peers): any local process "
            "can claim to be a peer"
        )
    if doc.get("routing_mode") == UDP_OFF:
        lines.append("udp       off: TLS or logins are on (a datagram can carry neither)")
    steering = doc.get("steering")
    if steering:
        lines.append(
            f"steering  ebpf steered {steering.get('steered', 0)}, "
            f"membership {steering.get('membership', 0)}, "
            f"malformed dropped {steering['malformed']}{_reasons(steering, '')}, "
            f"no socket {steering.get('no_socket', 0)}"
        )
    xdp = doc.get("xdp")
    if xdp and xdp["attached"]:
        counts = xdp.get("counters") or {}
        lines.append(
            f"xdp       on {xdp['interface']} ({xdp['mode']}): "
            f"partition {counts.get('partition', 0)}, membership {counts.get('membership', 0)}, "
            f"malformed dropped {counts.get('malformed', 0)}{_reasons(counts, 'malformed_')}, "
            f"other {counts.get('other', 0)}"
        )
    elif xdp:
        lines.append(f"xdp       not attached: {xdp['reason']}")
    return lines


def _reasons(counts: dict[str, int], prefix: str) -> str:
    """ " (short 1, bad_magic 2)" for the malformed reasons that occurred."""
    found = [f"{r} {counts[prefix + r]}" for r in _MALFORMED_REASONS if counts.get(prefix + r)]
    return f" ({', '.join(found)})" if found else ""


def _size(n: int | None) -> str | None:
    """Bytes for people: 1536 -> "1.5 KiB"."""
    if n is None:
        return None
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
