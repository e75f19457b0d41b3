"""A seeded simulation of consumer groups in the style of TigerBeetle's VOPR.

One seed picks the members, the faults and the timings; the same seed always
replays the same run (`python -m tests.groups.sim.simulation --seed N`). Fakes,
one module each: `network` (delays, drops, reordering), `coordinator_node`
(the coordinator core behind a positions log whose appends commit late or
are lost at a failover), `member_process` (a member core with an app that
consumes and commits, which can crash, pause past its session, stall past
its poll deadline, leave, change its subscription). `checkers` holds the
properties, `simulation` the driver.
"""
