"""The Kafka door's goals of issue 27, checked on one comparison's medians.

When the first target is the Kafka door (`laminar-kafka`, any variant), it is
compared with

- Redis Streams with `appendfsync always` (`redis-streams`): its throughput
  must be at least `MIN_VS_REDIS` of Redis's, for a closed-loop produce and
  for a backlog consume (XRANGE-style reads of what is there);
- a backlog consume must also reach `MIN_CONSUME_RECORDS_PER_S` on its own;
- laminar's own door (`laminar`, the same node): the server's CPU per record
  must be at most `MAX_CPU_VS_OWN_DOOR` of it, in every workload.

Throughput is checked in a closed loop or a backlog consume only (at a fixed
rate every target sends the same); a check involving a generator-bound target
says so, as in `laminar.bench.replication_goal`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from laminar.bench.compare import TargetSummary
from laminar.bench.config import RunConfig
from laminar.bench.replication_goal import GoalCheck, notes, ratio_of, throughput_check
from laminar.bench.targets import parse_target

MIN_VS_REDIS: Final = 2.0
MIN_CONSUME_RECORDS_PER_S: Final = 500_000
MAX_CPU_VS_OWN_DOOR: Final = 1.0
REDIS_ALWAYS: Final = "redis-streams"
OWN_DOOR: Final = "laminar"


def kafka_checks(config: RunConfig, summaries: Sequence[TargetSummary]) -> list[GoalCheck]:
    """The checks that apply (none unless the first target is `laminar-kafka`)."""
    if not summaries:
        return []
    base = summaries[0]
    if parse_target(base.target).system != "laminar-kafka" or base.runs == base.failed:
        return []
    others = {s.target: s for s in summaries[1:] if s.runs > s.failed}
    measures_throughput = config.consumes_backlog or (
        config.workload == "produce" and config.load == "closed"
    )
    checks = []
    redis = others.get(REDIS_ALWAYS)
    if redis is not None and measures_throughput:
        checks.append(throughput_check(base, redis, MIN_VS_REDIS))
    if config.consumes_backlog:
        rate = ratio_of(base.records_per_s, MIN_CONSUME_RECORDS_PER_S)
        met = rate is not None and rate >= 1.0
        other = f"{MIN_CONSUME_RECORDS_PER_S:,} records/s"
        checks.append(GoalCheck(base.target, other, "throughput", rate, 1.0, met, notes(base)))
    own = others.get(OWN_DOOR)
    if own is not None:
        cpu = ratio_of(base.server_cpu_us_per_record, own.server_cpu_us_per_record)
        met = cpu is not None and cpu <= MAX_CPU_VS_OWN_DOOR
        checks.append(
            GoalCheck(
                base.target,
                own.target,
                "server CPU per record",
                cpu,
                MAX_CPU_VS_OWN_DOOR,
                met,
                notes(base, own),
            )
        )
    return checks
