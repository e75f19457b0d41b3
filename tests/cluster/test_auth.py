"""Peer authentication: each side proves its own node id; nothing replayed, reflected
or made for another node passes; the secret file is checked through its descriptor."""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import ssl
from pathlib import Path

import pytest

from laminar.replication.auth import (
    PROTOCOL,
    Initiator,
    PeerAuth,
    PeerAuthError,
    Responder,
    SecretFileError,
    load_secret,
)

SECRET = b"correct horse battery staple"


def _pair(
    secret_i: bytes | None = SECRET, secret_r: bytes | None = SECRET
) -> tuple[Initiator, Responder]:
    return (
        Initiator(PeerAuth.from_secret("n1", secret_i)),
        Responder(PeerAuth.from_secret("n2", secret_r)),
    )


def test_nodes_sharing_the_secret_authenticate_each_other() -> None:
    initiator, responder = _pair()
    proof = initiator.on_challenge(responder.on_hello(initiator.hello()))
    assert responder.on_proof(proof) == "n1"
    assert initiator.peer_id == "n2"


def test_an_initiator_without_the_secret_is_refused() -> None:
    initiator, responder = _pair(secret_i=b"another secret of enough length")
    with pytest.raises(PeerAuthError, match="n2"):  # it cannot even check the responder
        initiator.on_challenge(responder.on_hello(initiator.hello()))
    forged = {"mac": bytes(32)}
    with pytest.raises(PeerAuthError, match="failed to prove it is node 'n1'"):
        responder.on_proof(forged)


def test_a_responder_without_the_secret_is_found_out_before_we_prove_anything() -> None:
    initiator, responder = _pair(secret_r=b"another secret of enough length")
    with pytest.raises(PeerAuthError):
        initiator.on_challenge(responder.on_hello(initiator.hello()))


def test_a_recorded_proof_does_not_open_a_second_connection() -> None:
    initiator, responder = _pair()
    proof = initiator.on_challenge(responder.on_hello(initiator.hello()))
    replayed_to = Responder(PeerAuth.from_secret("n2", SECRET))
    replayed_to.on_hello(initiator.hello())  # same hello, fresh responder nonce
    with pytest.raises(PeerAuthError):
        replayed_to.on_proof(proof)


def test_a_responder_mac_cannot_be_reflected_as_a_proof() -> None:
    initiator, responder = _pair()
    challenge = responder.on_hello(initiator.hello())
    with pytest.raises(PeerAuthError):
        responder.on_proof({"mac": challenge["mac"]})


def test_without_a_secret_ids_are_exchanged_and_nothing_is_proven() -> None:
    initiator, responder = _pair(None, None)
    assert not PeerAuth.from_secret("n1", None).required
    assert responder.on_proof(initiator.on_challenge(responder.on_hello(initiator.hello()))) == "n1"


def test_a_node_with_a_secret_refuses_one_without() -> None:
    initiator, responder = _pair(secret_i=None)
    with pytest.raises(PeerAuthError):
        initiator.on_challenge(responder.on_hello(initiator.hello()))


@pytest.mark.parametrize(
    "message",
    [
        None,
        [],
        {},
        {"node_id": 3, "nonce": bytes(32)},
        {"node_id": "n", "nonce": b"short"},
        {"node_id": "x" * 300, "nonce": bytes(32)},
    ],
)
def test_malformed_hellos_are_refused_with_a_clear_error(message: object) -> None:
    with pytest.raises(PeerAuthError):
        Responder(PeerAuth.from_secret("n2", SECRET)).on_hello(message)


def test_a_proof_before_a_hello_is_refused() -> None:
    with pytest.raises(PeerAuthError, match="before"):
        Responder(PeerAuth.from_secret("n2", SECRET)).on_proof({"mac": bytes(32)})


def test_fuzzed_handshake_messages_never_authenticate() -> None:
    rng = random.Random(7)
    initiator = Initiator(PeerAuth.from_secret("n1", SECRET))
    for _ in range(500):
        responder = Responder(PeerAuth.from_secret("n2", SECRET))
        responder.on_hello(initiator.hello())
        with pytest.raises(PeerAuthError):
            responder.on_proof({"mac": rng.randbytes(rng.choice((0, 31, 32, 33)))})


def test_the_secret_file_must_be_private_and_long_enough(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"  " + SECRET + b"\n")
    os.chmod(path, 0o600)
    assert load_secret(str(path)) == SECRET
    os.chmod(path, 0o644)
    with pytest.raises(SecretFileError, match="chmod 600"):
        load_secret(str(path))
    path.write_bytes(b"short\n")
    os.chmod(path, 0o600)
    with pytest.raises(SecretFileError, match="at least 16"):
        load_secret(str(path))
    with pytest.raises(SecretFileError, match="cannot read"):
        load_secret(str(tmp_path / "missing"))


def test_each_node_proves_with_its_own_key() -> None:
    auth = PeerAuth.from_secret("n1", SECRET)
    assert len({auth.key_of("n1"), auth.key_of("n2"), auth.key_of("n11")}) == 3
    assert PeerAuth.from_secret("n9", SECRET).key_of("n2") == auth.key_of("n2")


def _mac(key: bytes, role: bytes, initiator: str, responder: str, nonces: bytes) -> bytes:
    transcript = b"|".join((PROTOCOL, role, initiator.encode(), responder.encode(), nonces))
    return hmac.new(key, transcript, hashlib.sha256).digest()


def test_a_node_key_cannot_prove_another_node_id() -> None:
    """Node n1's credential (its key) does not open a session as n3: the proof
    must be made with the key of the id the hello claims."""
    n1_key = PeerAuth.from_secret("n1", SECRET).key_of("n1")
    nonce_i = bytes(range(32))
    responder = Responder(PeerAuth.from_secret("n2", SECRET))
    challenge = responder.on_hello({"node_id": "n3", "nonce": nonce_i})
    nonces = nonce_i + challenge["nonce"]
    with pytest.raises(PeerAuthError, match="failed to prove it is node 'n3'"):
        responder.on_proof({"mac": _mac(n1_key, b"initiator", "n3", "n2", nonces)})


def test_a_responder_cannot_answer_for_another_node() -> None:
    """A responder that proves with its own key but claims another id is refused
    before the initiator proves anything."""
    initiator = Initiator(PeerAuth.from_secret("n1", SECRET))
    hello = initiator.hello()
    n2_key = PeerAuth.from_secret("n2", SECRET).key_of("n2")
    nonce_r = bytes(32)
    mac = _mac(n2_key, b"responder", "n1", "n3", hello["nonce"] + nonce_r)
    with pytest.raises(PeerAuthError, match="n3"):
        initiator.on_challenge({"node_id": "n3", "nonce": nonce_r, "mac": mac})


def _secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_bytes(SECRET)
    os.chmod(path, 0o600)
    return path


def test_a_symlinked_secret_file_is_refused(tmp_path: Path) -> None:
    """Opened with O_NOFOLLOW: a link cannot redirect the read after a check."""
    link = tmp_path / "link"
    link.symlink_to(_secret_file(tmp_path))
    with pytest.raises(SecretFileError, match="cannot read"):
        load_secret(str(link))


def test_a_secret_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = _secret_file(tmp_path)
    other = os.geteuid() + 4242
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    os.chown(path, other, -1)
    with pytest.raises(SecretFileError, match=f"belongs to uid {other}"):
        load_secret(str(path))


def test_a_secret_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(SecretFileError, match="not a regular file"):
        load_secret(str(fifo))


def _certified(node_id: str) -> PeerAuth:
    return PeerAuth.with_certificates(node_id, ssl.create_default_context)


@pytest.mark.parametrize(
    ("certified", "why"),
    [("n3", "its certificate names node 'n3'"), (None, "its certificate names no node")],
)
def test_in_certificate_mode_a_hello_must_claim_the_certified_node(
    certified: str | None, why: str
) -> None:
    initiator = Initiator(_certified("n1"))
    responder = Responder(_certified("n2"), certified=certified)
    with pytest.raises(PeerAuthError, match=f"claims to be node 'n1' but {why}"):
        responder.on_hello(initiator.hello())


def test_in_certificate_mode_the_certified_node_is_the_session_s_peer() -> None:
    initiator = Initiator(_certified("n1"))
    responder = Responder(_certified("n2"), certified="n1")
    assert _certified("n1").required and _certified("n1").certificates
    proof = initiator.on_challenge(responder.on_hello(initiator.hello()))
    assert proof == {"mac": b""}  # the certificate, not a key, proves who it is
    assert responder.on_proof(proof) == "n1"
    assert initiator.peer_id == "n2"
