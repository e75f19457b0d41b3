"""Consumer groups: members that share topics' partitions and remember where
they are. This package holds the I/O-free cores and the shard's shell; the
clients drive the member core themselves.

- `coordinator.GroupCoordinator`: membership, server-side incremental
  assignment (KIP-848's consumer protocol, simplified), fencing and committed
  positions for the groups of one `__consumer_offsets` partition
  (`positions.coordinator_partition(group, count)`); its leader replica
  coordinates.
  Persist before answer: each call returns its answer and the records to
  append; the answer goes out once its `wait_for` record is committed.
- `member.MemberCore`: a member as a client holds it (heartbeats, the lease,
  the poll deadline, what to deliver and commit).
- `assignors`: range and uniform-sticky, pure functions.
- `records`: the positions log's keyed upserts and tombstones and their codec.
- `messages`, `errors`: what the cores exchange and refuse.
- `positions`: the positions topic (its name, config, which partition holds a
  group); `service`: the group ops a shard serves.

Classic Kafka groups (issue 27) fit beside the consumer groups: a
`ClassicGroup` keeps its own members (JoinGroup/SyncGroup barrier: the
generation is its epoch, the leader member's assignment is stored as each
member's `assigned` at SyncGroup) in member records of a second kind keyed
like these, and shares the rest: `GroupRecord` (a type field added, with the
protocol name as its assignor), `PositionRecord`s, `_put_position`, the
monotonic and end checks of `commit`, `positions`, `reset_positions` and
`delete_group`. Fencing stays one rule, written per group type: a commit is
applied only from a known member at its current epoch (generation) for a
partition it holds (for classic groups: any partition of the generation, as
Kafka does). A group id names one group of one type; a request of the other
protocol is refused with a specific error, as Kafka's GROUP_ID_NOT_FOUND /
INCONSISTENT_GROUP_PROTOCOL do.
"""
