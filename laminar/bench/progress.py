"""Live progress while runs go: a rich display on a terminal, lines otherwise.

The runner reports through the small `ProgressSink` interface, so tests use a
silent sink and scripts (`make bench`, CI logs) get one line per event instead
of a redrawn screen.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from laminar.bench.results import RunResult


class ProgressSink(Protocol):
    def begin_run(self, target: str, round_no: int, rounds: int) -> None: ...

    def phase(self, text: str) -> None: ...

    def counts(self, records: int, errors: int, phase: str, remaining_s: float | None) -> None: ...

    def end_run(self, result: RunResult, headline: str) -> None: ...

    def close(self) -> None: ...


class SilentProgress:
    def begin_run(self, target: str, round_no: int, rounds: int) -> None:
        pass

    def phase(self, text: str) -> None:
        pass

    def counts(self, records: int, errors: int, phase: str, remaining_s: float | None) -> None:
        pass

    def end_run(self, result: RunResult, headline: str) -> None:
        pass

    def close(self) -> None:
        pass


class LineProgress:
    """One line per run phase and per finished run (logs, pipes)."""

    def __init__(self) -> None:
        self._label = ""

    def _print(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {self._label} {text}", file=sys.stderr, flush=True)

    def begin_run(self, target: str, round_no: int, rounds: int) -> None:
        self._label = f"{target} round {round_no}/{rounds}:"

    def phase(self, text: str) -> None:
        self._print(text)

    def counts(self, records: int, errors: int, phase: str, remaining_s: float | None) -> None:
        pass

    def end_run(self, result: RunResult, headline: str) -> None:
        self._print(f"{result.status}: {headline}")

    def close(self) -> None:
        pass


@dataclass
class _Row:
    target: str
    round_no: int
    rounds: int
    phase: str = "starting"
    records: int = 0
    errors: int = 0
    rate: float = 0.0
    remaining_s: float | None = None
    outcome: str = ""
    samples: list[tuple[float, int]] = field(default_factory=list)


class RichProgress:
    """A live table: one row per run, the current one updating."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._rows: list[_Row] = []
        self._live = Live(self._table(), console=self.console, refresh_per_second=4)
        self._live.start()

    def _table(self) -> Table:
        table = Table(title="laminar-bench", expand=False)
        for name in (
            "target",
            "round",
            "phase",
            "records",
            "rec/s now",
            "errors",
            "left",
            "result",
        ):
            table.add_column(name, justify="right" if name in ("records", "rec/s now") else "left")
        for row in self._rows:
            left = "" if row.remaining_s is None else f"{row.remaining_s:4.0f} s"
            table.add_row(
                row.target,
                f"{row.round_no}/{row.rounds}",
                row.phase,
                f"{row.records:,}",
                f"{row.rate:,.0f}",
                str(row.errors),
                left,
                row.outcome,
            )
        return table

    def _refresh(self) -> None:
        self._live.update(self._table())

    def begin_run(self, target: str, round_no: int, rounds: int) -> None:
        self._rows.append(_Row(target, round_no, rounds))
        self._refresh()

    def phase(self, text: str) -> None:
        if self._rows:
            self._rows[-1].phase = text
            self._refresh()

    def counts(self, records: int, errors: int, phase: str, remaining_s: float | None) -> None:
        if not self._rows:
            return
        row = self._rows[-1]
        now = time.monotonic()
        row.samples = [s for s in row.samples if now - s[0] < 2.0] + [(now, records)]
        t0, r0 = row.samples[0]
        row.rate = (records - r0) / (now - t0) if now > t0 else 0.0
        row.records, row.errors, row.phase, row.remaining_s = records, errors, phase, remaining_s
        self._refresh()

    def end_run(self, result: RunResult, headline: str) -> None:
        if self._rows:
            row = self._rows[-1]
            row.phase = "done"
            row.remaining_s = None
            row.rate = 0.0
            row.outcome = f"{result.status}: {headline}"
            self._refresh()

    def close(self) -> None:
        self._live.stop()


def make_progress(kind: str) -> ProgressSink:
    """ "auto" (rich on a terminal, lines otherwise), "rich", "lines" or "none"."""
    if kind == "none":
        return SilentProgress()
    if kind == "lines" or (kind == "auto" and not sys.stderr.isatty()):
        return LineProgress()
    return RichProgress()
