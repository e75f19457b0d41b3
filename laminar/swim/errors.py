"""Errors of the membership subsystem, split as the wire codec splits them.

- `SwimUsageError`: this side misused the core (a bug in the caller).
- `MalformedPacket`: a peer sent a datagram the protocol does not allow; the
  shell drops it, counts it and logs it. It never changes any state.
- `Unauthenticated`: a datagram without a valid tag for the cluster secret, or
  (certificate mode) without a valid certificate and signature of its sender.
"""

from __future__ import annotations


class SwimError(Exception):
    """Base of every exception `laminar.swim` raises on purpose."""


class SwimUsageError(SwimError, ValueError):
    """This side asked the core for something it cannot do."""


class MalformedPacket(SwimError):
    """A peer's datagram does not decode to a membership packet."""


class Unauthenticated(MalformedPacket):
    """A datagram whose tag, or certificate and signature, is missing or wrong."""
