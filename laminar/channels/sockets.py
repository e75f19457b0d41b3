"""The sockets a shard serves on, as the supervisor hands them over.

Per shard `i` (`ShardSockets`, bound by `laminar.node.listeners`):

- `node_tcp`: the node port, SO_REUSEPORT, shared by all shards (any shard may
  accept; requests for other shards' partitions are forwarded).
- `shard_tcp`: shard i's own port, for clients that route themselves.
- `node_udp`: the node port over UDP, SO_REUSEPORT (small requests; where the
  kernel steering of laminar.xdp applies), made by the node's steering.
- `kafka_tcp`: shard i's Kafka listener (`laminar.shards.kafka_connection`),
  None when the node's Kafka door is off.
- `channel`: a Unix stream socket other shards connect to
  (`channel_address(run_dir, i)`), carrying forwarded requests and the
  metadata tail. What arrives there is trusted as internal, so the run
  directory is private (0700) and a shard serves a channel connection only
  from a sibling: a process of the same user whose parent is this node's
  supervisor (`is_sibling_shard`, by SO_PEERCRED). That also covers the
  abstract-namespace address used for long paths, which any local user
  could otherwise connect to.

File descriptors keep their numbers in the child (`pass_fds`), so a shard is
told them as `ShardSockets.fds()` and rebuilds its sockets with `from_fds`.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
from dataclasses import dataclass

_UNIX_PATH_MAX = 107

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket."""
    pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return pid, uid, gid


def is_sibling_shard(sock: socket.socket) -> bool:
    """Whether the peer of a channel connection is another shard of this node:
    the same user, and a child of this shard's own parent (the supervisor)."""
    try:
        pid, uid, _ = peer_credentials(sock)
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # Fields after the parenthesised command name: state, ppid, ...
    fields = stat[stat.rfind(b")") + 2 :].split()
    return uid == os.geteuid() and len(fields) > 1 and int(fields[1]) == os.getppid()


def channel_address(run_dir: str, shard_id: int) -> str:
    """The Unix socket address of shard `shard_id`'s channel listener.

    `<run_dir>/shard-<i>.sock` when the path fits in a sockaddr_un, else an
    abstract-namespace name derived from the run directory (deep test paths).
    """
    path = os.path.join(run_dir, f"shard-{shard_id}.sock")
    if len(path.encode()) <= _UNIX_PATH_MAX:
        return path
    digest = hashlib.sha1(os.path.abspath(run_dir).encode()).hexdigest()[:16]
    return f"\0laminar-{digest}-shard-{shard_id}"


@dataclass(slots=True)
class ShardSockets:
    """The listening sockets one shard serves on (`node_udp`: None when the
    steering gives this shard no UDP socket)."""

    node_tcp: socket.socket
    shard_tcp: socket.socket
    channel: socket.socket
    node_udp: socket.socket | None = None
    kafka_tcp: socket.socket | None = None

    def all(self) -> list[socket.socket]:
        socks = [self.node_tcp, self.shard_tcp, self.channel]
        return socks + [s for s in (self.node_udp, self.kafka_tcp) if s is not None]

    def fds(self) -> dict[str, int]:
        """The supervisor-bound descriptors (the UDP one comes from the steering)."""
        fds = {
            "node_tcp": self.node_tcp.fileno(),
            "shard_tcp": self.shard_tcp.fileno(),
            "channel": self.channel.fileno(),
        }
        if self.kafka_tcp is not None:
            fds["kafka_tcp"] = self.kafka_tcp.fileno()
        return fds

    @classmethod
    def from_fds(cls, fds: dict[str, int | None]) -> ShardSockets:
        """Adopt inherited descriptors (in the shard process), non-blocking."""

        def adopt(name: str) -> socket.socket | None:
            fd = fds.get(name)
            if fd is None:
                return None
            sock = socket.socket(fileno=fd)
            sock.setblocking(False)
            return sock

        node_tcp, shard_tcp, channel = adopt("node_tcp"), adopt("shard_tcp"), adopt("channel")
        if node_tcp is None or shard_tcp is None or channel is None:
            raise ValueError(f"a shard needs node_tcp, shard_tcp and channel fds, got {fds}")
        return cls(node_tcp, shard_tcp, channel, adopt("node_udp"), adopt("kafka_tcp"))

    def close(self) -> None:
        for sock in self.all():
            sock.close()
