"""Which partition a record goes to when the caller names none (`Client.send`).

As Kafka's default partitioner does:

- A record with a key goes to `partition_for_key(key, n)` (xxh64 of the key
  modulo the partition count): the same partition every time while the count
  stays, so a key's records stay in order. (The hash is laminar's own, not
  Kafka's murmur2: the same key lands elsewhere than on Kafka.)
- Records without a key stick to one partition for a whole batch (one `send`
  call), and the next batch goes to the next partition: KIP-480's sticky
  partitioner, round robin from a random start. Sticky per batch keeps a
  batch one request and one append; round robin per record would cut every
  batch into one small request per partition. Over many batches the load
  spreads evenly, and the random start spreads producers that send one batch
  each (a `laminar produce --value` per record) as well.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence

from laminar.client.routing import partition_for_key

Records = tuple[list[bytes], list[bytes | None] | None, list[Mapping[str, bytes] | None] | None]
"""Values, keys and headers, as `produce` takes them."""


class StickyPartitioner:
    """The partition of each record of a batch; thread-safe (one per client)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}

    def assign(
        self, topic: str, partitions: int, keys: Sequence[bytes | None] | None, count: int
    ) -> dict[int, list[int]]:
        """Partition -> positions of the batch's `count` records that go there
        (in batch order), by key, the keyless ones all to this batch's sticky
        partition."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        if keys is not None and len(keys) != count:
            raise ValueError(f"{len(keys)} keys for {count} values")
        groups: dict[int, list[int]] = {}
        sticky: int | None = None
        for position in range(count):
            key = None if keys is None else keys[position]
            if key is not None:
                partition = partition_for_key(key, partitions)
            else:
                if sticky is None:
                    sticky = self._take(topic, partitions)
                partition = sticky
            groups.setdefault(partition, []).append(position)
        return groups

    def split(
        self,
        topic: str,
        partitions: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Mapping[str, bytes] | None] | None,
    ) -> list[tuple[int, Records]]:
        """The records of one `send`, by partition (in partition order)."""
        if not values:
            raise ValueError("send needs at least one value")
        groups = self.assign(topic, partitions, keys, len(values))
        return [
            (
                partition,
                (
                    [values[i] for i in rows],
                    None if keys is None else [keys[i] for i in rows],
                    None if headers is None else [headers[i] for i in rows],
                ),
            )
            for partition, rows in sorted(groups.items())
        ]

    def _take(self, topic: str, partitions: int) -> int:
        """This batch's partition for keyless records; the next batch gets the next."""
        with self._lock:
            current = self._next.get(topic)
            if current is None:
                current = self._rng.randrange(partitions)
            current %= partitions  # the topic may have fewer partitions now
            self._next[topic] = current + 1
            return current
