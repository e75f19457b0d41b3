"""The XDP classifier on a veth pair between two network namespaces the test makes.

Nothing here touches the host's interfaces: each test creates a "node" and a
"peer" namespace joined by a veth pair, runs `netns_node serve` (the node,
owning the classifier) in one and `netns_node send` in the other, and deletes
both namespaces at the end, which also destroys the veth pair and anything
still attached to it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laminar.xdp import iface

from . import netns_node
from .conftest import needs_netns

pytestmark = needs_netns

ROOT = Path(__file__).resolve().parents[2]
NODE_IF = "vb"

COUNTS = {
    "partition_v4": 300,
    "partition_v6": 60,
    "membership_port": 40,
    "membership_op": 20,
    "short": 15,
    "bad_magic": 16,
    "bad_version": 17,
    "bad_length": 18,
    "other": 25,
}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Pair:
    node: str  # namespace holding NODE_IF, where the classifier runs
    peer: str  # namespace holding the sender's end

    def attached(self) -> list[iface.AttachedXdp]:
        return iface.attached_xdp(NODE_IF, netns=self.node)


@pytest.fixture
def pair(unique_name: str) -> Iterator[Pair]:
    made = Pair(f"{unique_name}n", f"{unique_name}p")
    try:
        _ip("netns", "add", made.node)
        _ip("netns", "add", made.peer)
        _ip("link", "add", "va", "netns", made.peer, "type", "veth", "peer", "name", NODE_IF,
            "netns", made.node)  # fmt: skip
        for ns, dev, v4, v6 in (
            (made.peer, "va", netns_node.PEER_V4, netns_node.PEER_V6),
            (made.node, NODE_IF, netns_node.NODE_V4, netns_node.NODE_V6),
        ):
            _ip("-n", ns, "addr", "add", f"{v4}/24", "dev", dev)
            _ip("-n", ns, "addr", "add", f"{v6}/64", "dev", dev, "nodad")
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield made
    finally:
        for ns in (made.node, made.peer):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def _helper(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.xdp.netns_node", *args]


class Serve:
    """A running `netns_node serve`: the node side."""

    def __init__(self, pair: Pair, *args: str) -> None:
        self.proc = subprocess.Popen(
            _helper(pair.node, "serve", "--ifname", NODE_IF, *args),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.hello = self.read()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"serve exited with {self.proc.wait()}"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def command(self, text: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.read()

    def finish(self) -> int:
        """Ask the node to detach and exit; its exit status."""
        assert self.command("exit") == {"detached": True}
        return self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGKILL (if still running); its exit status."""
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait()


@pytest.fixture
def serves() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        serve.stop()


def _start(serves: list[Serve], pair: Pair, *args: str) -> Serve:
    serve = Serve(pair, *args)
    serves.append(serve)
    return serve


def _send(pair: Pair, counts: dict[str, int]) -> None:
    result = subprocess.run(
        _helper(pair.peer, "send", "--counts", json.dumps(counts)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout)["sent"] == sum(counts.values())


@pytest.mark.parametrize(("mode", "expected_mode"), [("auto", "native"), ("generic", "generic")])
def test_counters_match_what_was_sent(
    pair: Pair, serves: list[Serve], mode: str, expected_mode: str
) -> None:
    serve = _start(serves, pair, "--mode", mode)
    assert serve.hello.get("ready"), serve.hello
    assert serve.hello["mode"] == expected_mode  # veth has native XDP; `auto` prefers it
    assert [a.mode for a in pair.attached()] == [expected_mode]

    _send(pair, COUNTS)
    report = serve.command("report")
    counters = report["counters"]
    assert counters["partition"] == COUNTS["partition_v4"] + COUNTS["partition_v6"]
    assert counters["membership"] == COUNTS["membership_port"] + COUNTS["membership_op"]
    for reason in ("short", "bad_magic", "bad_version", "bad_length"):
        assert counters[f"malformed_{reason}"] == COUNTS[reason], reason
    assert counters["malformed"] == sum(
        COUNTS[r] for r in ("short", "bad_magic", "bad_version", "bad_length")
    )
    assert counters["other"] >= COUNTS["other"]  # plus ARP and IPv6 neighbour discovery
    per_cpu = report["per_cpu"]["partition"]
    assert sum(per_cpu) == counters["partition"] and len(per_cpu) >= 1

    # Malformed datagrams never reached a socket; everything else did.
    assert report["malformed_received"] == 0
    assert report["received"] == {
        "partition": counters["partition"] + COUNTS["membership_op"],
        "membership": COUNTS["membership_port"],
    }

    assert serve.finish() == 0
    assert pair.attached() == []


def test_a_killed_node_leaves_nothing_attached(pair: Pair, serves: list[Serve]) -> None:
    serve = _start(serves, pair)  # BPF link: dies with the process
    assert serve.hello.get("ready")
    assert [a.prog_id for a in pair.attached()] == [serve.hello["prog_id"]]
    assert serve.stop() == -signal.SIGKILL
    assert pair.attached() == []


def test_netlink_mode_detaches_on_sigterm(pair: Pair, serves: list[Serve]) -> None:
    serve = _start(serves, pair, "--attach-with", "netlink")
    assert serve.hello.get("ready")
    assert len(pair.attached()) == 1
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.proc.wait() == -signal.SIGTERM  # the default action still happens
    assert pair.attached() == []


def test_a_stale_program_from_a_killed_run_is_replaced(pair: Pair, serves: list[Serve]) -> None:
    stale = _start(serves, pair, "--attach-with", "netlink")
    stale_id = stale.hello["prog_id"]
    assert stale.stop() == -signal.SIGKILL
    assert [(a.name, a.prog_id) for a in pair.attached()] == [("laminar_xdp", stale_id)]

    fresh = _start(serves, pair)
    assert fresh.hello.get("ready"), fresh.hello
    assert fresh.hello["replaced_stale"] == [stale_id]
    assert [a.prog_id for a in pair.attached()] == [fresh.hello["prog_id"]]
    _send(pair, {"partition_v4": 10, "short": 3})
    counters = fresh.command("report")["counters"]
    assert (counters["partition"], counters["malformed_short"]) == (10, 3)
    assert fresh.finish() == 0
    assert pair.attached() == []


def test_a_live_node_is_not_displaced(pair: Pair, serves: list[Serve]) -> None:
    first = _start(serves, pair)
    assert first.hello.get("ready")
    second = _start(serves, pair)
    assert "another laminar node" in second.hello.get("error", ""), second.hello
    assert second.proc.wait(timeout=30) == 1
    assert [a.prog_id for a in pair.attached()] == [first.hello["prog_id"]]


def test_a_foreign_program_is_not_replaced(pair: Pair, serves: list[Serve]) -> None:
    subprocess.run(_helper(pair.node, "foreign", "--ifname", NODE_IF), cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    assert [a.name for a in pair.attached()] == ["foreign_xdp"]
    serve = _start(serves, pair)
    assert "not laminar's" in serve.hello.get("error", ""), serve.hello
    assert [a.name for a in pair.attached()] == ["foreign_xdp"]
