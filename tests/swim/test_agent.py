"""The membership agent on real UDP sockets: loopback, one event loop, real time."""

from __future__ import annotations

import asyncio
import random
import socket

import pytest

from laminar.swim import MemberState, Swim, SwimConfig
from laminar.swim.agent import MembershipAgent, format_address, monotonic_ms, parse_address
from laminar.swim.auth import PacketSealer, derive_key
from laminar.swim.errors import SwimUsageError, Unauthenticated
from laminar.swim.messages import Gossip, Packet
from tests.support import wait_until_async

SECRET = b"a cluster secret of enough bytes"
FAST = SwimConfig(probe_interval_ms=100, probe_timeout_ms=40, gossip_interval_ms=20)


def make_agent(name: str, secret: bytes = SECRET) -> MembershipAgent:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    address = format_address(*sock.getsockname())
    swim = Swim(name, address, rng=random.Random(name), now_ms=monotonic_ms(), config=FAST)
    return MembershipAgent(swim, sock, PacketSealer(secret))


def state(agent: MembershipAgent, node_id: str) -> MemberState | None:
    member = agent.view().get(node_id)
    return member.state if member is not None else None


def test_agents_join_through_one_seed_and_see_a_dead_one_die() -> None:
    asyncio.run(_join_and_die())


async def _join_and_die() -> None:
    agents = [make_agent(f"n{i}") for i in range(4)]
    seed = agents[0].swim.address
    for i, agent in enumerate(agents):
        agent.start([seed] if i else [])
    try:
        await wait_until_async(lambda: all(len(a.view().live()) == 4 for a in agents), "joined")
        agents[3].close()  # gone without a word
        await wait_until_async(
            lambda: all(state(a, "n3") is MemberState.DEAD for a in agents[:3]), "n3 dead"
        )
        await agents[2].leave()
        await wait_until_async(
            lambda: all(state(a, "n2") is MemberState.LEFT for a in agents[:2]), "n2 left"
        )
    finally:
        for agent in agents[:3]:
            agent.close()


def test_a_member_with_the_wrong_secret_cannot_join() -> None:
    asyncio.run(_wrong_secret())


async def _wrong_secret() -> None:
    good = [make_agent("n0"), make_agent("n1")]
    intruder = make_agent("evil", secret=b"not the cluster secret at all")
    good[0].start([])
    good[1].start([good[0].swim.address])
    intruder.start([good[0].swim.address])
    try:
        await wait_until_async(lambda: state(good[0], "n1") is MemberState.ALIVE, "n1 alive")
        # The intruder's datagrams arrived, and were refused:
        await wait_until_async(lambda: good[0].stats.unauthenticated >= 3, "three refused")
        assert state(good[0], "evil") is None and state(good[1], "evil") is None
        assert state(intruder, "n0") is None
    finally:
        for agent in [*good, intruder]:
            agent.close()


def test_a_tag_made_with_another_secret_or_altered_bytes_is_refused() -> None:
    sealer = PacketSealer(SECRET)
    datagram = sealer.seal(Packet(Gossip()))
    assert sealer.open(datagram) == Packet(Gossip())
    with pytest.raises(Unauthenticated):
        PacketSealer(b"another secret of enough bytes!").open(datagram)
    altered = bytearray(datagram)
    altered[10] ^= 1
    with pytest.raises(Unauthenticated):
        sealer.open(bytes(altered))
    with pytest.raises(Unauthenticated):
        sealer.open(datagram[:-1])


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(SwimUsageError, match="at least 16 bytes"):
        derive_key(b"short")


@pytest.mark.parametrize("text", ["host", ":80", "h:0", "h:65536", "h:x"])
def test_addresses_must_be_host_and_port(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(text)


def test_ipv6_addresses_round_trip() -> None:
    assert parse_address(format_address("::1", 7070)) == ("::1", 7070)
