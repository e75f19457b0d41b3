"""Node ports for tests: chosen up front, reserved machine-wide, retried if lost.

A static cluster's nodes must know each other's ports before they start, so a
port is chosen free now and bound later by the node. Two things can take it
meanwhile: another test process choosing the same port (other xdist workers,
other test runs on this shared machine), and anything else on the machine.
The first is ruled out by a reservation every laminar test process honours:
an exclusive `flock` on a file per port under /tmp, held until the process
exits (the kernel drops it then, so a killed run leaks nothing). The second
is rare but real: `retry_on_port_in_use` starts again on fresh ports when a
node exits because its port was in use (laminar-node's start-up error says
"already in use" for the node port and the membership port alike).

The node cannot be handed already-bound sockets (it binds its own, probing
without SO_REUSEPORT first: laminar/shards/listeners.py), hence the retry.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from laminar.node.gossip import MEMBERSHIP_PORT_OFFSET

FIXED_PORTS_LOW = 10_000
"""Where `free_port` starts looking (below the kernel's ephemeral range: a
port chosen now is never handed meanwhile to an ephemeral socket, and every
shard, admin and client port of the tests' nodes is one)."""
START_ATTEMPTS = 5
"""How often `retry_on_port_in_use` starts on fresh ports before giving up."""
PORT_IN_USE = "already in use"
"""What laminar-node's start-up error says when a port it must bind is taken."""

_RESERVED = Path(tempfile.gettempdir()) / "laminar-test-ports"
_held: list[int] = []  # the reservations' file descriptors: held until this process exits
_PORTS = random.SystemRandom()  # not the global generator: tests seed it, alike in every worker

T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    """A port free for TCP and UDP on `host` right now, with the membership port
    a node derives from it (+1000), both reserved for this process (see the
    module docstring)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    for _ in range(1000):
        port = _PORTS.randrange(FIXED_PORTS_LOW, ephemeral_low - MEMBERSHIP_PORT_OFFSET)
        ports = (port, port + MEMBERSHIP_PORT_OFFSET)
        if _reserve(ports) and all(_bindable(host, p) for p in ports):
            return port
    raise RuntimeError("no free port")


def _bindable(host: str, port: int) -> bool:
    try:
        with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            tcp.bind((host, port))
            udp.bind((host, port))
    except OSError:
        return False
    return True


def _reserve(ports: tuple[int, ...]) -> bool:
    """Lock one file per port, all or none; the locks live as long as this process."""
    if not _RESERVED.is_dir():
        _RESERVED.mkdir(exist_ok=True)
        with contextlib.suppress(PermissionError):
            _RESERVED.chmod(0o1777)  # every user's test runs share it, as /tmp
    locked: list[int] = []
    for port in ports:
        fd = os.open(_RESERVED / str(port), os.O_CREAT | os.O_RDONLY, 0o444)  # flock needs no write
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for mine in locked:
                os.close(mine)  # closing drops the lock
            return False
        locked.append(fd)
    _held.extend(locked)
    return True


def port_in_use(exc: BaseException) -> bool:
    """Did a node fail to start because a port it must bind was taken?"""
    return PORT_IN_USE in str(exc)


def retry_on_port_in_use(start: Callable[[], T], attempts: int = START_ATTEMPTS) -> T:
    """`start()` again (it must choose fresh ports each call and clean up after a
    failed attempt) while it fails because a port was in use."""
    for _ in range(attempts - 1):
        try:
            return start()
        except Exception as exc:
            if not port_in_use(exc):
                raise
    return start()
