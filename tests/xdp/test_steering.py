"""Reuseport steering with real sockets: every datagram lands on its owner's socket.

The sockets are the supervisor's (`ReuseportSteering` binds them in shard
order), read here directly; test_shard_processes.py does the same through
shard processes that inherit them. eBPF cases need root/CAP_BPF and bcc and
share one loaded program per module; classic BPF cases need nothing.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from laminar import placement
from laminar.wire import codec
from laminar.xdp import (
    ReuseportSteering,
    RoutingMode,
    RoutingPlan,
    SteeringSpec,
    SteeringUsageError,
    attach_shard_socket,
    choose_routing,
)
from laminar.xdp.ebpf_steer import EbpfSteeringProgram, SteerCounters

from .conftest import BPF_REASON
from .udp_helpers import deliver, many_pids, owners_seen, request

DATAGRAMS = 3000

ebpf_param = pytest.param(
    RoutingMode.EBPF,
    marks=pytest.mark.skipif(BPF_REASON is not None, reason=str(BPF_REASON)),
)
modes = pytest.mark.parametrize("mode", [ebpf_param, RoutingMode.CBPF])


@pytest.fixture(scope="module")
def ebpf_program() -> Iterator[EbpfSteeringProgram]:
    if BPF_REASON is not None:
        pytest.skip(BPF_REASON)
    program = EbpfSteeringProgram.load()
    yield program
    program.close()


def _plan(mode: RoutingMode, shards: int, request: pytest.FixtureRequest) -> RoutingPlan:
    if mode is RoutingMode.EBPF:
        program = request.getfixturevalue("ebpf_program")
        return RoutingPlan(mode, "ebpf", shards, (), program)
    return choose_routing(str(mode), shards)


@pytest.fixture
def steering_for(request: pytest.FixtureRequest) -> Iterator[object]:
    made: list[ReuseportSteering] = []

    def make(mode: RoutingMode, shards: int) -> ReuseportSteering:
        steering = ReuseportSteering.prepare(
            shards, "127.0.0.1", 0, routing=_plan(mode, shards, request)
        )
        made.append(steering)
        return steering

    yield make
    for steering in made:
        steering.close()


def _send(steering: ReuseportSteering, pids: list[int]) -> dict[int, tuple[int, int]]:
    receivers = [steering.socket(i) for i in range(steering.shard_count)]
    datagrams = [request(pid, corr) for corr, pid in enumerate(pids)]
    return owners_seen(deliver(steering.port, receivers, datagrams))


def _counters(steering: ReuseportSteering) -> SteerCounters:
    counters = steering.counters()
    assert counters is not None
    return counters


@modes
@pytest.mark.parametrize("shards", [2, 3, 4])
def test_every_datagram_reaches_its_owner(steering_for, mode: RoutingMode, shards: int) -> None:  # type: ignore[no-untyped-def]
    steering = steering_for(mode, shards)
    assert steering.mode is mode
    before = steering.counters()
    pids = many_pids(DATAGRAMS, seed=shards)
    seen = _send(steering, pids)
    assert len(seen) == DATAGRAMS
    misrouted = [
        (corr, index, placement.shard_for(pid, shards))
        for corr, (index, pid) in seen.items()
        if index != placement.shard_for(pid, shards)
    ]
    assert misrouted == []
    assert {index for index, _ in seen.values()} == set(range(shards))  # every shard served
    if mode is RoutingMode.EBPF:
        assert before is not None
        assert _counters(steering).steered - before.steered == DATAGRAMS


@modes
def test_retired_socket_drops_out_and_a_replacement_serves_again(
    steering_for, mode: RoutingMode
) -> None:  # type: ignore[no-untyped-def]
    shards = 3
    steering = steering_for(mode, shards)
    pids = many_pids(900, seed=11)
    owned_by_1 = sum(1 for pid in pids if placement.shard_for(pid, shards) == 1)

    steering.retire(1)
    before = steering.counters()
    seen = _send(steering, pids)
    assert len(seen) == len(pids)  # nothing lost: shard 1's datagrams went elsewhere
    for index, pid in seen.values():
        owner = placement.shard_for(pid, shards)
        if owner == 1:
            assert index in (0, 2)
        else:
            assert index == owner
    if mode is RoutingMode.EBPF:
        assert before is not None
        assert _counters(steering).no_socket - before.no_socket == owned_by_1

    steering.replace(1)
    seen = _send(steering, pids)
    assert all(index == placement.shard_for(pid, shards) for index, pid in seen.values())

    # Replacing shard 0 moves the last socket of the group into its place: the
    # classic program must follow the kernel's new order.
    steering.replace(0)
    seen = _send(steering, pids)
    assert len(seen) == len(pids)
    assert all(index == placement.shard_for(pid, shards) for index, pid in seen.values())


def test_a_shard_bound_socket_registers_itself(steering_for) -> None:  # type: ignore[no-untyped-def]
    if BPF_REASON is not None:
        pytest.skip(BPF_REASON)
    steering = steering_for(RoutingMode.EBPF, 3)
    spec = SteeringSpec.from_json(steering.spec.to_json())
    steering.retire(2)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as own:
        own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        own.bind(("127.0.0.1", spec.port))
        attach_shard_socket(spec, 2, own)
        receivers = [steering.socket(0), steering.socket(1), own]
        pids = many_pids(600, seed=5)
        datagrams = [request(pid, corr) for corr, pid in enumerate(pids)]
        seen = owners_seen(deliver(spec.port, receivers, datagrams))
    assert len(seen) == len(pids)
    assert all(index == placement.shard_for(pid, 3) for index, pid in seen.values())


def test_classic_mode_refuses_shard_bound_sockets(steering_for) -> None:  # type: ignore[no-untyped-def]
    steering = steering_for(RoutingMode.CBPF, 2)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as own,
        pytest.raises(SteeringUsageError, match="bind order"),
    ):
        own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        own.bind(("127.0.0.1", steering.port))
        attach_shard_socket(steering.spec, 1, own)


def _malformed() -> dict[str, list[bytes]]:
    good = request(42, 1)
    bad_magic = bytearray(good)
    bad_magic[codec.OFFSET_MAGIC] = 0x17
    bad_version = bytearray(good)
    bad_version[codec.OFFSET_VERSION] = 9
    return {
        "short": [b"", b"x", good[:20], good[:24]] * 3,
        "bad_magic": [bytes(bad_magic), b"\0" * 40] * 5 + [bytes(bad_magic)],
        "bad_version": [bytes(bad_version)] * 12,
        "bad_length": [
            good + b"trailing",  # two frames' worth, or junk after one
            struct.pack(">I", len(good) - 5) + good[4:],  # frame_len one short
            codec.PREFIX.pack(99, codec.MAGIC, codec.VERSION, 8, 0, 1, 2) + b"\0" * 9,
        ]
        * 4
        + [good + b"\0"],
    }


def test_malformed_datagrams_are_counted_and_dropped(steering_for) -> None:  # type: ignore[no-untyped-def]
    if BPF_REASON is not None:
        pytest.skip(BPF_REASON)
    steering = steering_for(RoutingMode.EBPF, 2)
    malformed = _malformed()
    before = _counters(steering)
    valid = [request(pid, corr) for corr, pid in enumerate(many_pids(100, seed=2))]
    datagrams = [d for group in malformed.values() for d in group] + valid
    arrivals = deliver(steering.port, [steering.socket(0), steering.socket(1)], datagrams)
    assert sorted(data for _, data in arrivals) == sorted(valid)  # only the valid ones
    after = _counters(steering)
    for reason, group in malformed.items():
        assert getattr(after, reason) - getattr(before, reason) == len(group), reason
    assert after.steered - before.steered == len(valid)


def test_classic_mode_delivers_malformed_for_shards_to_reject(steering_for) -> None:  # type: ignore[no-untyped-def]
    # Classic programs cannot drop or count: foreign datagrams get the kernel's
    # hash and the shard validates them, as it does in every mode.
    steering = steering_for(RoutingMode.CBPF, 2)
    malformed = [d for group in _malformed().values() for d in group if d]
    arrivals = deliver(steering.port, [steering.socket(0), steering.socket(1)], malformed)
    assert sorted(data for _, data in arrivals) == sorted(malformed)
    assert steering.counters() is None


def test_userspace_mode_delivers_everything_somewhere() -> None:
    with ReuseportSteering.prepare(3, "127.0.0.1", 0, routing="userspace") as steering:
        assert steering.mode is RoutingMode.USERSPACE
        pids = many_pids(600, seed=9)
        seen = _send(steering, pids)
        assert len(seen) == len(pids)
        assert steering.fds_for_shard(0) == (steering.spec.socket_fds[0],)


def test_spec_round_trips_through_json(steering_for) -> None:  # type: ignore[no-untyped-def]
    steering = steering_for(RoutingMode.CBPF, 3)
    spec = steering.spec
    assert SteeringSpec.from_json(spec.to_json()) == spec
    assert spec.mode == "cbpf" and spec.port == steering.port and spec.shard_count == 3
    assert len(set(spec.socket_fds)) == 3
    steering.retire(1)
    assert steering.spec.socket_fds[1] is None
    with pytest.raises(SteeringUsageError):
        steering.fds_for_shard(3)
