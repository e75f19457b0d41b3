"""Targets: the systems the harness can run, by name.

A target name is `system[-r<N>][:variant]`; the variant picks the durability
setting, `-r<N>` runs N replicated servers (a cluster on loopback) and streams
with N replicas:

- `laminar` (`--flush always`), `laminar:interval`, `laminar:tls` (`--flush
  always`, every door and the client through TLS), `laminar:tls-scram` (TLS and
  `--auth scram`, an ordinary user's login and ACLs); `laminar-r1` (the same
  single node), `laminar-r3` (three nodes, replication_factor 3)
- `nats-jetstream` (server default), `nats-jetstream:sync-always` (needs
  nats-server >= 2.10); `nats-jetstream-r3` (three clustered servers, R3 streams)
- `redis-streams` (`appendfsync always`), `redis-streams:everysec`
- `laminar-kafka` (the `laminar` node through its Kafka door, confluent-kafka's
  producer defaults), `laminar-kafka:linger5` (`linger.ms=5`), `laminar-kafka:tls`
  (`security.protocol=SSL`), `laminar-kafka:tls-scram` (`SASL_SSL`, SCRAM-SHA-256)

Imports are lazy so that a missing client library only fails the targets that
need it, with a message, instead of the whole harness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from laminar.bench.targets.base import (
    Durability,
    Endpoint,
    Reader,
    Start,
    System,
    SystemUnavailable,
    Target,
)

SYSTEMS = ("laminar", "laminar-kafka", "nats-jetstream", "redis-streams")
REPLICATED_SYSTEMS = ("laminar", "nats-jetstream")
MAX_REPLICAS = 5
KNOWN_TARGETS = (
    "laminar",
    "laminar:interval",
    "laminar:plain",
    "laminar:tls",
    "laminar:tls-scram",
    "laminar-r1",
    "laminar-r3",
    "laminar-kafka",
    "laminar-kafka:linger5",
    "laminar-kafka:tls",
    "laminar-kafka:tls-scram",
    "nats-jetstream",
    "nats-jetstream:sync-always",
    "nats-jetstream-r3",
    "redis-streams",
    "redis-streams:everysec",
)
_REPLICAS = re.compile(r"(?P<system>.+)-r(?P<replicas>[0-9]+)")

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
    "TargetName",
    "connect_target",
    "make_system",
    "parse_target",
    "server_of",
]


@dataclass(frozen=True, slots=True)
class SystemOptions:
    """Settings that apply to one system only (given on the command line)."""

    laminar_bootstrap: str | None = None
    laminar_cores: int | None = None
    laminar_runtime: str = "auto"


class TargetName(NamedTuple):
    system: str
    variant: str | None
    replicas: int | None
    """N of `-r<N>`; None for the plain name (one server, no replication)."""


def parse_target(name: str) -> TargetName:
    """Split `system[-r<N>][:variant]`; raise ValueError for an unknown system
    or a replica count the system does not have."""
    base, _, variant = name.partition(":")
    system, replicas = base, None
    match = _REPLICAS.fullmatch(base)
    if match is not None and base not in SYSTEMS:
        system, replicas = match["system"], int(match["replicas"])
    if system not in SYSTEMS:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(KNOWN_TARGETS)}")
    if replicas is not None:
        if system not in REPLICATED_SYSTEMS:
            raise ValueError(f"{name!r}: {system} has no replicated variant (-r<N>)")
        if not 1 <= replicas <= MAX_REPLICAS:
            raise ValueError(f"{name!r}: replicas must be 1 to {MAX_REPLICAS}, not {replicas}")
    return TargetName(system, variant or None, replicas)


def server_of(name: str) -> str:
    """The server a target runs, whichever door its client uses: `laminar-kafka`
    is the `laminar` node (a goal compares laminar with other servers only)."""
    system = parse_target(name).system
    return "laminar" if system == "laminar-kafka" else system


def make_system(name: str, options: SystemOptions | None = None) -> System:
    """The coordinator-side `System` for a target name."""
    options = options or SystemOptions()
    system, variant, replicas = parse_target(name)
    if system == "laminar":
        from laminar.bench.targets.laminar_target import LaminarSystem

        return LaminarSystem(
            variant or "always",
            bootstrap=options.laminar_bootstrap,
            cores=options.laminar_cores,
            runtime=options.laminar_runtime,
            replicas=replicas,
        )
    if system == "laminar-kafka":
        from laminar.bench.targets.laminar_kafka import LaminarKafkaSystem

        return LaminarKafkaSystem(
            variant or "default", cores=options.laminar_cores, runtime=options.laminar_runtime
        )
    if system == "nats-jetstream":
        from laminar.bench.targets.nats_jetstream import NatsJetStreamSystem

        return NatsJetStreamSystem(variant or "default", replicas=replicas)
    from laminar.bench.targets.redis_streams import RedisStreamsSystem

    return RedisStreamsSystem(variant or "always")


def connect_target(endpoint: Endpoint) -> Target:
    """A (not yet connected) client for `endpoint`, in a worker process."""
    if endpoint.kind == "laminar":
        from laminar.bench.targets.laminar_target import LaminarTarget

        return LaminarTarget(endpoint)
    if endpoint.kind == "laminar-kafka":
        from laminar.bench.targets.laminar_kafka import LaminarKafkaTarget

        return LaminarKafkaTarget(endpoint)
    if endpoint.kind == "nats-jetstream":
        from laminar.bench.targets.nats_jetstream import NatsJetStreamTarget

        return NatsJetStreamTarget(endpoint)
    if endpoint.kind == "redis-streams":
        from laminar.bench.targets.redis_streams import RedisStreamsTarget

        return RedisStreamsTarget(endpoint)
    raise ValueError(f"no client for endpoint kind {endpoint.kind!r}")
