"""Put the harness's section into RESULTS.md without touching the rest.

The section lives between `<!-- laminar-bench:begin -->` and
`<!-- laminar-bench:end -->`; everything outside the markers belongs to other
people and is kept byte for byte. A file without the markers gets the section
appended.

    python -m laminar.bench.results_md --into benchmarks/RESULTS.md part1.md part2.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Final

BEGIN: Final = "<!-- laminar-bench:begin -->"
END: Final = "<!-- laminar-bench:end -->"


class MarkerError(ValueError):
    pass


def splice(document: str, section: str) -> str:
    """`document` with the text between the markers replaced by `section`."""
    body = f"{BEGIN}\n{section.strip()}\n{END}"
    begin = document.find(BEGIN)
    end = document.find(END)
    if begin < 0 and end < 0:
        sep = (
            ""
            if not document or document.endswith("\n\n")
            else ("\n" if document.endswith("\n") else "\n\n")
        )
        return f"{document}{sep}{body}\n"
    if begin < 0 or end < 0 or end < begin or document.count(BEGIN) != 1:
        raise MarkerError(f"expected exactly one {BEGIN} followed by one {END}")
    return document[:begin] + body + document[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m laminar.bench.results_md")
    p.add_argument("--into", type=Path, required=True, help="the Markdown file to update")
    p.add_argument("--header", type=Path, default=None, help="text to put before the parts")
    p.add_argument("parts", type=Path, nargs="+", help="Markdown fragments, in order")
    args = p.parse_args(argv)
    pieces = [args.header.read_text()] if args.header else []
    pieces += [part.read_text() for part in args.parts]
    section = "\n\n".join(piece.strip() for piece in pieces)
    document = args.into.read_text() if args.into.exists() else ""
    try:
        args.into.write_text(splice(document, section))
    except MarkerError as exc:
        print(f"{args.into}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
