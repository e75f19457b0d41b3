"""Choosing the node port's routing mode: eBPF, then classic BPF, then userspace.

`choose_routing(requested, shard_count)` returns a `RoutingPlan` whose mode is
the one that actually loaded, not the one that looked possible: eBPF is
chosen only after its program compiled and passed the verifier, classic BPF
only after the kernel accepted the program on a throwaway socket.

- `auto` tries ebpf -> cbpf -> userspace and records why each skipped mode
  was skipped (`RoutingPlan.skipped`), so the start-up log line says why a
  node runs a slower mode.
- a forced mode that cannot load raises `RoutingUnavailable` naming the cause;
  it never silently degrades.

Userspace always works: every shard binds the node port with SO_REUSEPORT,
the kernel spreads datagrams by 4-tuple hash, and shards forward what they do
not own. Shards forward in every mode anyway (correctness never depends on
BPF); the modes differ only in how often they have to.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, Literal

from laminar.xdp import cbpf, csource, sockets
from laminar.xdp.ebpf_steer import EbpfSteeringProgram
from laminar.xdp.errors import BpfUnavailable, RoutingUnavailable, SteeringUsageError

RequestedMode = Literal["auto", "ebpf", "cbpf", "userspace"]
REQUESTED_MODES: Final = ("auto", "ebpf", "cbpf", "userspace")


class RoutingMode(enum.StrEnum):
    """How datagrams on the node port reach their owning shard."""

    EBPF = "ebpf"  # SK_REUSEPORT program + socket array (needs CAP_BPF)
    CBPF = "cbpf"  # classic reuseport program, sockets by bind order (no privilege)
    USERSPACE = "userspace"  # kernel hash; shards forward


@dataclass(frozen=True)
class RoutingPlan:
    """The chosen mode, and for eBPF the loaded program the steering will own."""

    mode: RoutingMode
    requested: str
    shard_count: int
    skipped: tuple[tuple[RoutingMode, str], ...] = ()
    program: EbpfSteeringProgram | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        """One log line: the mode, what was asked, and why better modes were skipped."""
        text = (
            f"routing mode {self.mode} for {self.shard_count} shards (requested {self.requested})"
        )
        for mode, cause in self.skipped:
            text += f"; {mode} unavailable: {cause}"
        return text

    def close(self) -> None:
        """Release the loaded program when the plan is not handed to a steering."""
        if self.program is not None:
            self.program.close()


def choose_routing(requested: str, shard_count: int) -> RoutingPlan:
    """The best mode that loads here for `shard_count` shards (see the module doc)."""
    if requested not in REQUESTED_MODES:
        raise SteeringUsageError(
            f"routing must be one of {', '.join(REQUESTED_MODES)}, got {requested!r}"
        )
    if type(shard_count) is not int or shard_count < 1:
        raise SteeringUsageError(f"shard_count must be an int >= 1, got {shard_count!r}")
    order = list(RoutingMode) if requested == "auto" else [RoutingMode(requested)]
    skipped: list[tuple[RoutingMode, str]] = []
    for mode in order:
        try:
            program = _try_mode(mode, shard_count)
        except BpfUnavailable as exc:
            if requested != "auto":
                raise RoutingUnavailable(mode, exc.cause, exc.errno) from exc
            skipped.append((mode, exc.cause))
            continue
        return RoutingPlan(mode, requested, shard_count, tuple(skipped), program)
    raise AssertionError("userspace routing cannot fail")  # pragma: no cover


def _try_mode(mode: RoutingMode, shard_count: int) -> EbpfSteeringProgram | None:
    if mode is RoutingMode.EBPF:
        if shard_count > csource.MAX_SHARDS:
            raise BpfUnavailable(f"the eBPF program steers at most {csource.MAX_SHARDS} shards")
        program = EbpfSteeringProgram.load()
        try:
            program.set_shard_count(shard_count)
        except BaseException:
            program.close()
            raise
        return program
    if mode is RoutingMode.CBPF:
        probe_cbpf(shard_count)
        return None
    return None


def probe_cbpf(shard_count: int) -> None:
    """Raise `BpfUnavailable` unless the kernel takes the classic program for
    `shard_count` shards (attached to a throwaway socket on 127.0.0.1)."""
    if shard_count > cbpf.max_shards():
        raise BpfUnavailable(
            f"the classic program fits at most {cbpf.max_shards()} shards "
            f"({cbpf.BPF_MAXINSNS} instructions)"
        )
    program = cbpf.build_program(shard_count)
    try:
        with sockets.bind_reuseport_udp("127.0.0.1", 0) as probe:
            cbpf.attach(probe, program)
    except OSError as exc:
        raise BpfUnavailable(f"SO_ATTACH_REUSEPORT_CBPF was refused: {exc}", exc.errno) from exc
