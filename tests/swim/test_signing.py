"""Membership datagrams signed by certificate (`laminar.swim.signing`): each
node's datagrams verify with its certificate alone, a node speaks only as
itself, and nothing unsigned, foreign, altered or expired is opened.
Two agents on real UDP join with certificates and no secret."""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laminar.certs import Pem, make_ca, make_cert
from laminar.node.gossip import RELOAD_SLACK_BYTES, NodeGossip, certificate_sealer
from laminar.shards.config import NodeConfig
from laminar.swim import MemberState, Swim, SwimConfig
from laminar.swim.agent import MembershipAgent, format_address, monotonic_ms
from laminar.swim.errors import MalformedPacket, Unauthenticated
from laminar.swim.messages import Ack, Alive, Gossip, Packet, Ping
from laminar.swim.signing import CertificateError, CertificateSealer
from tests.support import wait_until_async

FAST = SwimConfig(probe_interval_ms=100, probe_timeout_ms=40, gossip_interval_ms=20)


class Pki:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ca = make_ca(tmp, "ca")
        self.other_ca = make_ca(tmp, "other-ca")
        self.certs = {n: make_cert(tmp, self.ca, n, node_id=n) for n in ("n1", "n2", "n3")}

    def sealer(self, pem: Pem, node_id: str, **kwargs: object) -> CertificateSealer:
        return CertificateSealer(
            Path(pem.cert).read_bytes(),
            Path(pem.key).read_bytes(),
            Path(self.ca.cert).read_bytes(),
            node_id=node_id,
            **kwargs,  # type: ignore[arg-type]
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def ping(source: str) -> Packet:
    return Packet(Ping(7, "n2", source, "127.0.0.1:1"), (Alive("n3", 4, "127.0.0.1:3", 1.0),))


def test_a_signed_datagram_opens_at_any_member_with_the_ca(pki: Pki) -> None:
    n1, n2 = pki.sealer(pki.certs["n1"], "n1"), pki.sealer(pki.certs["n2"], "n2")
    datagram = n1.seal(ping("n1"))
    assert n2.open(datagram) == ping("n1")
    assert n1.open(n2.seal(Packet(Gossip()))) == Packet(Gossip())


def test_a_node_cannot_speak_as_another(pki: Pki) -> None:
    n2 = pki.sealer(pki.certs["n2"], "n2")
    for message in (ping("n1"), Packet(Ack(3, "n1"))):
        with pytest.raises(Unauthenticated, match="signed by node n2 speaks as node n1"):
            n2.open(n2.seal(message))


def test_another_node_s_certificate_in_a_datagram_does_not_verify(pki: Pki) -> None:
    n1, n2 = pki.sealer(pki.certs["n1"], "n1"), pki.sealer(pki.certs["n2"], "n2")
    body, _, signature = _parts(n2.seal(ping("n1")))
    _, n1_certificate, _ = _parts(n1.seal(ping("n1")))
    # n2 signs a datagram as n1 and puts n1's certificate in: refused.
    forged = (
        body + n1_certificate + signature + struct.pack(">HH", len(n1_certificate), len(signature))
    )
    with pytest.raises(Unauthenticated, match="does not match the certificate of node n1"):
        n1.open(forged)


def _der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def _parts(datagram: bytes) -> tuple[bytes, bytes, bytes]:
    """A signed datagram's frame (with its length as sent), certificate, signature."""
    certificate_bytes, signature_bytes = struct.unpack(">HH", datagram[-4:])
    signature_at = len(datagram) - 4 - signature_bytes
    certificate_at = signature_at - certificate_bytes
    return (
        datagram[:certificate_at],
        datagram[certificate_at:signature_at],
        datagram[signature_at:-4],
    )


def test_certificates_from_another_ca_or_naming_no_node_are_refused(pki: Pki) -> None:
    n1 = pki.sealer(pki.certs["n1"], "n1")
    foreign = make_cert(pki.tmp, pki.other_ca, "foreign-n2", node_id="n2")
    stranger = CertificateSealer(
        Path(foreign.cert).read_bytes(),
        Path(foreign.key).read_bytes(),
        Path(pki.other_ca.cert).read_bytes(),
        node_id="n2",
    )
    with pytest.raises(Unauthenticated, match="not issued by the CA"):
        n1.open(stranger.seal(ping("n2")))
    # A client certificate from the right CA names no node: it cannot sign for one
    # (and cannot even make a sealer for a node id).
    client = make_cert(pki.tmp, pki.ca, "alice", hosts=())
    with pytest.raises(CertificateError, match="names node None"):
        pki.sealer(client, "n2")


def test_an_expired_certificate_is_refused(pki: Pki) -> None:
    """Checked on every datagram, also for a certificate whose verdict is kept."""
    n1 = pki.sealer(pki.certs["n1"], "n1")
    now = [time.time()]
    n2 = pki.sealer(pki.certs["n2"], "n2", wall_s=lambda: now[0])
    datagram = n1.seal(ping("n1"))
    assert n2.open(datagram) == ping("n1")
    now[0] = 4e9  # year 2096
    with pytest.raises(Unauthenticated, match="not valid now"):
        n2.open(datagram)
    # Met first once it (and its CA) expired: the CA no longer vouches for it.
    with pytest.raises(Unauthenticated, match="not issued by the CA"):
        pki.sealer(pki.certs["n3"], "n3", wall_s=lambda: 4e9).open(datagram)


def test_a_sealer_refuses_a_certificate_for_another_node_or_an_rsa_key(pki: Pki) -> None:
    with pytest.raises(CertificateError, match="names node 'n1', not this node"):
        pki.sealer(pki.certs["n1"], "n2")
    key, cert = pki.tmp / "rsa.key", pki.tmp / "rsa.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=rsa",
         "-addext", "subjectAltName=URI:laminar-node:n1"],
        check=True, capture_output=True,
    )  # fmt: skip
    with pytest.raises(CertificateError, match=r"EC .* or Ed25519"):
        pki.sealer(Pem(str(cert), str(key)), "n1")


def test_packets_filled_by_the_core_fit_a_datagram_with_the_signature(pki: Pki) -> None:
    sealer = pki.sealer(pki.certs["n1"], "n1")
    config = SwimConfig(packet_overhead_bytes=sealer.overhead_bytes)
    updates = tuple(
        Alive(f"member-{i:04d}", i, f"10.0.{i // 250}.{i % 250}:7070", 1.0) for i in range(60)
    )
    swim = Swim("n1", "127.0.0.1:1", rng=random.Random(1), now_ms=0, config=config)
    for update in updates:
        swim.step(Packet(Gossip(), (update,)), 0)
    swim.tick(10_000)
    sent = swim.ready().packets
    assert sent
    for outgoing in sent:
        datagram = sealer.seal(outgoing.packet)
        assert len(datagram) <= config.packet_bytes_max
        assert sealer.open(datagram) == outgoing.packet


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_damaged_datagram_is_refused_never_opened_or_crashing(
    pki: Pki, data: st.DataObject
) -> None:
    sealer = pki.sealer(pki.certs["n1"], "n1")
    datagram = bytearray(sealer.seal(ping("n1")))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend", "lengths"]))
    if how == "flip":
        at = data.draw(st.integers(0, len(datagram) - 1))
        datagram[at] ^= data.draw(st.integers(1, 255))
    elif how == "truncate":
        del datagram[data.draw(st.integers(0, len(datagram) - 1)) :]
    elif how == "extend":
        datagram += data.draw(st.binary(min_size=1, max_size=64))
    else:
        datagram[-4:] = data.draw(st.binary(min_size=4, max_size=4))
    with pytest.raises((Unauthenticated, MalformedPacket)):
        sealer.open(bytes(datagram))


def test_agents_with_certificates_and_no_secret_join_and_a_foreign_one_does_not(
    pki: Pki,
) -> None:
    asyncio.run(_join_with_certificates(pki))


def _agent(name: str, sealer: CertificateSealer) -> MembershipAgent:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    config = SwimConfig(
        probe_interval_ms=100,
        probe_timeout_ms=40,
        gossip_interval_ms=20,
        packet_overhead_bytes=sealer.overhead_bytes + RELOAD_SLACK_BYTES,  # as a node does
    )
    address = format_address(*sock.getsockname())
    swim = Swim(name, address, rng=random.Random(name), now_ms=monotonic_ms(), config=config)
    return MembershipAgent(swim, sock, sealer)


async def _join_with_certificates(pki: Pki) -> None:
    agents = [_agent(n, pki.sealer(pki.certs[n], n)) for n in ("n1", "n2")]
    foreign = make_cert(pki.tmp, pki.other_ca, "foreign-n3", node_id="n3")
    intruder = _agent(
        "n3",
        CertificateSealer(
            Path(foreign.cert).read_bytes(),
            Path(foreign.key).read_bytes(),
            Path(pki.other_ca.cert).read_bytes(),
            node_id="n3",
        ),
    )
    seed = agents[0].swim.address
    agents[0].start([])
    agents[1].start([seed])
    intruder.start([seed])
    try:
        await wait_until_async(
            lambda: all(len(a.view().live()) == 2 for a in agents), "n1 and n2 see each other"
        )
        await wait_until_async(lambda: agents[0].stats.unauthenticated >= 3, "three refused")
        for agent in agents:
            member = agent.view().get("n3")
            assert member is None or member.state is not MemberState.ALIVE
    finally:
        for agent in [*agents, intruder]:
            agent.close()


def test_a_reload_signs_with_the_new_certificate_and_keeps_the_old_on_failure(
    pki: Pki, tmp_path: Path
) -> None:
    """SIGHUP (`NodeGossip.reload`): the files' certificate signs from then on;
    a certificate for another node is refused and the one in use stays."""
    files = {"cert": tmp_path / "n1.crt", "key": tmp_path / "n1.key"}
    for kind, source in (("cert", pki.certs["n1"].cert), ("key", pki.certs["n1"].key)):
        shutil.copy(source, files[kind])
    config = cast(
        NodeConfig,
        SimpleNamespace(
            tls_cert_file=str(files["cert"]),
            tls_key_file=str(files["key"]),
            tls_ca_file=pki.ca.cert,
            node_id="n1",
        ),
    )
    sealer = certificate_sealer(config)
    gossip = NodeGossip(_agent("n1", sealer), "127.0.0.1:1", [], False, signed=True)
    reader = pki.sealer(pki.certs["n2"], "n2")
    try:
        renewed = make_cert(pki.tmp, pki.ca, "n1-renewed", node_id="n1")
        for kind, source in (("cert", renewed.cert), ("key", renewed.key)):
            shutil.copy(source, files[kind])
        gossip.reload(config)
        datagram = gossip.agent._sealer.seal(ping("n1"))
        assert _der(Path(renewed.cert).read_bytes()) in datagram
        assert reader.open(datagram) == ping("n1")
        for kind, source in (("cert", pki.certs["n2"].cert), ("key", pki.certs["n2"].key)):
            shutil.copy(source, files[kind])
        gossip.reload(config)  # names n2: refused, logged
        assert _der(Path(renewed.cert).read_bytes()) in gossip.agent._sealer.seal(ping("n1"))
    finally:
        gossip.close()
