"""How the `laminar` command prints: aligned tables for people, JSON for scripts.

Tables: a header row, then rows; numbers align right, text left, and a cell
that is None prints as "-". JSON goes to stdout as one document (or one
object per line for record streams); messages for people go to stderr, so a
pipe only ever carries data.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

Cell = str | int | float | None

ENTRIES_NOTE = (
    "ENTRIES is a partition's index range: on a replicated partition it also counts "
    "Raft's own entries (a no-op per leader term, membership changes), which reads skip"
)
"""Why a replicated partition's count is labelled ENTRIES, not RECORDS (the
index range is what the node reports; counting user records would need it to
scan its index)."""


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    """An aligned plain-text table (no trailing spaces)."""
    shown = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in shown:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]
    lines = []
    for row in [list(headers), *shown]:
        parts = [
            text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i])
            for i, text in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _cell(value: Cell) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def print_json(document: Any, out: TextIO | None = None) -> None:
    """One JSON document on stdout, indented for reading."""
    out = out or sys.stdout
    json.dump(document, out, indent=2, sort_keys=False)
    out.write("\n")


def say(message: str) -> None:
    """A message for the person at the terminal (stderr)."""
    print(message, file=sys.stderr)


def put_bytes(document: dict[str, Any], name: str, data: bytes | None) -> None:
    """Put bytes into a JSON object: as `name` when they are UTF-8 text (or None),
    else base64-encoded as `name_base64`, so no byte is ever lost or guessed."""
    if data is None:
        document[name] = None
        return
    try:
        document[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        document[f"{name}_base64"] = base64.b64encode(data).decode("ascii")


def ranges(indexes: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    if not indexes:
        return "-"
    parts = []
    start = prev = indexes[0]
    for i in [*indexes[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)
