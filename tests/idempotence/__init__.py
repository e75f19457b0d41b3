"""Tests of idempotent produce: the pure producer table, the wire stamp, a real node."""
