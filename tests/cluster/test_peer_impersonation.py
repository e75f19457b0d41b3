"""Issue 24, finding 2, against real nodes: a local process that opens a peer
connection, claims another node's id and sends a forged Raft INSTALL (term
10^6, anchor 10^6) erased every acknowledged record on main. Now:

- without the cluster secret it cannot open a peer session at all (a cluster
  never runs without one; the proof must be made with the claimed node's key);
- holding the secret (which derives every node's key: nothing at the
  handshake can stop that) it gets a session, but the forged INSTALL is
  refused by the Raft core, and a message naming another sender than the
  session's node closes the session; each refusal is logged and counted.

Delivery is checked by identity: every acknowledged record is on every
replica, once, at its acknowledged index.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from pathlib import Path

from laminar.client import Client
from laminar.placement import partition_id, shard_for
from laminar.raft import Membership, Message
from laminar.raft.messages import HEARTBEAT, INSTALL
from laminar.replication.auth import Initiator, PeerAuth
from laminar.replication.codec import encode_batch
from laminar.replication.transport import PEER_HELLO, PEER_PROOF, RAFT_BATCH, peer_decoder
from laminar.wire import NEED_DATA, Frame, encode_frame
from laminar.wire.records import decode_record
from tests.cluster.nodes import Cluster, read_replica, wait_committed
from tests.support import wait_until
from tests.system.nodes import RunningNode

RECORDS = 201
BIG = 10**6
VOTERS = ("n1", "n2", "n3")


def _read(sock: socket.socket) -> Frame | None:
    """The next frame, or None once the node closed (or reset) the connection;
    raises TimeoutError when the node neither answers nor closes."""
    decoder = peer_decoder(1 << 20)
    while True:
        frame = decoder.next_frame()
        if frame is not NEED_DATA:
            return frame
        try:
            data = sock.recv(1 << 16)
        except ConnectionError:
            return None
        if not data:
            return None
        decoder.feed(data)


def _peer_socket(node: RunningNode, pid: int) -> socket.socket:
    port = node.shard_ports[shard_for(pid, len(node.shard_ports))]
    sock = socket.create_connection((node.host, port), timeout=10)
    return sock


def _forged_install(pid: int, src: str, dst: str) -> bytes:
    install = Message(
        INSTALL, src, dst, BIG, BIG, BIG, commit=BIG, data=Membership(VOTERS).encode()
    )
    return encode_frame(RAFT_BATCH, 0, 0, {}, encode_batch([(pid, install)]))


def _claim_without_the_secret(node: RunningNode, pid: int, claimed: str, dst: str) -> bool:
    """Open a peer session as `claimed` with an empty proof (what the handshake
    without a secret was) and send a forged install; whether the node took the proof."""
    with contextlib.closing(_peer_socket(node, pid)) as sock:
        sock.sendall(encode_frame(PEER_HELLO, 1, 0, {"node_id": claimed, "nonce": os.urandom(32)}))
        challenge = _read(sock)
        assert challenge is not None and not challenge.is_error
        sock.sendall(encode_frame(PEER_PROOF, 2, 0, {"mac": b""}))
        answer = _read(sock)
        with contextlib.suppress(OSError):
            sock.sendall(_forged_install(pid, claimed, dst))
        return answer is not None and not answer.is_error


def _claim_with_the_secret(
    node: RunningNode, pid: int, claimed: str, dst: str, secret: bytes
) -> None:
    """A holder of the secret: a session as `claimed`, a forged install, then a
    message that names a third node as its sender (the session must close)."""
    initiator = Initiator(PeerAuth.from_secret(claimed, secret))
    with contextlib.closing(_peer_socket(node, pid)) as sock:
        sock.sendall(encode_frame(PEER_HELLO, 1, 0, initiator.hello()))
        challenge = _read(sock)
        assert challenge is not None
        sock.sendall(encode_frame(PEER_PROOF, 2, 0, initiator.on_challenge(challenge.header)))
        answer = _read(sock)
        assert answer is not None and not answer.is_error, "a secret holder gets a session"
        sock.sendall(_forged_install(pid, claimed, dst))
        third = next(n for n in VOTERS if n not in (claimed, dst))
        as_third = Message(HEARTBEAT, third, dst, BIG)
        sock.sendall(encode_frame(RAFT_BATCH, 0, 0, {}, encode_batch([(pid, as_third)])))
        assert _read(sock) is None, "the session names one node: it is closed"


def _refused(node: RunningNode, reason: str) -> float:
    status, text = node.admin_get("/metrics")
    assert status == 200
    pattern = rf'^laminar_peer_refused_total\{{[^}}]*reason="{reason}"[^}}]*\}} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.MULTILINE))


def _check_every_acknowledged_record(cluster: Cluster, pid: int, acked: dict[int, bytes]) -> None:
    for name, node in cluster.nodes.items():
        held = {index: decode_record(blob)[0] for index, blob in read_replica(node, pid)}
        values = [held.get(index) for index in acked]
        assert values == list(acked.values()), f"{name} lost acknowledged records"
        assert sorted(held.values()) == sorted(set(held.values())), f"{name}: duplicates"


def test_a_local_process_cannot_impersonate_a_peer_or_erase_a_partition(tmp_path: Path) -> None:
    with Cluster.start(tmp_path, 3, cores=1) as cluster:
        with Client(cluster.bootstrap) as client:
            topic = client.create_topic("victim", partitions=1, replication_factor=3)
            pid = partition_id(topic.topic_id, 0)
            acked: dict[int, bytes] = {}
            for i in range(RECORDS):
                value = b"r%03d" % i
                acked[client.produce("victim", 0, [value])] = value
        wait_committed(cluster, pid, max(acked) + 1)
        claims = {"n1": "n3", "n2": "n3", "n3": "n1"}  # victim -> the id claimed

        taken = [
            victim
            for victim, claimed in claims.items()
            if _claim_without_the_secret(cluster.nodes[victim], pid, claimed, victim)
        ]
        _check_every_acknowledged_record(cluster, pid, acked)
        assert taken == [], "a process without the secret opened peer sessions"
        for victim in claims:
            wait_until(
                lambda v=victim: "refused a peer connection" in cluster.nodes[v].log_text(),
                f"{victim} logging the refused handshake",
            )
            assert _refused(cluster.nodes[victim], "handshake") >= 1

        secret = Path(cluster.flags["cluster_secret_file"]).read_bytes().strip()
        for victim, claimed in claims.items():
            _claim_with_the_secret(cluster.nodes[victim], pid, claimed, victim, secret)
        for victim, node in cluster.nodes.items():
            wait_until(lambda n=node: _refused(n, "raft_implausible") >= 1, f"{victim} counting")
            assert _refused(node, "impersonation") >= 1
            log = node.log_text()
            assert f"refused install from node {claims[victim]} at term {BIG}" in log
            assert "sent raft messages as node" in log

        _check_every_acknowledged_record(cluster, pid, acked)
        with Client(cluster.bootstrap) as client:  # the cluster still serves
            index = client.produce("victim", 0, [b"after"])
        acked[index] = b"after"
        wait_committed(cluster, pid, index + 1)
        _check_every_acknowledged_record(cluster, pid, acked)
        assert all(node.admin_get("/health")[0] == 200 for node in cluster.nodes.values())
