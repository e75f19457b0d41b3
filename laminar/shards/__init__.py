"""The node: a supervisor and one pinned shard process per core.

`laminar-node --cores N` runs `supervisor.Supervisor`, which binds the node's
sockets, starts N `shard_main` processes and keeps them running. Each shard
(`shard.Shard`) owns the partitions placement gives it and serves them on its
own port and on the shared node port. Modules, each with one job:

- `config`: `NodeConfig`, the settings every process shares;
- `listeners`: binding the node's sockets (supervisor side);
- `steering`: the node port's UDP steering through `laminar.xdp` (ebpf, cbpf
  or userspace) and `xdp_attach`: the XDP classifier on the node's interface;
- `supervisor`, `control`, `admin`, `prometheus`: the supervisor, its control
  channel to each shard, the admin HTTP endpoint and its metrics text;
- `shard_main`, `shard`: a shard process and its lifecycle (start, drain);
- `connection`, `datagram`: serving TCP connections (their answers leave through
  `laminar.outbox`, coalesced per loop iteration) and UDP datagrams;
- `fastpath`: produces answered straight from the read loop, without a task;
- `router` (pure), `dispatch`, `handlers`, `errors`: where a request is served,
  forwarding, the per-op handlers, and failures as wire errors;
- `channels`: pipelined inter-shard connections (forwarding, metadata tail);
- `metadata` (pure), `metalog`: cluster metadata as a log, compacted by
  snapshots; `topic_config` (pure): the topic config keys and their meaning;
- `partitions`: the shard's partition logs; `retention`: topic retention on a timer;
- `budget`: the bytes of client input a shard holds, against one bound;
- `metrics`: counters, latency summaries, fsync timing.
"""
