"""Failover probe: how long a partition refuses writes after its leader dies.

    python -m laminar.bench.failover --runs 10 --json benchmarks/out/failover.json

Exit code 0 when every run recovered and passed its identity check (whether
the median met the goal is printed, not an error), 1 otherwise.

Each run starts a fresh three-node cluster on loopback (`LaminarCluster`),
creates a one-partition topic with replication_factor 3, waits for its leader,
and starts `--window` producer tasks (one `AsyncClient` bootstrapped from every
node, 1 KiB records, one record per produce) that send continuously. After
`--warmup` seconds of acknowledged produces it SIGKILLs the leader's node
(supervisor and shards at once, a machine crash) and measures the time from
the kill to the first acknowledgement of a produce *sent after the kill*:
such an answer can only come from a new leader (a request sent before the kill
might have been answered by the old one just before it died). The producers
keep going for `--after` seconds more, then the partition is read back from the
new leader and checked by identity: every acknowledged record present exactly
once (`laminar.bench.delivery`).

The client runs with its default retry policy (backoff from 20 ms doubling to
500 ms, 10 s budget) and without idempotence (a produce lost with the leader is
reported as failed, not retried, and the producer sends a new record): the
figure is what an application with the stock client sees. It includes the
election timeout (the followers must first notice the leader is gone), the
election, the new leader's no-op commit, and the client's discovery of the new
leader (metadata refresh, `NOT_LEADER` hints, backoff).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from laminar.bench.delivery import check_delivery
from laminar.bench.machine import loadavg
from laminar.bench.records import RecordMaker
from laminar.bench.servers.laminar_cluster import LaminarCluster
from laminar.bench.servers.process import install_signal_handlers
from laminar.client import AsyncClient, LaminarError

TOPIC: Final = "failover"
RECORD_BYTES: Final = 1024
LEADER_WAIT_S: Final = 30.0
RECOVERY_LIMIT_S: Final = 30.0
"""A run whose partition takes longer than this to accept a write again fails."""
READ_BATCH: Final = 1000
TARGET_S: Final = 2.0
"""Issue 15's goal for the median failover time."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One produce: when it was sent and when it was acknowledged (None: failed)."""

    sent_ns: int
    acked_ns: int | None


def failover_ns(kill_ns: int, attempts: Sequence[Attempt]) -> int | None:
    """Time from the kill to the first acknowledgement of a produce sent after
    it (None if none was acknowledged)."""
    acks = [a.acked_ns for a in attempts if a.sent_ns >= kill_ns and a.acked_ns is not None]
    return min(acks) - kill_ns if acks else None


_LEADS = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*partition (\d+): this node leads", re.M
)


def became_leader_at(log: str, pid: int, after: float) -> float | None:
    """The wall time (local clock, as the node logs it) at which the node whose
    `log` this is first said it leads partition `pid` after `after`."""
    for match in _LEADS.finditer(log):
        if int(match[2]) != pid:
            continue
        when = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if when >= after - 0.001:  # the log has millisecond resolution
            return when
    return None


@dataclass(slots=True)
class ProbeRun:
    run: int
    killed: str = ""
    new_leader: str | None = None
    failover_s: float | None = None
    elected_s: float | None = None
    """From the kill to the new leader's "this node leads" log line (the rest of
    `failover_s` is its no-op commit and the client finding it)."""
    acknowledged_before_kill: int = 0
    failed_produces: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    delivery: dict[str, Any] | None = None
    loadavg_at_start: tuple[float, float, float] = (0.0, 0.0, 0.0)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.failover_s is not None
            and self.delivery is not None
            and bool(self.delivery["ok"])
        )


class _Producers:
    """`window` tasks producing one record at a time, each attempt recorded."""

    def __init__(self, client: AsyncClient, window: int) -> None:
        self.client = client
        self.window = window
        self.maker = RecordMaker(RECORD_BYTES, producer=1)
        self.attempts: list[Attempt] = []
        self.errors: dict[str, int] = {}
        self.stop = False

    async def run(self) -> None:
        await asyncio.gather(*(self._one() for _ in range(self.window)))

    async def _one(self) -> None:
        client, maker = self.client, self.maker
        while not self.stop:
            sent = time.monotonic_ns()
            [record] = maker.batch(sent, 1)
            sequence = maker.ledger.sent - 1
            try:
                await client.produce(TOPIC, 0, [record])
            except LaminarError as exc:
                name = type(exc).__name__
                self.errors[name] = self.errors.get(name, 0) + 1
                self.attempts.append(Attempt(sent, None))
                await asyncio.sleep(0)  # the client already backed off; let others run
                continue
            maker.ledger.ack(sequence, 1)
            self.attempts.append(Attempt(sent, time.monotonic_ns()))


async def _leader(client: AsyncClient, deadline_s: float, not_: str | None = None) -> str:
    """The partition's leader once the metadata names one (other than `not_`)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            leader = (await client.describe_topic(TOPIC)).partitions[0].leader
        except LaminarError:
            leader = None
        if leader is not None and leader != not_:
            return leader
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no leader {'other than ' + not_ if not_ else ''} after {deadline_s:g} s")


async def _read_all(client: AsyncClient) -> list[bytes]:
    lowest, highest = await client.offsets(TOPIC, 0)
    out: list[bytes] = []
    index = lowest
    while index < highest:
        batch = await client.fetch_batch(TOPIC, 0, index, max_records=READ_BATCH)
        if batch.next_index <= index:
            break
        out += [bytes(v) for v in batch.values()]
        index = batch.next_index
    return out


async def _probe(cluster: LaminarCluster, result: ProbeRun, args: argparse.Namespace) -> None:
    client = AsyncClient(cluster.bootstrap)
    await client.connect()
    try:
        await client.create_topic(TOPIC, 1, replication_factor=3)
        leader = await _leader(client, LEADER_WAIT_S)
        producers = _Producers(client, args.window)
        running = asyncio.ensure_future(producers.run())
        await asyncio.sleep(args.warmup)
        # The leader as the metadata says just before the kill (it rarely moves).
        leader = await _leader(client, LEADER_WAIT_S)
        kill_ns, kill_wall = time.monotonic_ns(), time.time()
        cluster.kill(leader)
        result.killed = leader
        result.acknowledged_before_kill = sum(
            1 for a in producers.attempts if a.acked_ns is not None and a.acked_ns < kill_ns
        )
        end = time.monotonic() + RECOVERY_LIMIT_S
        while time.monotonic() < end and failover_ns(kill_ns, producers.attempts) is None:
            await asyncio.sleep(0.005)
        await asyncio.sleep(args.after)
        producers.stop = True
        await running
        took = failover_ns(kill_ns, producers.attempts)
        result.failover_s = None if took is None else took / 1e9
        result.failed_produces = sum(1 for a in producers.attempts if a.acked_ns is None)
        result.error_kinds = dict(producers.errors)
        if took is None:
            result.error = f"no produce acknowledged within {RECOVERY_LIMIT_S:g} s of the kill"
            return
        result.new_leader = await _leader(client, LEADER_WAIT_S, not_=leader)
        pid = (await client.describe_topic(TOPIC)).partitions[0].partition_id
        log = cluster.nodes[result.new_leader].log_path.read_text(errors="replace")
        elected = became_leader_at(log, pid, after=kill_wall)
        result.elected_s = None if elected is None else elected - kill_wall
        verdict = check_delivery({1: producers.maker.ledger}, await _read_all(client))
        result.delivery = verdict.to_dict()
    finally:
        await client.close()


def probe_once(run: int, workroot: Path, args: argparse.Namespace) -> ProbeRun:
    result = ProbeRun(run, loadavg_at_start=loadavg())
    workdir = Path(tempfile.mkdtemp(prefix=f"failover-{run}-", dir=workroot))
    cluster = LaminarCluster(workdir, 3, cores_per_node=1)
    try:
        cluster.start()
        asyncio.run(_probe(cluster, result, args))
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        cluster.stop()
    return result


def summary(runs: Sequence[ProbeRun]) -> dict[str, Any]:
    values = [r.failover_s for r in runs if r.ok and r.failover_s is not None]
    median = statistics.median(values) if values else None
    elected = [r.elected_s for r in runs if r.ok and r.elected_s is not None]
    return {
        "elected_s": elected,
        "elected_median_s": statistics.median(elected) if elected else None,
        "runs": len(runs),
        "ok": len(values),
        "failover_s": values,
        "median_s": median,
        "min_s": min(values) if values else None,
        "max_s": max(values) if values else None,
        "target_s": TARGET_S,
        "met": median is not None and median <= TARGET_S,
    }


def _line(r: ProbeRun) -> str:
    took = "-" if r.failover_s is None else f"{r.failover_s:.3f} s"
    if r.elected_s is not None:
        took += f" (elected after {r.elected_s:.3f} s)"
    d = r.delivery
    check = (
        "-"
        if d is None
        else f"{d['read']} read, {d['acknowledged']} acknowledged, "
        f"{d['lost']} lost, {d['duplicated']} duplicated, {d['phantom']} phantom"
    )
    errors = ", ".join(f"{k} {v}" for k, v in sorted(r.error_kinds.items())) or "none"
    text = (
        f"run {r.run:2d}: killed {r.killed or '-'} -> {r.new_leader or '-'}: {took}; "
        f"failed produces {r.failed_produces} ({errors}); identity: {check}; "
        f"load {r.loadavg_at_start[0]:.2f}"
    )
    return text + (f"; ERROR {r.error}" if r.error else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m laminar.bench.failover",
        description="SIGKILL a partition's leader while producing; time to the next ack.",
    )
    p.add_argument("--runs", type=int, default=10, help="fresh clusters, one kill each")
    p.add_argument("--window", type=int, default=8, help="producer tasks (requests in flight)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds producing before the kill")
    p.add_argument("--after", type=float, default=1.0, help="seconds producing after recovery")
    p.add_argument("--workdir", type=Path, default=None, help="where the clusters' data goes")
    p.add_argument("--json", type=Path, default=None, help="write every run and the summary")
    args = p.parse_args(argv)
    if not 1 <= args.runs <= 100 or not 1 <= args.window <= 1024:
        p.error("--runs is 1..100 and --window 1..1024")
    if not 0 < args.warmup <= 60 or not 0 <= args.after <= 60:
        p.error("--warmup is (0, 60] s and --after [0, 60] s")
    install_signal_handlers()
    workroot = Path(tempfile.mkdtemp(prefix="laminar-failover-", dir=args.workdir))
    runs = []
    for i in range(1, args.runs + 1):
        run = probe_once(i, workroot, args)
        print(_line(run), flush=True)
        runs.append(run)
    result = summary(runs)
    median = result["median_s"]
    elected = result["elected_median_s"]
    print(
        f"failover: median {'-' if median is None else f'{median:.3f} s'} "
        f"(new leader elected after {'-' if elected is None else f'{elected:.3f} s'}) over "
        f"{result['ok']}/{result['runs']} good runs "
        f"(goal <= {TARGET_S:g} s: {'met' if result['met'] else 'missed'})"
    )
    if args.json is not None:
        document = {
            "command": ["python", "-m", "laminar.bench.failover", *(argv or sys.argv[1:])],
            "settings": {k: str(v) for k, v in vars(args).items()},
            "summary": result,
            "runs": [asdict(r) for r in runs],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    shutil.rmtree(workroot, ignore_errors=True)
    return 0 if result["ok"] == result["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
