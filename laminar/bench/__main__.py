"""`python -m laminar.bench` runs `laminar-bench`."""

import sys

from laminar.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
