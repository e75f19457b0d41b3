"""The classic BPF program: exact xxh64 rendezvous with 32-bit registers.

Run through `cbpf_vm` (an interpreter with the kernel's semantics) against the
placement vectors, and handed to the kernel to check it passes the classic
checker. Delivery through real sockets is in test_steering.py. No privilege
is needed for any of this.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from laminar import placement
from laminar.wire import codec
from laminar.xdp import cbpf, sockets
from laminar.xdp.errors import SteeringUsageError

from . import cbpf_vm

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "placement.json"


def _frame(pid: int) -> bytes:
    return codec.encode_frame(op=1, correlation_id=5, partition_id=pid, header={})


@pytest.fixture(scope="module")
def programs() -> dict[int, list[cbpf.Insn]]:
    return {n: cbpf.build_program(n) for n in range(1, cbpf.max_shards() + 1)}


def test_owner_matches_the_placement_vectors(programs: dict[int, list[cbpf.Insn]]) -> None:
    shard = json.loads(VECTORS.read_text())["shard"]
    for case in shard["cases"]:
        frame = _frame(int(case["pid"], 16))
        owners = [cbpf_vm.run(programs[n], frame) for n in range(1, shard["max_shard_count"] + 1)]
        assert owners == case["owner"], case["pid"]


def test_owner_matches_placement_up_to_the_limit(programs: dict[int, list[cbpf.Insn]]) -> None:
    rng = random.Random(7)
    for _ in range(150):
        pid = rng.getrandbits(64)
        n = rng.randint(1, cbpf.max_shards())
        assert cbpf_vm.run(programs[n], _frame(pid)) == placement.shard_for_uncached(pid, n)


def test_not_a_frame_is_left_to_the_kernel_hash(programs: dict[int, list[cbpf.Insn]]) -> None:
    program = programs[3]
    assert cbpf_vm.run(program, b"") == cbpf.NO_CHOICE
    assert cbpf_vm.run(program, _frame(1)[:24]) == cbpf.NO_CHOICE  # shorter than a frame
    foreign = bytearray(_frame(1))
    foreign[codec.OFFSET_MAGIC] = 0x00
    assert cbpf_vm.run(program, bytes(foreign)) == cbpf.NO_CHOICE


def test_socket_order_maps_owners_to_group_indexes() -> None:
    # shard 0's socket left and was replaced: the kernel order is now [2, 1, 0]
    program = cbpf.build_program(3, [2, 1, 0])
    missing = cbpf.build_program(3, [0, None, 1])
    rng = random.Random(3)
    for _ in range(60):
        pid = rng.getrandbits(64)
        owner = placement.shard_for_uncached(pid, 3)
        assert cbpf_vm.run(program, _frame(pid)) == [2, 1, 0][owner]
        expected = [0, cbpf.NO_CHOICE, 1][owner]
        assert cbpf_vm.run(missing, _frame(pid)) == expected


def test_size_limit_is_explicit() -> None:
    limit = cbpf.max_shards()
    assert limit >= 8, "a node with up to 8 cores must get classic steering"
    assert len(cbpf.build_program(limit, [None] * limit)) <= cbpf.BPF_MAXINSNS
    with pytest.raises(SteeringUsageError, match="at most"):
        cbpf.build_program(limit + 1)


def test_the_kernel_accepts_the_program_for_every_supported_size() -> None:
    for n in (1, 2, cbpf.max_shards()):
        with sockets.bind_reuseport_udp("127.0.0.1", 0) as sock:
            cbpf.attach(sock, cbpf.build_program(n))
