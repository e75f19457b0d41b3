"""Principals: who a request comes from, as ACLs name it, and the rules that
name a client, and a node, by its TLS certificate.

A principal is Kafka's string form `User:<name>`. A SCRAM login gives
`User:<user name>`; a client certificate gives `User:<its subject's CN>`;
`User:*` in an ACL matches every principal (and is no one's name).

Why the CN and not the full DN: Kafka's `ssl.principal.mapping.rules=DEFAULT`
names a certificate by its whole RFC 2253 DN (`User:CN=alice,OU=eng,O=acme`).
laminar takes the common name alone, so the same person is `User:alice`
whether they log in with a password or a certificate, and ACLs stay short.
The CN identifies only as well as the CA's issuing policy: laminar trusts
only the CA(s) given to it, and whoever issues certificates there decides
names, exactly as with a DN. A subject with no CN, or with more than one
(ambiguous), names nobody: the connection is refused rather than guessed at.

A node is named by its certificate too, and never by its CN: a node
certificate carries exactly one subjectAltName URI `laminar-node:<node id>`
(`node_id_from_certificate`). Why a URI SAN: a client certificate (CN =
a user) can never pass for a node however its CN is spelled, a node
certificate still names its hosts in DNS/IP SANs for clients that check
them, and "which node is this" is answered by one field made for it (as
SPIFFE's `spiffe://` URIs do). Peer links take the node id from there
(`laminar.replication.auth`); a certificate with none, or with several, is
no node's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

USER_TYPE: Final = "User"
WILDCARD_PRINCIPAL: Final = "User:*"
"""In an ACL: any principal. Never a principal itself."""
PRINCIPAL_NAME_MAX: Final = 255
"""Characters in the name part of a principal (a CN is at most 64 by X.520)."""

NODE_URI_SCHEME: Final = "laminar-node"
"""A node certificate's subjectAltName URI is `laminar-node:<node id>`."""

Subject = Iterable[Iterable[tuple[str, str]]]
"""A certificate subject as `ssl.SSLObject.getpeercert()["subject"]` gives it:
relative distinguished names, each a sequence of (attribute, value) pairs."""


class PrincipalError(ValueError):
    """No principal can be taken from this name or certificate."""


def check_principal_name(name: str) -> None:
    """Raise `PrincipalError` unless `name` can be the name part of a principal:
    1-255 printable characters, not `*`, without leading or trailing spaces
    (ACL listings and logs must show exactly who it is)."""
    if not 0 < len(name) <= PRINCIPAL_NAME_MAX:
        raise PrincipalError(f"a principal's name has 1-{PRINCIPAL_NAME_MAX} characters")
    if name == "*" or not name.isprintable() or name != name.strip():
        raise PrincipalError(
            f"invalid principal name {name[:60]!r}: printable characters, not '*', "
            "no leading or trailing spaces"
        )


def user_principal(name: str) -> str:
    """`User:<name>`, after checking `name`."""
    check_principal_name(name)
    return f"{USER_TYPE}:{name}"


def check_acl_principal(principal: str) -> None:
    """Raise `PrincipalError` unless `principal` may stand in an ACL:
    `User:<name>` or `User:*`."""
    kind, sep, name = principal.partition(":")
    if kind != USER_TYPE or not sep:
        raise PrincipalError(f"a principal is 'User:<name>' or 'User:*', got {principal[:60]!r}")
    if name != "*":
        check_principal_name(name)


def principal_from_certificate(subject: Subject) -> str:
    """The principal of a verified client certificate: `User:<CN>`, or
    `PrincipalError` for a subject without exactly one CN (see the module
    docstring for why the CN)."""
    names = [value for rdn in subject for attr, value in rdn if attr == "commonName"]
    if len(names) != 1:
        raise PrincipalError(
            f"the client certificate's subject has {len(names)} common names (CN); "
            "laminar names a certificate by its one CN"
        )
    return user_principal(names[0])


def node_id_from_certificate(certificate: Mapping[str, Any]) -> str | None:
    """The node id a verified peer certificate names (its one
    `laminar-node:<id>` URI SAN), None if it names no node;
    `PrincipalError` if it names several. `certificate` is
    `ssl.SSLObject.getpeercert()`'s dict."""
    return node_id_from_uris(
        value for kind, value in certificate.get("subjectAltName", ()) if kind == "URI"
    )


def node_id_from_uris(uris: Iterable[str]) -> str | None:
    """The rule of `node_id_from_certificate`, over a certificate's URI SANs."""
    prefix = f"{NODE_URI_SCHEME}:"
    names = [uri[len(prefix) :] for uri in uris if uri.startswith(prefix)]
    if len(names) > 1:
        raise PrincipalError(
            f"the certificate names {len(names)} nodes; a node certificate names one"
        )
    return names[0] if names and names[0] else None
