"""Issue 28, peers: real three-node clusters whose links are mutual TLS with
per-node certificates (`laminar.certs.make_cluster_certs`: one CA, node ids
n1..n3 named by the URI SAN laminar-node:ID), and no cluster secret.

- With every node's certificate from the cluster's CA, records produced with
  replication factor 3 reach every replica, across a leader's SIGKILL.
- A node whose certificate comes from another CA never joins: the others'
  TLS refuses its links and it cannot verify theirs (both logged), and it
  never learns the topic.
- A node showing n2's certificate while it is n3 is refused: its hello
  claims an id its certificate does not name, and a node dialing n3 finds
  a certificate naming n2. A process holding n2's certificate cannot claim
  n3 either. Each refusal is logged and counted.

Delivery is checked by identity: every acknowledged record is on every
replica that must have it, once, at its acknowledged index.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.certs import make_ca, make_cert, make_cluster_certs
from laminar.client import Client
from laminar.placement import partition_id
from laminar.replication.auth import Initiator, PeerAuth
from laminar.replication.transport import PEER_HELLO, peer_decoder
from laminar.swim.agent import parse_address
from laminar.swim.messages import Packet, Ping
from laminar.swim.signing import CertificateSealer
from laminar.wire import NEED_DATA, Frame, encode_frame
from laminar.wire.records import decode_record
from tests.cluster.nodes import Cluster, gossip_node, leader_of, offsets, read_replica
from tests.support import wait_until
from tests.system.nodes import RunningNode

pytestmark = pytest.mark.timeout(240)

RECORDS = 60


def _certs(tmp: Path) -> Path:
    folder = tmp / "certs"
    make_cluster_certs(folder, days=2)
    return folder


def _client(cluster: Cluster, among: list[str] | None = None) -> Client:
    names = among or list(cluster.live())
    return _tls_client([cluster.nodes[n] for n in names])


def _tls_client(nodes: list[RunningNode]) -> Client:
    bootstrap = ",".join(node.bootstrap for node in nodes)
    return Client(bootstrap, tls=True, ca_file=str(nodes[0].flags["tls_ca_file"]))


def _produce(client: Client, topic: str, values: list[bytes]) -> dict[int, bytes]:
    return {client.produce(topic, 0, [value]): value for value in values}


def _held(node: RunningNode, pid: int) -> dict[int, bytes]:
    return {index: decode_record(blob)[0] for index, blob in read_replica(node, pid)}


def _check_replicas(cluster: Cluster, names: list[str], pid: int, acked: dict[int, bytes]) -> None:
    _check_nodes({name: cluster.nodes[name] for name in names}, pid, acked)


def _check_nodes(nodes: dict[str, RunningNode], pid: int, acked: dict[int, bytes]) -> None:
    """Every replica in `nodes` holds every acknowledged record, once, at its index."""
    end = max(acked) + 1
    for name, node in nodes.items():
        wait_until(lambda n=node: offsets(n, pid).committed_index >= end, f"{name} at {end}")
        held = _held(node, pid)
        assert [held.get(index) for index in acked] == list(acked.values()), name
        assert sorted(held.values()) == sorted(set(held.values())), f"{name}: duplicates"


def _refused(node: RunningNode, reason: str) -> float:
    status, text = node.admin_get("/metrics")
    assert status == 200
    pattern = rf'^laminar_peer_refused_total\{{[^}}]*reason="{reason}"[^}}]*\}} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.MULTILINE))


def test_node_certificates_from_one_ca_replicate_across_a_leader_kill(tmp_path: Path) -> None:
    with Cluster.start(tmp_path, 3, cores=1, certs=_certs(tmp_path)) as cluster:
        assert all(n.node_file()["peer_auth"] == "certificates" for n in cluster.nodes.values())
        with _client(cluster) as client:
            topic = client.create_topic("mtls", partitions=1, replication_factor=3)
            pid = partition_id(topic.topic_id, 0)
            acked = _produce(client, "mtls", [b"a%03d" % i for i in range(RECORDS)])
        _check_replicas(cluster, ["n1", "n2", "n3"], pid, acked)

        leader = leader_of(cluster, pid)
        cluster.nodes[leader].kill()
        survivors = sorted(cluster.live())
        leader_of(cluster, pid, survivors)
        with _client(cluster, survivors) as client:
            acked |= _produce(client, "mtls", [b"b%03d" % i for i in range(RECORDS)])
        _check_replicas(cluster, survivors, pid, acked)


@contextlib.contextmanager
def _cluster_without_n3(
    tmp_path: Path, certs: Path
) -> Iterator[tuple[Cluster, int, dict[int, bytes]]]:
    """n1..n3 on `certs`, whose n3 must stay out: a topic of replication factor
    3 written through n1 and n2 (their majority commits it), on both of them,
    and no link of theirs to n3 ever up. Yields (cluster, its pid, the acked)."""
    with Cluster.start(tmp_path, 3, cores=1, certs=certs) as cluster:
        with _client(cluster, ["n1", "n2"]) as client:
            topic = client.create_topic("kept", partitions=1, replication_factor=3)
            pid = partition_id(topic.topic_id, 0)
            acked = _produce(client, "kept", [b"k%03d" % i for i in range(RECORDS)])
        _check_replicas(cluster, ["n1", "n2"], pid, acked)
        for name in ("n1", "n2"):
            log = cluster.nodes[name].log_text()
            assert not re.search(r"raft link to node n3 shard \d+ is up", log), name
        yield cluster, pid, acked


def _never_learns(node: RunningNode, pid: int, ca_file: str) -> None:
    """`node` answers for `pid` as one that never heard of its topic (or of
    any metadata at all)."""
    with pytest.raises(AssertionError, match=r"UNKNOWN|NOT_READY"):
        offsets(node, pid, ca_file)


def test_a_node_with_a_certificate_from_another_ca_never_joins(tmp_path: Path) -> None:
    certs = _certs(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    other_ca = make_ca(other, "other-ca")
    foreign = make_cert(other, other_ca, "n3", node_id="n3")
    shutil.copy(foreign.cert, certs / "n3.crt")
    shutil.copy(foreign.key, certs / "n3.key")
    with _cluster_without_n3(tmp_path, certs) as (cluster, pid, _acked):
        n1, n2, n3 = (cluster.nodes[n] for n in ("n1", "n2", "n3"))
        for node in (n1, n2):  # n3's links fail the CA check here
            wait_until(
                lambda n=node: re.search(r"TLS with \S+ failed .* certificate verify failed",
                                         n.log_text()),
                "the refusal of n3's certificate",
            )  # fmt: skip
        # ... and n1's and n2's links refuse n3's certificate: n3 hears why.
        wait_until(
            lambda: re.search(r"raft link to node n[12]: .*unknown ca", n3.log_text()),
            "n3 told that its CA is unknown",
        )
        _never_learns(n3, pid, other_ca.cert)


def _impostor_hello(
    node: RunningNode, pid: int, certs: Path, as_cert: str, claimed: str
) -> Frame | None:
    """A TLS connection to `node`'s shard of `pid` showing node `as_cert`'s
    certificate, whose hello claims node `claimed`: the node's answer (None: closed)."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(certs / f"{as_cert}.crt", certs / f"{as_cert}.key")
    port = node.shard_ports[0]
    with (
        socket.create_connection((node.host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=node.host) as sock,
    ):
        hello = Initiator(PeerAuth.with_certificates(claimed, lambda: context)).hello()
        sock.sendall(encode_frame(PEER_HELLO, 1, 0, hello))
        decoder = peer_decoder(1 << 20)
        while True:
            frame = decoder.next_frame()
            if frame is not NEED_DATA:
                return frame
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                data = sock.recv(1 << 16)
                if data:
                    decoder.feed(data)
                    continue
            return None


def test_a_node_cannot_speak_for_another_node_id(tmp_path: Path) -> None:
    certs = _certs(tmp_path)
    for ext in ("crt", "key"):  # n3 shows n2's certificate
        shutil.copy(certs / f"n2.{ext}", certs / f"n3.{ext}")
    with _cluster_without_n3(tmp_path, certs) as (cluster, pid, acked):
        n1, n2, n3 = (cluster.nodes[n] for n in ("n1", "n2", "n3"))
        for node in (n1, n2):  # n3 dials both (its votes): each refuses its hello
            wait_until(
                lambda n=node: (
                    "a peer claims to be node 'n3' but its certificate names node 'n2'"
                    in n.log_text()
                ),
                "the refusal of n3's hello",
            )
            assert _refused(node, "handshake") >= 1
        # Only a leader (or a candidate) dials n3, and it refuses the certificate n3 shows.
        wait_until(
            lambda: any(
                "expected node 'n3' there, its certificate names node 'n2'" in n.log_text()
                for n in (n1, n2)
            ),
            "the refusal of n3's certificate by the node that dials it",
        )
        _never_learns(n3, pid, str(certs / "ca.crt"))

        answer = _impostor_hello(n1, pid, certs, as_cert="n2", claimed="n3")
        assert answer is None or answer.is_error, "n2's certificate opened a session as n3"
        own = _impostor_hello(n1, pid, certs, as_cert="n2", claimed="n2")
        assert own is not None and not own.is_error, "n2's certificate does open n2's session"
        with _client(cluster, ["n1", "n2"]) as client:  # the cluster still serves
            acked |= _produce(client, "kept", [b"after"])
        _check_replicas(cluster, ["n1", "n2"], pid, acked)


def test_nodes_that_join_by_gossip_sign_it_and_link_by_certificate(tmp_path: Path) -> None:
    """--join with certificates and no secret: membership datagrams are signed
    by each node's certificate, links are mutual TLS; a node with another CA's
    certificate never becomes a member, a datagram signed by one member in
    another's name is dropped, and records survive the leader's SIGKILL."""
    certs = _certs(tmp_path)
    with contextlib.ExitStack() as stack:
        nodes: dict[str, RunningNode] = {}
        for name in ("n1", "n2", "n3"):
            seed = nodes.get("n1")
            nodes[name] = stack.enter_context(gossip_node(tmp_path, name, certs, seed))
        n1 = nodes["n1"]
        assert all(n.node_file()["peer_auth"] == "certificates" for n in nodes.values())
        assert _membership(n1)["auth"] == "certificates"
        wait_until(lambda: all(_members(n) == set(nodes) for n in nodes.values()), "3 members")

        other = tmp_path / "other"
        other.mkdir()
        other_ca = make_ca(other, "other-ca")
        make_cert(other, other_ca, "n4", node_id="n4")
        foreign = stack.enter_context(gossip_node(tmp_path, "n4", other, n1, ca_file=other_ca.cert))
        wait_until(lambda: _membership(n1)["unauthenticated"] >= 3, "n4's datagrams refused")
        wait_until(lambda: "was not issued by the CA" in n1.log_text(), "the refusal logged")
        assert _members(foreign) == {"n4"}
        foreign.kill()
        # n3's key in n2's name, sent until its drop is logged (at most one drop
        # is logged per 10 s):
        wait_until(
            lambda: (
                _sign_as(certs, "n3", claimed="n2", to=n1)
                or "signed by node n3 speaks as node n2" in n1.log_text()
            ),
            "the forgery dropped and logged",
            timeout_s=40,
        )
        assert all(_members(n) == set(nodes) for n in nodes.values())

        with _tls_client(list(nodes.values())) as client:
            topic = client.create_topic("joined", partitions=1, replication_factor=3)
            pid = partition_id(topic.topic_id, 0)
            acked = _produce(client, "joined", [b"j%03d" % i for i in range(RECORDS)])
        cluster_leader = next(
            name for name, node in nodes.items() if offsets(node, pid).leader == name
        )
        nodes[cluster_leader].kill()
        survivors = {n: node for n, node in nodes.items() if n != cluster_leader}
        with _tls_client(list(survivors.values())) as client:
            acked |= _produce(client, "joined", [b"k%03d" % i for i in range(RECORDS)])
        _check_nodes(survivors, pid, acked)


def _membership(node: RunningNode) -> dict[str, Any]:
    membership: dict[str, Any] = json.loads(node.admin_get("/status")[1])["membership"]
    return membership


def _members(node: RunningNode) -> set[str]:
    status = json.loads(node.admin_get("/status")[1])
    return {m["node_id"] for m in status["members"] if m["state"] == "alive"}


def _sign_as(certs: Path, signer: str, *, claimed: str, to: RunningNode) -> None:
    """A ping signed with `signer`'s certificate and key that claims to come from `claimed`."""
    sealer = CertificateSealer.from_files(
        str(certs / f"{signer}.crt"), str(certs / f"{signer}.key"), str(certs / "ca.crt"),
        node_id=signer,
    )  # fmt: skip
    address = to.info["membership_address"]
    host, port = parse_address(address)
    datagram = sealer.seal(Packet(Ping(1, "n1", claimed, "127.0.0.1:9")))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(datagram, (host, port))
