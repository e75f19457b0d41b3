"""Membership between real `laminar-node` processes on loopback.

Nodes join through one seed's membership address; a SIGKILLed node is
declared dead by every survivor; a node with another cluster secret never gets
in; `laminar status --json` lists the members. Each routing mode carries
membership its own way (the node port steered by eBPF, or a port of its own),
so both are run. How fast a death is seen is a benchmark matter: the deadline
here is only a liveness bound, several times the protocol's own worst case
(a round of probes plus the longest Lifeguard suspicion, 24 s for 5 members).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until
from tests.system.bpf_env import BPF_REASON
from tests.system.nodes import RunningNode, start_node

DEADLINE_S = 90.0


def write_secret(path: Path) -> Path:
    path.write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
    path.chmod(0o600)  # a secret readable by others is refused
    return path


def admin_status(node: RunningNode) -> dict[str, Any]:
    with urllib.request.urlopen(f"{node.admin_url}/status", timeout=5) as response:
        doc: dict[str, Any] = json.load(response)
        return doc


def states(node: RunningNode) -> dict[str, str]:
    return {m["node_id"]: m["state"] for m in admin_status(node)["members"]}


def views(what: str, nodes: list[RunningNode]) -> Callable[[], str]:
    """`what`, with each live node's view of the members (a failed wait's description)."""
    return lambda: f"{what}: { ({n.info['node_id']: states(n) for n in nodes if n.alive()}) }"


def start_member(
    tmp_path: Path, name: str, secret: Path, routing: str, join: str | None = None, **flags: Any
) -> RunningNode:
    return start_node(
        tmp_path / name,
        cores=1,
        data_dir=tmp_path / name / "data",
        node_id=name,
        cluster_secret_file=secret,
        routing=routing,
        join=join,
        **flags,
    )


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
def test_five_nodes_join_through_one_seed_and_see_a_killed_node_die(
    tmp_path: Path, routing: str
) -> None:
    secret = write_secret(tmp_path / "secret")
    for name in ("n0", "n1", "n2", "n3", "n4"):
        (tmp_path / name).mkdir()
    with ExitStack() as stack:
        seed = stack.enter_context(start_member(tmp_path, "n0", secret, routing))
        address = seed.info["membership_address"]
        if routing == "ebpf":
            assert address == seed.bootstrap  # membership shares the node port
        else:
            assert address != seed.bootstrap
        nodes = [seed] + [
            stack.enter_context(
                start_member(tmp_path, f"n{i}", secret, routing, join=address, weight=i)
            )
            for i in range(1, 5)
        ]
        names = {f"n{i}" for i in range(5)}
        wait_until(
            lambda: all(states(n) == {name: "alive" for name in names} for n in nodes),
            views("every node sees five alive members", nodes),
            DEADLINE_S,
        )
        for n in nodes:  # every shard holds a view with all five members
            assert all(s["stats"]["membership_version"] for s in admin_status(n)["shards"])
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "laminar.cli.main",
                "status",
                "--bootstrap",
                nodes[1].bootstrap,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        doc = json.loads(cli.stdout)
        assert doc["membership_auth"] == "cluster-secret"
        members = {m["node_id"]: m for m in doc["members"]}
        assert set(members) == names
        assert members["n3"]["weight"] == 3.0 and members["n3"]["state"] == "alive"
        assert set(members["n2"]) == {"node_id", "address", "state", "incarnation", "weight"}

        victim = nodes.pop()
        victim.kill()
        wait_until(
            lambda: all(states(n).get("n4") == "dead" for n in nodes),
            views("every survivor sees n4 dead", nodes),
            DEADLINE_S,
        )
        assert all(states(n)["n1"] == "alive" for n in nodes)
        failed = 0.0  # some survivor's own probes of n4 failed (the others heard it)
        for n in nodes:
            code, text = n.admin_get("/metrics")
            pattern = r'laminar_membership_events_total\{event="(\w+)"\} (\S+)'
            events = dict(re.findall(pattern, text))
            assert code == 200 and "foreign_ack_ignored" in events
            failed += float(events["probe_failed"])
        assert failed >= 1

        leaver = nodes.pop()
        assert leaver.terminate() == 0
        wait_until(
            lambda: all(states(n).get("n3") == "left" for n in nodes),
            views("every survivor sees n3 left", nodes),
            DEADLINE_S,
        )


def test_a_node_with_the_wrong_secret_cannot_join(tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "secret")
    wrong = write_secret(tmp_path / "wrong")
    for name in ("n0", "n1", "evil"):
        (tmp_path / name).mkdir()
    with ExitStack() as stack:
        seed = stack.enter_context(start_member(tmp_path, "n0", secret, "userspace"))
        address = seed.info["membership_address"]
        good = stack.enter_context(start_member(tmp_path, "n1", secret, "userspace", join=address))
        evil = stack.enter_context(start_member(tmp_path, "evil", wrong, "userspace", join=address))
        wait_until(
            lambda: states(seed).get("n1") == "alive",
            views("n0 and n1 see each other", [seed]),
            DEADLINE_S,
        )
        wait_until(
            lambda: admin_status(seed)["membership"]["unauthenticated"] >= 3,
            views("n0 refused some datagrams", [seed]),
            DEADLINE_S,
        )
        assert "evil" not in states(seed) and "evil" not in states(good)
        assert states(evil) == {"evil": "alive"}
        assert "dropped a datagram" in seed.log_text()


def test_join_without_a_secret_is_refused(tmp_path: Path) -> None:
    from tests.system.nodes import NodeStartError

    with pytest.raises(NodeStartError, match="--join runs membership, whose datagrams must be"):
        start_node(tmp_path, cores=1, join="127.0.0.1:7946")


def test_a_short_secret_is_refused(tmp_path: Path) -> None:
    from tests.system.nodes import NodeStartError

    short = tmp_path / "short"
    short.write_bytes(b"too short\n")
    short.chmod(0o600)
    with pytest.raises(NodeStartError, match="needs at least 16"):
        start_node(tmp_path, cores=1, cluster_secret_file=short)
