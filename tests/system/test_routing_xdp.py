"""The node's XDP classifier, on a node inside a network namespace the test makes.

Nothing here touches the host's interfaces: the test creates a "node" and a
"peer" namespace joined by a veth pair, runs `laminar-node` in the node one
(listening on its veth address, so `--xdp auto` attaches there), sends from
the peer (`tests.system.netns_peer`), and reads the counters with `laminar
status --json` from inside the node's namespace. Deleting the namespaces at
the end destroys the veth pair and anything still attached to it; the tests
also check that the node itself detached, on SIGTERM and on SIGKILL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laminar.placement import partition_id
from laminar.xdp import iface
from tests.system.bpf_env import BPF_REASON
from tests.system.nodes import RunningNode, start_node
from tests.system.routed import laminar_cli

ROOT = Path(__file__).resolve().parents[2]
NODE_IF = "vb"
NODE_V4 = "10.78.0.2"
PEER_V4 = "10.78.0.1"
SHARDS = 2

pytestmark = pytest.mark.skipif(BPF_REASON is not None, reason=str(BPF_REASON))


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Pair:
    node: str
    peer: str

    def exec_in(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def attached(self) -> list[iface.AttachedXdp]:
        return iface.attached_xdp(NODE_IF, netns=self.node)


@pytest.fixture
def pair() -> Iterator[Pair]:
    name = f"lr{uuid.uuid4().hex[:8]}"
    made = Pair(f"{name}n", f"{name}p")
    try:
        _ip("netns", "add", made.node)
        _ip("netns", "add", made.peer)
        _ip("link", "add", "va", "netns", made.peer, "type", "veth", "peer", "name", NODE_IF,
            "netns", made.node)  # fmt: skip
        for ns, dev, v4 in ((made.peer, "va", PEER_V4), (made.node, NODE_IF, NODE_V4)):
            _ip("-n", ns, "addr", "add", f"{v4}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield made
    finally:
        for ns in (made.node, made.peer):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def _start(pair: Pair, tmp_path: Path) -> RunningNode:
    return start_node(
        tmp_path,
        cores=SHARDS,
        prefix=pair.exec_in(pair.node),
        host=NODE_V4,
        xdp="auto",
        insecure=True,
    )


def _status(pair: Pair, node: RunningNode) -> dict[str, Any]:
    admin = f"{node.admin_host}:{node.admin_port}"
    result = laminar_cli(node, "status", "--json", "--admin", admin, prefix=pair.exec_in(pair.node))
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _pids(pair: Pair, node: RunningNode) -> list[int]:
    code = (
        "import json, sys\n"
        "from laminar.client import Client\n"
        "with Client(sys.argv[1]) as c:\n"
        "    print(c.create_topic('x', partitions=24).topic_id)\n"
    )
    result = subprocess.run(
        [*pair.exec_in(pair.node), sys.executable, "-c", code, node.bootstrap],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    topic_id = int(result.stdout)
    return [partition_id(topic_id, p) for p in range(24)]


def test_xdp_counters_match_what_the_peer_sent(pair: Pair, tmp_path: Path) -> None:
    node = _start(pair, tmp_path)
    try:
        assert node.routing_mode == "ebpf"
        assert "xdp classifier on vb (native mode)" in node.log_text()
        assert [a.name for a in pair.attached()] == ["laminar_xdp"]
        pids = _pids(pair, node)
        before = _status(pair, node)["xdp"]["counters"]

        peer = subprocess.run(
            [*pair.exec_in(pair.peer), sys.executable, "-m", "tests.system.netns_peer",
             node.host, str(node.port), json.dumps(pids), str(SHARDS)],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        report = json.loads(peer.stdout)
        sent = report["sent"]
        assert report["answers"] == report["at_owner"] == 4 * len(pids)

        doc = _status(pair, node)
        xdp = doc["xdp"]
        assert xdp["attached"] is True and (xdp["interface"], xdp["mode"]) == (NODE_IF, "native")
        counters = {k: v - before.get(k, 0) for k, v in xdp["counters"].items()}
        assert counters["partition"] == sent["partition"]
        assert counters["membership"] == sent["membership"]
        for reason in ("short", "bad_magic", "bad_version", "bad_length"):
            assert counters[f"malformed_{reason}"] == sent[reason], reason
        # XDP dropped every malformed datagram before the socket lookup, so the
        # steering program saw only frames (and steered them all).
        steering = doc["steering"]
        assert steering["malformed"] == 0
        assert steering["steered"] == sent["partition"]
        # Membership ops go to the membership agent's slot; this node has no
        # agent (no cluster secret), so they are dropped, never handed to a shard.
        assert steering["no_socket"] == sent["membership"]
        assert steering.get("membership", 0) == 0
        assert all(s["forwarded"] == 0 for s in doc["shards"])

        human = laminar_cli(
            node, "status", "--admin", f"{node.admin_host}:{node.admin_port}",
            prefix=pair.exec_in(pair.node),
        ).stdout  # fmt: skip
        assert "xdp       on vb (native): partition" in human
    finally:
        assert node.terminate() == 0
    assert pair.attached() == []


def test_a_killed_node_leaves_nothing_attached(pair: Pair, tmp_path: Path) -> None:
    node = _start(pair, tmp_path)
    assert [a.name for a in pair.attached()] == ["laminar_xdp"]
    node.kill()  # SIGKILL, supervisor and shards: the BPF link dies with them
    assert pair.attached() == []
    with node.restart() as again:  # and the next run attaches cleanly
        assert "xdp classifier on vb" in again.log_text()
    assert pair.attached() == []
