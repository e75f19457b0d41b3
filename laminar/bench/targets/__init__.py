"""Targets: the systems the harness can run, by name.

A target name is `system[:variant]`; the variant picks the durability setting:

- `laminar` (`--flush always`), `laminar:interval`
- `nats-jetstream` (server default), `nats-jetstream:sync-always` (needs nats-server >= 2.10)
- `redis-streams` (`appendfsync always`), `redis-streams:everysec`

Imports are lazy so that a missing client library only fails the targets that
need it, with a message, instead of the whole harness.
"""

from __future__ import annotations

from dataclasses import dataclass

from laminar.bench.targets.base import (
    Durability,
    Endpoint,
    Reader,
    Start,
    System,
    SystemUnavailable,
    Target,
)

SYSTEMS = ("laminar", "nats-jetstream", "redis-streams")
KNOWN_TARGETS = (
    "laminar",
    "laminar:interval",
    "nats-jetstream",
    "nats-jetstream:sync-always",
    "redis-streams",
    "redis-streams:everysec",
)

__all__ = [
    "KNOWN_TARGETS",
    "SYSTEMS",
    "Durability",
    "Endpoint",
    "Reader",
    "Start",
    "System",
    "SystemOptions",
    "SystemUnavailable",
    "Target",
    "connect_target",
    "make_system",
    "parse_target",
]


@dataclass(frozen=True, slots=True)
class SystemOptions:
    """Settings that apply to one system only (given on the command line)."""

    laminar_bootstrap: str | None = None
    laminar_cores: int | None = None
    laminar_runtime: str = "auto"


def parse_target(name: str) -> tuple[str, str | None]:
    """Split `system:variant`; raise ValueError for an unknown system."""
    system, _, variant = name.partition(":")
    if system not in SYSTEMS:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(KNOWN_TARGETS)}")
    return system, variant or None


def make_system(name: str, options: SystemOptions | None = None) -> System:
    """The coordinator-side `System` for a target name."""
    options = options or SystemOptions()
    system, variant = parse_target(name)
    if system == "laminar":
        from laminar.bench.targets.laminar_target import LaminarSystem

        return LaminarSystem(
            variant or "always",
            bootstrap=options.laminar_bootstrap,
            cores=options.laminar_cores,
            runtime=options.laminar_runtime,
        )
    if system == "nats-jetstream":
        from laminar.bench.targets.nats_jetstream import NatsJetStreamSystem

        return NatsJetStreamSystem(variant or "default")
    from laminar.bench.targets.redis_streams import RedisStreamsSystem

    return RedisStreamsSystem(variant or "always")


def connect_target(endpoint: Endpoint) -> Target:
    """A (not yet connected) client for `endpoint`, in a worker process."""
    if endpoint.kind == "laminar":
        from laminar.bench.targets.laminar_target import LaminarTarget

        return LaminarTarget(endpoint)
    if endpoint.kind == "nats-jetstream":
        from laminar.bench.targets.nats_jetstream import NatsJetStreamTarget

        return NatsJetStreamTarget(endpoint)
    if endpoint.kind == "redis-streams":
        from laminar.bench.targets.redis_streams import RedisStreamsTarget

        return RedisStreamsTarget(endpoint)
    raise ValueError(f"no client for endpoint kind {endpoint.kind!r}")
