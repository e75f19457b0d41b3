"""Free loopback ports for the servers the harness starts."""

from __future__ import annotations

import contextlib
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out for `host` and released.

    Another process may take it before the server binds it; the servers'
    start-up fails loudly then, and the runner reports that run as failed.
    """
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def accepts(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """True once a TCP connection to host:port succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
