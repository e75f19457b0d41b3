"""Client security's I/O-free core: who a client is, and what it may do.

- `scram`: SCRAM-SHA-256/512 credentials (salted keys, never a password), the
  server's exchange that both doors (laminar's protocol, Kafka's
  SaslAuthenticate) drive with the client's bytes, and laminar's client side.
- `credentials`: the users and their credentials, a state machine applied
  from metadata log entries.
- `acls`: Kafka's ACL model and the cached `authorize` decision, applied from
  the same log.
- `principal`: what a principal is, and the rules that name a TLS client,
  and a node, by its certificate.
- `login`: one client connection's login (SCRAM or a verified client
  certificate), which the connections of both doors drive.
- `frames`: AUTHENTICATE, USERS and ACLS on laminar's wire.
- `errors`: why an authentication failed, why a change was refused;
  `entries`: the msgpack form of the metadata entries.

Nothing here opens a socket, reads a clock or a file: the node and the
clients wire these into their connections (`laminar.shards.connection`,
`laminar.client.login`).
"""
