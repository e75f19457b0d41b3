"""Retention and timestamp seeks on every topology, a leader killed in the middle."""

from __future__ import annotations

import bisect

from laminar.client import Client
from tests.matrix.reading import read_records, topic_name
from tests.matrix.topologies import Topology
from tests.support import wait_until

VALUE = b"x" * 200


def test_retention_keeps_a_suffix_of_what_was_acknowledged(healed: Topology) -> None:
    """Small segments and a byte limit: the oldest segments go (on the node's
    1 s timer), and what stays is readable and is the acknowledged records from
    some point on, each once, at its acknowledged index."""
    topic = topic_name("retention")
    config = {"segment.bytes": 4096, "retention.bytes": 8192}
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, 1, config=config, replication_factor=healed.replication_factor)
        healed.leader(topic, 0)
        acked: list[tuple[int, bytes]] = []
        for part in ("a", "b"):
            for i in range(60):
                value = b"%s-%03d-" % (part.encode(), i) + VALUE
                acked.append((client.produce(topic, 0, [value]), value))
            if part == "a":
                healed.kill_leader(topic, 0)
        wait_until(lambda: client.offsets(topic, 0).lowest > acked[0][0], "retention to run")
        kept = [(r.index, r.value) for r in read_records(client, topic, 0)]
    assert kept, "retention removed everything"
    first = next(k for k, (index, _) in enumerate(acked) if index >= kept[0][0])
    assert kept == acked[first:], "what stays is not the acknowledged suffix"
    assert first > 0


def test_a_timestamp_seek_finds_the_first_record_at_or_after_it(healed: Topology) -> None:
    topic = topic_name("seek")
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, 1, replication_factor=healed.replication_factor)
        healed.leader(topic, 0)
        for i in range(30):
            client.produce(topic, 0, [b"a-%d" % i])
        healed.kill_leader(topic, 0)
        for i in range(30):
            client.produce(topic, 0, [b"b-%d" % i])
        records = read_records(client, topic, 0)
        stamps = [r.timestamp_ms for r in records]
        assert stamps == sorted(stamps), "timestamps decrease along the partition"
        end = client.offsets(topic, 0).highest
        for at in {stamps[0] - 1, stamps[0], stamps[29], stamps[30], stamps[-1], stamps[-1] + 1}:
            k = bisect.bisect_left(stamps, at)
            want = records[k].index if k < len(records) else end
            got = client.offset_for_timestamp(topic, 0, at)
            # A seek may land on a protocol entry just before the record (reads skip it).
            assert got <= want and all(not got <= r.index < want for r in records), (at, got, want)
