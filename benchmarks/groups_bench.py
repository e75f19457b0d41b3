"""Consumer groups (issue 26): consume throughput with a commit per batch, and
rebalance times, next to laminar's plain reader, Redis Streams and NATS
JetStream, in one run.

    .venv/bin/python benchmarks/groups_bench.py [--records 200000] [--rounds 3]
        [--session-s 10] [--trials 3] [--json benchmarks/out/groups_bench.json]
        [--systems laminar-group,laminar-group-noprefetch,laminar-group-unwaited,
                   laminar-group-uncommitted,laminar-plain,redis-group,nats-group]

Consume: a backlog of `--records` 1 KiB records, read by 1, 2 and 4 consumer
processes, each taking batches of 500 and acknowledging each batch before the
next, until every record was read once:

- laminar-group: `Client.consumer(group, [topic], start="earliest")`, `poll()`
  then `commit()` (durable on the positions log: fsynced before the answer);
  a fresh group per run. The topic has 4 partitions.
- laminar-group-noprefetch: the same with `prefetch=0` (each poll fetches
  only when called, so a batch costs fetch + commit: the consumer before
  prefetch).
- laminar-group-unwaited: the same with `commit(wait=False)` per batch (Kafka's
  commitAsync: the batch's commit travels while the next is processed; one in
  flight at most, its answer taken by the next commit).
- laminar-group-uncommitted: the same without any commit (not the workload:
  it shows what the commits cost, next to what the group itself costs).
- laminar-plain: `Client.fetch` of the partitions split by hand (no group, no
  commit): what the group costs on top.
- redis-group: one stream, `XREADGROUP ... COUNT 500` then `XACK` of the batch
  (Redis 7, `appendfsync always`, so the ack is fsynced before its reply),
  through the project's pipelined RESP client with the hiredis parser
  (`laminar.bench.targets.resp`: faster than redis-py's, see there); a fresh
  group per run.
- nats-group: one JetStream stream, one durable pull consumer per run shared
  by the processes, `fetch(500)` then `ack_sync()` of the batch's last message
  (`AckPolicy.ALL`: JetStream's only batch ack).

The systems run together on this machine; every round runs each (system,
consumers) pair once, in an order rotated per round; figures are medians of
the rounds. Each run reports its consumers' CPU (cores, summed) and the
server's (its process tree), and the fsync floor is measured before and after
(`fsync_floor_us`: this VM flips between a ~0.1 ms and a 4 ms fdatasync).

Rebalance (laminar only): three members on a 6-partition topic, polling every
20 ms; one leaves (`close()`) or is SIGKILLed; the time from then until the two
left deliver all six partitions between them (monotonic clocks of the
processes, comparable on Linux). `--trials` of each.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing as mp
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from laminar.bench.machine import fsync_floor_us, tree_cpu_s
from laminar.bench.servers.laminar_node import LaminarNode
from laminar.bench.servers.nats_server import NatsServer
from laminar.bench.servers.redis_server import RedisServer
from laminar.client import Client

BATCH = 500
RECORD = 1024
PARTITIONS = 4
CONSUMERS = (1, 2, 4)
SYSTEMS = (
    "laminar-group",
    "laminar-group-noprefetch",
    "laminar-group-unwaited",
    "laminar-group-uncommitted",
    "laminar-plain",
    "redis-group",
    "nats-group",
)
TOPIC = "backlog"
STREAM = "backlog"
WAIT_S = 300.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- consumer processes (one function per system) --------------------------------


def _laminar_group(
    address: str,
    group: str,
    me: int,
    n: int,
    shared: dict[str, Any],
    wait: bool = True,
    commit: bool = True,
    **options: Any,
) -> None:
    with (
        Client(address) as client,
        client.consumer(group, [TOPIC], start="earliest", max_records=BATCH, **options) as consumer,
    ):
        _ready(shared)
        while not shared["stop"].is_set():
            got = len(consumer.poll(timeout_s=0.2))
            if got:
                if commit:
                    consumer.commit(wait=wait)
                _count(shared, got)
        consumer.commit()  # the last unwaited one answered
        _report_cpu(shared)


def _laminar_plain(address: str, group: str, me: int, n: int, shared: dict[str, Any]) -> None:
    mine = [p for p in range(PARTITIONS) if p % n == me]
    with Client(address) as client:
        next_index = dict.fromkeys(mine, 0)
        _ready(shared)
        while not shared["stop"].is_set() and next_index:
            for p in list(next_index):
                records = client.fetch(TOPIC, p, next_index[p], max_records=BATCH)
                if not records:
                    del next_index[p]  # the backlog of p is read
                    continue
                next_index[p] = records[-1].index + 1
                _count(shared, len(records))
        _report_cpu(shared)


def _redis_group(address: str, group: str, me: int, n: int, shared: dict[str, Any]) -> None:
    from laminar.bench.targets.resp import RespClient

    async def run() -> None:
        redis = RespClient()
        host, port = address.rsplit(":", 1)
        await redis.connect(host, int(port))
        _ready(shared)
        while not shared["stop"].is_set():
            reply = await redis.execute(
                "XREADGROUP", "GROUP", group, f"c{me}", "COUNT", BATCH, "BLOCK", 200,
                "STREAMS", STREAM, ">",
            )  # fmt: skip
            if not reply:
                continue
            entries = reply[0][1]
            await redis.execute("XACK", STREAM, group, *(entry[0] for entry in entries))
            _count(shared, len(entries))
        await redis.close()

    asyncio.run(run())
    _report_cpu(shared)


def _nats_group(address: str, group: str, me: int, n: int, shared: dict[str, Any]) -> None:
    import nats
    from nats.errors import TimeoutError as NatsTimeoutError
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    async def run() -> None:
        nc = await nats.connect(f"nats://{address}", pending_size=64 << 20)
        js = nc.jetstream()
        config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.ALL)
        sub = await js.pull_subscribe(STREAM, durable=group, stream=STREAM, config=config)
        _ready(shared)
        while not shared["stop"].is_set():
            try:
                msgs = await sub.fetch(BATCH, timeout=0.2)
            except (TimeoutError, NatsTimeoutError):
                continue
            if not msgs:
                continue
            await msgs[-1].ack_sync()
            _count(shared, len(msgs))
        await nc.close()

    asyncio.run(run())
    _report_cpu(shared)


CONSUME: dict[str, Callable[..., None]] = {
    "laminar-group": _laminar_group,
    "laminar-group-noprefetch": functools.partial(_laminar_group, prefetch=0),
    "laminar-group-unwaited": functools.partial(_laminar_group, wait=False),
    "laminar-group-uncommitted": functools.partial(_laminar_group, commit=False),
    "laminar-plain": _laminar_plain,
    "redis-group": _redis_group,
    "nats-group": _nats_group,
}


def _ready(shared: dict[str, Any]) -> None:
    """Connected: wait for the others; from then on this process's CPU counts."""
    with shared["ready"].get_lock():
        shared["ready"].value += 1
    shared["go"].wait()
    shared["cpu_at_go"] = _cpu_s()


def _report_cpu(shared: dict[str, Any]) -> None:
    shared["cpu"].put(_cpu_s() - shared["cpu_at_go"])


def _count(shared: dict[str, Any], got: int) -> None:
    with shared["count"].get_lock():
        shared["count"].value += got


def _wait(
    what: str, done: Callable[[], bool], timeout_s: float = WAIT_S, procs: Sequence[Any] = ()
) -> None:
    """Until `done()`; a consumer process that died fails it at once."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if failed:
            raise RuntimeError(f"{what}: a process failed (exit codes {failed})")
        time.sleep(0.002)


# -- the servers and their backlogs ----------------------------------------------


class Servers:
    """The three servers, each holding the same backlog."""

    def __init__(self, workdir: Path, records: int) -> None:
        self.records = records
        self.laminar = LaminarNode(workdir / "laminar", cores=2)
        self.redis = RedisServer(workdir / "redis")
        self.nats = NatsServer(workdir / "nats")
        for d in ("laminar", "redis", "nats"):
            (workdir / d).mkdir()
        self.address = {
            "laminar": self.laminar.start(),
            "redis": self.redis.start(),
            "nats": self.nats.start(),
        }
        self.groups = 0

    def pid(self, system: str) -> int | None:
        return {"laminar": self.laminar.pid, "redis": self.redis.pid, "nats": self.nats.pid}[
            system.split("-")[0]
        ]

    def load(self) -> None:
        value = os.urandom(RECORD)
        with Client(self.address["laminar"]) as client:
            client.create_topic(TOPIC, PARTITIONS)
            client.create_topic("rebalance", 6)
            per = self.records // PARTITIONS
            for p in range(PARTITIONS):
                for start in range(0, per, 1000):
                    client.produce(TOPIC, p, [value] * min(1000, per - start))
        asyncio.run(self._load_peers(value))

    async def _load_peers(self, value: bytes) -> None:
        import nats

        from laminar.bench.targets.resp import RespClient

        redis = RespClient()
        host, port = self.address["redis"].rsplit(":", 1)
        await redis.connect(host, int(port))
        for start in range(0, self.records, 1000):
            count = min(1000, self.records - start)
            await asyncio.gather(
                *(redis.execute("XADD", STREAM, "*", "v", value) for _ in range(count))
            )
        await redis.close()
        nc = await nats.connect(f"nats://{self.address['nats']}", pending_size=64 << 20)
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=[STREAM])
        for start in range(0, self.records, 1000):
            count = min(1000, self.records - start)
            await asyncio.gather(*[await js.publish_async(STREAM, value) for _ in range(count)])
        await nc.close()

    def new_group(self, system: str) -> str:
        """A group (durable) that has read nothing yet."""
        self.groups += 1
        group = f"g{self.groups}"
        if system == "redis-group":
            asyncio.run(self._redis("XGROUP", "CREATE", STREAM, group, "0"))
        return group

    async def _redis(self, *command: Any) -> Any:
        from laminar.bench.targets.resp import RespClient

        redis = RespClient()
        host, port = self.address["redis"].rsplit(":", 1)
        await redis.connect(host, int(port))
        try:
            return await redis.execute(*command)
        finally:
            await redis.close()

    def stop(self) -> None:
        for server in (self.laminar, self.redis, self.nats):
            server.stop()


def consume_run(servers: Servers, system: str, consumers: int) -> dict[str, Any]:
    """One run: `consumers` processes read the whole backlog; rec/s and CPU."""
    ctx = mp.get_context("spawn")
    shared = {
        "ready": ctx.Value("q", 0),
        "count": ctx.Value("q", 0),
        "go": ctx.Event(),
        "stop": ctx.Event(),
        "cpu": ctx.Queue(),
    }
    address = servers.address[system.split("-")[0]]
    group = servers.new_group(system)
    procs = [
        ctx.Process(target=CONSUME[system], args=(address, group, me, consumers, shared))
        for me in range(consumers)
    ]
    for proc in procs:
        proc.start()
    _wait("consumers ready", lambda: shared["ready"].value == consumers, procs=procs)
    server_pid = servers.pid(system)
    cpu0 = tree_cpu_s(server_pid) if server_pid else 0.0
    began = time.monotonic()
    shared["go"].set()
    _wait(
        f"{system} x{consumers} read the backlog",
        lambda: shared["count"].value >= servers.records,
        procs=procs,
    )
    elapsed = time.monotonic() - began
    server_cpu = (tree_cpu_s(server_pid) if server_pid else 0.0) - cpu0
    shared["stop"].set()
    client_cpu = [shared["cpu"].get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(60)
    read = shared["count"].value
    return {
        "system": system,
        "consumers": consumers,
        "records": read,
        "elapsed_s": elapsed,
        "records_per_s": servers.records / elapsed,
        "server_cores": server_cpu / elapsed,
        "client_cpu_s": sum(client_cpu),
    }


# -- rebalance ---------------------------------------------------------------------


def _member(address: str, name: str, session_s: float, leave: Any, changes: Any) -> None:
    """A member that reports each change of its assignment; leaves when told."""
    with Client(address) as client:
        consumer = client.consumer("rebalancing", ["rebalance"], session_timeout_s=session_s)
        shown: frozenset[Any] | None = None
        while not leave.is_set():
            consumer.poll(timeout_s=0.02)
            now = consumer.assignment()
            if now != shown:
                shown = now
                changes.put((name, time.monotonic(), sorted(now)))
        changes.put((name, time.monotonic(), "leaving"))
        consumer.close()


def rebalance_trial(address: str, how: str, session_s: float) -> float:
    """Seconds from a member's leave (or SIGKILL) to the two others
    delivering all six partitions (as they report it)."""
    ctx = mp.get_context("spawn")
    changes = ctx.Queue()
    leaves = [ctx.Event() for _ in range(3)]
    procs = [
        ctx.Process(target=_member, args=(address, f"m{i}", session_s, leaves[i], changes))
        for i in range(3)
    ]
    for proc in procs:
        proc.start()
    held: dict[str, tuple[float, list[Any]]] = {}
    left_at: list[float] = []

    def covered(names: list[str]) -> bool:
        while not changes.empty():
            name, at, parts = changes.get()
            if parts == "leaving":
                left_at.append(at)
            else:
                held[name] = (at, parts)
        owned = sorted(tuple(p) for n in names for p in held.get(n, (0.0, []))[1])
        return owned == [("rebalance", p) for p in range(6)]

    everyone = ["m0", "m1", "m2"]
    _wait(
        "three members hold two partitions each",
        lambda: covered(everyone) and all(len(held.get(n, (0, []))[1]) == 2 for n in everyone),
        60,
    )
    time.sleep(0.5)  # some phase of the heartbeats (not a check)
    if how == "leave":
        leaves[0].set()
        _wait("the member leaves", lambda: covered([]) or bool(left_at), 30)
        started = left_at[0]
    else:
        started = time.monotonic()
        os.kill(procs[0].pid or 0, signal.SIGKILL)
    _wait("the two left deliver all six", lambda: covered(["m1", "m2"]), session_s + 30)
    ended = max(held[n][0] for n in ("m1", "m2"))
    for event in leaves:
        event.set()
    for proc in procs:
        proc.join(30)
    return ended - started


# -- the run -----------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--session-s", type=float, default=10.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--json", default="benchmarks/out/groups_bench.json")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    args = parser.parse_args(argv)
    systems = tuple(s for s in SYSTEMS if s in args.systems.split(","))
    workdir = Path(tempfile.mkdtemp(prefix="groups-bench-"))
    floor_before = fsync_floor_us(workdir)
    servers = Servers(workdir, args.records)
    runs: list[dict[str, Any]] = []
    rebalance: dict[str, list[float]] = {"leave": [], "sigkill": []}
    try:
        servers.load()
        pairs = [(s, c) for c in CONSUMERS for s in systems]
        for round_no in range(args.rounds):
            shift = round_no * len(systems) % len(pairs) + round_no
            for system, consumers in pairs[shift % len(pairs) :] + pairs[: shift % len(pairs)]:
                run = consume_run(servers, system, consumers)
                run["round"] = round_no
                runs.append(run)
                print(json.dumps(run), file=sys.stderr, flush=True)
        for _ in range(args.trials):
            for how in ("leave", "sigkill"):
                took = rebalance_trial(servers.address["laminar"], how, args.session_s)
                rebalance[how].append(took)
                print(f"rebalance after {how}: {took:.3f} s", file=sys.stderr, flush=True)
    finally:
        servers.stop()
    floor_after = fsync_floor_us(workdir)
    summary = summarize(runs, systems)
    doc = {
        "records": args.records,
        "rounds": args.rounds,
        "session_timeout_s": args.session_s,
        "fsync_floor_before": floor_before,
        "fsync_floor_after": floor_after,
        "consume": summary,
        "rebalance_s": rebalance,
        "runs": runs,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=2))
    print(markdown(doc))
    return 0


def summarize(runs: list[dict[str, Any]], systems: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for consumers in CONSUMERS:
        for system in systems:
            mine = [r for r in runs if (r["system"], r["consumers"]) == (system, consumers)]
            out.append(
                {
                    "system": system,
                    "consumers": consumers,
                    "records_per_s": median([r["records_per_s"] for r in mine]),
                    "server_cores": median([r["server_cores"] for r in mine]),
                    "client_cores": median([r["client_cpu_s"] / r["elapsed_s"] for r in mine]),
                }
            )
    return out


def markdown(doc: dict[str, Any]) -> str:
    by = {(s["system"], s["consumers"]): s for s in doc["consume"]}
    lines = [
        "| consumers | system | records/s | vs plain | vs redis "
        "| consumers' CPU (cores) | server CPU (cores) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for consumers in CONSUMERS:
        plain = by.get(("laminar-plain", consumers), {}).get("records_per_s")
        redis = by.get(("redis-group", consumers), {}).get("records_per_s")
        for system in SYSTEMS:
            s = by.get((system, consumers))
            if s is None:
                continue
            rate = s["records_per_s"]
            lines.append(
                f"| {consumers} | {system} | {rate:,.0f} | {_ratio(rate, plain)} "
                f"| {_ratio(rate, redis)} | {s['client_cores']:.2f} | {s['server_cores']:.2f} |"
            )
    for how, times in doc["rebalance_s"].items():
        if times:
            lines.append(
                f"\nrebalance after {how}: median {median(times):.3f} s, "
                f"max {max(times):.3f} s over {len(times)} ({', '.join(f'{t:.3f}' for t in times)})"
            )
    for when in ("before", "after"):
        floor = doc[f"fsync_floor_{when}"]
        lines.append(
            f"\nfsync floor {when} (1 KiB pwritev + fdatasync): "
            f"p50 {floor['p50_us']:.0f} us, p99 {floor['p99_us']:.0f} us"
        )
    return "\n".join(lines)


def _ratio(rate: float, base: float | None) -> str:
    return f"{rate / base:.2f}x" if base else "-"


if __name__ == "__main__":
    sys.exit(main())
