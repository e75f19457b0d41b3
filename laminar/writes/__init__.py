"""Atomic writes: staging, one commit decision, publish. Exactly once, never partial.

Why. A Spark write (or any distributed job) runs tasks that may fail, run
again, or run twice at once (speculation), and a retried task may see its rows
in another order. Appending as tasks go cannot be made exactly-once by
sequence numbers alone (a retry whose sequences name other rows would have
them dropped as "duplicates"). So tasks do not append: each task *attempt*
stages its rows, and the job's committer, which alone knows which attempts
won, commits exactly those in one decision.

Design (chosen over Kafka-style transactions with markers in the partitions
and read_committed readers): staged data lives in its own files, never in a
partition log, so readers and the fetch path are unchanged (no last stable
offset, no aborted-record filtering), and publishing is one durable append
per partition, which maps onto one Raft proposal when partitions are
replicated.

The protocol (messages: `laminar.wire.writes`):

1. stage: a task attempt, keyed by (write id, task, attempt id), sends its
   batches to each target partition's owner, numbered per partition; each is
   fsync'd before it is acknowledged and is invisible to every reader.
2. commit: the committer sends the winning attempts with what each staged
   where (batch and record counts) under one commit id to that id's
   coordinator. The coordinator has every partition check and durably claim
   its parts, then appends one decision entry to its log (fsync): from then on
   the commit happens, whatever crashes.
3. publish: each partition appends its parts' records (in the order named) in
   one append (chunks of at most --publish-chunk-bytes for large shares), each
   chunk stamped with the commit id, so a publish sent again, or rolled
   forward after a crash, appends nothing twice. Then "done" is recorded and
   the staged files are deleted.
4. abort and expiry: an abort decides "aborted" for good; staged data nobody
   commits expires after --staging-timeout idle seconds (claimed data only
   once its coordinator says the commit is not pending).

On a cluster staged data stays on the node that led the partition when the
attempt began (the part names it), the coordinator reaches it over an
authenticated peer session, the decision is a Raft commit of the decisions
group, and a staging node that no longer leads publishes through the leader
(docs/architecture.md, "Atomic writes", says why).

Modules: `frames` (file layout), `area` (participant rules) and `decisions`
(coordinator rules) are the sans-IO cores; `files`, `participant`,
`coordinator`, `decision_logs` (where decisions are kept), `routes` (where
internal requests go) and `service` are the I/O shells.
"""
