"""The distributed layer's shell: everything between the pure cores
(`laminar.raft`, `laminar.swim`) and the shards.

- `auth`: peers prove who they are (per-node keys, no I/O); `members`: who is
  in the cluster and the view placement reads; `downtime`: since when a member
  is down;
- `controller` (pure): the next safe placement step of each partition;
  `placer`, `moves`: its shell on a shard;
- `raft_storage`: a Raft replica's log and hard state on the segmented log;
  `group`, `opening`, `host`: one Raft group, its settings, every group of a
  shard; `repair`: rebuilding a replica that lost its Raft state;
- `replica`: `PartitionReplica`, the one face a handler sees of a partition,
  local or replicated;
- `transport`, `codec`, `calls`, `refusals`: Raft traffic and requests
  between nodes, and what was refused from peers.
"""
