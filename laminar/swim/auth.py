"""Membership datagrams authenticated with the cluster secret.

Every membership datagram ends in a 32-byte tag (the frame's payload, see
`codec`): HMAC-SHA256 over every byte before the tag, keyed with a key derived
from the cluster secret:

    key = HMAC-SHA256(secret, b"laminar membership v1")
    tag = HMAC-SHA256(key, datagram[:-32])

The tag covers the frame prefix (length, op) and the whole header, so a
datagram cannot be forged, altered or truncated without the secret. The
derived key keeps the raw secret out of every per-packet computation and lets
other node-to-node channels derive their own keys from the same secret.

Replays are not rejected here, and need not be: every piece of membership news
is ordered by incarnation numbers (an old `Suspect` or `Dead` is ignored, an
old `Alive` changes nothing) and a replayed ping only earns an ack. What a
replay cannot do is create news the members did not send.

Datagrams are not encrypted: member ids, addresses and weights travel in the
clear, as they do in `laminar status`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final, Protocol

from laminar.swim.codec import decode_packet, encode_packet
from laminar.swim.errors import SwimUsageError, Unauthenticated
from laminar.swim.messages import Packet

TAG_BYTES: Final = 32
KEY_LABEL: Final = b"laminar membership v1"
SECRET_BYTES_MIN: Final = 16


def derive_key(secret: bytes) -> bytes:
    """The membership key for a cluster secret (at least 16 bytes)."""
    if len(secret) < SECRET_BYTES_MIN:
        raise SwimUsageError(
            f"the cluster secret must be at least {SECRET_BYTES_MIN} bytes, got {len(secret)}"
        )
    return hmac.new(secret, KEY_LABEL, hashlib.sha256).digest()


class Sealer(Protocol):
    """How membership datagrams are authenticated: the cluster secret's tag
    (`PacketSealer`) or the sending node's certificate and signature
    (`laminar.swim.signing.CertificateSealer`)."""

    @property
    def overhead_bytes(self) -> int:
        """Bytes each datagram carries beyond its packet (`SwimConfig.packet_overhead_bytes`)."""
        ...

    def seal(self, packet: Packet) -> bytes: ...

    def open(self, datagram: bytes) -> Packet:
        """Raises `Unauthenticated` or `MalformedPacket`."""
        ...


class PacketSealer:
    """Encodes packets with their tag, and checks and decodes received datagrams."""

    __slots__ = ("_key",)

    overhead_bytes: Final = TAG_BYTES

    def __init__(self, secret: bytes) -> None:
        self._key = derive_key(secret)

    def seal(self, packet: Packet) -> bytes:
        """The datagram for `packet`, tag included."""
        frame = bytearray(encode_packet(packet, TAG_BYTES))
        frame[-TAG_BYTES:] = self._tag(memoryview(frame)[:-TAG_BYTES])
        return bytes(frame)

    def open(self, datagram: bytes) -> Packet:
        """The packet in `datagram`; raises `Unauthenticated` when its tag is wrong
        (checked before anything is decoded) and `MalformedPacket` when it decodes
        to nothing valid."""
        if len(datagram) <= TAG_BYTES:
            raise Unauthenticated(f"a datagram of {len(datagram)} bytes cannot carry a tag")
        body = memoryview(datagram)[:-TAG_BYTES]
        if not hmac.compare_digest(self._tag(body), datagram[-TAG_BYTES:]):
            raise Unauthenticated("the authentication tag does not match the cluster secret")
        return decode_packet(datagram, TAG_BYTES)

    def _tag(self, body: memoryview) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()
