"""Run the Raft simulator over many seeds in parallel (make soak).

    python -m tests.raft.sim.soak --seeds 10000 --processes 2

Prints progress, every failure with its `reproduce with seed=...` line, and
the total; exits 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

from .history import Violation
from .simulation import run_seed

CHUNK = 50


def _run_chunk(bounds: tuple[int, int]) -> list[str]:
    first, last = bounds
    failures = []
    for seed in range(first, last):
        try:
            run_seed(seed)
        except Violation as violation:
            failures.append(str(violation))
        except Exception as exc:  # a crash of the core is a failure too
            failures.append(f"{type(exc).__name__}: {exc}; reproduce with seed={seed}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10_000)
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    chunks = [
        (first, min(first + CHUNK, args.first + args.seeds))
        for first in range(args.first, args.first + args.seeds, CHUNK)
    ]
    started = time.perf_counter()
    failures: list[str] = []
    done = 0
    with multiprocessing.Pool(args.processes) as pool:
        for chunk_failures in pool.imap_unordered(_run_chunk, chunks):
            failures += chunk_failures
            done += 1
            if done % 20 == 0 or done == len(chunks):
                seeds = min(done * CHUNK, args.seeds)
                print(
                    f"{seeds}/{args.seeds} seeds, {len(failures)} failed, "
                    f"{time.perf_counter() - started:.0f} s",
                    flush=True,
                )
        pool.close()
        pool.join()  # reaped, so their CPU time is counted below
    for failure in failures:
        print(failure)
    took = time.perf_counter() - started
    times = os.times()
    cpu = times.children_user + times.children_system
    print(
        f"raft simulator: {args.seeds} seeds, {len(failures)} violations, {took:.0f} s wall, "
        f"{cpu:.0f} s CPU in {args.processes} processes ({args.seeds / took:.1f} seeds/s; "
        f"load average {os.getloadavg()[0]:.1f})"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
