"""The node's sockets, bound once by the supervisor and inherited by the shards.

Why the supervisor binds them: a port in use or a bad address is found before
any shard starts, with one clear message; port 0 works (the node port is
bound once, then the same port is bound again by the other shards' sockets
with SO_REUSEPORT); and a shard that crashes and restarts gets the very same
sockets back, so connections that arrive meanwhile wait in the backlog instead
of being refused, and a steering program (laminar.xdp) that indexes the node
port's sockets keeps its map valid.

What each shard is handed is `laminar.channels.sockets.ShardSockets`; the
node port's UDP group is made by the steering (`steering.prepare_steering`,
through `laminar.xdp.ReuseportSteering`), not here: classic BPF indexes the
group's sockets by bind order, so one component must bind all of them. This
module only checks that the UDP port is free.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from dataclasses import dataclass

from laminar.channels.sockets import ShardSockets, channel_address
from laminar.shards.config import NodeConfig

BACKLOG = 1024
EPHEMERAL_PORT_TRIES = 5
"""Ports the kernel picks for `--port 0` before giving up on one free for UDP too."""


class StartupError(Exception):
    """A fatal start-up problem, described in one line for the operator."""


@dataclass(slots=True)
class NodeSockets:
    """Every socket of the node, per shard, with the ports actually bound."""

    host: str
    port: int
    shards: list[ShardSockets]

    @property
    def shard_ports(self) -> list[int]:
        return [s.shard_tcp.getsockname()[1] for s in self.shards]

    @property
    def kafka_ports(self) -> list[int]:
        """Each shard's Kafka port, in shard order (empty: the Kafka door is off)."""
        return [s.kafka_tcp.getsockname()[1] for s in self.shards if s.kafka_tcp is not None]

    def close(self) -> None:
        for shard in self.shards:
            shard.close()


def _family(host: str) -> socket.AddressFamily:
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StartupError(f"cannot resolve --host {host!r}: {exc.strerror}") from None
    return infos[0][0]


def _bind(
    family: socket.AddressFamily,
    kind: socket.SocketKind,
    host: str,
    port: int,
    what: str,
    *,
    reuseport: bool,
    listen: bool = True,
) -> socket.socket:
    sock = socket.socket(family, kind)
    try:
        if kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen and kind == socket.SOCK_STREAM:
            sock.listen(BACKLOG)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        raise _bind_error(exc, what, host, port) from None
    return sock


def _bind_error(exc: OSError, what: str, host: str, port: int) -> StartupError:
    if exc.errno == errno.EADDRINUSE:
        return StartupError(
            f"{what} {host}:{port} is already in use (another laminar-node?); "
            "stop it or choose other ports"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return StartupError(f"{what}: address {host} is not an address of this machine")
    if exc.errno == errno.EACCES:
        return StartupError(f"{what} {host}:{port}: permission denied (ports below 1024?)")
    return StartupError(f"{what} {host}:{port}: {exc.strerror or exc}")


def _probe(
    family: socket.AddressFamily, kind: socket.SocketKind, host: str, port: int, what: str
) -> int:
    """Bind `port` once *without* SO_REUSEPORT and return the port bound.

    SO_REUSEPORT lets any process of the same user join a port's group, so a
    second node on the same port would bind "successfully" and steal half the
    connections. A plain bind first fails with EADDRINUSE if anyone holds the
    port, which is the error an operator needs to see.
    """
    probe = _bind(family, kind, host, port, what, reuseport=False, listen=False)
    try:
        bound: int = probe.getsockname()[1]
        return bound
    finally:
        probe.close()


def _bind_channel(run_dir: str, shard_id: int) -> socket.socket:
    address = channel_address(run_dir, shard_id)
    if not address.startswith("\0"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # left by a killed node; the data-dir lock says it is ours
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        raise StartupError(f"shard {shard_id} channel socket {address!r}: {exc}") from None
    return sock


def bind_node(config: NodeConfig) -> NodeSockets:
    """Bind every socket of the node, or raise `StartupError` naming the problem."""
    family = _family(config.host)
    os.makedirs(config.run_dir, mode=0o700, exist_ok=True)
    os.chmod(config.run_dir, 0o700)  # the channel sockets live here: this user only
    bound: list[socket.socket] = []
    shards: list[ShardSockets] = []
    port = _node_port(family, config.host, config.port)
    try:
        for i in range(config.cores):
            node_tcp = _bind(
                family, socket.SOCK_STREAM, config.host, port, "node port", reuseport=True
            )
            bound.append(node_tcp)
            shard_tcp = _bind(
                family,
                socket.SOCK_STREAM,
                config.host,
                config.shard_port(i),
                f"shard {i} port",
                reuseport=False,
            )
            bound.append(shard_tcp)
            channel = _bind_channel(config.run_dir, i)
            bound.append(channel)
            kafka_tcp = None
            kafka_port = config.kafka_shard_port(i)
            if kafka_port is not None:
                kafka_tcp = _bind(
                    family,
                    socket.SOCK_STREAM,
                    config.host,
                    kafka_port,
                    f"shard {i} Kafka port",
                    reuseport=False,
                )
                bound.append(kafka_tcp)
            shards.append(ShardSockets(node_tcp, shard_tcp, channel, kafka_tcp=kafka_tcp))
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return NodeSockets(config.host, port, shards)


def _node_port(family: socket.AddressFamily, host: str, port: int) -> int:
    """A node port free for TCP and for UDP. For port 0 the kernel picks a free
    TCP port, which something else may hold for UDP: then pick again (a few
    times), rather than fail a start that asked for any port."""
    for attempt in range(EPHEMERAL_PORT_TRIES):
        chosen = _probe(family, socket.SOCK_STREAM, host, port, "node port")
        try:
            _probe(family, socket.SOCK_DGRAM, host, chosen, "node UDP port")
            return chosen
        except StartupError:
            if port or attempt == EPHEMERAL_PORT_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def bind_admin(config: NodeConfig) -> socket.socket:
    """The admin HTTP listener (the supervisor serves it)."""
    return _bind(
        _family(config.admin_host),
        socket.SOCK_STREAM,
        config.admin_host,
        config.admin_port_resolved,
        "admin port",
        reuseport=False,
    )
