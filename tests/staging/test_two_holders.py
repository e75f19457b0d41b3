"""One partition's parts of a commit staged on two nodes, one of them resuming its publish.

Tasks that staged before and after a leader change leave one commit's parts of
a partition on two nodes; each publishes its own, one after the other. A
resumed publish looks for its chunks' stamps from its INTENT's index, which is
its node's commit index when it began: on a lagging follower that can be
before where the other node's chunks landed. The stamp's slot keeps the two
apart; without it the resumed publish would take the other's chunk for its
own and its records would be lost. Two participants (the two nodes' shells,
each with its own staging files) share one partition log here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from laminar.log import LogConfig, MemoryBackend, SegmentedLog
from laminar.shards.errors import RequestError
from laminar.shards.replica import LocalReplica
from laminar.shards.staging.area import StagingArea
from laminar.shards.staging.files import StagingFiles
from laminar.shards.staging.participant import Participant
from laminar.wire import ErrorCode, decode_record
from laminar.wire.writes import StagedPart, StageRequest, WriteState
from tests.delivery import assert_exactly_once

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


def _participant(backend: MemoryBackend, node: str, replica: LocalReplica) -> Participant:
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
