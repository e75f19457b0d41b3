"""A shard's staging area: what is staged on its partitions, and the rules. No I/O.

The shell (`laminar.writes.participant`) asks this core before every
step and tells it after every durable one; the core never runs ahead of the
disk. Time arrives as an argument (`now`, seconds on any monotonic clock).

Per partition the area holds *attempts* (a task attempt's staged batches,
numbered 0, 1, 2, ...) and *commit records* (what a commit id claimed here,
whether its publish started, where it landed).

Rules:

1. A batch is staged only if it continues its attempt's sequence; a batch
   sent again (a sequence already staged, same record count) is a duplicate
   and is answered without staging it again; a gap or a changed count is
   refused. One batch per attempt is in flight at a time (the shell holds a
   lock per attempt).
2. Staged bytes are bounded per shard (`bytes_max`): a batch that does not fit
   is refused with a clear error; bytes are reserved before the write, so
   concurrent batches cannot overshoot.
3. A commit may claim parts only if each is staged in full (its batch count and
   record count match). The claim is durable before the coordinator hears yes.
4. An attempt nobody claims expires after it was idle for its timeout: it is
   dropped. Idle means no batch of its *write* reached this shard for that
   long (a job whose tasks still stage here keeps its finished tasks' rows).
   A claimed attempt and a commit record are dropped only after the
   coordinator says the commit is not pending (unknown, aborted or done), and
   only if no new claim arrived while it was asked (a commit sent again may be
   checking the same parts right then). Why an attempt went (expired,
   published, dropped by a commit or an abort) is remembered for the last
   `GONE_REMEMBERED` ones, so a commit that names it later is told the cause.
5. Attempts are owned (`laminar.security.ownership`): the principal that
   staged an attempt's first batch is its owner; a batch from another is
   refused, a commit claims an attempt only on its owner's behalf, and a drop
   on an owner's behalf drops only that owner's attempts.
6. A publish is planned once: its batches, in the order the commit names them,
   cut into chunks of at most `chunk_bytes` (one log append each). The plan is
   recorded durably (INTENT) before the first append, so after a crash the same
   chunks are looked for in the log and only the missing ones appended.
"""

from __future__ import annotations

import enum
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from laminar.wire.writes import Published, StagedPart, WriteState
from laminar.writes.frames import AttemptKey, Intent

GONE_REMEMBERED: Final = 4096
"""Dropped attempts whose reason the area remembers (for error messages)."""


class StagedBatch(NamedTuple):
    """One staged batch: its sequence, records, and where its frame is in the file."""

    sequence: int
    records: int
    offset: int
    length: int


@dataclass(slots=True)
class Attempt:
    """A task attempt's staged batches on one partition."""

    partition_id: int
    key: AttemptKey
    timeout_s: float
    idle_since: float
    batches: list[StagedBatch] = field(default_factory=list)
    bytes: int = 0
    """File bytes, counted against the shard's bound."""
    records: int = 0
    claimed_by: int | None = None
    """The commit id whose latest claim names this attempt."""
    publishing: bool = False
    principal: str | None = None
    """Its owner: who staged its first batch (None on a node without logins).
    Only the owner stages more into it, and only the owner's commit claims it."""


@dataclass(slots=True)
class CommitRecord:
    """What one commit id did on one partition."""

    partition_id: int
    commit_id: int
    idle_since: float
    claim: tuple[StagedPart, ...] = ()
    generation: int = 0
    """Bumped by every claim: an expiry asked before it must not drop."""
    intent: Intent | None = None
    published: Published | None = None
    asking: bool = False


class Verdict(enum.Enum):
    STAGE = "stage"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out of order"
    FULL = "full"
    NOT_OWNER = "not the owner"


class StageDecision(NamedTuple):
    verdict: Verdict
    new_file: bool = False
    reason: str = ""


class Ask(NamedTuple):
    """Expiry: ask the coordinator of `commit_id` whether it is still pending."""

    partition_id: int
    commit_id: int
    generation: int


class Drop(NamedTuple):
    """Expiry: drop an attempt nobody claimed (its file and its bytes)."""

    partition_id: int
    key: AttemptKey


class Chunk(NamedTuple):
    """One log append of a publish: batches of the claimed attempts, in order."""

    batches: tuple[tuple[AttemptKey, StagedBatch], ...]
    bytes: int
    records: int


class PublishPlan(NamedTuple):
    intent: Intent
    chunks: tuple[Chunk, ...]
    fresh: bool
    """True if no INTENT is recorded yet (nothing can be in the log)."""


class NotOwner(Exception):
    """A commit names attempts another principal staged."""


class MissingStagedData(Exception):
    """A commit names staged data this partition does not hold in full."""


class StagingArea:
    """Every attempt and commit record on one shard's partitions (module docstring)."""

    def __init__(self, bytes_max: int, default_timeout_s: float) -> None:
        if bytes_max < 1 or default_timeout_s <= 0:
            raise ValueError("bytes_max and default_timeout_s must be positive")
        self.bytes_max = bytes_max
        self.default_timeout_s = default_timeout_s
        self.bytes = 0
        """Staged bytes, including reservations of batches being written."""
        self._attempts: dict[tuple[int, AttemptKey], Attempt] = {}
        self._commits: dict[tuple[int, int], CommitRecord] = {}
        self._write_active: dict[int, float] = {}
        """When a batch of each write id last arrived."""
        self._write_attempts: Counter[int] = Counter()
        self._gone: OrderedDict[tuple[int, AttemptKey], str] = OrderedDict()
        """Why recently dropped attempts went, newest last."""

    # -- views ---------------------------------------------------------------------

    def attempt(self, pid: int, key: AttemptKey) -> Attempt | None:
        return self._attempts.get((pid, key))

    def commit_record(self, pid: int, commit_id: int) -> CommitRecord | None:
        return self._commits.get((pid, commit_id))

    @property
    def attempt_count(self) -> int:
        return len(self._attempts)

    @property
    def commit_count(self) -> int:
        return len(self._commits)

    def partitions(self) -> set[int]:
        """Partitions with anything staged or recorded."""
        return {p for p, _ in self._attempts} | {p for p, _ in self._commits}

    def attempts_of(self, pid: int) -> list[Attempt]:
        return [a for (p, _), a in self._attempts.items() if p == pid]

    def commits_of(self, pid: int) -> list[CommitRecord]:
        return [c for (p, _), c in self._commits.items() if p == pid]

    def timeout_for(self, timeout_ms: int) -> float:
        """An attempt's idle timeout: its own, or the node's default for 0."""
        return timeout_ms / 1000 if timeout_ms else self.default_timeout_s

    # -- staging (rules 1, 2) ----------------------------------------------------------

    def decide_stage(
        self,
        pid: int,
        key: AttemptKey,
        sequence: int,
        records: int,
        frame_bytes: int,
        principal: str | None = None,
    ) -> StageDecision:
        """What to do with a batch `principal` sends; a STAGE verdict reserves
        `frame_bytes`."""
        attempt = self._attempts.get((pid, key))
        if attempt is not None and attempt.principal != principal:
            return StageDecision(
                Verdict.NOT_OWNER,
                reason=f"task {key.task} attempt {key.attempt:#x} of write {key.write_id:#x} "
                "was staged by another principal",
            )
        expected = 0 if attempt is None else len(attempt.batches)
        if sequence < expected:
            assert attempt is not None
            staged = attempt.batches[sequence]
            if staged.records != records:
                return StageDecision(
                    Verdict.OUT_OF_ORDER,
                    reason=f"batch {sequence} of this attempt was staged with {staged.records} "
                    f"records, and is now sent with {records}",
                )
            return StageDecision(Verdict.DUPLICATE)
        if attempt is not None and attempt.publishing:
            return StageDecision(
                Verdict.OUT_OF_ORDER, reason="the attempt is being published; it takes no more"
            )
        if sequence > expected:
            return StageDecision(
                Verdict.OUT_OF_ORDER,
                reason=f"this attempt must continue at batch {expected}, not {sequence}",
            )
        if self.bytes + frame_bytes > self.bytes_max:
            return StageDecision(
                Verdict.FULL,
                reason=f"the shard's staging area holds {self.bytes} of {self.bytes_max} bytes; "
                f"a batch of {frame_bytes} bytes does not fit (staged writes free it when they "
                "commit, abort or expire; the node's --staging-bytes-max sets the bound)",
            )
        self.bytes += frame_bytes
        return StageDecision(Verdict.STAGE, new_file=attempt is None)

    def staged(
        self,
        pid: int,
        key: AttemptKey,
        batch: StagedBatch,
        reserved: int,
        timeout_ms: int,
        now: float,
        principal: str | None = None,
    ) -> Attempt:
        """Record a batch now durable (its frame `reserved` bytes, header included
        for a new file; `principal` owns a new attempt)."""
        attempt = self._attempts.get((pid, key))
        if attempt is None:
            attempt = Attempt(pid, key, self.timeout_for(timeout_ms), now, principal=principal)
            self._attempts[(pid, key)] = attempt
            self._write_attempts[key.write_id] += 1
        if batch.sequence != len(attempt.batches):
            raise ValueError(f"batch {batch.sequence} recorded out of order: decide first")
        attempt.batches.append(batch)
        attempt.bytes += reserved
        attempt.records += batch.records
        attempt.idle_since = now
        self._write_active[key.write_id] = now
        return attempt

    def stage_failed(self, reserved: int) -> None:
        """A batch whose write failed: give its reservation back."""
        self.bytes -= reserved

    # -- claims (rule 3) -----------------------------------------------------------------

    def check_owner(self, pid: int, parts: Sequence[StagedPart], principal: str | None) -> None:
        """Raise `NotOwner` if any of `parts` staged on `pid` is not `principal`'s
        (rule 5; a commit claims them on its owner's behalf)."""
        for part in parts:
            attempt = self._attempts.get((pid, AttemptKey.of(part)))
            if attempt is not None and attempt.principal != principal:
                raise NotOwner(
                    f"task {part.task} attempt {part.attempt:#x} of write {part.write_id:#x} "
                    "was staged by another principal"
                )

    def check(self, pid: int, parts: Sequence[StagedPart]) -> int:
        """The records of `parts` if each is staged in full on `pid`; else raise
        `MissingStagedData` naming what is missing and why, when known."""
        problems = []
        records = 0
        for part in parts:
            key = AttemptKey.of(part)
            attempt = self._attempts.get((pid, key))
            who = f"task {part.task} attempt {part.attempt:#x} of write {part.write_id:#x}"
            if attempt is None:
                why = self._gone.get((pid, key)) or (
                    "nothing staged here: never staged on this node, or dropped before it restarted"
                )
                problems.append(f"{who}: {why}")
            elif len(attempt.batches) != part.batches or attempt.records != part.records:
                problems.append(
                    f"{who}: {len(attempt.batches)} batches of {attempt.records} records "
                    f"staged, the commit names {part.batches} of {part.records}"
                )
            else:
                records += attempt.records
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise MissingStagedData("; ".join(problems[:5]) + more)
        return records

    def claimed(
        self, pid: int, commit_id: int, parts: Sequence[StagedPart], now: float
    ) -> CommitRecord:
        """Record a claim now durable; attempts the previous claim named and this
        one does not are free again (and get a whole timeout)."""
        record = self._record(pid, commit_id, now)
        new = {AttemptKey.of(p) for p in parts}
        for part in record.claim:
            key = AttemptKey.of(part)
            attempt = self._attempts.get((pid, key))
            if key not in new and attempt is not None and attempt.claimed_by == commit_id:
                attempt.claimed_by = None
                attempt.idle_since = now
        for key in new:
            attempt = self._attempts.get((pid, key))
            if attempt is not None:
                attempt.claimed_by = commit_id
                attempt.idle_since = now
        record.claim = tuple(parts)
        record.generation += 1
        record.idle_since = now
        return record

    def _record(self, pid: int, commit_id: int, now: float) -> CommitRecord:
        record = self._commits.get((pid, commit_id))
        if record is None:
            record = CommitRecord(pid, commit_id, now)
            self._commits[(pid, commit_id)] = record
        return record

    # -- publishing (rule 6) ---------------------------------------------------------------

    def plan_publish(
        self, pid: int, commit_id: int, parts: Sequence[StagedPart], chunk_bytes: int
    ) -> PublishPlan:
        """The chunks that publish `parts` (the recorded plan after a crash).
        `MissingStagedData` if any part is not staged in full."""
        self.check(pid, parts)
        record = self._commits.get((pid, commit_id))
        batches = [
            (AttemptKey.of(part), batch)
            for part in parts
            for batch in self._attempts[(pid, AttemptKey.of(part))].batches
        ]
        if record is not None and record.intent is not None:
            return PublishPlan(record.intent, _cut(batches, record.intent.chunk_batches), False)
        sizes: list[int] = []
        size = 0
        count = 0
        for _, batch in batches:
            if count and size + batch.length > chunk_bytes:
                sizes.append(count)
                size = count = 0
            size += batch.length
            count += 1
        if count:
            sizes.append(count)
        return PublishPlan(Intent(0, tuple(sizes)), _cut(batches, tuple(sizes)), True)

    def publishing(self, pid: int, parts: Sequence[StagedPart], busy: bool) -> None:
        """Mark the parts' attempts as being published (they take no more batches)."""
        for part in parts:
            attempt = self._attempts.get((pid, AttemptKey.of(part)))
            if attempt is not None:
                attempt.publishing = busy

    def intent_recorded(self, pid: int, commit_id: int, intent: Intent, now: float) -> None:
        self._record(pid, commit_id, now).intent = intent

    def published(self, pid: int, commit_id: int, where: Published, now: float) -> None:
        record = self._record(pid, commit_id, now)
        record.published = where
        record.idle_since = now

    # -- expiry (rule 4) ------------------------------------------------------------------

    def due(self, now: float) -> tuple[list[Drop], list[Ask]]:
        """What expiry must do now: attempts to drop, commits to ask about."""
        drops = [
            Drop(a.partition_id, a.key)
            for a in self._attempts.values()
            if a.claimed_by is None and not a.publishing and self.idle_for(a, now) >= a.timeout_s
        ]
        asks = []
        for record in self._commits.values():
            if record.asking or now - record.idle_since < self._record_timeout(record):
                continue
            record.asking = True
            asks.append(Ask(record.partition_id, record.commit_id, record.generation))
        return drops, asks

    def expired_because(self, attempt: Attempt, now: float) -> str:
        """What a commit naming an attempt that expired is told."""
        return (
            f"expired: no batch of its write reached this node for "
            f"{_seconds(self.idle_for(attempt, now))}, past its staging timeout of "
            f"{_seconds(attempt.timeout_s)} (raise the node's --staging-timeout, or the write's "
            "timeout_s / the Spark option stagingTimeoutMs, if jobs take longer between "
            "staging and commit)"
        )

    def idle_for(self, attempt: Attempt, now: float) -> float:
        """Seconds since the attempt, or any attempt of its write, staged here."""
        active = max(attempt.idle_since, self._write_active.get(attempt.key.write_id, 0.0))
        return now - active

    def _record_timeout(self, record: CommitRecord) -> float:
        timeouts = [
            a.timeout_s
            for part in record.claim
            if (a := self._attempts.get((record.partition_id, AttemptKey.of(part)))) is not None
        ]
        return min(timeouts, default=self.default_timeout_s)

    def answered(self, ask: Ask, state: str | None, now: float) -> list[AttemptKey] | None:
        """The coordinator's answer to `ask` (None: it could not be asked). Returns
        the attempts to drop with the commit record, or None to keep them."""
        record = self._commits.get((ask.partition_id, ask.commit_id))
        if record is None:
            return None
        record.asking = False
        pending = state is None or state == WriteState.COMMITTED
        if pending or record.generation != ask.generation:
            record.idle_since = now
            return None
        return [
            AttemptKey.of(p)
            for p in record.claim
            if (a := self._attempts.get((ask.partition_id, AttemptKey.of(p)))) is not None
            and a.claimed_by == ask.commit_id
        ]

    # -- dropping ---------------------------------------------------------------------------

    def drop_attempt(self, pid: int, key: AttemptKey, why: str) -> Attempt | None:
        """Forget an attempt; `why` it went is what a commit naming it is told."""
        attempt = self._attempts.pop((pid, key), None)
        if attempt is not None:
            self._gone[(pid, key)] = why
            self._gone.move_to_end((pid, key))
            if len(self._gone) > GONE_REMEMBERED:
                self._gone.popitem(last=False)
            self.bytes -= attempt.bytes
            self._write_attempts[key.write_id] -= 1
            if self._write_attempts[key.write_id] <= 0:
                del self._write_attempts[key.write_id]
                self._write_active.pop(key.write_id, None)
        return attempt

    def drop_commit(self, pid: int, commit_id: int) -> CommitRecord | None:
        return self._commits.pop((pid, commit_id), None)

    def keys_of_write(self, pid: int, write_id: int) -> list[AttemptKey]:
        return [k for (p, k) in self._attempts if p == pid and k.write_id == write_id]

    # -- recovery ---------------------------------------------------------------------------

    def restore_attempt(
        self,
        pid: int,
        key: AttemptKey,
        timeout_ms: int,
        batches: Iterable[StagedBatch],
        file_bytes: int,
        now: float,
        principal: str | None = None,
    ) -> Attempt:
        """An attempt found on disk after a restart (its batches in sequence
        order); it gets a whole timeout from `now`."""
        attempt = Attempt(pid, key, self.timeout_for(timeout_ms), now, principal=principal)
        for batch in batches:
            if batch.sequence != len(attempt.batches):
                break  # cannot happen for a file written by this module
            attempt.batches.append(batch)
            attempt.records += batch.records
        attempt.bytes = file_bytes
        self._attempts[(pid, key)] = attempt
        self._write_attempts[key.write_id] += 1
        self.bytes += file_bytes
        return attempt

    def restore_commit(
        self,
        pid: int,
        commit_id: int,
        claim: tuple[StagedPart, ...],
        claims: int,
        intent: Intent | None,
        published: Published | None,
        now: float,
    ) -> CommitRecord:
        record = self._record(pid, commit_id, now)
        record.claim, record.generation = claim, claims
        record.intent, record.published = intent, published
        for part in claim:
            attempt = self._attempts.get((pid, AttemptKey.of(part)))
            if attempt is not None:
                attempt.claimed_by = commit_id
        return record

    def __iter__(self) -> Iterator[Attempt]:
        return iter(list(self._attempts.values()))


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _cut(
    batches: list[tuple[AttemptKey, StagedBatch]], sizes: tuple[int, ...]
) -> tuple[Chunk, ...]:
    if sum(sizes) != len(batches):
        raise MissingStagedData(
            f"the recorded publish plan covers {sum(sizes)} batches, {len(batches)} are staged"
        )
    chunks = []
    pos = 0
    for n in sizes:
        piece = tuple(batches[pos : pos + n])
        pos += n
        chunks.append(
            Chunk(piece, sum(b.length for _, b in piece), sum(b.records for _, b in piece))
        )
    return tuple(chunks)
