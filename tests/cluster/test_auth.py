"""Peer authentication: both sides prove the secret; nothing replayed or reflected passes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from laminar.cluster.auth import (
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
    with pytest.raises(PeerAuthError, match="does not know the cluster secret"):
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
