"""What every test folder shares: one way to wait (`waits`), one way to pick
a node port that nobody else takes meanwhile (`ports`), and the clock tests
move by hand (`clock.FakeClock`)."""

from tests.support.ports import free_port, port_in_use, retry_on_port_in_use
from tests.support.waits import wait_until, wait_until_async

__all__ = ["free_port", "port_in_use", "retry_on_port_in_use", "wait_until", "wait_until_async"]
