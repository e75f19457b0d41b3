"""`python -m laminar.xdp setup|check`: the bcc environment, from scripts/setup-bcc.

- `setup`: link Debian's bcc into the venv and build the kernel header tree
  (both skipped when already done);
- `check`: import bcc as the node would and say where everything is.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from laminar.xdp import bcc_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar.xdp")
    parser.add_argument("command", choices=["setup", "check"])
    parser.add_argument("--tree", type=Path, default=None, help="where the header tree goes")
    args = parser.parse_args(argv)
    tree = args.tree or bcc_env.default_kernel_tree()
    if args.command == "setup":
        if bcc_env.link_bcc_into_venv():
            print(f"setup-bcc: linked {bcc_env.DEBIAN_BCC_DIR} into {bcc_env.venv_site_packages()}")
        if bcc_env.build_kernel_tree(tree):
            print(f"setup-bcc: built the bcc kernel header tree at {tree}")
        return 0
    os.environ.setdefault(bcc_env.KERNEL_TREE_ENV, str(tree))
    bcc = bcc_env.import_bcc()
    print(f"bcc from {bcc.__file__}; kernel header tree {bcc_env.kernel_tree()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
