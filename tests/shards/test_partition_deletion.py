"""Deleting a partition under power cuts at every point.

A deleted partition must never come back, whole or in part: a directory at
its name with some files gone (its Raft state, say) would open as a replica
that never voted, and a removed replica without its `.retired` mark would be
opened again by its topic's replayed creation. Each scenario deletes a
partition with the power cut after every operation, restarts the shard
(`recover` finishes any deletion left half-way) and checks that the partition
is whole at its name, or gone with nothing left behind.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from laminar.log import LogConfig, SegmentedLog, SimulatedDisk
from laminar.log.partitions import DELETING_SUFFIX, PartitionManager
from laminar.placement import partition_id
from laminar.raft import HardState
from laminar.replication.raft_storage import SegmentedLogStorage, read_state
from tests.log.test_powercut import World, batch, cut_everywhere, read_all

ROOT = "/data/partitions"
PID = partition_id(5, 1)
DIRECTORY = f"{ROOT}/5-1"
CONFIG = LogConfig(segment_bytes=200, preallocate_bytes=0, flush="always")
VOTED = HardState(3, "n2", 0)


@dataclass
class Shard:
    """What a restarted shard holds: its partition manager, on the disk."""

    partitions: PartitionManager
    disk: SimulatedDisk

    async def close(self) -> None:
        await self.partitions.close_all()  # waits for the deletions `recover` started


class ShardWorld(World):
    """A power-cut scenario's world whose `open` starts a shard's partitions."""

    async def open(self, disk: SimulatedDisk) -> Shard:
        partitions = PartitionManager(ROOT, self.config, disk, owns=lambda pid: True)
        await partitions.recover()
        return Shard(partitions, disk)


async def prepare(shard: Shard, world: World) -> None:
    """A replica with a few segments and a vote (the Raft state file)."""
    log = await shard.partitions.get(PID)
    for n in range(4):
        await log.append(batch(n))
        world.records += batch(n)
    await (await SegmentedLogStorage.over(log)).set_hard_state(VOTED)
    await shard.partitions.close_partition(PID)


@pytest.mark.parametrize("how", ["remove_partition", "drop_topic", "remove_orphans"])
def test_a_deleted_partition_is_whole_or_gone_after_a_power_cut_at_every_point(how: str) -> None:
    async def delete(shard: Shard, world: World, notes: dict[str, object]) -> None:
        if how == "remove_partition":
            assert await shard.partitions.remove_partition(PID)
        elif how == "drop_topic":
            assert await shard.partitions.drop_topic(5, 2) == 1
        else:  # topic 5 was deleted while the shard was down
            assert await shard.partitions.remove_orphans([], next_topic_id=6) == 1
        notes["deleted"] = True

    async def check(shard: Shard, world: World, notes: dict[str, object]) -> None:
        retired = shard.partitions.retired(PID)
        await shard.close()
        names = await shard.disk.list_dir(ROOT)
        assert "5-1" + DELETING_SUFFIX not in names  # the restart finished it
        if "5-1" in names:
            assert not notes.get("deleted"), "the deleted partition is back at its name"
            log = await SegmentedLog.open(DIRECTORY, world.config, backend=shard.disk)
            assert await read_all(log) == world.records
            await log.close()
            state = await read_state(shard.disk, DIRECTORY)
            assert (state.term, state.vote) == (VOTED.term, VOTED.vote)
        elif how == "remove_partition":
            assert retired, "gone without its mark: its replayed creation would reopen it"

    assert cut_everywhere(CONFIG, prepare, delete, check, make_world=ShardWorld) >= 10
