"""UDP sockets of a reuseport group, and the socket options that steer them.

Facts:

- Every socket of a group binds the same address and port with SO_REUSEPORT
  set before bind, from processes of the same effective uid.
- A steering program belongs to the group, not to a socket: attaching through
  any member (after it is bound) replaces the group's program. Attaching
  before bind gives the socket a private group that it leaves on bind, with
  the program, so always bind first.
- The group keeps its sockets in an array in join order; a leaving socket's
  slot is filled by the last one. Classic programs return indexes into it.
- A socket leaves the group when its last file reference closes, not when one
  process closes its copy.
- Each socket gets a large receive buffer (`RECEIVE_BUFFER_BYTES`): the
  default (208 KiB) holds only about 200 small datagrams, fewer when generic
  XDP runs on the interface (it re-homes every skb into a whole page, which
  counts against the buffer), and a shard being restarted must not lose what
  queues meanwhile. SO_RCVBUFFORCE when allowed (CAP_NET_ADMIN), else
  SO_RCVBUF, which the kernel caps at net.core.rmem_max.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Final

SO_ATTACH_REUSEPORT_EBPF: Final = 52
SO_RCVBUFFORCE: Final = 33
RECEIVE_BUFFER_BYTES: Final = 4 << 20


def family_of(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 literal, else AF_INET (names resolve as IPv4)."""
    try:
        return (
            socket.AF_INET6
            if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
            else socket.AF_INET
        )
    except ValueError:
        return socket.AF_INET


def bind_reuseport_udp(host: str, port: int) -> socket.socket:
    """A UDP socket with SO_REUSEPORT bound to (host, port); port 0 picks one."""
    sock = socket.socket(family_of(host), socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        grow_receive_buffer(sock, RECEIVE_BUFFER_BYTES)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def grow_receive_buffer(sock: socket.socket, size_bytes: int) -> None:
    """Ask for a `size_bytes` receive buffer, forced past rmem_max when privileged."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size_bytes)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size_bytes)


def bound_port(sock: socket.socket) -> int:
    """The port `sock` is bound to."""
    return int(sock.getsockname()[1])


def attach_ebpf(sock: socket.socket, prog_fd: int) -> None:
    """Make the SK_REUSEPORT program `prog_fd` the group's program (CAP_BPF not needed
    here: loading it was the privileged part)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, prog_fd)
