"""Shard processes that inherit their sockets answer for exactly their partitions.

This is the node's shape: the supervisor prepares the steering, starts one
process per shard with `pass_fds=steering.fds_for_shard(i)` and the spec as
JSON; each shard adopts its socket with `open_shard_socket`. Every response
names the shard that answered it.

A shard killed with SIGKILL leaves its socket in the group (the supervisor
holds a copy), so requests for its partitions wait in the socket's queue and
the restarted shard, given the same fd, answers them.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar import placement
from laminar.wire import codec
from laminar.xdp import ReuseportSteering, RoutingMode, open_shard_socket

from .conftest import BPF_REASON
from .udp_helpers import many_pids, request

SHARDS = 3
ROOT = Path(__file__).resolve().parents[2]
QUIET_S = 2.0
CLIENT_RCVBUF_BYTES = 4 << 20
"""Room for a batch of 200 answers even when generic XDP on lo makes each cost a page."""

MODES = [
    pytest.param(
        RoutingMode.EBPF,
        marks=pytest.mark.skipif(BPF_REASON is not None, reason=str(BPF_REASON)),
    ),
    RoutingMode.CBPF,
]


class Node:
    """A supervisor in miniature: the steering plus one child per shard."""

    def __init__(self, mode: RoutingMode) -> None:
        self.steering = ReuseportSteering.prepare(SHARDS, "127.0.0.1", 0, routing=str(mode))
        self.children: dict[int, subprocess.Popen[str]] = {}

    def start(self, shard: int) -> None:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.xdp.shard_child",
                self.steering.spec.to_json(),
                str(shard),
            ],
            cwd=ROOT,
            pass_fds=self.steering.fds_for_shard(shard),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        self.children[shard] = child

    def kill(self, shard: int) -> None:
        child = self.children.pop(shard)
        child.send_signal(signal.SIGKILL)
        child.wait()

    def close(self) -> None:
        for shard in list(self.children):
            self.kill(shard)
        self.steering.close()


@pytest.fixture
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    made = Node(request.param)
    try:
        yield made
    finally:
        made.close()


def _ask(port: int, pids: list[int], first_corr: int = 0) -> dict[int, tuple[int, int]]:
    """Send one request per pid; correlation id -> (answering shard, pid)."""
    answers: dict[int, tuple[int, int]] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF_BYTES)
        for start in range(0, len(pids), 200):
            for corr, pid in enumerate(pids[start : start + 200], first_corr + start):
                client.sendto(request(pid, corr), ("127.0.0.1", port))
            want = min(len(pids), start + 200)
            while len(answers) < want and select.select([client], [], [], QUIET_S)[0]:
                frame = codec.decode_frame(client.recv(65536))
                answers[frame.correlation_id] = (frame.header["shard"], frame.partition_id)
    return answers


@pytest.mark.parametrize("node", MODES, indirect=True)
def test_each_shard_answers_for_its_partitions_and_survives_a_restart(node: Node) -> None:
    for shard in range(SHARDS):
        node.start(shard)
    pids = many_pids(1200, seed=21)
    answers = _ask(node.steering.port, pids)
    assert len(answers) == len(pids)
    assert all(shard == placement.shard_for(pid, SHARDS) for shard, pid in answers.values())

    node.kill(1)
    owned_by_1 = [pid for pid in pids if placement.shard_for(pid, SHARDS) == 1][:150]
    waiting = _ask_without_waiting(node.steering.port, owned_by_1, first_corr=10_000)
    node.start(1)  # same fd: the queued requests are answered now
    answers = _collect(waiting, len(owned_by_1))
    assert len(answers) == len(owned_by_1)
    assert {shard for shard, _ in answers.values()} == {1}


def _ask_without_waiting(port: int, pids: list[int], first_corr: int) -> socket.socket:
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF_BYTES)
    for corr, pid in enumerate(pids, first_corr):
        client.sendto(request(pid, corr), ("127.0.0.1", port))
    return client


def _collect(client: socket.socket, count: int) -> dict[int, tuple[int, int]]:
    answers: dict[int, tuple[int, int]] = {}
    with client:
        while len(answers) < count and select.select([client], [], [], QUIET_S)[0]:
            frame = codec.decode_frame(client.recv(65536))
            answers[frame.correlation_id] = (frame.header["shard"], frame.partition_id)
    return answers


def test_a_socket_not_passed_is_a_clear_error() -> None:
    with ReuseportSteering.prepare(2, "127.0.0.1", 0, routing="userspace") as steering:
        spec = steering.spec
        code = (
            "import sys\n"
            "from laminar.xdp import SteeringSpec, SteeringUsageError, open_shard_socket\n"
            "try:\n"
            "    open_shard_socket(SteeringSpec.from_json(sys.argv[1]), 1)\n"
            "except SteeringUsageError as exc:\n"
            "    print(exc)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, spec.to_json()],
            capture_output=True,
            text=True,
            check=True,
            pass_fds=steering.fds_for_shard(0),  # shard 0's, not shard 1's
        )
        assert "pass_fds" in result.stdout
        # in-process, the supervisor's own copy adopts fine
        assert open_shard_socket(spec, 1).detach() == spec.socket_fds[1]
        assert os.get_inheritable(spec.socket_fds[0]) is False  # pass_fds does that per child
