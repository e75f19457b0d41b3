"""A writer for the SIGKILL crash test: appends forever, reports what was acknowledged.

    python -m tests.log.crash_writer DIRECTORY ROUND syscall|uring

Every value is self-describing (batch id, position in batch, then bytes derived
from both), so the checker can tell a record's exact expected bytes from the
record alone. Each acknowledged batch is reported on stdout as
`ack FIRST_INDEX COUNT BATCH_ID` and flushed at once.
"""

from __future__ import annotations

import asyncio
import random
import struct
import sys

from laminar.log import LogConfig, SegmentedLog, StorageBackend, SyscallBackend
from laminar.reactor import UringEventLoop
from laminar.reactor.storage import UringBackend

HEADER = struct.Struct(">QI")
CONFIG = LogConfig(segment_bytes=96 * 1024, preallocate_bytes=32 * 1024, max_flushes_in_flight=4)


def make_value(batch_id: int, position: int) -> bytes:
    rng = random.Random(batch_id * 1_000_003 + position)
    return HEADER.pack(batch_id, position) + rng.randbytes(rng.randint(0, 3000))


def check_value(value: bytes) -> tuple[int, int]:
    """The (batch id, position) a stored value claims, after checking its bytes."""
    batch_id, position = HEADER.unpack_from(value)
    if value != make_value(batch_id, position):
        raise AssertionError(f"record claiming batch {batch_id}/{position} has altered bytes")
    return batch_id, position


async def write_forever(directory: str, round_no: int, backend: StorageBackend) -> None:
    log = await SegmentedLog.open(directory, CONFIG, backend=backend)
    print(f"open {log.lowest_index} {log.highest_index}", flush=True)
    counter = 0

    async def appender(worker: int) -> None:
        nonlocal counter
        rng = random.Random(round_no * 100 + worker)
        while True:
            counter += 1
            batch_id = round_no * 10_000_000 + counter
            values = [make_value(batch_id, j) for j in range(rng.randint(1, 20))]
            first = await log.append(values)
            sys.stdout.write(f"ack {first} {len(values)} {batch_id}\n")
            sys.stdout.flush()

    await asyncio.gather(*(appender(w) for w in range(6)))


if __name__ == "__main__":
    directory, round_no, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind == "uring":
        with asyncio.Runner(loop_factory=UringEventLoop) as runner:
            runner.run(write_forever(directory, round_no, UringBackend()))
    else:
        asyncio.run(write_forever(directory, round_no, SyscallBackend()))
