"""A shard: one pinned process serving the partitions placement gives it.

`laminar.node` starts one per core (`shard_main`); each (`shard.Shard`) owns
its partitions and serves them on its own port and on the shared node port.
Modules, each with one job:

- `config`: `NodeConfig`, the settings every process shares; `sockets`: the
  sockets the supervisor hands a shard; `control`: the supervisor's channel;
- `shard_main`, `shard`: a shard process and its lifecycle (start, drain);
- `connection`, `datagram`: serving TCP connections (their answers leave through
  `laminar.outbox`, coalesced per loop iteration) and UDP datagrams;
- `fastpath`: produces answered straight from the read loop, without a task;
- `router` (pure), `dispatch`, `handlers`, `errors`: where a request is served,
  forwarding, the per-op handlers, and failures as wire errors;
- `channels`: pipelined inter-shard connections (forwarding, metadata tail);
- `metadata` (pure), `metalog`: cluster metadata as a log, compacted by
  snapshots; `topic_config` (pure): the topic config keys and their meaning;
- `groups`: the shard's Raft groups (`laminar.replication` does the work);
  `replicas`: the one face handlers see of a partition (local or a group);
- `producers`, `idempotence` (pure): idempotent producers' sequences;
- `partitions`: the shard's partition logs; `retention`: topic retention on a timer;
- `budget`: the bytes of client input a shard holds, against one bound;
- `metrics`: counters, latency summaries, fsync timing.

Atomic writes are `laminar.writes`; the node process is `laminar.node`.
"""
