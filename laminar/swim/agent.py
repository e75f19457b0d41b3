"""The membership agent: the SWIM core on a UDP socket, in the supervisor's loop.

A thin shell: it reads datagrams, has its `auth.Sealer` check them (the
cluster secret's tag, or a certificate and signature), hands packets to
the core, calls the core's `tick` at its deadline, seals and sends what the
core produced, and publishes a new `MembershipView` whenever a member changed.
It runs in the supervisor, not in a shard, so membership survives shard
restarts and a dying shard does not make the node look dead.

Datagrams that fail authentication or do not decode are dropped, counted, and
logged (at most one line per `LOG_EVERY_S`, with how many were dropped since),
so a flood of them cannot flood the log. Reading is bounded per wake-up
(`READS_PER_WAKEUP`) so that a flood cannot starve the loop either.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from laminar.swim.auth import Sealer
from laminar.swim.core import Swim
from laminar.swim.errors import MalformedPacket, SwimUsageError, Unauthenticated
from laminar.swim.view import MembershipView

logger = logging.getLogger("laminar.membership")

READS_PER_WAKEUP: Final = 256
RECV_BYTES: Final = 65_535
LOG_EVERY_S: Final = 10.0
LEAVE_TIMEOUT_S: Final = 3.0
RESOLVED_MAX: Final = 16_384


def parse_address(address: str) -> tuple[str, int]:
    """Where membership datagrams for `address` go: `host:port` (or
    `[v6]:port`), or a member's `host:node_port/membership_port` (see
    `member_address`); ValueError when it is neither."""
    base, slash, membership = address.partition("/")
    host, port = node_address(base)
    if not slash:
        return host, port
    if not membership.isdigit() or not 0 < int(membership) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT/PORT")
    return host, int(membership)


def node_address(address: str) -> tuple[str, int]:
    """A member's node address (Raft and clients: its node port) from what it advertises."""
    host, sep, port_text = address.partition("/")[0].rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port_text)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def member_address(host: str, node_port: int, membership_port: int) -> str:
    """What a member advertises: its node address (peers open Raft links and
    clients connect there), then `/membership_port` when membership datagrams
    have a port of their own (cbpf and userspace routing)."""
    address = format_address(host, node_port)
    return address if membership_port == node_port else f"{address}/{membership_port}"


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class AgentStats:
    datagrams_in: int = 0
    datagrams_out: int = 0
    unauthenticated: int = 0
    malformed: int = 0
    send_errors: int = 0


class MembershipAgent:
    """Runs `swim` on `sock` (bound, non-blocking UDP) until `close`."""

    def __init__(
        self,
        swim: Swim,
        sock: socket.socket,
        sealer: Sealer,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.swim = swim
        self.sock = sock
        self._sealer = sealer
        self._on_view: Callable[[MembershipView], None] | None = None
        self._clock_ms = clock_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._resolved: dict[str, tuple[str, int] | None] = {}
        self._dropped_since_log = 0
        self._last_drop_log = -LOG_EVERY_S
        self.stats = AgentStats()
        sock.setblocking(False)

    def view(self) -> MembershipView:
        return self.swim.view()

    def start(
        self, seeds: list[str], on_view: Callable[[MembershipView], None] | None = None
    ) -> None:
        """Start serving in the running loop, joining through `seeds` if any;
        `on_view` gets every new view."""
        self._on_view = on_view
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._on_readable)
        if seeds:
            self.swim.join(seeds, self._clock_ms())
        self._flush()

    async def leave(self, timeout_s: float = LEAVE_TIMEOUT_S) -> None:
        """Announce a graceful leave and keep gossiping until the news is out
        (no update pending, or no live member left to tell) or `timeout_s` has
        passed."""
        self.swim.leave(self._clock_ms())
        self._flush()
        deadline = time.monotonic() + timeout_s
        while self.swim.pending_updates() and time.monotonic() < deadline:
            if not self.swim.view().live():
                break
            await asyncio.sleep(0.05)

    def set_weight(self, weight: float) -> None:
        """Announce a new weight to the cluster (`Swim.set_weight`)."""
        self.swim.set_weight(weight, self._clock_ms())
        self._flush()

    def use_sealer(self, sealer: Sealer) -> None:
        """Seal and open with `sealer` from now on (a reloaded certificate);
        `SwimUsageError` if its datagrams would not fit the packets' reserve."""
        reserved = self.swim.config.packet_overhead_bytes
        if sealer.overhead_bytes > reserved:
            raise SwimUsageError(
                f"the new credentials need {sealer.overhead_bytes} bytes per datagram; "
                f"{reserved} are reserved until a restart"
            )
        self._sealer = sealer

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._loop = None
        self.sock.close()

    # --- the shell ----------------------------------------------------------------

    def _on_readable(self) -> None:
        for _ in range(READS_PER_WAKEUP):
            try:
                data, source = self.sock.recvfrom(RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # ICMP errors of earlier sends surface here
                logger.debug("membership socket: %s", exc)
                continue
            self.stats.datagrams_in += 1
            try:
                packet = self._sealer.open(data)
            except Unauthenticated as exc:
                self.stats.unauthenticated += 1
                self._log_drop(source, exc)
                continue
            except MalformedPacket as exc:
                self.stats.malformed += 1
                self._log_drop(source, exc)
                continue
            self.swim.step(packet, self._clock_ms())
        self._flush()

    def _on_timer(self) -> None:
        self._timer = None
        self.swim.tick(self._clock_ms())
        self._flush()

    def _flush(self) -> None:
        """Send what the core produced, publish the view, re-arm the timer."""
        ready = self.swim.ready()
        for outgoing in ready.packets:
            target = self._resolve(outgoing.address)
            if target is None:
                continue
            try:
                self.sock.sendto(self._sealer.seal(outgoing.packet), target)
                self.stats.datagrams_out += 1
            except OSError as exc:  # a full buffer or an unreachable peer: loss, as UDP
                self.stats.send_errors += 1
                logger.debug("membership send to %s: %s", outgoing.address, exc)
        if ready.changes:
            for change in ready.changes:
                member = change.member
                logger.info(
                    "member %s (%s) is %s (incarnation %d, weight %g)",
                    member.node_id,
                    member.address,
                    member.state.label,
                    member.incarnation,
                    member.weight,
                )
            if self._on_view is not None:
                self._on_view(self.swim.view())
        if self._loop is not None:
            if self._timer is not None:
                self._timer.cancel()
            delay_s = max(0.0, (self.swim.next_deadline_ms() - self._clock_ms()) / 1000)
            self._timer = self._loop.call_later(delay_s, self._on_timer)

    def _resolve(self, address: str) -> tuple[str, int] | None:
        if len(self._resolved) > RESOLVED_MAX:
            self._resolved.clear()
        if address not in self._resolved:
            try:
                self._resolved[address] = parse_address(address)
            except ValueError:
                logger.warning("membership: cannot send to %r: not HOST:PORT", address)
                self._resolved[address] = None
        return self._resolved[address]

    def _log_drop(self, source: object, exc: Exception) -> None:
        self._dropped_since_log += 1
        now = time.monotonic()
        if now - self._last_drop_log >= LOG_EVERY_S:
            logger.warning(
                "membership: dropped a datagram from %s: %s (%d dropped since the last report)",
                source,
                exc,
                self._dropped_since_log,
            )
            self._dropped_since_log = 0
            self._last_drop_log = now
