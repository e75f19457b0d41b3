"""What every test folder shares: one way to wait (`waits`) and one way to pick
a node port that nobody else takes meanwhile (`ports`)."""

from tests.support.ports import free_port, port_in_use, retry_on_port_in_use
from tests.support.waits import wait_until, wait_until_async

__all__ = ["free_port", "port_in_use", "retry_on_port_in_use", "wait_until", "wait_until_async"]
