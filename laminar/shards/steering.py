"""Request steering: how requests on the node port reach their owning shard.

This module is the seam where `laminar.xdp` (eBPF / classic BPF reuseport
steering and the XDP classifier) plugs into the node. Today it knows one mode:

- "userspace": every shard binds the node port (TCP and UDP) with SO_REUSEPORT,
  the kernel spreads connections and datagrams by its own hash, and a shard
  forwards requests for partitions it does not own over the inter-shard
  channel (`laminar.shards.dispatch`). Always available; the fallback of the
  others.

How a steering mode plugs in (supervisor side, before any shard starts):

1. `prepare_steering(config, sockets)` gets the node's bound sockets
   (`NodeSockets.shards[i].node_udp` / `.node_tcp`, in shard order: slot i is
   shard i's socket). A BPF mode attaches its program to the reuseport group
   (`SO_ATTACH_REUSEPORT_EBPF` / `_CBPF` on any socket of the group) and fills
   its REUSEPORT_SOCKARRAY with those sockets; the supervisor holds the sockets
   for the node's whole life, so the map stays valid across shard restarts.
2. It returns a `Steering`: the mode to report (metadata, `/metrics`, start-up
   log, node.json), descriptors every shard process must inherit
   (`pass_fds`, e.g. map fds for per-CPU counters), settings for the shards
   (`shard_settings`, delivered as `config.extra["steering"]`), and a `close`
   callable the supervisor runs on every exit path (detach XDP, close maps),
   and `metrics`, Prometheus text blocks the supervisor appends to /metrics.
3. Shards need nothing more to be correct: they check ownership of every
   request and forward when needed; `shard_setup(settings)` is where a shard
   would adopt what the supervisor prepared (it returns the mode it serves in).

`--routing` accepts "auto" and "userspace" today; forcing a mode that cannot be
set up must raise `StartupError` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laminar.shards.config import ROUTING_MODES, NodeConfig
from laminar.shards.listeners import NodeSockets, StartupError


def _nothing() -> None:
    return None


def _no_metrics() -> list[str]:
    return []


@dataclass(slots=True)
class Steering:
    """What the supervisor set up for steering (see the module docstring)."""

    mode: str
    pass_fds: tuple[int, ...] = ()
    shard_settings: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] = _nothing
    metrics: Callable[[], list[str]] = _no_metrics
    """Prometheus exposition blocks appended to /metrics (e.g. XDP counters)."""
    detail: str = ""


def prepare_steering(config: NodeConfig, sockets: NodeSockets) -> Steering:
    """Choose and prepare the routing mode; raise `StartupError` if a forced
    mode cannot be had."""
    if config.routing not in ROUTING_MODES:
        raise StartupError(
            f"--routing {config.routing!r} is not available; choose one of "
            f"{', '.join(ROUTING_MODES)}"
        )
    # laminar.xdp: try "ebpf" then "cbpf" here when routing is "auto" (or the
    # forced mode), falling back to userspace with the reason in `detail`.
    return Steering(
        "userspace",
        detail="SO_REUSEPORT spreading; shards forward requests they do not own",
    )


def shard_setup(settings: dict[str, Any]) -> str:
    """Shard side: adopt the supervisor's steering settings; return the mode."""
    mode = settings.get("mode", "userspace")
    return mode if isinstance(mode, str) else "userspace"
