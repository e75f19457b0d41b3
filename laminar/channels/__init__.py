"""How the shards of one node reach each other: the sockets a shard is handed
(`sockets`: the layout, and the check that a peer on a channel is a sibling
shard) and the request channels between sibling shards (`siblings`: forwarded
requests and the metadata tail). Below `shards` and `replication`, which both
use them; nothing here knows what the requests mean."""
