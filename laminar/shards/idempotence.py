"""Idempotent produce: which batches a partition appends, by producer and sequence.

Why. A producer that sends a batch again after its answer was lost, or a Spark
task that runs again after a failure, must not append its records twice. The
client alone cannot know whether a lost produce was applied; the partition
can, if every record says who sent it and where it stands in that sender's
stream. This is Kafka's idempotent producer, with sequences that never wrap.

Rules.

1. A producer names itself with a 64-bit `producer_id` (random, or derived from
   something stable such as a Spark job id and task partition) and numbers its
   records per partition: 0, 1, 2, ... A batch carries the sequence of its first
   record and its record count, so it covers `first .. first + count - 1`.
2. The partition keeps, per producer, the next sequence it expects and the last
   few batches it appended (sequence range, first index, append time).
3. A batch that starts at the expected sequence is appended (APPEND).
4. A batch wholly below the expected sequence was appended before: nothing is
   appended. If it lies inside one remembered batch, the answer is the index
   its first record got then (DUPLICATE); otherwise the partition says that it
   was appended but no longer knows where (DUPLICATE_INDEX_UNKNOWN, the wire's
   DUPLICATE_SEQUENCE). Either way the producer may count it as written.
5. A batch that starts past the expected sequence (a gap: records in between
   were never appended) or straddles it (partly old, partly new) is refused
   (OUT_OF_ORDER, the wire's OUT_OF_ORDER_SEQUENCE): appending it would lose or
   duplicate records.
6. A producer the partition does not know (new, or forgotten: see Limits)
   must start at sequence 0; any other batch is refused (OUT_OF_ORDER). A
   new leader that let one start anywhere appended a pipelined producer's
   later batch that overtook earlier ones during a leader change, and then
   answered those earlier ones DUPLICATE_INDEX_UNKNOWN ("appended before")
   although they never were: silent loss. A forgotten producer's next batch
   is therefore refused too; the client starts over under a new producer id.

Theory of operation. This module decides and remembers; it does no I/O. The
shard's glue (`laminar.shards.producers`) serializes each producer's batches
on a partition, asks `decide`, appends when told to, and calls `appended`
only once the append is durable, so the table never runs ahead of the log. A
failed append changes nothing, and the producer may send the batch again.

Durability. Each idempotent batch's first record carries a `ProducerStamp`
(`laminar.wire.records`: producer id, first sequence, count) in its
`laminar.producer` header, written by the client and checked by the shard.
A partition opened after a restart rebuilds its table on the first idempotent
produce: it reads the tail of its log newest first and hands the stamps to
`ProducerTable.restored`. The newest stamp of a producer gives its expected
sequence, exactly as before the restart.

Limits (the guarantee holds while a producer is remembered):
- The table keeps `PRODUCERS_MAX` producers per partition and
  `PRODUCERS_PER_OWNER_MAX` per owner (the client connection that introduced
  the producer): an owner at its bound that introduces another forgets its
  own least recently active producer, and a full table forgets the least
  recently active producer of the owner with the most. So a client that
  churns producer ids (4,200 one-record produces with random ids evicted a
  real producer from the whole table) evicts only its own, never another
  connection's producer, unless that connection holds as many. Producers
  rebuilt from the log after a restart have no owner until their next batch
  names one. `BATCHES_MAX` batches are kept per producer for exact
  duplicate answers. The clients never run further ahead than that
  (`PRODUCER_WINDOW` batches from the oldest unanswered one), so their own
  resends always get the original index; only a batch sent again after it
  was answered, by a caller naming its own producer, can be forgotten.
- After a restart, only producers whose latest batch lies in the last
  `SCAN_BYTES_MAX` bytes of the partition's log are remembered.
- A forgotten producer's next batch is refused (rule 6), and its client
  starts over under a new producer id: that batch fails for its caller,
  nothing is lost or duplicated. Retention that deletes a producer's last
  batch forgets it too.
- Duplicates are recognized by sequence numbers only: a producer that sends
  different records under sequences it used before gets them dropped. Spark
  task retries must therefore see the same rows in the same order, which is
  Spark's own condition for exactly-once output.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from laminar.wire import PRODUCER_WINDOW, ProducerStamp

PRODUCERS_MAX: Final = 4096
"""Producers remembered per partition; the least recently active go first."""
PRODUCERS_PER_OWNER_MAX: Final = 256
"""Producers one owner (client connection) may have in one partition's table."""
BATCHES_MAX: Final = PRODUCER_WINDOW
"""Appended batches remembered per producer, for exact duplicate answers: as
many as a client may have outstanding on a partition (`PRODUCER_WINDOW`,
counted from its oldest unanswered batch). A resend is of an unanswered
batch, and at most `PRODUCER_WINDOW - 1` batches were sent after it, so it is
always among the remembered ones. Remembering fewer would answer a client's
own resend with DUPLICATE_SEQUENCE (seen under load with 16 batches in
flight); remembering more costs memory per producer and protects nobody."""
SCAN_BYTES_MAX: Final = 64 << 20
"""Record bytes read from the tail of a log to rebuild its table after a restart."""


@dataclass(frozen=True, slots=True)
class AppendedBatch:
    """A batch a producer appended: its sequences and where they went."""

    first_sequence: int
    count: int
    first_index: int
    timestamp_ms: int

    @property
    def end_sequence(self) -> int:
        """The sequence after its last record (exclusive)."""
        return self.first_sequence + self.count


class Verdict(enum.Enum):
    """What the partition does with an idempotent batch (module docstring, rules 3-5)."""

    APPEND = "append"
    DUPLICATE = "duplicate"
    DUPLICATE_INDEX_UNKNOWN = "duplicate, index unknown"
    OUT_OF_ORDER = "out of order"


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict with what the answer needs: the original index and time of a
    DUPLICATE, and words for the refusals."""

    verdict: Verdict
    expected_sequence: int | None
    """The producer's next sequence before this batch; None for an unknown producer."""
    first_index: int | None = None
    timestamp_ms: int | None = None
    reason: str = ""


Owner = int | None
"""Who introduced a producer: a client connection's id; None when unknown
(rebuilt from the log)."""


class _Producer:
    """What the table holds for one producer."""

    __slots__ = ("batches", "next_sequence", "owner")

    def __init__(self, next_sequence: int, batches_max: int, owner: Owner = None) -> None:
        self.next_sequence = next_sequence
        self.owner = owner
        self.batches: deque[AppendedBatch] = deque(maxlen=batches_max)


class ProducerTable:
    """The producers of one partition and the batches they appended (see the
    module docstring). Not thread-safe; one table per open partition log."""

    def __init__(
        self,
        producers_max: int = PRODUCERS_MAX,
        batches_max: int = BATCHES_MAX,
        per_owner_max: int = PRODUCERS_PER_OWNER_MAX,
    ) -> None:
        if producers_max < 1 or batches_max < 1 or per_owner_max < 1:
            raise ValueError("producers_max, batches_max and per_owner_max must be >= 1")
        self.producers_max = producers_max
        self.batches_max = batches_max
        self.per_owner_max = per_owner_max
        # Least recently active first, in all and per owner: eviction pops from the front.
        self._producers: OrderedDict[int, _Producer] = OrderedDict()
        self._owned: dict[Owner, OrderedDict[int, None]] = {}
        self.evicted = 0
        """Producers forgotten to stay within `producers_max` (a statistic)."""

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._producers

    def next_sequence(self, producer_id: int) -> int | None:
        """The sequence the producer's next batch must start at; None if unknown."""
        state = self._producers.get(producer_id)
        return None if state is None else state.next_sequence

    def batches(self, producer_id: int) -> list[AppendedBatch]:
        """The producer's remembered batches, oldest first."""
        state = self._producers.get(producer_id)
        return [] if state is None else list(state.batches)

    def decide(self, producer_id: int, first_sequence: int, count: int) -> Decision:
        """What to do with a batch of `count` records starting at `first_sequence`."""
        if count < 1 or first_sequence < 0:
            raise ValueError(
                f"a batch needs count >= 1 and sequence >= 0, got {count}, {first_sequence}"
            )
        state = self._producers.get(producer_id)
        if state is None:
            if first_sequence == 0:
                return Decision(Verdict.APPEND, None)
            return Decision(
                Verdict.OUT_OF_ORDER,
                None,
                reason=f"producer {producer_id:#018x} is not known to this partition (new, or "
                f"forgotten), so its first batch must start at sequence 0, not {first_sequence}; "
                "an earlier batch may still be on its way, or start over under a new producer id",
            )
        self._touch(producer_id, state)
        expected = state.next_sequence
        if first_sequence == expected:
            return Decision(Verdict.APPEND, expected)
        end = first_sequence + count
        who = f"producer {producer_id:#018x}"
        if first_sequence > expected:
            return Decision(
                Verdict.OUT_OF_ORDER,
                expected,
                reason=f"{who} must continue at sequence {expected}, but the batch starts at "
                f"{first_sequence}: sequences {expected}..{first_sequence - 1} were never "
                "appended (send them first)",
            )
        if end > expected:
            return Decision(
                Verdict.OUT_OF_ORDER,
                expected,
                reason=f"the batch of sequences {first_sequence}..{end - 1} overlaps what {who} "
                f"appended already (up to {expected - 1}); resend it as it was first sent",
            )
        for batch in reversed(state.batches):
            if batch.first_sequence <= first_sequence and end <= batch.end_sequence:
                offset = first_sequence - batch.first_sequence
                return Decision(
                    Verdict.DUPLICATE, expected, batch.first_index + offset, batch.timestamp_ms
                )
        return Decision(
            Verdict.DUPLICATE_INDEX_UNKNOWN,
            expected,
            reason=f"sequences {first_sequence}..{end - 1} of {who} were appended before "
            "(nothing was appended now); their index is no longer remembered",
        )

    def appended(self, producer_id: int, batch: AppendedBatch, owner: Owner = None) -> None:
        """Record a batch `decide` said to APPEND, once it is durable; `owner`
        (the connection that sent it) owns a producer it introduces, or one
        rebuilt from the log."""
        state = self._producers.get(producer_id)
        if state is None:
            state = self._admit(producer_id, batch.first_sequence, owner)
        elif batch.first_sequence != state.next_sequence:
            raise ValueError(
                f"batch at sequence {batch.first_sequence} recorded for producer "
                f"{producer_id:#x}, which expects {state.next_sequence}: decide() first"
            )
        if state.owner is None and owner is not None:
            self._disown(producer_id, state)
            state.owner = owner
            self._owned.setdefault(owner, OrderedDict())[producer_id] = None
        state.batches.append(batch)
        state.next_sequence = batch.end_sequence
        self._touch(producer_id, state)

    def _touch(self, producer_id: int, state: _Producer) -> None:
        self._producers.move_to_end(producer_id)
        self._owned[state.owner].move_to_end(producer_id)

    def _admit(self, producer_id: int, next_sequence: int, owner: Owner) -> _Producer:
        mine = self._owned.get(owner)
        if owner is not None and mine is not None and len(mine) >= self.per_owner_max:
            self._evict(next(iter(mine)))
        while len(self._producers) >= self.producers_max:
            heaviest = max(self._owned.values(), key=len)
            self._evict(next(iter(heaviest)))
        state = _Producer(next_sequence, self.batches_max, owner)
        self._producers[producer_id] = state
        self._owned.setdefault(owner, OrderedDict())[producer_id] = None
        return state

    def _evict(self, producer_id: int) -> None:
        self._disown(producer_id, self._producers.pop(producer_id))
        self.evicted += 1

    def _disown(self, producer_id: int, state: _Producer) -> None:
        mine = self._owned[state.owner]
        del mine[producer_id]
        if not mine:
            del self._owned[state.owner]

    @classmethod
    def restored(
        cls,
        newest_first: Iterable[tuple[ProducerStamp, int, int]],
        producers_max: int = PRODUCERS_MAX,
        batches_max: int = BATCHES_MAX,
        per_owner_max: int = PRODUCERS_PER_OWNER_MAX,
    ) -> ProducerTable:
        """A table rebuilt from the stamps found in a log, newest first, each with
        the index and time of the record that carried it.

        A producer's newest stamp sets its expected sequence; older stamps of it
        fill its remembered batches while they precede what is already known.
        The `producers_max` most recently active producers are kept."""
        found: dict[int, list[AppendedBatch]] = {}  # insertion order: most recent first
        for stamp, index, timestamp_ms in newest_first:
            if stamp.record_count < 1:
                continue
            batch = AppendedBatch(stamp.first_sequence, stamp.record_count, index, timestamp_ms)
            known = found.get(stamp.producer_id)
            if known is None:
                if len(found) < producers_max:
                    found[stamp.producer_id] = [batch]
            elif len(known) < batches_max and batch.end_sequence <= known[-1].first_sequence:
                known.append(batch)
        table = cls(producers_max, batches_max, per_owner_max)
        for producer_id, batches in reversed(found.items()):
            state = _Producer(batches[0].end_sequence, batches_max)
            state.batches.extend(reversed(batches))
            table._producers[producer_id] = state
            table._owned.setdefault(None, OrderedDict())[producer_id] = None
        return table
