"""Where staged data lives on a cluster, and what that asks of a publish.

- An attempt starts on the partition's leader: a follower that knows the
  leader refuses an attempt's first batch (NOT_LEADER naming it), so the
  publish appends in place; the attempt's later batches are taken wherever
  its first went, whoever leads by then.
- Tasks that staged before and after a leader change leave one commit's parts
  of a partition on two nodes; each publishes its own, one after the other.
  A resumed publish looks for its chunks' stamps from its INTENT's index,
  which is its node's commit index when it began: on a lagging follower that
  can be before where the other node's chunks landed. The stamp's slot keeps
  the two apart; without it the resumed publish would take the other's chunk
  for its own and its records would be lost.

Participants (the nodes' shells, each with its own staging files) share one
partition log here; the replica seam says who leads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log import LogConfig, MemoryBackend, SegmentedLog
from laminar.replication.replica import LocalReplica
from laminar.wire import ErrorCode, decode_record
from laminar.wire.errors import RequestError
from laminar.wire.writes import StagedPart, StageRequest, WriteState
from laminar.writes.area import StagingArea
from laminar.writes.files import StagingFiles
from laminar.writes.participant import Participant
from tests.delivery import assert_exactly_once
from tests.support.clock import FakeClock

PID = (5 << 32) | 0
COMMIT = 0xC0
VALUES = {"n1": [b"n1-%d" % i for i in range(6)], "n2": [b"n2-%d" % i for i in range(6)]}


class LosesItsFirstAppend(LocalReplica):
    """The partition as the second node reaches it: its first append's answer
    is lost (the outcome is unknown), and nothing was appended."""

    lost = False

    async def append_stamped(self, blobs: Sequence[bytes]) -> tuple[int, int]:
        if not self.lost:
            self.lost = True
            raise RequestError(ErrorCode.OUTCOME_UNKNOWN, "the answer was lost")
        return await super().append_stamped(blobs)


class Led(LocalReplica):
    """The partition as a replica sees it: `leading` leads (None: no leader known)."""

    leading: str | None = None

    @property
    def leader(self) -> str | None:
        return self.leading


def _participant(
    backend: MemoryBackend, node: str, replica: LocalReplica, clock: Clock = SYSTEM_CLOCK
) -> Participant:
    async def replica_of(pid: int) -> LocalReplica:
        return replica

    async def ask(commit_id: int) -> str:
        return WriteState.COMMITTED

    return Participant(
        StagingArea(1 << 20, 60.0),
        StagingFiles(backend, f"/mem/{node}/staging"),  # type: ignore[arg-type]
        lambda pid: True,
        replica_of,
        ask,
        1 << 20,
        clock,
        node_id=node,
    )


async def _staged(part: Participant, node: str, task: int) -> StagedPart:
    blobs = tuple(b"\x00" + v for v in VALUES[node])
    await part.stage(StageRequest(PID, 1, task, task, 0, blobs))
    return StagedPart(PID, 1, task, task, 1, len(blobs), node)


async def _scenario() -> list[bytes]:
    backend = MemoryBackend()
    config = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0)
    log = await SegmentedLog.open("/mem/partition", config, backend=backend)  # type: ignore[arg-type]
    first = _participant(backend, "n1", LocalReplica(log))
    second = _participant(backend, "n2", LosesItsFirstAppend(log))
    parts = {"n1": await _staged(first, "n1", 0), "n2": await _staged(second, "n2", 1)}
    await first.check(PID, COMMIT, (parts["n1"],))
    await second.check(PID, COMMIT, (parts["n2"],))
    # n2 records its INTENT at the log's end now, then loses its append...
    try:
        await second.publish(PID, COMMIT, (parts["n2"],), slot=1)
        raise AssertionError("the first append was to be lost")
    except RequestError:
        pass
    # ...n1's chunk lands after that index, and n2 resumes looking from it.
    await first.publish(PID, COMMIT, (parts["n1"],), slot=0)
    await second.publish(PID, COMMIT, (parts["n2"],), slot=1)
    records = await log.read_range(0, 1 << 20)
    return [decode_record(r.value)[0] for r in records]


def test_a_resumed_publish_never_takes_another_nodes_chunk_for_its_own() -> None:
    published = asyncio.run(_scenario())
    assert_exactly_once(published, VALUES["n1"] + VALUES["n2"])


async def _follower_stages() -> None:
    backend = MemoryBackend()
    config = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0)
    log = await SegmentedLog.open("/mem/partition", config, backend=backend)  # type: ignore[arg-type]
    replica = Led(log)
    replica.leading = "n2"
    node = _participant(backend, "n1", replica)
    first = StageRequest(PID, 1, 0, 7, 0, (b"\x00a",))
    try:
        await node.stage(first)
        raise AssertionError("a follower took an attempt's first batch")
    except RequestError as exc:
        assert exc.code is ErrorCode.NOT_LEADER and exc.leader == "n2"
    assert node.area.attempt_count == 0
    replica.leading = None  # an election: staging needs no leader
    assert await node.stage(first) == (1, False)
    replica.leading = "n2"  # n2 leads now: the attempt goes on where it started
    assert await node.stage(StageRequest(PID, 1, 0, 7, 1, (b"\x00b",))) == (1, False)


def test_an_attempt_starts_on_the_leader_and_goes_on_where_it_started() -> None:
    asyncio.run(_follower_stages())


async def _expires_on_its_clock() -> None:
    backend = MemoryBackend()
    config = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0)
    log = await SegmentedLog.open("/mem/partition", config, backend=backend)  # type: ignore[arg-type]
    clock = FakeClock()
    node = _participant(backend, "n1", LocalReplica(log), clock)
    await _staged(node, "n1", 0)
    clock.advance(59.9)  # the area's default timeout is 60 s
    await node.expire()
    assert node.area.attempt_count == 1
    clock.advance(0.2)
    await node.expire()
    assert node.area.attempt_count == 0


def test_idle_staged_data_expires_when_the_clock_passes_its_timeout() -> None:
    asyncio.run(_expires_on_its_clock())
