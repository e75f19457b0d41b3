"""The node port's reuseport group: sockets made by the supervisor, used by shards.

Who owns what
-------------

The supervisor makes every shard's UDP socket, in shard order, and hands
socket i to shard i through `subprocess.Popen(pass_fds=...)`; it keeps its
own copy of each. That choice buys three things:

- classic BPF indexes sockets by the order they joined the group, and only a
  single process binding them one after the other fixes that order;
- a shard needs no privilege at all: the socket array is filled and the
  program attached by the supervisor, which did the privileged loading;
- a crashed shard's socket stays in the group, so its datagrams wait in the
  socket's receive queue (up to its buffer) and the restarted shard, given the
  same fd, serves them: no re-steering while it restarts.

When a shard is gone for good (or its socket must be renewed), `retire(i)`
closes the supervisor's copy and empties slot i: its partitions then reach
some other shard by the kernel's hash and are forwarded. `replace(i)` binds
a fresh socket for shard i and steers to it again. For classic BPF both
rebuild the program for the group's new order, which `ReuseportSteering`
tracks the way the kernel keeps it (appended on bind; on leave the last
socket fills the hole). That tracking assumes the supervisor's copy is the
last reference: call `retire`/`replace` only after shard i's process has
exited. In eBPF mode slots are explicit and no order is assumed.

A shard that binds its own socket instead (eBPF and userspace modes) calls
`attach_shard_socket`, which needs the socket array and program fds passed
too; `fds_for_shard` includes them in eBPF mode.

The spec
--------

`SteeringSpec` is what a shard needs to know, as JSON: the mode, the address,
the shard count and the fd numbers it inherits (pass_fds keeps fd numbers).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

from laminar.xdp import cbpf, sockets
from laminar.xdp.csource import MEMBERSHIP_SLOT
from laminar.xdp.ebpf_steer import EbpfSteeringProgram, SteerCounters, set_socket
from laminar.xdp.errors import SteeringUsageError
from laminar.xdp.routing import RoutingMode, RoutingPlan, choose_routing

UdpSocket = socket.socket  # the class name `socket` is shadowed by a method below


@dataclass(frozen=True, slots=True)
class SteeringSpec:
    """What shards need from the supervisor's steering (JSON-serialisable)."""

    mode: str
    host: str
    port: int
    shard_count: int
    socket_fds: tuple[int | None, ...]
    """Shard i's socket fd, inherited through pass_fds (None: retired)."""
    sockarray_fd: int | None = None
    """eBPF mode: the REUSEPORT_SOCKARRAY fd, for `attach_shard_socket`."""
    prog_fd: int | None = None
    """eBPF mode: the SK_REUSEPORT program fd, for `attach_shard_socket`."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SteeringSpec:
        data: dict[str, Any] = json.loads(text)
        data["socket_fds"] = tuple(data["socket_fds"])
        return cls(**data)


class ReuseportSteering:
    """The supervisor's side: the group's sockets and its steering program."""

    def __init__(self, plan: RoutingPlan, host: str, port: int, *, owns_plan: bool) -> None:
        self.plan = plan
        self._owns_plan = owns_plan
        self.host = host
        self.port = port
        self._program: EbpfSteeringProgram | None = plan.program
        self._sockets: list[socket.socket | None] = []
        self._group_order: list[int] = []  # shard ids in the kernel's socket order
        self._closed = False

    @classmethod
    def prepare(
        cls, shard_count: int, host: str, port: int, routing: str | RoutingPlan = "auto"
    ) -> ReuseportSteering:
        """Choose (or take) a routing plan, bind one socket per shard and steer.

        `port` 0 binds an ephemeral port (see `.port`). Close the steering (or
        use `with`) when the node stops. A plan made here (routing given as a
        mode name) is closed with the steering; a `RoutingPlan` passed in stays
        the caller's to close, so one loaded program can serve successive
        steerings (one at a time: the socket array has one slot per shard).
        """
        owns_plan = not isinstance(routing, RoutingPlan)
        plan = routing if isinstance(routing, RoutingPlan) else choose_routing(routing, shard_count)
        if plan.shard_count != shard_count:
            raise SteeringUsageError(
                f"the plan is for {plan.shard_count} shards, not {shard_count}"
            )
        steering = cls(plan, host, port, owns_plan=owns_plan)
        try:
            for shard in range(shard_count):
                steering._bind(shard)
            steering._install()
        except BaseException:
            steering.close()
            raise
        return steering

    @property
    def mode(self) -> RoutingMode:
        return self.plan.mode

    @property
    def shard_count(self) -> int:
        return self.plan.shard_count

    @property
    def spec(self) -> SteeringSpec:
        program = self._program
        return SteeringSpec(
            mode=str(self.mode),
            host=self.host,
            port=self.port,
            shard_count=self.shard_count,
            socket_fds=tuple(None if s is None else s.fileno() for s in self._sockets),
            sockarray_fd=None if program is None else program.sockarray_fd,
            prog_fd=None if program is None else program.prog_fd,
        )

    def fds_for_shard(self, shard: int) -> tuple[int, ...]:
        """The fds to give shard `shard` in `pass_fds` (its socket; in eBPF mode
        also the socket array and program, for `attach_shard_socket`)."""
        self._check_shard(shard)
        fds = [] if (sock := self._sockets[shard]) is None else [sock.fileno()]
        if self._program is not None:
            fds += [self._program.sockarray_fd, self._program.prog_fd]
        return tuple(fds)

    def socket(self, shard: int) -> socket.socket | None:
        """The supervisor's copy of shard `shard`'s socket (None when retired)."""
        self._check_shard(shard)
        return self._sockets[shard]

    def retire(self, shard: int) -> None:
        """Take shard `shard`'s socket out of steering and close the supervisor's copy.

        Call after the shard's process has exited (see the module doc).
        """
        self._check_shard(shard)
        sock = self._sockets[shard]
        if sock is None:
            return
        if self._program is not None:
            self._program.clear_socket(shard)
        self._sockets[shard] = None
        sock.close()
        position = self._group_order.index(shard)
        last = self._group_order.pop()
        if position < len(self._group_order):
            self._group_order[position] = last
        self._install()

    def replace(self, shard: int) -> int:
        """Give shard `shard` a freshly bound socket; returns its fd (to pass)."""
        self._check_shard(shard)
        self.retire(shard)
        self._bind(shard)
        self._install()
        sock = self._sockets[shard]
        assert sock is not None
        return sock.fileno()

    def bind_membership_socket(self) -> UdpSocket | None:
        """eBPF mode: a new socket in the group, in the membership slot, which the
        program gives every membership datagram (ops 96-127); the caller owns it
        (closing it empties the slot). None in the other modes, which cannot
        steer by op: membership needs a port of its own there."""
        if self._closed:
            raise SteeringUsageError("the steering is closed")
        if self._program is None:
            return None
        sock = sockets.bind_reuseport_udp(self.host, self.port)
        try:
            self._program.set_socket(MEMBERSHIP_SLOT, sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def counters(self) -> SteerCounters | None:
        """The eBPF program's counters; None in the other modes (they have none)."""
        return None if self._program is None else self._program.counters()

    def describe(self) -> str:
        text = self.plan.describe() + f"; node port {self.host}:{self.port}/udp"
        if self._program is not None:
            text += f"; program id {self._program.prog_id}"
        return text

    def close(self) -> None:
        """Close the supervisor's sockets and release the program (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for sock in self._sockets:
            if sock is not None:
                sock.close()
        self._sockets = []
        if self._owns_plan:
            self.plan.close()

    def __enter__(self) -> ReuseportSteering:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_shard(self, shard: int) -> None:
        if self._closed:
            raise SteeringUsageError("the steering is closed")
        if not 0 <= shard < self.shard_count:
            raise SteeringUsageError(f"shard {shard} out of range 0..{self.shard_count - 1}")

    def _bind(self, shard: int) -> None:
        sock = sockets.bind_reuseport_udp(self.host, self.port)
        if self.port == 0:
            self.port = sockets.bound_port(sock)
        while len(self._sockets) <= shard:
            self._sockets.append(None)
        self._sockets[shard] = sock
        self._group_order.append(shard)

    def _install(self) -> None:
        live = [s for s in self._sockets if s is not None]
        if not live:
            return
        if self.mode is RoutingMode.EBPF:
            assert self._program is not None
            self._program.set_shard_count(self.shard_count)
            for shard, sock in enumerate(self._sockets):
                if sock is not None:
                    self._program.set_socket(shard, sock)
            self._program.attach(live[0])
        elif self.mode is RoutingMode.CBPF:
            order = self._group_order
            index = [order.index(s) if s in order else None for s in range(self.shard_count)]
            cbpf.attach(live[0], cbpf.build_program(self.shard_count, index))


def open_shard_socket(spec: SteeringSpec, shard: int) -> socket.socket:
    """The shard's side: adopt the node-port socket the supervisor passed.

    Raises `SteeringUsageError` when the fd was not passed (`pass_fds`) or is
    not the node port's UDP socket.
    """
    if not 0 <= shard < spec.shard_count:
        raise SteeringUsageError(f"shard {shard} out of range 0..{spec.shard_count - 1}")
    fd = spec.socket_fds[shard]
    if fd is None:
        raise SteeringUsageError(f"shard {shard}'s socket was retired by the supervisor")
    try:
        os.fstat(fd)
    except OSError as exc:
        raise SteeringUsageError(
            f"fd {fd} was not inherited: pass ReuseportSteering.fds_for_shard({shard}) "
            "to subprocess.Popen(pass_fds=...)"
        ) from exc
    sock = socket.socket(fileno=fd)
    if sock.type != socket.SOCK_DGRAM or sockets.bound_port(sock) != spec.port:
        sock.detach()
        raise SteeringUsageError(f"fd {fd} is not the node port's UDP socket ({spec.port})")
    return sock


def attach_shard_socket(spec: SteeringSpec, shard: int, sock: socket.socket) -> None:
    """The shard's side, for a socket it bound itself (SO_REUSEPORT, the node port).

    eBPF: puts the socket into slot `shard` and attaches the program (needs the
    spec's `sockarray_fd` and `prog_fd` inherited, and CAP_BPF for the map
    update). Userspace: nothing to do. Classic BPF: refused, because only the
    supervisor's bind order is known to the program; use `open_shard_socket`.
    """
    if not 0 <= shard < spec.shard_count:
        raise SteeringUsageError(f"shard {shard} out of range 0..{spec.shard_count - 1}")
    if sockets.bound_port(sock) != spec.port:
        raise SteeringUsageError(f"the socket is not bound to the node port {spec.port}")
    mode = RoutingMode(spec.mode)
    if mode is RoutingMode.CBPF:
        raise SteeringUsageError(
            "classic BPF steering indexes sockets by bind order, which only the supervisor "
            "controls: use the socket it passed (open_shard_socket)"
        )
    if mode is RoutingMode.EBPF:
        if spec.sockarray_fd is None or spec.prog_fd is None:
            raise SteeringUsageError("the eBPF spec lacks the socket array and program fds")
        set_socket(spec.sockarray_fd, shard, sock)
        sockets.attach_ebpf(sock, spec.prog_fd)
