"""Replication on a node: Raft groups of partitions on a shard, and their transport."""
