"""The participant shell on the memory backend, with power cuts at random moments.

A power cut keeps only what was fsync'd (or a random torn prefix of what was
not). After each cut the participant and the partition log are opened again
from what survived, and:

- every batch whose stage was acknowledged is still staged, byte for byte;
- a publish cut anywhere and then sent again (as the coordinator's
  roll-forward does) leaves every record of the commit in the log exactly
  once, in order, and nothing of attempts the commit did not name.

Each case is a seed; a failure names it.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from laminar.log import LogConfig, MemoryBackend, SegmentedLog
from laminar.replication.replica import LocalReplica
from laminar.wire import decode_record
from laminar.wire.writes import WRITE_HEADER, StagedPart, StageRequest, WriteStamp, WriteState
from laminar.writes.area import StagingArea
from laminar.writes.files import StagingFiles
from laminar.writes.frames import AttemptKey, read_batch_blobs
from laminar.writes.participant import Participant

PID = (3 << 32) | 1
LOG_DIR = "/mem/partitions/3-1"
STAGING = "/mem/staging"
SEEDS = range(40)
PUBLISH_SEEDS = range(150)
"""Publishes are cut inside their window (resumed with chunks in the log) in about
one seed in ten."""


class MortalBackend:
    """A view of the memory file system for one process lifetime: once the
    process "dies", whatever it still runs can no longer touch the files."""

    def __init__(self, files: MemoryBackend) -> None:
        self._files = files
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        op = getattr(self._files, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise OSError("the process died")
            return await op(*args, **kwargs)

        return call


class World:
    """One partition log and one participant over a memory file system that
    survives power cuts."""

    def __init__(self, chunk_bytes: int) -> None:
        self.backend = MemoryBackend()
        self.chunk_bytes = chunk_bytes
        self.log: SegmentedLog
        self.part: Participant

    async def open(self) -> None:
        config = LogConfig(segment_bytes=4096, overflow_bytes=1 << 20, preallocate_bytes=0)
        self.view = MortalBackend(self.backend)
        self.log = await SegmentedLog.open(LOG_DIR, config, backend=self.view)  # type: ignore[arg-type]

        async def replica_of(pid: int) -> LocalReplica:
            return LocalReplica(self.log)

        async def ask(commit_id: int) -> str:
            return WriteState.COMMITTED

        self.part = Participant(
            StagingArea(1 << 30, 60.0),
            StagingFiles(self.view, STAGING, open_max=3),  # type: ignore[arg-type]
            lambda pid: True,
            replica_of,
            ask,
            self.chunk_bytes,
        )
        await self.part.recover()

    async def power_cut(self, rng: random.Random) -> None:
        """The power goes: the disk keeps what a power cut could leave (synced
        bytes and directory entries, any part of the rest), the tasks stop."""
        self.view.dead = True
        self.backend.power_cut(rng)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await self.open()


def _batches(rng: random.Random, tag: str, n: int) -> list[tuple[bytes, ...]]:
    return [
        tuple(
            b"\x00" + f"{tag}-{i}-{j}".encode() + bytes(rng.randrange(0, 60))
            for j in range(rng.randint(1, 4))
        )
        for i in range(n)
    ]


async def _advance(steps: int) -> None:
    for _ in range(steps):
        await asyncio.sleep(0)


async def _staged_blobs(part: Participant, key: AttemptKey) -> list[tuple[bytes, ...]]:
    attempt = part.area.attempt(PID, key)
    assert attempt is not None
    out = []
    for batch in attempt.batches:
        data = await part.files.read(part.attempt_path(PID, key), batch.offset, batch.length)
        out.append(read_batch_blobs(data)[1])
    return out


def _request(key: AttemptKey, seq: int, blobs: tuple[bytes, ...]) -> StageRequest:
    return StageRequest(PID, key.write_id, key.task, key.attempt, seq, blobs)


async def _stage_all(part: Participant, key: AttemptKey, batches: list[tuple[bytes, ...]]) -> int:
    """Stage in order; how many were acknowledged (the task ends at the first failure)."""
    acked = 0
    for seq, blobs in enumerate(batches):
        await part.stage(_request(key, seq, blobs))
        acked += 1
    return acked


@pytest.mark.parametrize("seed", SEEDS)
def test_acknowledged_stages_survive_a_power_cut(seed: int) -> None:
    rng = random.Random(seed)

    async def main() -> None:
        world = World(chunk_bytes=1 << 20)
        await world.open()
        keys = [AttemptKey(1, t, rng.getrandbits(64)) for t in range(3)]
        sent = {k: _batches(rng, f"s{k.task}", rng.randint(1, 6)) for k in keys}
        acked = dict.fromkeys(keys, 0)

        async def run(key: AttemptKey) -> None:
            for seq, blobs in enumerate(sent[key]):
                await world.part.stage(_request(key, seq, blobs))
                acked[key] = seq + 1

        running = [asyncio.ensure_future(run(key)) for key in keys]
        await _advance(rng.randint(0, 40))
        snapshot = dict(acked)
        await world.power_cut(rng)
        assert all(t.done() for t in running)
        for key in keys:
            if world.part.area.attempt(PID, key) is None:
                assert snapshot[key] == 0, f"seed {seed}: acknowledged batches of {key} lost"
                continue
            got = await _staged_blobs(world.part, key)
            assert len(got) >= snapshot[key], f"seed {seed}: acknowledged batches lost"
            assert got == sent[key][: len(got)], f"seed {seed}: staged bytes changed"
        # The survivors continue where they are: a resent batch is a duplicate.
        for key in keys:
            attempt = world.part.area.attempt(PID, key)
            if attempt is not None and attempt.batches:
                seq = len(attempt.batches) - 1
                assert await world.part.stage(_request(key, seq, sent[key][seq])) == (
                    len(sent[key][seq]),
                    True,
                )

    asyncio.run(main())


async def _log_values(log: SegmentedLog) -> list[bytes]:
    out: list[bytes] = []
    index = log.lowest_index
    while index < log.highest_index:
        records = await log.read_range(index, 1 << 20)
        out += [r.value for r in records]
        index = records[-1].index + 1
    return out


@pytest.mark.parametrize("seed", PUBLISH_SEEDS)
def test_a_publish_cut_anywhere_and_sent_again_appends_every_record_once(seed: int) -> None:
    """Two commits publish to one partition at once (so each finds the other's
    stamps in the log when it resumes); then the power is cut."""
    rng = random.Random(seed)

    async def main() -> None:
        world = World(chunk_bytes=rng.choice([400, 900, 1 << 20]))
        await world.open()
        commits = {77: [AttemptKey(5, t, rng.getrandbits(64)) for t in range(2)]}
        commits[66] = [AttemptKey(6, 0, rng.getrandbits(64))]
        loser = AttemptKey(5, 0, rng.getrandbits(64))  # another attempt of task 0
        keys = [*commits[77], *commits[66], loser]
        sent = {k: _batches(rng, f"w{k.attempt}", rng.randint(1, 5)) for k in keys}
        for key in keys:
            await _stage_all(world.part, key, sent[key])
        await world.log.append([b"\x00before"])
        parts = {
            c: tuple(StagedPart(PID, *k, len(sent[k]), sum(map(len, sent[k]))) for k in winners)
            for c, winners in commits.items()
        }
        for c, p in parts.items():
            await world.part.check(PID, c, p)
        running = [asyncio.ensure_future(world.part.publish(PID, c, p)) for c, p in parts.items()]
        await _advance(rng.randint(0, 80))
        await world.power_cut(rng)
        assert all(t.done() for t in running)
        # The coordinator rolls forward: the same publishes, sent again (twice).
        results = {}
        for c, p in parts.items():
            results[c] = await world.part.publish(PID, c, p)
            assert await world.part.publish(PID, c, p) == results[c]
        values = await _log_values(world.log)
        assert values[0] == b"\x00before"
        by_commit: dict[int, list[bytes]] = {77: [], 66: []}
        owner = None
        for value in values[1:]:
            stamp, plain = _stamp_of(value)
            if stamp is not None:
                owner = stamp
            assert owner is not None, f"seed {seed}: a record before any stamp"
            by_commit[owner].append(plain)
        for c, winners in commits.items():
            expected = [blob for k in winners for batch in sent[k] for blob in batch]
            assert by_commit[c] == expected, f"seed {seed}: commit {c} not published exactly once"
            assert results[c].records == len(expected)
        # The published attempts' staged files are gone; the loser's is not.
        assert all(world.part.area.attempt(PID, k) is None for k in keys if k != loser)
        assert world.part.area.attempt(PID, loser) is not None

    asyncio.run(main())


def _stamp_of(blob: bytes) -> tuple[int | None, bytes]:
    """The commit id a record's write stamp names (None: not a chunk's first
    record), and the record as it was staged (stamp removed)."""
    value, key, headers = decode_record(blob)
    if headers and WRITE_HEADER in headers:
        stamp = WriteStamp.decode(headers[WRITE_HEADER])
        assert stamp is not None and key is None and len(headers) == 1
        return stamp.commit_id, b"\x00" + value
    return None, blob
