"""CPU time of a 500-record fetch on each side, in process (no sockets): what
the shard spends answering it (index columns, the read, the checksums, the
answer's table) and what the client spends taking it apart.

    .venv/bin/python benchmarks/read_path_cpu.py [--reps 400]

Measured in CPU time (`time.process_time`), so a busy machine slows it less
than wall-clock figures; compare runs made in the same minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable

from laminar.client.batch import RecordBatch
from laminar.client.results import fetched_records
from laminar.log import LogConfig, SegmentedLog
from laminar.wire import FetchResponse, Flags, Op, ProducerStamp
from laminar.wire.codec import encode_frame_buffers
from laminar.wire.records import encode_fetch_batch, encode_fetch_columns, stamp_only_record

RECORDS = 500


def clock_us(work: Callable[[], object], reps: int) -> float:
    start = time.process_time()
    for _ in range(reps):
        work()
    return (time.process_time() - start) / reps * 1e6


async def shard_side(reps: int) -> str:
    with tempfile.TemporaryDirectory() as directory:
        log = await SegmentedLog.open(directory, LogConfig(flush="always"))
        value = os.urandom(1024)
        for _ in range(40):
            await log.append([value] * RECORDS, term=1)
        segment = log._segments[0]

        def fetch(round_: int = 0) -> None:
            start = (round_ * RECORDS) % (39 * RECORDS)
            batch = log.read_batch_nowait(start, 1 << 20, RECORDS)
            assert batch is not None and len(batch) == RECORDS
            header = {"lowest_index": 0, "highest_index": 40 * RECORDS, "next_index": start}
            table = encode_fetch_columns(
                batch.first_index, batch.timestamps_ms, batch.lengths, batch.payload
            )
            encode_frame_buffers(Op.FETCH, 1, 0, header, table, flags=Flags.RESPONSE)

        columns = segment._columns(0, 1 << 20, RECORDS, True)
        assert columns is not None
        payload = segment.store.read_at_nowait(columns.size, columns.positions[0])
        assert payload is not None
        batch = log.read_batch_nowait(0, 1 << 20, RECORDS)
        assert batch is not None
        figures = {
            "whole fetch": clock_us(fetch, reps),
            "index columns": clock_us(lambda: segment._columns(0, 1 << 20, RECORDS, True), reps),
            "read": clock_us(
                lambda: segment.store.read_at_nowait(columns.size, columns.positions[0]), reps
            ),
            "checksums": clock_us(lambda: columns.verified(payload), reps),
            "answer table": clock_us(
                lambda: encode_fetch_columns(
                    batch.first_index, batch.timestamps_ms, batch.lengths, batch.payload
                ),
                reps,
            ),
        }
        await log.close()
    return ", ".join(f"{name} {us:.0f} us" for name, us in figures.items())


def client_side(reps: int) -> str:
    value = os.urandom(1016)
    blobs = [  # an idempotent producer's batches of 64: the first record stamped
        stamp_only_record(value, ProducerStamp(1, i, 64)) if i % 64 == 0 else b"\0" + value
        for i in range(RECORDS)
    ]
    rows = [(i, 1000 + i, blob) for i, blob in enumerate(blobs)]
    payload = b"".join(encode_fetch_batch(rows))
    frame = FetchResponse(1, rows, 0, RECORDS, RECORDS).to_frame(9)
    figures = {
        "RecordBatch.from_payload": clock_us(
            lambda: RecordBatch.from_payload(payload, 0, RECORDS), reps
        ),
        "+ values()": clock_us(
            lambda: RecordBatch.from_payload(payload, 0, RECORDS).values(), reps
        ),
        "fetch() records": clock_us(lambda: fetched_records(frame), reps),
    }
    return ", ".join(f"{name} {us:.0f} us" for name, us in figures.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    print(f"shard, per {RECORDS} x 1 KiB fetch: {asyncio.run(shard_side(args.reps))}")
    print(f"client, per {RECORDS}-record answer: {client_side(args.reps)}")


if __name__ == "__main__":
    main()
