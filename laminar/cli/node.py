"""`laminar-node`: run a laminar node (a supervisor and one shard per core).

With no flags it runs a single-node cluster on loopback port 7070 with one
shard per core and its data in ./laminar-data. See `laminar-node --help`.
Exit codes: 0 after a clean drain (SIGTERM, SIGINT), 2 for a bad flag or a
fatal start-up problem (port in use, data dir unusable, a forced --routing
mode that cannot load here), 1 otherwise.

The flags are not declared here: each is a `NodeConfig` field's `Setting`
(`laminar.shards.config`), read by `build_parser`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import types
import typing
from dataclasses import Field
from typing import Any

from laminar.shards.config import ConfigError, NodeConfig
from laminar.shards.settings import Setting, flag_default, parse_size, settings_of

__all__ = ["build_parser", "config_from_args", "main", "parse_size"]


def build_parser() -> argparse.ArgumentParser:
    """One flag per setting of `NodeConfig`, in the order of its fields."""
    p = argparse.ArgumentParser(
        prog="laminar-node",
        description="Run a laminar node: one pinned shard process per core.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    hints = typing.get_type_hints(NodeConfig)
    for f, s in settings_of(NodeConfig):
        p.add_argument(s.flag, dest=f.name, help=s.help, **_flag_options(f, s, hints[f.name]))
    return p


def _flag_options(f: Field[Any], s: Setting, hint: Any) -> dict[str, Any]:
    """argparse's options for setting `s` of field `f` whose type is `hint`."""
    if hint is bool:
        return {"action": "store_true"}
    options: dict[str, Any] = {"default": flag_default(f, s), "type": s.parse or _scalar(hint)}
    if s.choices:
        options["choices"] = s.choices
    else:  # the flag, not the field, names the value: --idle-timeout IDLE_TIMEOUT
        options["metavar"] = s.metavar or s.flag.removeprefix("--").replace("-", "_").upper()
    return options


def _scalar(hint: Any) -> type:
    """int, float or str from a field type such as `int | None` or a Literal of strings."""
    if typing.get_origin(hint) is typing.Literal:
        return str
    if isinstance(hint, types.UnionType):
        (hint,) = (a for a in typing.get_args(hint) if a is not type(None))
    if hint not in (int, float, str):
        raise TypeError(f"no flag type for {hint!r}: give the setting a parse function")
    return typing.cast(type, hint)


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    return NodeConfig(**{f.name: getattr(args, f.name) for f, _ in settings_of(NodeConfig)})


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"laminar-node: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s node %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from laminar.node.supervisor import Supervisor

    return Supervisor(config).run()


if __name__ == "__main__":
    sys.exit(main())
