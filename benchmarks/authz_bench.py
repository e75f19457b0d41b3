"""What authorization costs the shard per request, in process (no sockets).

    .venv/bin/python -m benchmarks.authz_bench [--requests 4000] [--rounds 5] [--acls 2000]

One shard (`tests/shards/authz_harness.py`: real dispatcher, handlers, fast
path and partition log, flush "always") with logins and one without, in
rotated rounds. Each round sends the same requests to each, 64 in flight:
produces of one 1 KiB record and fetches of 64 records, through the general
path (`Dispatcher.dispatch`) and through the fast path
(`RequestFastPath.try_serve`), and metadata requests. The shard with logins
holds `--acls` ACLs besides the two that allow the client (other principals,
literal and prefixed names), and its client is `User:alice`. Prints the
shard's CPU per request (`time.process_time`, so fsync waits do not count,
its syscalls do) per kind, medians over the rounds, and the ratio.

The figure the issue asks for is the ratio: authorization should add at most
5% server CPU per request. The sockets, framing and TLS a real node adds per
request only make the denominator larger (this is the conservative figure).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from laminar.security.acls import (
    ACLS_PER_CHANGE_MAX,
    Acl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from laminar.wire import FetchRequest, Frame, Message, MetadataRequest, decode_frame
from laminar.wire.codec import Buffer
from tests.shards.authz_harness import ALICE, FRAME_BYTES, Shards, acl, produce

IN_FLIGHT = 64
declined = [0]
"""Fast-path requests served by the general path instead (a segment rollover due)."""
VALUE = b"v" * 1024

Kind = Callable[[Shards, int, int], Awaitable[None]]


def _others(count: int) -> list[Acl]:
    """ACLs for other principals and names: what a real cluster's set holds."""
    out = []
    for n in range(count):
        pattern = PatternType.PREFIXED if n % 4 == 0 else PatternType.LITERAL
        out.append(
            Acl(
                f"User:u{n}",
                ResourceType.TOPIC,
                pattern,
                f"team{n % 50}.topic{n}",
                Operation.WRITE if n % 2 else Operation.READ,
                Permission.ALLOW,
            )
        )
    return out


async def _shard(root: Path, authenticated: bool, acls: int) -> Shards:
    shards = Shards(root, count=1, authenticated=authenticated)
    await shards.start()
    shards.metadata.apply(shards.metadata.state.plan_create("events", 1))
    if authenticated:
        others = _others(acls)
        for n in range(0, len(others), ACLS_PER_CHANGE_MAX):
            shards.metadata.allow(*others[n : n + ACLS_PER_CHANGE_MAX])
        shards.metadata.allow(acl(Operation.WRITE, "events"), acl(Operation.READ, "events"))
    pid = shards.pid_on("events", 0)
    await shards.ask(produce(pid, *([VALUE] * 64)), shards.internal(0))  # opens the log
    return shards


def _frame(message: Message) -> Frame:
    return decode_frame(message.encode(1), FRAME_BYTES)


async def _general(s: Shards, pid: int, count: int, message: Message) -> None:
    ctx = s.client(ALICE if s.dispatchers[0].authorizer else None)
    dispatch = s.dispatchers[0].dispatch
    frame = _frame(message)
    for _ in range(count // IN_FLIGHT):
        await asyncio.gather(*(dispatch(frame, ctx) for _ in range(IN_FLIGHT)))


async def _fast(s: Shards, pid: int, count: int, message: Message) -> None:
    ctx = s.client(ALICE if s.dispatchers[0].authorizer else None)
    fast = s.fast_paths[0]
    dispatch = s.dispatchers[0].dispatch
    frame = _frame(message)
    loop = asyncio.get_running_loop()
    for _ in range(count // IN_FLIGHT):
        done = loop.create_future()
        left = IN_FLIGHT

        def answered(_: list[Buffer], done: asyncio.Future[None] = done) -> None:
            nonlocal left
            left -= 1
            if left == 0:
                done.set_result(None)

        for _ in range(IN_FLIGHT):
            if not fast.try_serve(frame, ctx, answered):  # a rollover is due: as a connection does
                declined[0] += 1
                general = asyncio.ensure_future(dispatch(frame, ctx))
                general.add_done_callback(lambda task: answered(task.result()))
        await done


KINDS: dict[str, Kind] = {
    "produce (general path)": lambda s, pid, n: _general(s, pid, n, produce(pid, VALUE)),
    "produce (fast path)": lambda s, pid, n: _fast(s, pid, n, produce(pid, VALUE)),
    "fetch 64 (general path)": lambda s, pid, n: _general(
        s, pid, n, FetchRequest(pid, 0, 1 << 20, 64)
    ),
    "fetch 64 (fast path)": lambda s, pid, n: _fast(s, pid, n, FetchRequest(pid, 0, 1 << 20, 64)),
    "metadata (general path)": lambda s, pid, n: _general(s, pid, n, MetadataRequest()),
}


async def _cpu_us(kind: Kind, shards: Shards, requests: int) -> float:
    pid = shards.pid_on("events", 0)
    start = time.process_time()
    await kind(shards, pid, requests)
    return (time.process_time() - start) / requests * 1e6


async def main(requests: int, rounds: int, acls: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        off = await _shard(root / "off", False, acls)
        on = await _shard(root / "on", True, acls)
        figures: dict[tuple[str, bool], list[float]] = {}
        try:
            for kind in KINDS.values():  # warm both up
                await _cpu_us(kind, off, IN_FLIGHT * 4)
                await _cpu_us(kind, on, IN_FLIGHT * 4)
            for r in range(rounds):
                order = [(off, False), (on, True)] if r % 2 == 0 else [(on, True), (off, False)]
                for name, kind in KINDS.items():
                    for shards, flag in order:
                        us = await _cpu_us(kind, shards, requests)
                        figures.setdefault((name, flag), []).append(us)
        finally:
            await off.close()
            await on.close()
    print(f"requests per kind and round: {requests}, rounds: {rounds}, other ACLs: {acls}")
    print(f"fast-path requests the general path served (rollovers): {declined[0]}")
    print("| request | CPU/request without logins (us) | with authorization (us) | ratio |")
    print("| --- | --- | --- | --- |")
    for name in KINDS:
        without = statistics.median(figures[name, False])
        with_ = statistics.median(figures[name, True])
        print(f"| {name} | {without:.1f} | {with_:.1f} | {with_ / without:.3f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--acls", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds, args.acls))
