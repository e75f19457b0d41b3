"""The vocabulary of the node's settings table (`laminar.shards.config.NodeConfig`).

Every `NodeConfig` field a flag sets carries one `Setting` in its field
metadata: the flag, its help, and the checks its value must pass. The
`laminar-node` parser is built from those fields (`laminar.cli.node`) and
`NodeConfig` validates itself with the same checks, so a setting is declared
in one place and a flag cannot drift from the field it sets.

A check is a function returning what is wrong with a value ("must be at least
4096, got 10") or None; the families below make them and `Setting` prefixes
the flag. Rules that relate two settings (--peers needs --node-id) are not here:
they are `NodeConfig`'s own list of named functions.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, Final

SETTING: Final = "laminar.setting"
"""The field-metadata key under which a `NodeConfig` field keeps its `Setting`."""

_SIZE_RE = re.compile(r"(\d+)\s*([kmgt]?)(i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from "1048576", "64MiB", "64m", "1g" (binary units)."""
    match = _SIZE_RE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 67108864, 64MiB, 1g)")
    return int(match[1]) * _UNITS[match[2].lower()]


Check = Callable[[Any], str | None]
"""One rule on a value: what is wrong with it ("must be ..., got ..."), or None."""


@dataclass(frozen=True, slots=True)
class Range:
    """A rule on a number; values from JSON or code that are no number break it too."""

    wanted: str
    """What the number must be, e.g. "in 0..65535"."""
    holds: Callable[[float], bool]

    def __call__(self, value: Any) -> str | None:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return None if number and self.holds(value) else f"must be {self.wanted}, got {value!r}"


def between(low: float, high: float) -> Range:
    """A number in `low..high`, both ends included (NaN is not)."""
    return Range(f"in {low}..{high}", lambda v: low <= v <= high)


def at_least(low: float, shown: str = "") -> Range:
    """A number of at least `low` (`shown` says it in the unit users think in)."""
    return Range(f"at least {shown or low}", lambda v: v >= low)


def at_most(high: float, why: str = "") -> Range:
    """A number of at most `high`; `why` tells the user what the ceiling protects."""
    return Range(f"at most {high}" + (f" ({why})" if why else ""), lambda v: v <= high)


def positive(high: float = math.inf) -> Range:
    """A number above zero, and at most `high` when one is given."""
    wanted = "positive" if high == math.inf else f"a number in (0, {high:g}]"
    return Range(wanted, lambda v: 0 < v <= high)


def one_of(allowed: tuple[object, ...]) -> Check:
    """One of a fixed set of values."""

    def check(value: Any) -> str | None:
        if value in allowed:
            return None
        return f"must be one of {', '.join(map(str, allowed))}, got {value!r}"

    return check


def absolute_path(value: Any) -> str | None:
    """A path that means the same in every process whatever its working directory."""
    return None if os.path.isabs(value) else f"must be absolute, got {value!r}"


def host_ports(value: Any) -> str | None:
    """A sequence of HOST:PORT addresses, each with a port in 1..65535."""
    for address in value:
        host, sep, port = address.rpartition(":")
        if not (sep and host and port.isdigit() and 0 < int(port) <= 65535):
            return f"wants HOST:PORT addresses, got {address!r}"
    return None


@dataclass(frozen=True, slots=True)
class Setting:
    """How a `NodeConfig` field is set from the command line and what it accepts."""

    flag: str
    """The `laminar-node` flag, e.g. "--idle-timeout"; errors name the setting by it."""
    help: str
    checks: tuple[Check, ...] = ()
    """Range rules the value must pass (None, "use the derived value", is never checked)."""
    choices: tuple[str, ...] = ()
    """The only values allowed; the parser offers them and the config checks them."""
    parse: Callable[[str], Any] | None = None
    """Flag text -> field value; None: the field's type (int, float, str)."""
    metavar: str | None = None
    flag_default: object = None
    """The flag's default where the field's own does not fit the command line (the
    field has none, or its value is not what a user would type); None: the field's."""

    def complaint(self, value: object) -> str | None:
        """The first check `value` fails, worded after the flag; None if it passes."""
        if value is None:
            return None
        checks = (one_of(self.choices), *self.checks) if self.choices else self.checks
        for check in checks:
            if wrong := check(value):
                return f"{self.flag} {wrong}"
        return None


def setting(
    flag: str,
    help: str,
    *,
    checks: tuple[Check, ...] = (),
    choices: tuple[str, ...] = (),
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    flag_default: object = None,
) -> Mapping[str, Setting]:
    """Field metadata declaring a setting: `field(default=..., metadata=setting(...))`."""
    return {SETTING: Setting(flag, help, checks, choices, parse, metavar, flag_default)}


def settings_of(cls: type) -> Iterator[tuple[Field[Any], Setting]]:
    """The fields of dataclass `cls` that are settings, in declaration order."""
    for f in fields(cls):
        if SETTING in f.metadata:
            yield f, f.metadata[SETTING]


def flag_default(f: Field[Any], s: Setting) -> object:
    """What the flag of field `f` defaults to: the setting's own, else the field's."""
    if s.flag_default is not None:
        return s.flag_default
    if f.default_factory is not MISSING:
        return f.default_factory()
    if f.default is MISSING:
        raise TypeError(f"setting {s.flag} has no default for its flag")
    return f.default
