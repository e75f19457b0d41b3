"""Consume from the start, one fetch in flight (prefetch off): the fetch path alone.

    .venv/bin/python benchmarks/consume_probe.py HOST:PORT [--records 100000]
        [--fetch-max 500] [--passes 3] [--topic consume-probe]

Fills the topic's partition 0 with `--records` 1 KiB records once (if it holds
fewer), then reads them from index 0 with `fetch_batch` `--passes` times, one
fetch at a time, and prints records/s, the fetch round trip p50/p99 and the
client process's CPU (cores, and microseconds per fetch) per pass. Every pass checks what it read by
identity: each record's first 8 bytes are its sequence number. Used by
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


async def one_pass(client: AsyncClient, topic: str, records: int, fetch_max: int) -> str:
    index = 0
    rtts: list[float] = []
    seen = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    while index < records:
        f0 = time.perf_counter()
        batch = await client.fetch_batch(
            topic, 0, index, max_bytes=64 << 20, max_records=min(fetch_max, records - index)
        )
        rtts.append(time.perf_counter() - f0)
        values = batch.values()
        if not values or _SEQ.unpack_from(values[0])[0] != index:
            raise SystemExit(f"identity check failed at index {index}")
        if _SEQ.unpack_from(values[-1])[0] != index + len(values) - 1:
            raise SystemExit(f"identity check failed in the batch from {index}")
        seen += len(values)
        index += len(values)
    elapsed = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    rtts.sort()
    p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
    return (
        f"{seen / elapsed:,.0f} rec/s  fetches={len(rtts)} "
        f"rtt p50 {1e3 * statistics.median(rtts):.2f} ms p99 {1e3 * p99:.2f} ms "
        f"client_cpu={cpu_s / elapsed:.2f} client_us_per_fetch={1e6 * cpu_s / len(rtts):.0f}"
    )


async def probe(address: str, topic: str, records: int, fetch_max: int, passes: int) -> None:
    async with AsyncClient(address) as client:
        with contextlib.suppress(TopicExistsError):
            await client.create_topic(topic, 1)
        await fill(client, topic, records)
        for n in range(passes):
            print(f"pass {n + 1}: {await one_pass(client, topic, records, fetch_max)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--fetch-max", type=int, default=500)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--topic", default="consume-probe")
    args = parser.parse_args()
    asyncio.run(probe(args.address, args.topic, args.records, args.fetch_max, args.passes))


if __name__ == "__main__":
    main()
