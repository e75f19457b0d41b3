"""Put the harness's section into RESULTS.md without touching the rest.

The section lives between `<!-- laminar-bench:begin -->` and
`<!-- laminar-bench:end -->` (another section name, `--section replication`,
uses its own pair of markers); everything outside the markers belongs to other
people and is kept byte for byte. A file without the markers gets the section
appended.

    python -m laminar.bench.results_md --into benchmarks/RESULTS.md part1.md part2.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Final

DEFAULT_SECTION: Final = "laminar-bench"
BEGIN: Final = "<!-- laminar-bench:begin -->"
END: Final = "<!-- laminar-bench:end -->"
_SECTION_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,40}")


def markers(section: str) -> tuple[str, str]:
    """The begin and end markers of a named section."""
    if not _SECTION_NAME.fullmatch(section):
        raise MarkerError(f"a section name is lower-case letters, digits and '-', not {section!r}")
    return f"<!-- {section}:begin -->", f"<!-- {section}:end -->"


class MarkerError(ValueError):
    pass


def splice(document: str, section: str, name: str = DEFAULT_SECTION) -> str:
    """`document` with the text between `name`'s markers replaced by `section`."""
    first, last = markers(name)
    body = f"{first}\n{section.strip()}\n{last}"
    begin = document.find(first)
    end = document.find(last)
    if begin < 0 and end < 0:
        sep = (
            ""
            if not document or document.endswith("\n\n")
            else ("\n" if document.endswith("\n") else "\n\n")
        )
        return f"{document}{sep}{body}\n"
    if begin < 0 or end < 0 or end < begin or document.count(first) != 1:
        raise MarkerError(f"expected exactly one {first} followed by one {last}")
    return document[:begin] + body + document[end + len(last) :]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m laminar.bench.results_md")
    p.add_argument("--into", type=Path, required=True, help="the Markdown file to update")
    p.add_argument("--header", type=Path, default=None, help="text to put before the parts")
    p.add_argument("--section", default=DEFAULT_SECTION, help="marker name (%(default)s)")
    p.add_argument("parts", type=Path, nargs="+", help="Markdown fragments, in order")
    args = p.parse_args(argv)
    pieces = [args.header.read_text()] if args.header else []
    pieces += [part.read_text() for part in args.parts]
    section = "\n\n".join(piece.strip() for piece in pieces)
    document = args.into.read_text() if args.into.exists() else ""
    try:
        args.into.write_text(splice(document, section, args.section))
    except MarkerError as exc:
        print(f"{args.into}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
