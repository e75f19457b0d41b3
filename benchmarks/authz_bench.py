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
its syscalls do) per kind: the two shards are driven batch by batch in turn
(which goes first alternating), so both see the same machine; medians over
the rounds of the per-round ratio. Also the added work alone (the
dispatcher's test and the check, or the metadata filter) in a tight loop, as
a share of the request's CPU without logins: the steadier figure on a busy
machine.

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
from laminar.wire import FetchRequest, Frame, Message, MetadataRequest, Op, decode_frame
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


def messages(pid: int) -> dict[str, Message]:
    """The requests measured, by name."""
    return {
        "produce": produce(pid, VALUE),
        "fetch 64": FetchRequest(pid, 0, 1 << 20, 64),
        "metadata": MetadataRequest(),
    }


KINDS: dict[str, Kind] = {
    "produce (general path)": lambda s, pid, n: _general(s, pid, n, messages(pid)["produce"]),
    "produce (fast path)": lambda s, pid, n: _fast(s, pid, n, messages(pid)["produce"]),
    "fetch 64 (general path)": lambda s, pid, n: _general(s, pid, n, messages(pid)["fetch 64"]),
    "fetch 64 (fast path)": lambda s, pid, n: _fast(s, pid, n, messages(pid)["fetch 64"]),
    "metadata (general path)": lambda s, pid, n: _general(s, pid, n, messages(pid)["metadata"]),
}


async def _cpu_us(kind: Kind, shards: Shards, requests: int) -> float:
    pid = shards.pid_on("events", 0)
    start = time.process_time()
    await kind(shards, pid, requests)
    return (time.process_time() - start) / requests * 1e6


async def _paired(kind: Kind, off: Shards, on: Shards, requests: int) -> tuple[float, float]:
    """CPU per request without and with logins, batch by batch in turn (which
    goes first alternating), so both see the same machine."""
    spent = {False: 0.0, True: 0.0}
    for batch in range(requests // IN_FLIGHT):
        for shards, flag in [(off, False), (on, True)][:: 1 if batch % 2 else -1]:
            spent[flag] += await _cpu_us(kind, shards, IN_FLIGHT)
    batches = requests // IN_FLIGHT
    return spent[False] / batches, spent[True] / batches


def _check_alone_us(on: Shards, message: Message, reps: int = 100_000) -> float:
    """The added work alone, in a tight loop: the dispatcher's test, the check
    (and, for metadata, the filtered topic list)."""
    authorizer = on.dispatchers[0].authorizer
    assert authorizer is not None
    ctx = on.client(ALICE)
    op = _frame(message).op
    topics = on.metadata.state.topics()
    start = time.process_time()
    for _ in range(reps):
        if ctx.from_client:
            authorizer.check(op, message, ctx.principal)
            if op == Op.METADATA:
                authorizer.visible(ctx.principal, topics)
    return (time.process_time() - start) / reps * 1e6


async def main(requests: int, rounds: int, acls: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        off = await _shard(root / "off", False, acls)
        on = await _shard(root / "on", True, acls)
        figures: dict[str, list[tuple[float, float]]] = {}
        alone: dict[str, float] = {}
        try:
            for kind in KINDS.values():  # warm both up
                await _paired(kind, off, on, IN_FLIGHT * 4)
            for _ in range(rounds):
                for name, kind in KINDS.items():
                    figures.setdefault(name, []).append(await _paired(kind, off, on, requests))
            pid = on.pid_on("events", 0)
            for name, message in messages(pid).items():
                alone[name] = _check_alone_us(on, message)
        finally:
            await off.close()
            await on.close()
    print(f"requests per kind and round: {requests}, rounds: {rounds}, other ACLs: {acls}")
    print(f"fast-path requests the general path served (rollovers): {declined[0]}")
    print(
        "| request | CPU/request without logins (us) | with authorization (us) | ratio "
        "| the check alone (us) | alone / request |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name in KINDS:
        without = statistics.median(f[0] for f in figures[name])
        with_ = statistics.median(f[1] for f in figures[name])
        ratio = statistics.median(f[1] / f[0] for f in figures[name])
        check = alone[name.split(" (")[0]]
        print(
            f"| {name} | {without:.1f} | {with_:.1f} | {ratio:.3f}x | {check:.2f} "
            f"| {check / without:.1%} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--acls", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds, args.acls))
