"""A deterministic simulator for laminar.raft in the style of TigerBeetle's VOPR.

One seed picks the cluster, the faults and the workload; the same seed always
replays the same run. `simulation.run_seed(seed)` returns the violations the
checkers found (one module per checker in `checkers/`); a failing test prints
`reproduce with seed=...`. Fakes: `network` (drop, duplicate, delay, reorder,
partitions, one-way links), `node` (a core over storage that survives crashes;
unpersisted Ready content is lost), `params` (the fault plan a seed draws).
"""
