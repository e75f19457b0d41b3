"""A cluster that runs itself: nodes joined with `--join`, real processes on loopback.

Four nodes join through one seed (SWIM membership, authenticated with the
cluster secret); a topic's partitions are Raft groups placed by weighted
rendezvous over the live members. One node is SIGKILLed for good: the
survivors declare it dead, and after the (short) dead grace every partition
it held is back at its replication factor on the others, with every
acknowledged record (checked by identity). Then a fifth node joins: the
partitions whose top replicas now include it move there, and no other
partition moves. A node with another cluster secret never gets in. A node
killed and restarted within the dead grace keeps its partitions and catches
up (with eBPF routing too: membership then shares the node port). With
`--metadata-voters 3`, a fourth node observes the metadata, takes a vote
when `laminar weight` makes it heavy, and replaces a dead voter. Long
versions run in `make soak`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from laminar.cli.status import parse_prometheus
from laminar.client import Client, RetryPolicy
from laminar.placement import partition_id, replica_nodes
from laminar.wire.records import decode_record
from tests.cluster.history import Produce, check
from tests.cluster.netns import TestNetwork
from tests.cluster.nodes import host_index, read_replica
from tests.support import free_port, retry_on_port_in_use, wait_until
from tests.system.bpf_env import BPF_REASON
from tests.system.nodes import RunningNode, start_node

SOAK = os.environ.get("LAMINAR_SOAK") == "1"
PARTITIONS = 24 if SOAK else 4
RECORDS = 300 if SOAK else 10
"""Per partition (`make soak` runs the long version)."""
RF = 3


def _secret(path: Path) -> Path:
    path.write_bytes(os.urandom(32).hex().encode())
    path.chmod(0o600)
    return path


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def member_states(node: RunningNode) -> dict[str, str]:
    doc: dict[str, Any] = json.loads(_get(f"{node.admin_url}/status"))
    return {m["node_id"]: m["state"] for m in doc["members"]}


def replica_holders(nodes: dict[str, RunningNode], pid: int) -> dict[str, list[tuple[int, bytes]]]:
    """The nodes that serve `pid` as a replica, with the (offset, value) pairs
    each holds committed."""
    out = {}
    for name, node in nodes.items():
        try:
            out[name] = [(i, decode_record(blob)[0]) for i, blob in read_replica(node, pid)]
        except (AssertionError, OSError):
            continue  # NOT_LEADER: holds none (or no longer)
    return out


def full_holders(
    live: dict[str, RunningNode], pids: list[int], acked: dict[int, list[bytes]], rf: int = RF
) -> dict[int, frozenset[str]] | None:
    """Each partition's holders, once every partition (`pids[p]`) has `rf` of
    them holding every acknowledged record (`acked[p]`) in order (else None)."""
    out = {}
    for p, pid in enumerate(pids):
        holders = replica_holders(live, pid)
        full = {n for n, log in holders.items() if [v for _, v in log] == acked[p]}
        if len(full) != rf or len(holders) != rf:
            return None
        out[pid] = frozenset(full)
    return out


@contextmanager
def gossip_cluster(
    tmp_path: Path,
    count: int,
    dead_grace: float = 1.0,
    routing: str = "userspace",
    net: TestNetwork | None = None,
    **flags: Any,
) -> Iterator[tuple[dict[str, RunningNode], Any]]:
    """Nodes n1..n{count} joined through n1, on loopback or, with `net`, node
    n{i+1} on host i of that network (`tests.cluster.netns`)."""
    secret = _secret(tmp_path / "secret")
    nodes: dict[str, RunningNode] = {}
    with ExitStack() as stack:
        # Whatever `nodes` holds at the end, a node a test restarted in place too.
        stack.callback(lambda: [node.kill() for node in nodes.values() if node.alive()])

        def start(name: str, join: str | None, key: Path = secret) -> RunningNode:
            (tmp_path / name).mkdir()

            def start_once() -> RunningNode:
                # A fixed node port below the ephemeral range: tests restart nodes on
                # it, and a kernel-chosen one could meanwhile go to another socket
                # (tests/support/ports.py); shard and admin ports ephemeral (by
                # default they follow the node port, the admin one into that range).
                where: dict[str, Any] = {
                    "port": free_port(),
                    "shard_port_base": 0,
                    "admin_port": 0,
                }
                where = {k: v for k, v in where.items() if k not in flags}
                if net is not None:
                    host = host_index(name)
                    address = net.address(host)  # the admin endpoint too: the test reads it
                    where = {
                        "host": address,
                        "admin_host": address,
                        "prefix": net.exec_prefix(host),
                    }
                return start_node(
                    tmp_path / name,
                    cores=1,
                    **where,
                    data_dir=tmp_path / name / "data",
                    node_id=name,
                    cluster_secret_file=key,
                    routing=routing,
                    join=join,
                    dead_grace=dead_grace,
                    **flags,
                )

            node = retry_on_port_in_use(start_once)
            stack.callback(lambda: node.kill() if node.alive() else None)
            nodes[name] = node
            return node

        seed = start("n1", None)
        for i in range(2, count + 1):
            start(f"n{i}", seed.info["membership_address"])
        yield nodes, start


def test_a_joined_cluster_heals_a_death_and_moves_only_what_a_new_node_takes(
    tmp_path: Path,
) -> None:
    """Placement is deterministic here (node ids n1..n5, topic ids 1 and 2):
    the seed n1 holds the most replicas and is killed; n5 then takes events'
    partitions 1-3 and single's partitions 1 and 3 (from n4), nothing else."""
    with gossip_cluster(tmp_path, 4) as (nodes, start):
        names = set(nodes)
        wait_until(
            lambda: all(set(member_states(n)) == names for n in nodes.values()),
            "every node sees four alive members",
        )
        evil = start("evil", nodes["n1"].info["membership_address"], _secret(tmp_path / "wrong"))
        del nodes["evil"]
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            topic = wait_until(
                lambda: client.create_topic("events", partitions=PARTITIONS, replication_factor=RF),
                "the topic is created",
            )
            pids = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
            # One replica only: a Raft group of one in a gossip cluster, so it can move too.
            single = client.create_topic("single", partitions=4, replication_factor=1)
            singles = {partition_id(single.topic_id, p): b"s%d" % p for p in range(4)}
            for p, value in enumerate(singles.values()):
                client.produce("single", p, [value], producer_id=100 + p, sequence=0)
            history: list[Produce] = []
            for p in range(PARTITIONS):
                for n in range(RECORDS):
                    value = b"p%d-%03d" % (p, n)
                    first = client.produce("events", p, [value], producer_id=7 + p, sequence=n)
                    history.append(Produce(p, value, "ok", first))
        acked = {p: [h.value for h in history if h.partition == p] for p in range(PARTITIONS)}

        def at_rf(live: dict[str, RunningNode]) -> dict[int, frozenset[str]] | None:
            return full_holders(live, pids, acked)

        def sole(live: dict[str, RunningNode], pid: int) -> str | None:
            """The one node serving single-replica partition `pid`, with its record."""
            holders = replica_holders(live, pid)
            ok = [n for n, log in holders.items() if [v for _, v in log] == [singles[pid]]]
            return ok[0] if len(holders) == 1 and ok else None

        before = wait_until(lambda: at_rf(nodes), "every partition on three replicas")
        single_before = {pid: wait_until(lambda p=pid: sole(nodes, p), "placed") for pid in singles}
        victim = max(nodes, key=lambda n: sum(n in h for h in before.values()))
        nodes[victim].kill()
        live = {n: node for n, node in nodes.items() if n != victim}
        wait_until(
            lambda: all(member_states(n).get(victim) == "dead" for n in live.values()),
            f"the survivors see {victim} dead",
        )
        healed = wait_until(lambda: at_rf(live), "every partition back at three replicas")
        assert all(victim not in h for h in healed.values())
        report = check(
            history,
            {
                n: {p: replica_holders(live, pid).get(n, []) for p, pid in enumerate(pids)}
                for n in live
            },
        )
        assert report.valid, report.summary()

        start("n5", next(iter(live.values())).info["membership_address"])
        live["n5"] = nodes["n5"]
        weights = {n: 1.0 for n in live}
        targets = {pid: frozenset(replica_nodes(pid, weights, RF)) for pid in pids}
        moved = wait_until(
            lambda: (now := at_rf(live)) is not None and now == targets and now,
            "the partitions placement gives the new node move there",
        )
        for pid in pids:
            if "n5" not in targets[pid]:
                assert moved[pid] == healed[pid], f"partition {pid} moved without reason"
        for pid, holder in single_before.items():
            if holder != victim:  # a single replica on the victim is gone with it
                target = replica_nodes(pid, weights, 1)[0]
                wait_until(lambda p=pid, t=target: sole(live, p) == t, f"{pid} on {target}")
        # The moves were counted where they were driven (what `laminar status` reads).
        samples = [
            sample
            for node in live.values()
            for sample in parse_prometheus(_get(f"{node.admin_url}/metrics"))
        ]
        started = [v for name, labels, v in samples if name == "laminar_move_steps_total"
                   and labels["outcome"] == "started"]  # fmt: skip
        copied = [v for name, _, v in samples if name == "laminar_move_bytes_total"]
        assert sum(started) >= PARTITIONS and sum(copied) > 0
        # The node with another secret never got in: no member knows it, it holds nothing.
        assert all("evil" not in member_states(n) for n in live.values())
        assert set(member_states(evil)) == {"evil"}
        assert not any(replica_holders({"evil": evil}, pid) for pid in pids)


def weights(node: RunningNode) -> dict[str, float]:
    doc: dict[str, Any] = json.loads(_get(f"{node.admin_url}/status"))
    return {m["node_id"]: m["weight"] for m in doc["members"]}


def shard_stats(node: RunningNode) -> list[dict[str, Any]]:
    return [s["stats"] for s in json.loads(_get(f"{node.admin_url}/status"))["shards"]]


def metadata_group(node: RunningNode) -> dict[str, Any] | None:
    """The metadata group's membership as `node`'s replica applied it."""
    return next((s["metadata_group"] for s in shard_stats(node) if s["metadata_group"]), None)


def decisions_settled(nodes: list[RunningNode]) -> bool:
    """The write decisions group is at its target: three voters and no learner,
    as each of `nodes` holding a replica of it applied its membership."""
    groups = [g for n in nodes for s in shard_stats(n) if (g := s["decisions_group"])]
    return bool(groups) and all(len(g["voters"]) == 3 and not g["learners"] for g in groups)


@pytest.mark.soak  # 50 s of a 4-node cluster: `make soak` (suite time)
def test_members_beyond_the_metadata_voters_observe_it_and_replace_a_dead_voter(
    tmp_path: Path,
) -> None:
    """--metadata-voters 3 in a cluster of four: three vote on the metadata,
    the fourth observes it as a learner and so knows every topic. `laminar
    weight` raises the observer's weight: it takes a vote and the voter that
    lost its place observes instead. When a voter dies for good, the
    observer takes its vote (after the dead grace) and topics can still be
    created and are seen by every survivor."""
    with gossip_cluster(tmp_path, 4, metadata_voters=3) as (nodes, _start):
        names = set(nodes)

        def placed(live: dict[str, RunningNode]) -> dict[str, Any] | None:
            """The metadata group, once every live node's replica says the
            same: three live voters, every other live node a learner."""
            groups = [metadata_group(n) for n in live.values()]
            first = groups[0]
            if first is None or any(g != first for g in groups):
                return None
            everyone = set(first["voters"]) | set(first["learners"])
            return first if len(first["voters"]) == 3 and everyone == set(live) else None

        def topics_everywhere(live: dict[str, RunningNode], count: int) -> bool:
            return all(s["topics"] == count for n in live.values() for s in shard_stats(n))

        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        group = wait_until(lambda: placed(nodes), "three metadata voters and one observer")
        (heavy,) = group["learners"]
        cli = [sys.executable, "-m", "laminar.cli.main", "weight", "1000", "--json"]
        weight = subprocess.run(
            [*cli, "--bootstrap", nodes[heavy].bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert weight.returncode == 0, weight.stderr
        assert json.loads(weight.stdout)["weight"] == 1000
        wait_until(
            lambda: all(weights(n)[heavy] == 1000 for n in nodes.values()), "the weight is gossiped"
        )
        group = wait_until(
            lambda: (g := placed(nodes)) and heavy in g["voters"] and g, "the heavy node votes"
        )
        (observer,) = group["learners"]
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            wait_until(lambda: client.create_topic("first", partitions=2), "created")
        wait_until(lambda: topics_everywhere(nodes, 1), "every node, the observer too, knows it")
        victim = next(n for n in group["voters"] if n != group["leader"])
        nodes[victim].kill()
        live = {n: node for n, node in nodes.items() if n != victim}
        healed = wait_until(lambda: placed(live), "three live metadata voters again")
        assert observer in healed["voters"] and healed["learners"] == []
        bootstrap = ",".join(n.bootstrap for n in live.values())
        with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            wait_until(lambda: client.create_topic("second", partitions=2), "created")
        wait_until(lambda: topics_everywhere(live, 2), "every survivor knows both topics")


def steps_started(nodes: list[RunningNode]) -> float:
    """Membership steps the placement controllers of `nodes` started."""
    return sum(
        v
        for node in nodes
        for name, labels, v in parse_prometheus(_get(f"{node.admin_url}/metrics"))
        if name == "laminar_move_steps_total" and labels["outcome"] == "started"
    )


def incarnations(node: RunningNode) -> dict[str, int]:
    doc: dict[str, Any] = json.loads(_get(f"{node.admin_url}/status"))
    return {m["node_id"]: m["incarnation"] for m in doc["members"]}


@pytest.mark.parametrize(
    "routing",
    [
        pytest.param(
            "ebpf",
            # the same membership with kernel steering: under `make soak` (suite time)
            marks=[
                pytest.mark.skipif(BPF_REASON is not None, reason=str(BPF_REASON)),
                pytest.mark.soak,
            ],
        ),
        "userspace",
    ],
)
def test_a_node_back_within_the_grace_keeps_its_partitions_and_catches_up(
    tmp_path: Path, routing: str
) -> None:
    """SIGKILL, declared dead, restarted (on new ports) within the dead
    grace: it rejoins with a higher incarnation, nothing moves (no copy of
    what it still holds), and its replicas catch up on what was acknowledged
    while it was down. With eBPF routing membership shares the node port
    (the kernel steers its datagrams to the agent's socket)."""
    with gossip_cluster(tmp_path, 4, dead_grace=60.0, routing=routing) as (nodes, _start):
        names = set(nodes)
        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

        def produce(client: Client, round_: int) -> None:
            for p in range(PARTITIONS):
                value = b"p%d-%d" % (p, round_)
                client.produce("events", p, [value], producer_id=90 + p, sequence=round_)
                acked[p].append(value)

        with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            topic = wait_until(
                lambda: client.create_topic("events", partitions=PARTITIONS, replication_factor=RF),
                "the topic is created",
            )
            pids = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
            produce(client, 0)

            before = wait_until(
                lambda: full_holders(nodes, pids, acked), "every partition on three replicas"
            )
            victim = "n2"
            old = nodes[victim]
            was = incarnations(nodes["n1"])[victim]
            others = [n for name, n in nodes.items() if name != victim]
            wait_until(
                lambda: all(len(metadata_group(n)["voters"]) == 4 for n in nodes.values()),
                "the metadata group on every node",
            )
            wait_until(
                lambda: decisions_settled(list(nodes.values())),
                "the write decisions group on its three voters",
            )
            steps_before = steps_started(others)  # the metadata and decisions groups' growth
            old.kill()
            wait_until(
                lambda: all(member_states(n).get(victim) == "dead" for n in others),
                f"{victim} declared dead",
            )
            produce(client, 1)  # acknowledged by the two replicas left of each partition
        if routing == "ebpf":  # one port: the kernel splits the traffic
            assert old.info["membership_address"] == old.bootstrap
        # A new node port (and ephemeral shard ports): the new address is
        # gossiped with the new incarnation, and the replicas follow it.
        nodes[victim] = retry_on_port_in_use(lambda: old.restart(port=free_port()))
        wait_until(
            lambda: all(member_states(n).get(victim) == "alive" for n in nodes.values()),
            f"{victim} alive again",
        )
        assert all(incarnations(n)[victim] > was for n in nodes.values())
        after = wait_until(lambda: full_holders(nodes, pids, acked), f"{victim} caught up")
        assert after == before  # nothing moved
        assert steps_started(others) == steps_before  # no membership change anywhere


@pytest.mark.soak
def test_a_decommissioned_node_leaves_with_every_partition_writable(tmp_path: Path) -> None:
    """`decommission_node`, then SIGTERM once it holds nothing: producers to
    every partition see no failure while its partitions move and while it
    goes, and every partition is back at three replicas on the others with
    every acknowledged record. (SIGTERM alone is a restart: the node would
    keep its place; tests/cluster/test_rolling_restart.py.)"""
    with gossip_cluster(tmp_path, 4) as (nodes, _start):
        names = set(nodes)
        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        live = {n: node for n, node in nodes.items() if n != "n2"}
        with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            topic = wait_until(
                lambda: client.create_topic("events", partitions=PARTITIONS, replication_factor=RF),
                "the topic is created",
            )
            pids = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
            sequence = dict.fromkeys(range(PARTITIONS), 0)

            def produce_round() -> None:
                for p in range(PARTITIONS):
                    value = b"p%d-%05d" % (p, sequence[p])
                    client.produce("events", p, [value], producer_id=50 + p, sequence=sequence[p])
                    sequence[p] += 1
                    acked[p].append(value)

            produce_round()
            assert client.decommission_node("n2") == ("n2",)
            while any(replica_holders({"n2": nodes["n2"]}, pid) for pid in pids):
                produce_round()  # raises if a partition stays unwritable past the budget
            stopping = threading.Thread(target=nodes["n2"].terminate)
            stopping.start()
            while stopping.is_alive():
                produce_round()
            stopping.join()
            for _ in range(5):
                produce_round()
        wait_until(
            lambda: all(member_states(n).get("n2") == "left" for n in live.values()), "n2 left"
        )
        wait_until(lambda: full_holders(live, pids, acked), "every partition on three replicas")
