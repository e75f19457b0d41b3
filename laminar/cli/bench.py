"""`laminar-bench`: the benchmark harness (see `laminar.bench`)."""

from __future__ import annotations

import sys


def main() -> int:
    from laminar.bench.cli import main as bench_main

    return bench_main()


if __name__ == "__main__":
    sys.exit(main())
