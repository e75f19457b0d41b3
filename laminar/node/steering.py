"""Request steering: how requests on the node port reach their owning shard.

This module is the seam where `laminar.xdp` plugs into the node. The modes
(`--routing`, see `laminar.xdp.routing`):

- "ebpf": an SK_REUSEPORT program reads the partition id of each datagram and
  picks the owner's socket from a socket array; malformed datagrams are
  counted and dropped in the kernel. Needs CAP_BPF.
- "cbpf": a classic reuseport program computes the same owner and returns its
  socket's bind-order index. No privilege needed.
- "userspace": plain SO_REUSEPORT; the kernel spreads datagrams by its own
  hash and shards forward what they do not own.
- "auto" (the default) takes the first of those that loads and the start-up
  log says why the better ones did not; a forced mode that cannot load is a
  `StartupError` naming the cause.
- "off" (`UDP_OFF`): with TLS or logins (`--auth`) the node serves no UDP at
  all (a datagram can carry neither, and a side door would undo them): no UDP socket
  is bound on the node port, nothing is steered, no XDP classifier attaches,
  and membership binds its own port. `NodeConfig` refuses a forced
  `--routing` or `--xdp` mode then.

Shards need nothing more to be correct: in every mode they check ownership of
each request and forward over the inter-shard channel (`dispatch`); the modes
differ in how often they have to. TCP on the node port is never steered (the
program would run at SYN time, before any request).

Supervisor side, before any shard starts:

1. `prepare_steering(config, sockets)` runs after the TCP sockets are bound
   (`sockets.port` is the node port) and makes the node port's UDP group
   (`ReuseportSteering`): one socket per shard, bound in shard order and held
   by the supervisor for the node's whole life, so a restarted shard gets the
   same socket back; the socket array and the classic program's bind order
   stay valid, and datagrams sent meanwhile wait in its queue.
2. With ebpf routing it also attaches the XDP classifier (`xdp_attach`).
3. It returns a `Steering`: `mode`; `udp_fd(i)` (the UDP socket shard i
   inherits: shards get no BPF program or map fds, they have no use for
   them); `shard_settings()` (delivered as
   `config.extra["steering"]`, with "mode" added); `close()` (run by the
   supervisor on every exit path: detach, unload, close the sockets);
   `metrics()` (exposition blocks for /metrics); `state()` (JSON for /status
   and node.json); `detail` (the start-up log line).

Shard side: `shard_setup(settings)` returns the mode the shard reports; the
UDP socket itself arrives with the shard's other sockets (`listeners`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from laminar.node.listeners import NodeSockets, StartupError
from laminar.node.prometheus import render_family
from laminar.node.xdp_attach import NodeXdp, attach_classifier
from laminar.shards.config import UDP_OFF, NodeConfig
from laminar.xdp import ReuseportSteering, RoutingUnavailable, SteerCounters, SteeringUsageError


def _nothing() -> None:
    return None


def _no_metrics() -> list[str]:
    return []


def _no_settings() -> dict[str, Any]:
    return {}


def _no_socket() -> socket.socket | None:
    return None


@dataclass(slots=True)
class Steering:
    """What the supervisor set up for steering (see the module docstring)."""

    mode: str
    udp_fd: Callable[[int], int | None]
    shard_settings: Callable[[], dict[str, Any]] = _no_settings
    close: Callable[[], None] = _nothing
    metrics: Callable[[], list[str]] = _no_metrics
    state: Callable[[], dict[str, Any]] = _no_settings
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    bind_membership: Callable[[], socket.socket | None] = _no_socket
    """A node-port socket the kernel steers membership datagrams to, or None when
    this mode cannot (`laminar.node.gossip`)."""


def prepare_steering(config: NodeConfig, sockets: NodeSockets) -> Steering:
    """Bind the node port's UDP group and steer it (nothing with TLS or logins:
    `UDP_OFF`); raise `StartupError` if a forced mode cannot be had or the port
    cannot be bound."""
    if config.udp_off_reason is not None:
        return Steering(UDP_OFF, udp_fd=lambda _shard: None, detail=config.udp_off_reason)
    try:
        rs = ReuseportSteering.prepare(
            config.cores, config.host, sockets.port, routing=config.routing
        )
    except RoutingUnavailable as exc:
        raise StartupError(
            f"--routing {config.routing}: {exc} (--routing auto picks the best mode that loads)"
        ) from None
    except (OSError, SteeringUsageError) as exc:
        raise StartupError(f"node UDP port {config.host}:{sockets.port}: {exc}") from None
    try:
        xdp = attach_classifier(config.xdp, str(rs.mode), config.host, rs.port)
    except BaseException:
        rs.close()
        raise
    return _from_reuseport(rs, xdp)


def _from_reuseport(rs: ReuseportSteering, xdp: NodeXdp) -> Steering:
    def udp_fd(shard: int) -> int | None:
        return rs.spec.socket_fds[shard]

    def close() -> None:
        try:
            xdp.close()
        finally:
            rs.close()

    def metrics() -> list[str]:
        blocks = xdp.metrics()
        counters = rs.counters()
        if counters is not None:
            blocks.append(
                render_family(
                    "laminar_steering_datagrams_total",
                    "counter",
                    "Datagrams the eBPF reuseport program handled, by outcome "
                    "(malformed ones dropped, by reason).",
                    _steer_samples(counters),
                )
            )
        return blocks

    def state() -> dict[str, Any]:
        counters = rs.counters()
        return {
            "steering_counters": None if counters is None else counters.as_dict(),
            "xdp": xdp.state(),
        }

    return Steering(
        str(rs.mode),
        udp_fd=udp_fd,
        shard_settings=lambda: {"spec": rs.spec.to_json()},
        close=close,
        metrics=metrics,
        state=state,
        detail=f"{rs.describe()}; {xdp.describe()}",
        extra={"xdp": xdp},
        bind_membership=rs.bind_membership_socket,
    )


_MALFORMED = ("short", "bad_magic", "bad_version", "bad_length")


def _steer_samples(counters: SteerCounters) -> Iterator[tuple[dict[str, object], float]]:
    for outcome, value in counters.as_dict().items():
        if outcome in _MALFORMED:
            yield {"outcome": "malformed", "reason": outcome}, value
        else:
            yield {"outcome": outcome}, value
