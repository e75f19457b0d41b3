"""Request steering: how requests on the node port reach their owning shard.

This module is the seam where `laminar.xdp` (eBPF / classic BPF reuseport
steering and the XDP classifier) plugs into the node. Today it knows one mode:

- "userspace": every shard has a socket in the node port's UDP SO_REUSEPORT
  group (and in its TCP group, bound by `listeners`); the kernel spreads
  datagrams and connections by its own hash, and a shard forwards requests for
  partitions it does not own over the inter-shard channel
  (`laminar.shards.dispatch`). Always available; the fallback of the others.

How a steering mode plugs in (supervisor side, before any shard starts):

1. `prepare_steering(config, sockets)` runs after the TCP sockets are bound
   (`sockets.port` is the node port, ephemeral ports resolved) and makes the
   node port's UDP group: one socket per shard, in shard order, held by the
   supervisor for the node's whole life (a restarted shard gets the same
   socket back, so a socket array or a classic-BPF bind order stays valid).
   A BPF mode attaches its program to that group and fills its map.
2. It returns a `Steering`:
   - `mode`: what the node reports (metadata, /metrics, start-up log, node.json);
   - `udp_fd(i)`: shard i's UDP socket descriptor (None: no UDP for shard i);
   - `fds_for_shard(i)`: every descriptor shard i must inherit for steering,
     its UDP socket included (`pass_fds` keeps the numbers);
   - `shard_settings()`: JSON-able settings for the shards, read when a shard
     process starts (so a restarted shard gets current ones), delivered as
     `config.extra["steering"]` (with "mode" added);
   - `close()`: run by the supervisor on every exit path (detach, close maps);
   - `metrics()`: Prometheus text blocks appended to /metrics (e.g. counters);
   - `detail`: a line for the start-up log (why better modes were skipped).

   For `laminar.xdp.ReuseportSteering` (`rs = ReuseportSteering.prepare(
   shard_count=config.cores, host=config.host, port=sockets.port,
   routing=config.routing)`), that is `udp_fd=lambda i: rs.spec.socket_fds[i]`,
   `fds_for_shard=rs.fds_for_shard`, `shard_settings=lambda: {"spec":
   rs.spec.to_json()}`, `close=rs.close`, `detail=rs.describe()`.
3. Shards need nothing more to be correct: they check ownership of every
   request and forward when needed. `shard_setup(settings)` is where a shard
   adopts what the supervisor prepared; it returns the mode it reports.

`--routing` accepts "auto" and "userspace" today (`config.ROUTING_MODES`);
forcing a mode that cannot be set up must raise `StartupError` with the reason.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laminar.shards.config import ROUTING_MODES, NodeConfig
from laminar.shards.listeners import NodeSockets, StartupError, bind_udp_group


def _nothing() -> None:
    return None


def _no_metrics() -> list[str]:
    return []


def _no_settings() -> dict[str, Any]:
    return {}


@dataclass(slots=True)
class Steering:
    """What the supervisor set up for steering (see the module docstring)."""

    mode: str
    udp_fd: Callable[[int], int | None]
    fds_for_shard: Callable[[int], tuple[int, ...]]
    shard_settings: Callable[[], dict[str, Any]] = _no_settings
    close: Callable[[], None] = _nothing
    metrics: Callable[[], list[str]] = _no_metrics
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def userspace_steering(host: str, port: int, shard_count: int) -> Steering:
    """Plain SO_REUSEPORT: the kernel's hash picks the shard, shards forward."""
    group: list[socket.socket] = bind_udp_group(host, port, shard_count)

    def close() -> None:
        for sock in group:
            sock.close()

    return Steering(
        "userspace",
        udp_fd=lambda i: group[i].fileno(),
        fds_for_shard=lambda i: (group[i].fileno(),),
        close=close,
        detail="SO_REUSEPORT hashing; shards forward requests they do not own",
    )


def prepare_steering(config: NodeConfig, sockets: NodeSockets) -> Steering:
    """Choose and prepare the routing mode; raise `StartupError` if a forced
    mode cannot be had."""
    if config.routing not in ROUTING_MODES:
        raise StartupError(
            f"--routing {config.routing!r} is not available; choose one of "
            f"{', '.join(ROUTING_MODES)}"
        )
    # laminar.xdp: for "auto", "ebpf" and "cbpf", prepare ReuseportSteering here
    # (see the module docstring), falling back to userspace only for "auto".
    return userspace_steering(config.host, sockets.port, config.cores)


def shard_setup(settings: dict[str, Any]) -> str:
    """Shard side: adopt the supervisor's steering settings; return the mode."""
    mode = settings.get("mode", "userspace")
    return mode if isinstance(mode, str) else "userspace"
