"""laminar: a partitioned, replicated, immutable-log message queue for bare Linux hosts."""

__version__ = "0.1.0"
