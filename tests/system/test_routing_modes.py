"""Node-port routing in each mode, on real nodes: the kernel delivers each UDP
request to the shard that owns its partition, so no shard forwards.

Every answer names the shard that served it (`Pong.shard_id`) and the shard
whose socket received it (`received_by`); the shards' `forwarded_*` counters
in /metrics say whether any request took the userspace hop. Requests leave
from several client sockets, so without steering the kernel's 4-tuple hash
would spread them over the shards (the userspace case shows that it does and
that forwarding still gets every answer right).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar.client import Client
from laminar.client.udp import UdpClient
from laminar.placement import shard_for
from laminar.wire import (
    ErrorCode,
    FetchRequest,
    FetchResponse,
    Ping,
    ProduceRequest,
    ProduceResponse,
    codec,
    decode_frame,
)
from tests.system.bpf_env import BPF_REASON
from tests.system.routed import (
    UDP_MAX_BYTES,
    Fleet,
    call_spread,
    laminar_cli,
    metrics,
    pongs,
    total,
)

needs_bpf = pytest.mark.skipif(BPF_REASON is not None, reason=str(BPF_REASON))
MODES = [pytest.param("ebpf", marks=needs_bpf), "cbpf"]
REQUESTS = 2400


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    made = Fleet(Path(tmp_path_factory.mktemp("routing")))
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("shards", [2, 3, 4])
@pytest.mark.parametrize("mode", MODES)
def test_every_datagram_reaches_its_owner_without_a_forward(
    fleet: Fleet, mode: str, shards: int
) -> None:
    node = fleet.node(mode, shards)
    assert node.routing_mode == mode
    pids = fleet.partitions(mode, shards)
    answers = pongs(call_spread(node, [Ping(pids[i % len(pids)]) for i in range(REQUESTS)]))
    assert len(answers) == REQUESTS
    for pong in answers:
        assert pong.shard_id == shard_for(pong.partition_id, shards) == pong.received_by
    assert {p.shard_id for p in answers} == set(range(shards))

    # Small produce and fetch requests take the same path.
    produced = call_spread(node, [ProduceRequest.from_values(p, [b"r%d" % p]) for p in pids])
    assert all(isinstance(a, ProduceResponse) and a.count == 1 for a in produced), produced
    fetched = call_spread(node, [FetchRequest(p, 0, max_bytes=1000) for p in pids])
    for pid, answer in zip(pids, fetched, strict=True):
        assert isinstance(answer, FetchResponse), answer
        assert [r.decode()[0] for r in answer.records] == [b"r%d" % pid]

    samples = metrics(node)
    assert total(samples, "laminar_forwarded_out_total") == 0
    assert total(samples, "laminar_forwarded_in_total") == 0
    if mode == "ebpf":
        sent = REQUESTS + 2 * len(pids)
        assert total(samples, "laminar_steering_datagrams_total", outcome="steered") >= sent
        assert total(samples, "laminar_steering_datagrams_total", outcome="no_socket") == 0


def test_userspace_forwarding_answers_from_the_owner(fleet: Fleet) -> None:
    node = fleet.node("userspace", 2)
    pids = fleet.partitions("userspace", 2)
    answers = pongs(call_spread(node, [Ping(pids[i % len(pids)]) for i in range(400)]))
    assert all(p.shard_id == shard_for(p.partition_id, 2) for p in answers)
    hopped = sum(1 for p in answers if p.received_by != p.shard_id)
    assert hopped > 0  # the kernel's hash is not the placement
    assert total(metrics(node), "laminar_forwarded_out_total") == hopped


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_shard_is_served_again_after_its_restart(fleet: Fleet, mode: str) -> None:
    node = fleet.node(mode, 3)
    owned = [p for p in fleet.partitions(mode, 3) if shard_for(p, 3) == 1]
    old_pid = node.kill_shard(1, wait_restart=False)
    # Sent while shard 1 is down: its socket (held by the supervisor) stays in
    # the group and queues them for the restarted process.
    answers = pongs(call_spread(node, [Ping(p) for p in owned * 4]))
    assert {(p.shard_id, p.received_by) for p in answers} == {(1, 1)}
    assert node.wait_shard_restarted(1, old_pid) != old_pid
    samples = metrics(node)
    assert samples[("laminar_shard_restarts_total", frozenset({("shard", "1")}))] >= 1
    assert total(samples, "laminar_forwarded_out_total") == 0


def _malformed() -> dict[str, list[bytes]]:
    ping = Ping(7).encode(1)
    bad_magic, bad_version = bytearray(ping), bytearray(ping)
    bad_magic[codec.OFFSET_MAGIC] = 0x41
    bad_version[codec.OFFSET_VERSION] = 9
    return {
        "short": [ping[:n] for n in (0, 1, 5, 12, 19, 20, 24)],
        "bad_magic": [bytes(bad_magic)] * 8,
        "bad_version": [bytes(bad_version)] * 9,
        "bad_length": [ping + b"\0" * n for n in range(1, 11)],
    }


@needs_bpf
def test_malformed_datagrams_are_counted_and_dropped_in_the_kernel(fleet: Fleet) -> None:
    node = fleet.node("ebpf", 3)
    before = metrics(node)
    kinds = _malformed()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        for datagrams in kinds.values():
            for data in datagrams:
                sock.sendto(data, (node.host, node.port))
        sock.sendto(Ping(7).encode(99), (node.host, node.port))
        reply, _ = sock.recvfrom(65536)  # the one answer: nothing came back for the rest
    assert decode_frame(reply).correlation_id == 99
    after = metrics(node)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    for reason, datagrams in kinds.items():
        counted = delta("laminar_steering_datagrams_total", outcome="malformed", reason=reason)
        assert counted == len(datagrams), reason
    assert delta("laminar_datagrams_received_total") == 1  # no shard saw a malformed one
    assert delta("laminar_protocol_errors_total") == 0


def test_too_big_for_a_datagram_gets_use_tcp(fleet: Fleet) -> None:
    mode = "cbpf" if BPF_REASON is not None else "ebpf"
    node = fleet.node(mode, 2)
    pid = fleet.partitions(mode, 2)[5]
    big_batch = ProduceRequest.from_values(pid, [b"x" * 600] * 3)
    assert len(big_batch.encode(1)) > UDP_MAX_BYTES
    with UdpClient((node.host, node.port), max_datagram_bytes=65507) as udp:
        [refused] = udp.call_many([big_batch])
        assert getattr(refused, "code", None) is ErrorCode.USE_TCP, refused
        assert "send it over TCP" in str(refused)
        # An answer that would not fit is refused too; TCP serves both.
        with Client(node.bootstrap) as client:
            first = client.produce("routed", 5, [b"y" * 1000] * 2)
        [too_big] = udp.call_many([FetchRequest(pid, first)])
        assert getattr(too_big, "code", None) is ErrorCode.USE_TCP, too_big
    with UdpClient((node.host, node.port), max_datagram_bytes=UDP_MAX_BYTES) as udp:
        [local] = udp.call_many([big_batch])
        assert getattr(local, "code", None) is ErrorCode.USE_TCP  # refused before sending


@pytest.mark.parametrize("mode", MODES)
def test_status_reports_the_routing_mode_and_kernel_counters(fleet: Fleet, mode: str) -> None:
    node = fleet.node(mode, 2)
    fleet.partitions(mode, 2)
    admin = f"{node.admin_host}:{node.admin_port}"
    result = laminar_cli(node, "status", "--json", "--admin", admin)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["routing_mode"] == mode
    assert doc["xdp"]["attached"] is False and doc["xdp"]["reason"] == "--xdp off"
    assert all(s["forwarded"] == 0 for s in doc["shards"])
    human = laminar_cli(node, "status", "--admin", admin).stdout
    assert f"routing {mode}" in human and "xdp       not attached: --xdp off" in human
    if mode == "ebpf":
        assert doc["steering"]["steered"] > 0 and doc["steering"]["malformed"] >= 0
        assert "steering  ebpf steered" in human
    else:
        assert doc["steering"] is None


@needs_bpf
def test_shards_hold_no_bpf_program_or_map(fleet: Fleet) -> None:
    """The supervisor loads the steering program and its socket array; a shard
    only needs its own UDP socket, and gets nothing more."""
    node = fleet.node("ebpf", 2)
    assert node.routing_mode == "ebpf"
    supervisor = _bpf_fds(node.pid)
    assert any("bpf-prog" in link for link in supervisor)  # the steering is there
    for pid in node.shard_pids():
        assert _bpf_fds(pid) == [], f"shard {pid} holds {_bpf_fds(pid)}"


def _bpf_fds(pid: int) -> list[str]:
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            links.append(str(fd.readlink()))
        except OSError:
            continue  # closed meanwhile
    return [link for link in links if link.startswith("anon_inode:bpf-")]
