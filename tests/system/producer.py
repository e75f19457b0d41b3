"""A producer process for crash tests: `python -m tests.system.producer ...`.

It produces batches of unique records (`<tag>:<partition>:<seq>` padded to a
size) round-robin over a topic's partitions with `laminar.client.Client`, and
appends one line per outcome to `--out`, written with `os.write` before the
next request so the test can trust it even if this process is killed:

    A <partition> <first_index> <seq> <count>   acknowledged: durable at those indexes
    U <partition> <seq> <count> <error>         outcome unknown (the node died mid-request)
    R <partition> <seq> <count> <error>         refused: the node said it applied none of it

Only errors that say the outcome is unknown (a lost connection, a timeout,
`OutcomeUnknownError`) are logged as U; every answer from the node is taken at
its word, so a node whose error lies about the outcome is caught (the test
checks that refused records are absent).

It keeps going across node failures (reconnecting) until `--seconds` pass or
`--stop-file` appears.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from laminar.client import (
    Client,
    ConnectionLostError,
    LaminarError,
    RequestTimeoutError,
    RetryPolicy,
)


def record_value(tag: str, partition: int, seq: int, size: int) -> bytes:
    head = f"{tag}:{partition}:{seq}:".encode()
    return head + b"x" * max(0, size - len(head))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tag", default="p")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--stop-file", default=None)
    args = p.parse_args(argv)

    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    deadline = time.monotonic() + args.seconds
    seqs = [0] * args.partitions
    client: Client | None = None
    turn = 0
    while time.monotonic() < deadline:
        if args.stop_file and os.path.exists(args.stop_file):
            break
        if client is None:
            try:
                client = Client(args.bootstrap, timeout_s=10.0, retry=RetryPolicy(budget_s=2.0))
            except LaminarError:
                time.sleep(0.05)
                continue
        partition = turn % args.partitions
        turn += 1
        seq = seqs[partition]
        values = [record_value(args.tag, partition, seq + i, args.size) for i in range(args.batch)]
        seqs[partition] += args.batch
        try:
            first = client.produce(args.topic, partition, values)
        except LaminarError as exc:
            unknown = isinstance(exc, ConnectionLostError | RequestTimeoutError)
            kind = "U" if unknown else "R"
            os.write(fd, f"{kind} {partition} {seq} {args.batch} {type(exc).__name__}\n".encode())
            client.close()
            client = None
            time.sleep(0.02)
            continue
        os.write(fd, f"A {partition} {first} {seq} {args.batch}\n".encode())
    if client is not None:
        client.close()
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
