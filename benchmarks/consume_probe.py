"""Consume from the start, one fetch at a time: the fetch path alone.

    .venv/bin/python benchmarks/consume_probe.py HOST:PORT [--records 100000]
        [--fetch-max 500] [--passes 3] [--seconds 0] [--prefetch N]
        [--topic consume-probe]

Fills the topic's partition 0 with `--records` 1 KiB records once (if it holds
fewer), then reads them from index 0 through `AsyncClient.reader` `--passes`
times: with `--prefetch 0` (the default) each fetch is sent once the
previous batch has been looked at (prefetch off, as `laminar-bench` reads);
with N > 0 up to N fetches are on their way while the probe takes in the
current batch. Prints
records/s, how long each `next_batch` waited (p50/p99; the fetch round trip
with prefetch off) and the client process's CPU (cores, and microseconds per
fetch) per pass. Every pass checks what it read by
identity: each record's first 8 bytes are its sequence number. `--seconds S`
keeps making passes until S seconds have passed (for a profiler to watch;
`--passes 0` only fills). Used by
`benchmarks/profile_request_path.sh` (PROBE=consume) and for A/B runs of two
nodes side by side; the recorded comparison with the peers is `laminar-bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import struct
import time

from laminar.client import AsyncClient, TopicExistsError

_SEQ = struct.Struct(">Q")


async def fill(client: AsyncClient, topic: str, records: int) -> None:
    _, highest = await client.offsets(topic, 0)
    pad = os.urandom(1024 - _SEQ.size)
    batch = 256
    for first in range(highest, records, batch):
        values = [_SEQ.pack(seq) + pad for seq in range(first, min(records, first + batch))]
        await client.produce(topic, 0, values)


async def one_pass(
    client: AsyncClient, topic: str, records: int, fetch_max: int, prefetch: int
) -> str:
    index = 0
    waits: list[float] = []
    seen = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    async with client.reader(
        topic, 0, 0, max_bytes=64 << 20, max_records=fetch_max, prefetch=prefetch
    ) as reader:
        while index < records:
            f0 = time.perf_counter()
            batch = await reader.next_batch()
            waits.append(time.perf_counter() - f0)
            values = batch.values()[: records - index]
            if not values or _SEQ.unpack_from(values[0])[0] != index:
                raise SystemExit(f"identity check failed at index {index}")
            if _SEQ.unpack_from(values[-1])[0] != index + len(values) - 1:
                raise SystemExit(f"identity check failed in the batch from {index}")
            seen += len(values)
            index += len(values)
    elapsed = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    waits.sort()
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))]
    return (
        f"{seen / elapsed:,.0f} rec/s  fetches={len(waits)} "
        f"wait p50 {1e3 * statistics.median(waits):.2f} ms p99 {1e3 * p99:.2f} ms "
        f"client_cpu={cpu_s / elapsed:.2f} client_us_per_fetch={1e6 * cpu_s / len(waits):.0f}"
    )


async def probe(
    address: str,
    topic: str,
    records: int,
    fetch_max: int,
    passes: int,
    seconds: float,
    prefetch: int,
) -> None:
    async with AsyncClient(address) as client:
        with contextlib.suppress(TopicExistsError):
            await client.create_topic(topic, 1)
        await fill(client, topic, records)
        end = time.perf_counter() + seconds
        n = 0
        while n < passes or time.perf_counter() < end:
            n += 1
            result = await one_pass(client, topic, records, fetch_max, prefetch)
            print(f"pass {n}: {result}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--fetch-max", type=int, default=500)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--prefetch", type=int, default=0)
    parser.add_argument("--topic", default="consume-probe")
    args = parser.parse_args()
    asyncio.run(
        probe(
            args.address,
            args.topic,
            args.records,
            args.fetch_max,
            args.passes,
            args.seconds,
            args.prefetch,
        )
    )


if __name__ == "__main__":
    main()
