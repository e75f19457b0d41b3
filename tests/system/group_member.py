"""A consumer group member as its own process, for tests that kill, stop and
resume members: `python -m tests.system.group_member BOOTSTRAP GROUP TOPIC LOG`.

It polls and commits after each batch until SIGTERM (then it leaves the
group), appending to LOG one line per event, flushed at once:
`GOT partition index value` for each record it processed, `COMMITTED
partition index` per partition after a commit the coordinator acknowledged,
`REFUSED partition code` for each refused one, and `HOLDS n` when what it
holds changes. A SIGKILLed member's log ends where it died.

While the file LOG.hold exists, the member stops between processing a batch
and committing it (logging `HOLDING` once): a test stops the process there
(SIGSTOP) to resume it past its session with a commit still to make.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from laminar.client import Client, CommitFailedError

SESSION_S = 3.0


def main(bootstrap: str, group: str, topic: str, log_path: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    hold = log_path + ".hold"
    with (
        open(log_path, "a", buffering=1) as log,
        Client(bootstrap) as client,
        client.consumer(group, [topic], session_timeout_s=SESSION_S) as consumer,
    ):
        held = -1
        while not stop.is_set():
            batch = consumer.poll(timeout_s=0.2)
            for r in batch:
                log.write(f"GOT {r.partition} {r.index} {r.value.decode()}\n")
            if batch and os.path.exists(hold):
                log.write("HOLDING\n")
                while os.path.exists(hold) and not stop.is_set():
                    time.sleep(0.01)  # the test SIGSTOPs this process here
            try:
                consumer.commit({(r.topic, r.partition): r.index + 1 for r in batch})
                for r in {r.partition: r for r in batch}.values():
                    log.write(f"COMMITTED {r.partition} {r.index + 1}\n")
            except CommitFailedError as exc:
                for (_, partition), code in sorted(exc.refused.items()):
                    log.write(f"REFUSED {partition} {code.name}\n")
            if len(consumer.assignment()) != held:
                held = len(consumer.assignment())
                log.write(f"HOLDS {held}\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
