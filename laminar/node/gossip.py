"""The node's membership: the SWIM agent the supervisor runs, and where its socket is.

Membership is on with a cluster secret (`--cluster-secret-file`), `--join`
or `--gossip` (`NodeConfig.membership`). Every membership datagram is
authenticated: with TLS between nodes, signed by the sending node's
certificate key and carrying its certificate (`laminar.swim.signing`; no
secret needed), else tagged with the cluster secret (`laminar.swim.auth`).
Membership with neither is a start-up error (`NodeConfig`). Without
membership the node runs alone or on its --peers, and `members` is empty.
SIGHUP loads the certificate and key again (`reload`).

Where membership datagrams arrive:

- `ebpf` routing: on the node port itself. The agent's socket joins the node
  port's reuseport group in the slot reserved for it, and the SK_REUSEPORT
  program sends every datagram whose op is in the membership range (96-127)
  there, never to a shard (the XDP classifier counts them as membership).
  The agent's socket is one more member of the group, so a partition datagram
  the program cannot place (its shard's slot empty) may be hashed to it by the
  kernel; the agent drops it as unauthenticated, as it would any stranger's.
- `cbpf` and `userspace` routing: on a port of their own,
  `--membership-port` (default node port + 1000; ephemeral with `--port 0`):
  the classic program has no room for a second rule, and plain reuseport
  would spread them over the shards.

A member advertises its node address (`--host` and the node port: peers
open Raft links and clients connect there) and, when membership has a port
of its own, that port after a slash (`laminar.swim.agent.member_address`).
The agent pushes
every new view to the shards (`on_view`); `state()` and `metrics()` feed
/status and /metrics.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from collections.abc import Callable
from typing import Any

from laminar.node.listeners import StartupError
from laminar.node.prometheus import render_family
from laminar.replication.auth import SecretFileError, load_secret
from laminar.shards.config import NodeConfig
from laminar.swim import MembershipView, Swim, SwimConfig, SwimUsageError
from laminar.swim.agent import MembershipAgent, format_address, member_address, monotonic_ms
from laminar.swim.auth import PacketSealer, Sealer
from laminar.swim.signing import CertificateError, CertificateSealer
from laminar.xdp import sockets as xdp_sockets

logger = logging.getLogger("laminar.membership")

MEMBERSHIP_PORT_OFFSET = 1000
RELOAD_SLACK_BYTES = 128
"""Room kept in each packet for a reloaded certificate a little larger than
the one the node started with (a larger one waits for a restart)."""


def read_cluster_secret(path: str) -> bytes:
    """The secret in `path` (`laminar.replication.auth.load_secret`: private to its
    owner, at least 16 bytes); `StartupError` saying why not."""
    try:
        return load_secret(path)
    except SecretFileError as exc:
        raise StartupError(f"--cluster-secret-file: {exc}") from None


class NodeGossip:
    """The agent of one node, with the socket it owns."""

    def __init__(
        self,
        agent: MembershipAgent,
        address: str,
        seeds: list[str],
        steered: bool,
        signed: bool,
    ) -> None:
        self.agent = agent
        self.signed = signed
        """True when datagrams are signed by certificate, not tagged with the secret."""
        self.address = address
        """Where membership datagrams reach this node (what `--join` names)."""
        self.seeds = seeds
        self.steered = steered
        """True when membership shares the node port (ebpf steering)."""

    def start(self, on_view: Callable[[MembershipView], None]) -> None:
        self.agent.start(self.seeds, on_view)

    async def leave(self) -> None:
        await self.agent.leave()

    def close(self) -> None:
        self.agent.close()

    def view(self) -> MembershipView:
        return self.agent.view()

    def set_weight(self, weight: float) -> None:
        """Announce a new weight (`SwimUsageError` if it is not one)."""
        self.agent.set_weight(weight)

    def reload(self, config: NodeConfig) -> None:
        """SIGHUP: sign with the certificate and key in the files now, and trust
        the CA file's CAs now (datagrams tagged with the secret: nothing to do).
        A failure is logged and the credentials in use stay."""
        if not self.signed:
            return
        try:
            self.agent.use_sealer(certificate_sealer(config))
        except (OSError, SwimUsageError) as exc:
            logger.error("SIGHUP: membership keeps its certificate: %s", exc)
            return
        logger.info("SIGHUP: membership signs with the reloaded certificate")

    def state(self) -> dict[str, Any]:
        """The "membership" block of /status."""
        stats = self.agent.stats
        swim = self.agent.swim
        return {
            "address": self.address,
            "auth": "certificates" if self.signed else "cluster-secret",
            "port": "node" if self.steered else "membership",
            "incarnation": swim.incarnation,
            "weight": swim.weight,
            "health_score": swim.health_score,
            "datagrams_in": stats.datagrams_in,
            "datagrams_out": stats.datagrams_out,
            "unauthenticated": stats.unauthenticated,
            "malformed": stats.malformed,
        }

    def metrics(self) -> list[str]:
        view = self.view()
        stats = self.agent.stats
        core = self.agent.swim.stats
        states = ("alive", "suspect", "dead", "left")
        counts = {s: 0 for s in states}
        for member in view.members:
            counts[member.state.label] += 1
        return [
            render_family(
                "laminar_members",
                "gauge",
                "Members this node knows, by state (itself included).",
                [({"state": s}, counts[s]) for s in states],
            ),
            render_family(
                "laminar_membership_datagrams_total",
                "counter",
                "Membership datagrams by direction and outcome (dropped: failed "
                "authentication or did not decode).",
                [
                    (
                        {"direction": "in", "outcome": "accepted"},
                        stats.datagrams_in - stats.unauthenticated - stats.malformed,
                    ),
                    ({"direction": "in", "outcome": "unauthenticated"}, stats.unauthenticated),
                    ({"direction": "in", "outcome": "malformed"}, stats.malformed),
                    ({"direction": "out", "outcome": "sent"}, stats.datagrams_out),
                ],
            ),
            render_family(
                "laminar_membership_health_score",
                "gauge",
                "Lifeguard health awareness score (0 healthy; probes slow down as it grows).",
                [({}, self.agent.swim.health_score)],
            ),
            render_family(
                "laminar_membership_events_total",
                "counter",
                "Failure detector events on this node.",
                [
                    ({"event": "probe_failed"}, core.probes_failed),
                    ({"event": "suspicion_raised"}, core.suspicions_raised),
                    ({"event": "refuted"}, core.refutations),
                    ({"event": "declared_dead"}, core.deaths_declared),
                    ({"event": "foreign_ack_ignored"}, core.foreign_acks),
                ],
            ),
        ]


def prepare_gossip(
    config: NodeConfig,
    node_port: int,
    bind_steered: Callable[[], socket.socket | None],
) -> NodeGossip | None:
    """The node's membership, bound and ready to start; None when it has no secret.

    `bind_steered()` returns a socket on the node port that the kernel steers
    membership datagrams to (ebpf routing), or None when the routing mode
    cannot, and then a port of membership's own is bound. Raises
    `StartupError` with a one-line reason.
    """
    if not config.membership:
        return None
    sealer = _sealer(config)
    steered = bind_steered() if config.membership_port is None else None
    sock = steered if steered is not None else _bind_own_port(config, node_port)
    port = xdp_sockets.bound_port(sock)
    address = format_address(config.host, port)
    swim = Swim(
        config.node_id,
        member_address(config.host, node_port, port),
        rng=random.Random(os.urandom(16)),
        now_ms=monotonic_ms(),
        weight=config.weight,
        incarnation=_start_incarnation(),
        config=SwimConfig(
            packet_overhead_bytes=sealer.overhead_bytes
            + (RELOAD_SLACK_BYTES if config.gossip_signed else 0)
        ),
    )
    agent = MembershipAgent(swim, sock, sealer)
    where = "the node port (steered by the eBPF program)" if steered else f"port {port}"
    logger.info("membership on %s as %s at %s", where, config.node_id, address)
    return NodeGossip(agent, address, list(config.join), steered is not None, config.gossip_signed)


def _sealer(config: NodeConfig) -> Sealer:
    if not config.gossip_signed:
        return PacketSealer(read_cluster_secret(config.cluster_secret_file))
    try:
        return certificate_sealer(config)
    except (OSError, CertificateError) as exc:
        raise StartupError(f"membership cannot sign with the node certificate: {exc}") from None


def certificate_sealer(config: NodeConfig) -> CertificateSealer:
    """Raises `OSError` or `CertificateError`."""
    return CertificateSealer.from_files(
        config.tls_cert_file, config.tls_key_file, config.tls_ca_file, node_id=config.node_id
    )


def _bind_own_port(config: NodeConfig, node_port: int) -> socket.socket:
    if config.membership_port is not None:
        port = config.membership_port
    else:
        port = node_port + MEMBERSHIP_PORT_OFFSET if config.port else 0
    try:
        sock = socket.socket(xdp_sockets.family_of(config.host), socket.SOCK_DGRAM)
        sock.bind((config.host, port))
    except OSError as exc:
        raise StartupError(
            f"membership port {config.host}:{port}: {exc.strerror or exc} "
            "(choose another with --membership-port)"
        ) from None
    return sock


def _start_incarnation() -> int:
    """A restarted node starts above any incarnation it had before (seconds since
    the epoch, modulo u32), so its first `Alive` beats the news of its death
    instead of waiting to learn of it and refute."""
    return int(time.time()) & 0xFFFF_FFFF
