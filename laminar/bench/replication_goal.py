"""The replication goals of issue 15, checked on one comparison's medians.

When the first target is replicated (`laminar-r3`), it is compared with

- the same system unreplicated (`laminar-r1`, or plain `laminar`): in a closed
  loop its throughput must be at least `MIN_VS_SINGLE` of it; at a fixed rate
  its p99 at most `MAX_P99_VS_SINGLE` of it;
- each other system with as many replicas (`nats-jetstream-r3`): in a closed
  loop at least `MIN_VS_PEER` of its throughput, whatever its durability (the
  check says when the peer acknowledges before fsync, which flatters it).

As everywhere in the harness, throughput is checked in a closed loop only and
p99 at a fixed rate only, and a check involving a generator-bound target says
so: it is not a server comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from laminar.bench.compare import TargetSummary
from laminar.bench.config import RunConfig
from laminar.bench.targets import parse_target

MIN_VS_SINGLE: Final = 0.5
MAX_P99_VS_SINGLE: Final = 2.0
MIN_VS_PEER: Final = 1.0


@dataclass(frozen=True, slots=True)
class GoalCheck:
    baseline: str
    other: str
    metric: Literal["throughput", "p99", "server CPU per record"]
    ratio: float | None
    """baseline / other."""
    bound: float
    met: bool
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        shown = "-" if self.ratio is None else f"{self.ratio:.2f}x"
        sign = ">=" if self.metric == "throughput" else "<="
        where = " at a fixed rate" if self.metric == "p99" else ""
        text = (
            f"{self.baseline} {self.metric} {shown} of {self.other}{where} "
            f"(goal {sign} {self.bound:g}x: {'met' if self.met else 'missed'})"
        )
        return text + "".join(f"; {note}" for note in self.notes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def replication_checks(config: RunConfig, summaries: Sequence[TargetSummary]) -> list[GoalCheck]:
    """The checks that apply to this comparison (none unless the first target
    is replicated and the workload produces)."""
    if not summaries or config.workload != "produce":
        return []
    base = summaries[0]
    name = parse_target(base.target)
    if name.replicas is None or name.replicas < 2 or base.runs == base.failed:
        return []
    checks = []
    for other in summaries[1:]:
        if other.runs == other.failed:
            continue
        theirs = parse_target(other.target)
        if theirs.system == name.system and (theirs.replicas or 1) == 1:
            if config.load == "closed":
                checks.append(throughput_check(base, other, MIN_VS_SINGLE))
            else:
                checks.append(_p99(base, other, MAX_P99_VS_SINGLE))
        elif (
            theirs.system != name.system
            and theirs.replicas == name.replicas
            and config.load == "closed"
        ):
            checks.append(throughput_check(base, other, MIN_VS_PEER))
    return checks


def notes(base: TargetSummary, other: TargetSummary | None = None) -> tuple[str, ...]:
    """What qualifies a check: a peer acknowledging before fsync, a generator
    that bound a run."""
    out = []
    if other is not None and not other.durability.get("fsync_before_ack", True):
        out.append(f"{other.target} acknowledges before fsync")
    bound = [s.target for s in (base, other) if s is not None and s.generator_bound]
    if bound:
        out.append(f"{', '.join(bound)}: generator-bound, not a server comparison")
    return tuple(out)


def throughput_check(base: TargetSummary, other: TargetSummary, bound: float) -> GoalCheck:
    ratio = ratio_of(base.records_per_s, other.records_per_s)
    met = ratio is not None and ratio >= bound
    return GoalCheck(base.target, other.target, "throughput", ratio, bound, met, notes(base, other))


def _p99(base: TargetSummary, other: TargetSummary, bound: float) -> GoalCheck:
    ratio = ratio_of(base.latency_us.get("p99_us"), other.latency_us.get("p99_us"))
    met = ratio is not None and ratio <= bound
    return GoalCheck(base.target, other.target, "p99", ratio, bound, met, notes(base, other))


def ratio_of(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b
