"""The TLS contexts of peer links, on in-memory handshakes (two `TlsSession`s
joined by hand): what a shard port learns of who dialed it, and what a
dialing node accepts; and the reload of both contexts."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest

from laminar.certs import Pem, make_ca, make_cert
from laminar.security.principal import node_id_from_certificate
from laminar.security.tls import ServerTls, TlsFiles, TlsSession, peer_client_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pem]:
    tmp = tmp_path_factory.mktemp("peer-certs")
    ca, other_ca = make_ca(tmp, "ca"), make_ca(tmp, "other-ca")
    return {
        "ca": ca,
        "n1": make_cert(tmp, ca, "n1", node_id="n1"),
        "n2": make_cert(tmp, ca, "n2", node_id="n2"),
        "admin": make_cert(tmp, ca, "admin", hosts=()),
        "foreign": make_cert(tmp, other_ca, "foreign", node_id="n2"),
    }


def _files(pems: dict[str, Pem], name: str) -> TlsFiles:
    return TlsFiles(pems[name].cert, pems[name].key, pems["ca"].cert)


def _handshake(client: TlsSession, server: TlsSession) -> None:
    """Pump both ways until both ends are done; raises `ssl.SSLError` on failure."""
    for _ in range(10):
        client_done = client.handshake()
        server.feed(client.take_output())
        server_done = server.handshake()
        client.feed(server.take_output())
        if client_done and server_done:
            # TLS 1.3: the server's verdict on the client's certificate comes after.
            assert client.read(1) is None
            return
    raise AssertionError("the handshake did not finish")


def _dial(pems: dict[str, Pem], client: ssl.SSLContext, server: str) -> TlsSession:
    """A handshake of `client` with node `server`'s shard port: the server's session."""
    server_session = TlsSession(ServerTls(_files(pems, server)).context, server_side=True)
    _handshake(TlsSession(client, server_side=False), server_session)
    return server_session


def test_a_node_dialing_a_shard_port_is_named_by_its_certificate(pems: dict[str, Pem]) -> None:
    accepted = _dial(pems, peer_client_context(_files(pems, "n1")), "n2")
    certificate = accepted.peer_certificate()
    assert certificate is not None and node_id_from_certificate(certificate) == "n1"


def test_a_client_without_a_certificate_still_connects_and_names_no_node(
    pems: dict[str, Pem],
) -> None:
    client = ssl.create_default_context(cafile=pems["ca"].cert)
    client.check_hostname = False
    assert _dial(pems, client, "n2").peer_certificate() is None
    client.load_cert_chain(pems["admin"].cert, pems["admin"].key)
    certificate = _dial(pems, client, "n2").peer_certificate()
    assert certificate is not None and node_id_from_certificate(certificate) is None


def test_a_certificate_from_another_ca_is_refused_either_way(pems: dict[str, Pem]) -> None:
    foreign = TlsFiles(pems["foreign"].cert, pems["foreign"].key, pems["ca"].cert)
    with pytest.raises(ssl.SSLError, match=r"certificate verify failed|unknown ca"):
        _dial(pems, peer_client_context(foreign), "n2")  # it dials us
    with pytest.raises(ssl.SSLError, match=r"certificate verify failed|unknown ca"):
        _dial(pems, peer_client_context(_files(pems, "n1")), "foreign")  # we dial it


def test_reload_swaps_the_dialing_context_too(pems: dict[str, Pem], tmp_path: Path) -> None:
    served = TlsFiles(str(tmp_path / "node.crt"), str(tmp_path / "node.key"), pems["ca"].cert)
    shutil.copy(pems["n1"].cert, served.cert_file)
    shutil.copy(pems["n1"].key, served.key_file)
    tls = ServerTls(served)
    before = tls.dial_context()
    assert tls.reload() and tls.dial_context() is not before
    Path(served.key_file).write_text("not a key")
    kept = tls.dial_context(), tls.context
    assert not tls.reload() and (tls.dial_context(), tls.context) == kept
    with pytest.raises(ValueError, match="--tls-ca-file"):
        ServerTls(TlsFiles(pems["n1"].cert, pems["n1"].key)).dial_context()
