"""`laminar consume TOPIC`: print records, one per line, optionally following.

Where to start: --from-beginning, --from-end, --index I, or --since-ms T (the
first record appended at or after T, milliseconds since the Unix epoch). The
default is the beginning, or the end with --follow (new records only, like
`tail -f`). Without --follow the command prints what the partitions hold when
it starts and exits; with --follow it waits for new records until Ctrl-C or
--max records, and when the node stops answering (a restart) it says so on
stderr, keeps trying, and goes on from the next record once the node is back.
Without --partition every partition is read.

With --group G the command joins consumer group G instead: it prints the
records of the partitions the group gives it, from the group's committed
positions (with none: the end, or the beginning with --from-beginning), and
commits after printing, until Ctrl-C or --max. Run it several times to share
the topic's partitions.

Each value is printed as it is stored, followed by a newline; --json prints
one object per line with partition, index, timestamp_ms, key, value and
headers (bytes that are not UTF-8 come as `value_base64` etc.).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import sys
import time
from collections.abc import Coroutine
from typing import Any, BinaryIO

from laminar.cli.common import UsageError, client_security
from laminar.cli.output import put_bytes, say
from laminar.client import (
    AsyncClient,
    CommitFailedError,
    ConnectionLostError,
    ConsumedRecord,
    LaminarError,
    ProtocolViolationError,
    RecordBatch,
    RequestTimeoutError,
    RetryPolicy,
    TopicInfo,
    UnknownTopicError,
)
from laminar.client.routing import check_partition

LONG_POLL_MS = 5000
"""How long one fetch waits for new records in --follow mode."""
FOLLOW_RETRY = RetryPolicy(budget_s=2.0)
"""--follow's client gives up on a request soon, so an outage is reported
within seconds; the follower itself then retries for as long as it takes."""
RECONNECT_DELAY_MAX_S = 1.0
"""The longest a follower waits between two tries while the node is away."""
INT64_MAX = (1 << 63) - 1
"""The largest index or timestamp a flag may name (Kafka's too)."""


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "consume",
        parents=[common],
        help="print a topic's records (optionally follow new ones)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("-p", "--partition", type=int, help="read only this partition")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    start.add_argument("--from-end", action="store_true", help="start after the newest record")
    start.add_argument("--index", type=int, metavar="I", help="start at index I")
    start.add_argument(
        "--since-ms", type=int, metavar="T", help="start at the first record appended at or after T"
    )
    parser.add_argument("-f", "--follow", action="store_true", help="wait for new records")
    parser.add_argument(
        "-g", "--group", metavar="G", help="read as a member of consumer group G (commits)"
    )
    parser.add_argument("-n", "--max", type=int, metavar="N", help="stop after N records")
    parser.set_defaults(run_async=consume)


class Printer:
    """Writes records to stdout and counts them against --max."""

    def __init__(self, as_json: bool, limit: int | None, out: BinaryIO) -> None:
        self.as_json = as_json
        self.limit = limit
        self.out = out
        self.printed = 0
        self.done = asyncio.Event()
        if limit == 0:
            self.done.set()

    def write(self, partition: int, batch: RecordBatch, end: int | None = None) -> None:
        """Print the records of `batch` with an index below `end` (all by default)."""
        n = len(batch) if end is None else bisect.bisect_left(batch.indexes, end)
        n = self._room(n)
        if n <= 0:
            return
        if self.as_json:
            self._put(b"\n".join(_json_line(partition, r) for r in itertools.islice(batch, n)), n)
        else:  # values straight from the answer's buffer, no object per record
            self._put(b"\n".join(batch.values()[:n]), n)

    def write_records(self, records: list[ConsumedRecord]) -> list[ConsumedRecord]:
        """Print what a group member got (within --max); the records printed."""
        shown = records[: self._room(len(records))]
        if shown:
            if self.as_json:
                self._put(b"\n".join(_json_line(r.partition, r) for r in shown), len(shown))
            else:
                # a null value prints as an empty line, as `batch.values()` has it
                self._put(b"\n".join(r.value or b"" for r in shown), len(shown))
        return shown

    def _room(self, n: int) -> int:
        return n if self.limit is None else min(n, self.limit - self.printed)

    def _put(self, data: bytes, n: int) -> None:
        self.out.write(data + b"\n")
        self.out.flush()
        self.printed += n
        if self.limit is not None and self.printed >= self.limit:
            self.done.set()


def _json_line(partition: int, r: Any) -> bytes:
    """One record as a JSON line (bytes that are not UTF-8 in base64)."""
    doc: dict[str, Any] = {"partition": partition, "index": r.index, "timestamp_ms": r.timestamp_ms}
    put_bytes(doc, "key", r.key)
    put_bytes(doc, "value", r.value)
    headers: dict[str, Any] = {}
    for name, value in (r.headers or {}).items():
        put_bytes(headers, name, value)
    doc["headers"] = headers
    return json.dumps(doc).encode()


async def consume(args: argparse.Namespace) -> int:
    for flag, value in (
        ("--max", args.max),
        ("--index", args.index),
        ("--since-ms", args.since_ms),
    ):
        if value is not None and value < 0:
            raise UsageError(f"{flag} must be at least 0, got {value}")
        if value is not None and value > INT64_MAX:
            raise UsageError(f"{flag} must be at most {INT64_MAX}, got {value}")
    printer = Printer(args.json, args.max, sys.stdout.buffer)
    if args.group is not None:
        for flag, value in (
            ("--partition", args.partition),
            ("--index", args.index),
            ("--since-ms", args.since_ms),
        ):
            if value is not None:
                raise UsageError(f"--group reads the partitions the group gives: no {flag}")
        async with AsyncClient(
            args.bootstrap, timeout_s=args.timeout, **client_security(args)
        ) as client:
            await _consume_as_member(client, args, printer)
        return 0
    retry = FOLLOW_RETRY if args.follow else None
    async with AsyncClient(
        args.bootstrap, timeout_s=args.timeout, retry=retry, **client_security(args)
    ) as client:
        topic = await _topic(client, args.topic)
        if args.partition is None:
            partitions = list(range(topic.partitions))
        else:
            check_partition(topic, args.partition)
            partitions = [args.partition]
        starts = await asyncio.gather(*(_start(client, args, p) for p in partitions))
        if args.follow:
            outage = Outage(args.json)
            followers = [
                _follow(client, args.topic, p, i, printer, outage)
                for p, i in zip(partitions, starts, strict=True)
            ]
            await _together(followers, printer)
        else:  # one partition after the other, so the output is grouped by partition
            ends = await asyncio.gather(*(client.offsets(args.topic, p) for p in partitions))
            for p, i, end in zip(partitions, starts, ends, strict=True):
                await _read_to(client, args.topic, p, i, end.highest, printer)
    if not printer.printed and not args.follow and sys.stderr.isatty():
        say(f"no records in {args.topic} from the chosen start (try --from-beginning)")
    return 0


async def _consume_as_member(
    client: AsyncClient, args: argparse.Namespace, printer: Printer
) -> None:
    """Print what the group gives this member and commit after printing."""
    await _topic(client, args.topic)  # UNKNOWN_TOPIC now rather than an idle member
    start = "earliest" if args.from_beginning else "latest"
    async with client.consumer(args.group, [args.topic], start=start) as consumer:
        while not printer.done.is_set():
            printed = printer.write_records(await consumer.poll(timeout_s=1.0))
            if printed:
                after: dict[tuple[str, int], int] = {}
                for r in printed:
                    after[r.topic, r.partition] = r.index + 1
                try:
                    await consumer.commit(after)
                except CommitFailedError as exc:  # printed, not committed: printed again later
                    say(f"laminar: {exc}")


async def _topic(client: AsyncClient, name: str) -> TopicInfo:
    view = client.cluster
    try:
        if view is None:
            raise UnknownTopicError(name)
        return view.topic(name)
    except UnknownTopicError:
        return (await client.refresh_metadata()).topic(name)


async def _start(client: AsyncClient, args: argparse.Namespace, partition: int) -> int:
    if args.index is not None:
        return int(args.index)
    if args.since_ms is not None:
        return await client.offset_for_timestamp(args.topic, partition, args.since_ms)
    offsets = await client.offsets(args.topic, partition)
    if args.from_end or (args.follow and not args.from_beginning):
        return offsets.highest
    return offsets.lowest


async def _read_to(
    client: AsyncClient, topic: str, partition: int, index: int, end: int, printer: Printer
) -> None:
    """Print records `index..end-1`: what the partition held when the command began."""
    while index < end and not printer.done.is_set():
        batch = await client.fetch_batch(
            topic, partition, index, max_records=min(4096, end - index)
        )
        if batch.next_index <= index:
            return  # removed meanwhile (retention): nothing more of the range is there
        printer.write(partition, batch, end)
        index = batch.next_index


class Outage:
    """The node as the followers see it: one notice on stderr when they stop
    reaching it, one when it answers again (not one per partition)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.since: float | None = None

    def lost(self, error: LaminarError) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self._notice("lost", f"lost the node ({error}); reconnecting until it answers")

    def back(self) -> None:
        if self.since is not None:
            seconds = time.monotonic() - self.since
            self.since = None
            self._notice("reconnected", f"reconnected after {seconds:.1f} s; going on")

    def _notice(self, event: str, message: str) -> None:
        if self.as_json:
            say(json.dumps({"notice": event, "message": message}))
        else:
            say(f"laminar: {message}")


def _transient(error: LaminarError) -> bool:
    """A failure a restart or a leader change causes, which ends by itself."""
    if isinstance(error, ConnectionLostError | RequestTimeoutError):
        return not isinstance(error, ProtocolViolationError)
    return error.retriable


async def _follow(
    client: AsyncClient,
    topic: str,
    partition: int,
    index: int,
    printer: Printer,
    outage: Outage,
) -> None:
    """Print the partition's records from `index` on as they come; across an
    outage, retry the same index until the node answers (nothing skipped,
    nothing printed twice)."""
    delay = FOLLOW_RETRY.backoff_first_s
    while not printer.done.is_set():
        try:
            batch = await client.fetch_batch(topic, partition, index, max_wait_ms=LONG_POLL_MS)
        except LaminarError as exc:
            if not _transient(exc):
                raise
            outage.lost(exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_DELAY_MAX_S)
            continue
        delay = FOLLOW_RETRY.backoff_first_s
        outage.back()
        printer.write(partition, batch)
        index = batch.next_index


async def _together(followers: list[Coroutine[Any, Any, None]], printer: Printer) -> None:
    """Run the partition followers concurrently until one fails or --max is reached."""
    tasks: list[asyncio.Future[Any]] = [asyncio.ensure_future(f) for f in followers]
    stop: asyncio.Future[Any] = asyncio.ensure_future(printer.done.wait())
    try:
        pending: set[asyncio.Future[Any]] = set(tasks)
        while pending and not stop.done():
            done, pending = await asyncio.wait(
                pending | {stop}, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(stop)
            for task in done:
                if task is not stop:
                    task.result()  # raise a reader's error
    finally:
        for task in [*tasks, stop]:
            task.cancel()
        await asyncio.gather(*tasks, stop, return_exceptions=True)
