"""Consumer groups: members that share a topic's partitions and remember where
they are. `positions`: where a group's state lives (a partition of the
positions topic) and which coordinator serves it; `service`: the group ops a
shard serves."""
