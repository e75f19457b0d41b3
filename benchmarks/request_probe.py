"""One record per produce request, N in flight on one AsyncClient: the request path alone.

    .venv/bin/python benchmarks/request_probe.py HOST:PORT [--partitions 1]
        [--inflight 64] [--seconds 5] [--topic probe] [--plain]

Prints records/s and the client process's CPU (cores). Used by
`benchmarks/profile_request_path.sh` (py-spy on the client and the shards)
and for quick A/B runs of two nodes side by side; the recorded comparison with
the peers is `laminar-bench` (`benchmarks/compare.sh`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time

from laminar.client import AsyncClient, TopicExistsError


async def probe(
    address: str, topic: str, partitions: int, inflight: int, seconds: float, idempotent: bool
) -> None:
    async with AsyncClient(address, idempotent=idempotent) as client:
        with contextlib.suppress(TopicExistsError):
            await client.create_topic(topic, partitions)
        value = os.urandom(1024)
        done = 0
        issued = 0
        end = time.perf_counter() + seconds

        async def sender() -> None:
            nonlocal done, issued
            while time.perf_counter() < end:
                issued += 1
                await client.produce(topic, issued % partitions, [value])
                done += 1

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(inflight)))
        elapsed = time.perf_counter() - t0
        cpu = (time.process_time() - cpu0) / elapsed
    print(
        f"partitions={partitions} inflight={inflight} idempotent={idempotent} "
        f"{done / elapsed:,.0f} rec/s "
        f"client_cpu={cpu:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--topic", default="probe")
    parser.add_argument("--plain", action="store_true", help="produce without idempotence")
    args = parser.parse_args()
    asyncio.run(
        probe(
            args.address, args.topic, args.partitions, args.inflight, args.seconds, not args.plain
        )
    )


if __name__ == "__main__":
    main()
