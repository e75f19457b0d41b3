"""The Kafka protocol as a second front door (issue 27), sans I/O.

The codec (`codec`, generated `messages` from Kafka's published JSON message
definitions), the record batch conversions (`batches`) and the request logic
live here without sockets; the shard's Kafka listener is a thin shell around
them. See docs/architecture.md, "The Kafka door".
"""
