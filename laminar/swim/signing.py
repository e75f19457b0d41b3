"""Membership datagrams signed with the sending node's certificate key.

With per-node certificates (a node started with `--tls-cert-file`,
`--tls-key-file` and `--tls-ca-file` in a cluster), membership does not need
the cluster secret: every datagram carries its sender's certificate and a
signature made with that certificate's key, so a receiver checks it alone,
with nothing but the CA. The trailer (the frame's payload, see `codec`):

    certificate (DER) | signature | certificate length u16 | signature length u16

The signature covers every byte before it (frame prefix, header, certificate)
and the two lengths. A datagram is accepted when:

- the certificate was issued by one of the CAs (directly: the CA file holds
  the issuing CA) and is valid now;
- it names exactly one node, by the rule of TLS between nodes
  (`laminar.security.principal.node_id_from_uris`: one subjectAltName URI
  `laminar-node:<node id>`);
- the signature verifies with its key;
- the message speaks as that node: every message but `Gossip` names its
  sender (`source`), and it must be the certificate's node. A relayed ack is
  sent in the relay's own name (`core`), so this holds for relays too.

What stays as in SWIM: the updates a packet carries are news about other
members, relayed; a certified node can lie in them (claim another suspect,
or alive at another address), and the incarnation rules, refutation and the
peer links' own node-id check are what bound it. Replays: as with the
secret's tag (`auth`), incarnations order the news.

Keys: EC (ECDSA with SHA-256, the signature as fixed-size r||s) and Ed25519.
An RSA certificate and its signature would leave too little of a datagram
for the packet; it is refused at start. Checking a certificate costs a
signature verification, so the verdict is kept per certificate (bounded,
`VERIFIED_MAX`); the datagram's own signature is verified every time.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from laminar.security.principal import PrincipalError, node_id_from_uris
from laminar.swim.codec import decode_packet, encode_packet
from laminar.swim.errors import SwimUsageError, Unauthenticated
from laminar.swim.messages import Gossip, Packet

_FOOTER: Final = struct.Struct(">HH")
CERTIFICATE_BYTES_MAX: Final = 1024
SIGNATURE_BYTES_MAX: Final = 132
"""ECDSA P-521's r||s; Ed25519's and P-256's are 64."""
VERIFIED_MAX: Final = 1024
"""Certificates whose verdict is kept (cleared when full: a flood of new
certificates costs their checks, not memory)."""

_UNREADABLE: Final = (
    ValueError,
    TypeError,
    UnsupportedAlgorithm,
    x509.InvalidVersion,
    x509.DuplicateExtension,
    x509.UnsupportedGeneralNameType,
)
"""What parsing a certificate from a peer may raise."""

PublicKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


class CertificateError(SwimUsageError):
    """This node's own certificate, key or CA file cannot sign membership datagrams."""


@dataclass(frozen=True, slots=True)
class _Signer:
    node_id: str
    key: PublicKey
    not_before: float
    not_after: float


def _signature_bytes(key: PublicKey) -> int:
    if isinstance(key, ec.EllipticCurvePublicKey):
        return 2 * ((key.curve.key_size + 7) // 8)
    return 64


def _sign(key: PrivateKey, data: bytes, size: int) -> bytes:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        half = size // 2
        return r.to_bytes(half, "big") + s.to_bytes(half, "big")
    return key.sign(data)


def _verify(key: PublicKey, signature: bytes, data: bytes) -> None:
    """Raises `InvalidSignature`."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        half = len(signature) // 2
        der = encode_dss_signature(
            int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big")
        )
        key.verify(der, data, ec.ECDSA(hashes.SHA256()))
    else:
        key.verify(signature, data)


def _node_id(certificate: x509.Certificate) -> str | None:
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return None
    return node_id_from_uris(names.value.get_values_for_type(x509.UniformResourceIdentifier))


class CertificateSealer:
    """Signs packets with this node's certificate key; checks and decodes
    datagrams signed by any node whose certificate the CA issued."""

    __slots__ = ("_cas", "_certificate", "_key", "_signature_bytes", "_verified", "_wall_s")

    def __init__(
        self,
        certificate_pem: bytes,
        key_pem: bytes,
        ca_pem: bytes,
        *,
        node_id: str,
        wall_s: Callable[[], float] = time.time,
    ) -> None:
        """Raises `CertificateError` when the certificate does not name
        `node_id`, its key is not one membership can sign with, or the CA file
        holds no certificate."""
        try:
            certificate = x509.load_pem_x509_certificate(certificate_pem)
            key = serialization.load_pem_private_key(key_pem, password=None)
            self._cas = x509.load_pem_x509_certificates(ca_pem)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:  # TypeError: a password
            raise CertificateError(f"cannot load the certificate, key or CA: {exc}") from None
        public = certificate.public_key()
        if not isinstance(key, PrivateKey) or not isinstance(public, PublicKey):
            raise CertificateError(
                "membership datagrams are signed with the node certificate's key: use an "
                "EC (P-256) or Ed25519 key (an RSA certificate and signature do not fit "
                "in a datagram next to the packet)"
            )
        if key.public_key() != public:
            raise CertificateError("the key does not belong to the certificate")
        try:
            named = _node_id(certificate)
        except PrincipalError as exc:
            raise CertificateError(str(exc)) from None
        if named != node_id:
            raise CertificateError(
                f"the certificate names node {named!r}, not this node ({node_id!r})"
            )
        self._certificate = certificate.public_bytes(serialization.Encoding.DER)
        if len(self._certificate) > CERTIFICATE_BYTES_MAX:
            raise CertificateError(
                f"the certificate is {len(self._certificate)} bytes; a membership datagram "
                f"carries at most {CERTIFICATE_BYTES_MAX}"
            )
        self._key = key
        self._signature_bytes = _signature_bytes(public)
        self._verified: dict[bytes, _Signer] = {}
        self._wall_s = wall_s

    @classmethod
    def from_files(
        cls, certificate_file: str, key_file: str, ca_file: str, *, node_id: str
    ) -> CertificateSealer:
        read = Path.read_bytes
        return cls(
            read(Path(certificate_file)),
            read(Path(key_file)),
            read(Path(ca_file)),
            node_id=node_id,
        )

    @property
    def overhead_bytes(self) -> int:
        """The trailer's size: what each packet must leave room for."""
        return len(self._certificate) + self._signature_bytes + _FOOTER.size

    def seal(self, packet: Packet) -> bytes:
        """The datagram for `packet`: certificate, signature and lengths included."""
        size = self._signature_bytes
        frame = bytearray(encode_packet(packet, self.overhead_bytes))
        signature_at = len(frame) - _FOOTER.size - size
        certificate_at = signature_at - len(self._certificate)
        frame[certificate_at:signature_at] = self._certificate
        frame[-_FOOTER.size :] = _FOOTER.pack(len(self._certificate), size)
        signed = bytes(frame[:signature_at]) + bytes(frame[-_FOOTER.size :])
        frame[signature_at : signature_at + size] = _sign(self._key, signed, size)
        return bytes(frame)

    def open(self, datagram: bytes) -> Packet:
        """The packet in `datagram`; raises `Unauthenticated` (certificate,
        signature or sender wrong: checked before the packet is decoded, but
        for the sender) and `MalformedPacket`."""
        if len(datagram) <= _FOOTER.size:
            raise Unauthenticated(f"a datagram of {len(datagram)} bytes cannot carry a signature")
        certificate_bytes, signature_bytes = _FOOTER.unpack_from(datagram, len(datagram) - 4)
        trailer = certificate_bytes + signature_bytes + _FOOTER.size
        if (
            not 0 < certificate_bytes <= CERTIFICATE_BYTES_MAX
            or not 0 < signature_bytes <= SIGNATURE_BYTES_MAX
            or trailer >= len(datagram)
        ):
            raise Unauthenticated("the signature trailer's lengths do not fit the datagram")
        signature_at = len(datagram) - _FOOTER.size - signature_bytes
        certificate = datagram[signature_at - certificate_bytes : signature_at]
        signer = self._signer(certificate)
        signed = datagram[:signature_at] + datagram[-_FOOTER.size :]
        try:
            _verify(signer.key, datagram[signature_at : signature_at + signature_bytes], signed)
        except (InvalidSignature, ValueError):
            raise Unauthenticated(
                f"the signature does not match the certificate of node {signer.node_id}"
            ) from None
        packet = decode_packet(datagram, trailer)
        message = packet.message
        if not isinstance(message, Gossip) and message.source != signer.node_id:
            raise Unauthenticated(
                f"a datagram signed by node {signer.node_id} speaks as node {message.source}"
            )
        return packet

    def _signer(self, certificate: bytes) -> _Signer:
        signer = self._verified.get(certificate)
        if signer is None:
            signer = self._check(certificate)
            if len(self._verified) >= VERIFIED_MAX:
                self._verified.clear()
            self._verified[certificate] = signer
        now = self._wall_s()
        if not signer.not_before <= now <= signer.not_after:
            raise Unauthenticated(f"the certificate of node {signer.node_id} is not valid now")
        return signer

    def _check(self, der: bytes) -> _Signer:
        try:
            certificate = x509.load_der_x509_certificate(der)
            now = self._wall_s()
            issued = any(_issued_by(certificate, ca, now) for ca in self._cas)
            node_id = _node_id(certificate) if issued else None
            key = certificate.public_key()
        except PrincipalError as exc:
            raise Unauthenticated(f"the datagram's certificate: {exc}") from None
        except _UNREADABLE as exc:
            raise Unauthenticated(f"the datagram's certificate does not parse: {exc}") from None
        if not issued:
            raise Unauthenticated("the datagram's certificate was not issued by the CA")
        if node_id is None or not isinstance(key, PublicKey):
            raise Unauthenticated("the datagram's certificate names no node it can sign for")
        return _Signer(
            node_id,
            key,
            certificate.not_valid_before_utc.timestamp(),
            certificate.not_valid_after_utc.timestamp(),
        )


def _issued_by(certificate: x509.Certificate, ca: x509.Certificate, now: float) -> bool:
    """Signed by `ca`, which is valid now (as TLS checks a chain)."""
    if not ca.not_valid_before_utc.timestamp() <= now <= ca.not_valid_after_utc.timestamp():
        return False
    try:
        certificate.verify_directly_issued_by(ca)
    except (*_UNREADABLE, InvalidSignature):
        return False
    return True
