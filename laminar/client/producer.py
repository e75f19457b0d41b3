"""Idempotent produce without bookkeeping: a producer id and sequences per partition.

By default (as Kafka's producer since 3.0; `Client(idempotent=False)` opts
out) each (topic, partition) a client writes to gets a random 64-bit producer id,
and its records are numbered 0, 1, 2, ... in the order produce calls are
made, so a batch sent again after a lost answer, a leader change or a shard
restart is appended once (`laminar.shards.idempotence` decides on the node).
Pipelined calls keep working: the node places a producer's batches in the
order they arrive. The stamp travels in the first record's `laminar.producer`
header, which the clients' reads leave out (`decode_user_record`).

A produce that fails for good leaves a hole in the numbers, which the node
would refuse every later batch for. The partition then starts over under a
new producer id, whose first batch starts at 0 as the node requires;
batches already sent behind the failed one under the old id are refused as
out of order, with nothing appended, and fail too.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Mapping, Sequence

from laminar.client import calls


class ProducerSequences:
    """The producer id and next sequence of each partition a client writes to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the blocking client is shared by threads
        self._next: dict[tuple[str, int], tuple[int, int]] = {}

    def assign(self, topic: str, partition: int, count: int) -> tuple[int, int]:
        """(producer id, first sequence) for the next batch of `count` records."""
        key = (topic, partition)
        with self._lock:
            producer_id, sequence = self._next.get(key) or (secrets.randbits(64), 0)
            self._next[key] = (producer_id, sequence + count)
        return producer_id, sequence

    def failed(self, topic: str, partition: int, producer_id: int) -> None:
        """A batch of `producer_id` failed for good: the partition's next batch
        starts a new producer (unless that happened already)."""
        key = (topic, partition)
        with self._lock:
            current = self._next.get(key)
            if current is not None and current[0] == producer_id:
                del self._next[key]


def produce_call(
    sequences: ProducerSequences | None,
    topic: str,
    partition: int,
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Mapping[str, bytes] | None] | None,
    producer_id: int | None,
    sequence: int | None,
) -> calls.Call[int]:
    """The produce call of a client: idempotent under the partition's own
    producer when `sequences` is given and the caller named no producer."""
    failed = None
    if sequences is not None and producer_id is None and sequence is None:
        producer_id, sequence = sequences.assign(topic, partition, len(values))
        failed = functools.partial(sequences.failed, topic, partition, producer_id)
    return calls.produce(topic, partition, values, keys, headers, producer_id, sequence, failed)
