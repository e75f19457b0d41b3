"""The node process: a supervisor and one pinned shard process per core.

`laminar-node --cores N` runs `supervisor.Supervisor`, which binds the node's
sockets, starts N `laminar.shards.shard_main` processes and keeps them
running. Modules, each with one job:

- `supervisor`: start-up checks, the shard processes, their control channel
  (`laminar.shards.control`), drain and restart;
- `listeners`: binding the node's sockets (each shard gets its
  `laminar.channels.sockets.ShardSockets`);
- `steering`: the node port's UDP steering through `laminar.xdp` (ebpf, cbpf
  or userspace), and `xdp_attach`: the XDP classifier on the node's interface;
- `gossip`: the node's SWIM agent and the views it hands the shards;
- `admin`, `prometheus`: the admin HTTP endpoint and its metrics text.
"""
