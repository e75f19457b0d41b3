"""`laminar topic create|list|describe|alter|delete`.

Topic configs take Kafka's keys and meanings (`laminar.replication.topic_config`):
retention.ms, retention.bytes (per partition), segment.bytes, segment.ms;
-1 means "no limit" for the retention keys.
"""

from __future__ import annotations

import argparse
from typing import Any

from laminar.cli.common import UsageError
from laminar.cli.output import ENTRIES_NOTE, Cell, print_json, say, table
from laminar.client import Client, TopicExistsError, TopicInfo, UnknownTopicError
from laminar.replication.topic_config import TOPIC_CONFIG_KEYS

CONFIG_KEYS = ", ".join(sorted(TOPIC_CONFIG_KEYS))


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register `topic` and its subcommands on `commands` (a subparsers action)."""
    topic = commands.add_parser(
        "topic", help="create, list, describe or delete topics", description="Manage topics."
    )
    sub = topic.add_subparsers(dest="topic_command", metavar="ACTION", required=True)

    create = sub.add_parser(
        "create",
        parents=[common],
        help="create a topic",
        description="Create a topic made of PARTITIONS partitions.",
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "-p", "--partitions", type=_positive, default=1, help="number of partitions (default 1)"
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a topic setting (repeatable): {CONFIG_KEYS}",
    )
    create.add_argument(
        "-r",
        "--replication-factor",
        type=_positive,
        default=None,
        help="nodes holding each partition in a cluster (default: 3, or every node if fewer)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )
    create.set_defaults(run=create_topic)

    listing = sub.add_parser("list", parents=[common], help="list topics")
    listing.set_defaults(run=list_topics)

    describe = sub.add_parser(
        "describe",
        parents=[common],
        help="show a topic's partitions, owners and sizes",
        description="Show each partition's owning shard, its endpoint and its index range.",
    )
    describe.add_argument("name", metavar="NAME")
    describe.set_defaults(run=describe_topic)

    alter = sub.add_parser(
        "alter",
        parents=[common],
        help="change a live topic's settings",
        description="Change a topic's settings; retention applies on the node's next "
        "retention pass (--retention-check-interval).",
    )
    alter.add_argument("name", metavar="NAME")
    alter.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"set a topic setting (repeatable): {CONFIG_KEYS}",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="return a setting to its default (repeatable)",
    )
    alter.set_defaults(run=alter_topic)

    delete = sub.add_parser("delete", parents=[common], help="delete a topic and all its records")
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true", help="succeed if there is no topic")
    delete.set_defaults(run=delete_topic)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _config(pairs: list[str]) -> dict[str, int | str]:
    config: dict[str, int | str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--config takes KEY=VALUE, got {pair!r}")
        config[key] = int(value) if value.lstrip("-").isdigit() else value
    return config


def topic_json(topic: TopicInfo) -> dict[str, Any]:
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "partitions": topic.partitions,
        "replication_factor": topic.replication_factor,
        "config": topic.config,
    }


def create_topic(client: Client, args: argparse.Namespace) -> int:
    config = _config(args.config)
    try:
        topic = client.create_topic(
            args.name, args.partitions, config=config, replication_factor=args.replication_factor
        )
        created = True
    except TopicExistsError:
        if not args.if_not_exists:
            raise
        topic = client.refresh_metadata_view().topic(args.name)
        created = False
    if args.json:
        print_json({**topic_json(topic), "created": created})
    elif created:
        print(
            f"created topic {topic.name} (id {topic.topic_id}) "
            f"with {topic.partitions} partition{'s' if topic.partitions != 1 else ''}"
            + (
                f", each on {topic.replication_factor} nodes"
                if topic.replication_factor > 1
                else ""
            )
        )
    else:
        print(f"topic {topic.name} already exists (id {topic.topic_id})")
    return 0


def list_topics(client: Client, args: argparse.Namespace) -> int:
    topics = sorted(client.list_topics(), key=lambda t: t.name)
    if args.json:
        print_json([topic_json(t) for t in topics])
    elif not topics:
        say("no topics yet; create one with `laminar topic create NAME --partitions N`")
    else:
        print(
            table(
                ["TOPIC", "ID", "PARTITIONS"], [(t.name, t.topic_id, t.partitions) for t in topics]
            )
        )
    return 0


def describe_topic(client: Client, args: argparse.Namespace) -> int:
    desc = client.describe_topic(args.name)
    if args.json:
        print_json(
            {
                **topic_json(desc.topic),
                "partition_details": [
                    {
                        "partition": p.index,
                        "partition_id": p.partition_id,
                        "shard": p.shard_id,
                        "host": p.host,
                        "port": p.port,
                        "lowest_index": p.lowest,
                        "highest_index": p.highest,
                        "records": p.records,
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                    }
                    for p in desc.partitions
                ],
            }
        )
        return 0
    topic = desc.topic
    total = sum(p.records for p in desc.partitions)
    counted = "entries" if topic.replication_factor > 1 else "records"
    print(
        f"topic {topic.name}  id {topic.topic_id}  partitions {topic.partitions}  {counted} {total}"
    )
    if topic.config:
        print("config " + " ".join(f"{k}={v}" for k, v in sorted(topic.config.items())))
    headers = ["PARTITION", "SHARD", "ENDPOINT", "LOWEST", "HIGHEST", counted.upper()]
    rows: list[tuple[Cell, ...]] = [
        (p.index, p.shard_id, f"{p.host}:{p.port}", p.lowest, p.highest, p.records)
        for p in desc.partitions
    ]
    if any(p.replicas for p in desc.partitions):
        headers += ["LEADER", "REPLICAS"]
        rows = [
            (*row, p.leader or "(none)", ",".join(p.replicas))
            for row, p in zip(rows, desc.partitions, strict=True)
        ]
    print(table(headers, rows))
    if topic.replication_factor > 1:
        say(f"note: {ENTRIES_NOTE}")
    return 0


def alter_topic(client: Client, args: argparse.Namespace) -> int:
    config = _config(args.config)
    if not config and not args.delete_config:
        raise UsageError("say what to change: --config KEY=VALUE or --delete-config KEY")
    topic = client.alter_topic(args.name, config=config, remove=args.delete_config)
    if args.json:
        print_json(topic_json(topic))
    else:
        settings = " ".join(f"{k}={v}" for k, v in sorted(topic.config.items())) or "(defaults)"
        print(f"altered topic {topic.name}: {settings}")
    return 0


def delete_topic(client: Client, args: argparse.Namespace) -> int:
    try:
        client.delete_topic(args.name)
        deleted = True
    except UnknownTopicError:
        if not args.if_exists:
            raise
        deleted = False
    if args.json:
        print_json({"name": args.name, "deleted": deleted})
    else:
        print(f"deleted topic {args.name}" if deleted else f"no topic {args.name}; nothing to do")
    return 0
