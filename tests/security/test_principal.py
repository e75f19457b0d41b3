"""Principals: the certificate rule on subjects that a real TLS handshake
(memory BIOs, certificates made by openssl) hands the server, and on subjects
that must name nobody."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest

from laminar.certs import make_ca, make_cert
from laminar.security.principal import (
    PrincipalError,
    Subject,
    check_acl_principal,
    node_id_from_certificate,
    principal_from_certificate,
    user_principal,
)

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl is not installed"
)


def peer_subject(tmp_path: Path, client_subject: str) -> Subject:
    """The client certificate's subject as the server side of a verified TLS
    handshake sees it (`SSLObject.getpeercert()`), all in memory."""
    ca = make_ca(tmp_path, "ca")
    server_crt, server_key = make_cert(tmp_path, ca, "server", hosts=("localhost",))
    client_crt, client_key = make_cert(tmp_path, ca, "client", subject=client_subject, hosts=())
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server_crt, server_key)
    server_ctx.load_verify_locations(ca.cert)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(ca.cert)
    client_ctx.load_cert_chain(client_crt, client_key)
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, client_in = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(client_in, to_server, server_hostname="localhost")
    server = server_ctx.wrap_bio(server_in, to_client, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for side, end in (("client", client), ("server", server)):
            try:
                end.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
        server_in.write(to_server.read())
        client_in.write(to_client.read())
        if all(done.values()):
            break
    assert all(done.values()), "the in-memory handshake did not finish"
    cert = server.getpeercert()
    assert cert, "the server verified no client certificate"
    subject: Subject = cert["subject"]
    return subject


@needs_openssl
def test_a_verified_client_certificate_is_named_by_its_cn(tmp_path: Path) -> None:
    subject = peer_subject(tmp_path, "/C=NL/O=Acme/OU=billing/CN=alice")
    assert principal_from_certificate(subject) == "User:alice"


@needs_openssl
def test_a_verified_certificate_without_a_cn_names_nobody(tmp_path: Path) -> None:
    subject = peer_subject(tmp_path, "/O=Acme/OU=billing")
    with pytest.raises(PrincipalError):
        principal_from_certificate(subject)


@pytest.mark.parametrize(
    "subject",
    [
        ((("commonName", "alice"),), (("commonName", "bob"),)),  # two CNs: ambiguous
        ((("commonName", "*"),),),  # would match every ACL for anyone
        ((("commonName", " alice"),),),
        ((("commonName", "al\nice"),),),
        ((("commonName", "x" * 256),),),
        ((("organizationName", "Acme"),),),
    ],
)
def test_subjects_that_name_nobody(subject: Subject) -> None:
    with pytest.raises(PrincipalError):
        principal_from_certificate(subject)


def test_a_multi_valued_rdn_is_searched_too() -> None:
    subject = ((("organizationName", "Acme"), ("commonName", "svc-billing")),)
    assert principal_from_certificate(subject) == "User:svc-billing"


def test_acl_principals() -> None:
    for good in ("User:alice", "User:*", "User:CN with spaces"):
        check_acl_principal(good)
    for bad in ("alice", "Group:ops", "User:", "user:alice", "User: alice"):
        with pytest.raises(PrincipalError):
            check_acl_principal(bad)
    assert user_principal("alice") == "User:alice"


@pytest.mark.parametrize(
    ("alt_names", "node_id"),
    [
        ((("DNS", "localhost"), ("URI", "laminar-node:n1")), "n1"),
        ((("IP Address", "127.0.0.1"),), None),  # a client's or a plain server's
        ((("URI", "spiffe://acme/n1"),), None),
        ((("URI", "laminar-node:"),), None),
        ((), None),
    ],
)
def test_a_node_certificate_names_its_node_by_its_uri(
    alt_names: tuple[tuple[str, str], ...], node_id: str | None
) -> None:
    certificate = {"subject": ((("commonName", "n2"),),), "subjectAltName": alt_names}
    assert node_id_from_certificate(certificate) == node_id  # never by the CN


def test_a_certificate_naming_two_nodes_names_none() -> None:
    both = {"subjectAltName": (("URI", "laminar-node:n1"), ("URI", "laminar-node:n2"))}
    with pytest.raises(PrincipalError, match="names 2 nodes"):
        node_id_from_certificate(both)
