"""Small helpers shared by the Spark tests."""

from __future__ import annotations

import itertools
import urllib.request
from typing import Any

from laminar.client import Client, Record
from tests.system.nodes import RunningNode

_names = itertools.count()


def fresh_topic(client: Client, stem: str, partitions: int) -> str:
    """A new topic (tests share one node, so every test makes its own)."""
    name = f"{stem}-{next(_names)}"
    client.create_topic(name, partitions=partitions)
    return name


def read(spark: Any, node: RunningNode, topic: str, **options: object) -> Any:
    """`spark.read.format("laminar")` with bootstrap and topic set."""
    r = spark.read.format("laminar").option("bootstrap", node.bootstrap).option("topic", topic)
    for name, value in options.items():
        r = r.option(name, str(value))
    return r.load()


def all_records(client: Client, topic: str, partition: int) -> list[Record]:
    """Every record of a partition, through the plain client."""
    out: list[Record] = []
    lowest, highest = client.offsets(topic, partition)
    index = lowest
    while index < highest:
        got = client.fetch(topic, partition, index)
        out += got
        index = got[-1].index + 1
    return out


def rows_as_tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Rows as (partition, index, key, value, headers dict or None), sorted."""
    return sorted(
        (r.partition, r["index"], r.key, r.value, None if r.headers is None else dict(r.headers))
        for r in rows
    )


def metric(node: RunningNode, name: str) -> float:
    """The sum over shards of one /metrics sample of the node."""
    with urllib.request.urlopen(node.admin_url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def row_ids(client: Client, topic: str, partitions: int) -> list[int]:
    """The ids of every record of a topic whose values are b"row-<id>[-...]"."""
    return [
        int(r.value.split(b"-")[1])
        for p in range(partitions)
        for r in all_records(client, topic, p)
    ]
