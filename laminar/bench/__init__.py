"""laminar-bench: latency and throughput of laminar next to its peers.

The harness exists so that people can choose a queue by its numbers under
their own load, next to what they would use instead. It is built around a few
rules that make those numbers mean something:

- Same work for everyone: one `RunConfig` (record size, batch, partitions,
  producers, consumers, load model) runs unchanged against every target, from
  Python clients on the same event loop, with the same warm-up, each against a
  server started fresh on an empty directory.
- Durability is stated, not assumed: every target says what its
  acknowledgement means (after fsync, or not, and how that was established);
  a peer that cannot acknowledge after fsync is run in its honest settings and
  labelled as such.
- Latency without coordinated omission: in the open-loop model each request
  has an intended send time and its latency counts from then, so a stall is
  charged to every request it delayed (`loadmodels`, `pacing`).
- Exact percentiles: each load-generator process keeps an HDR histogram; the
  coordinator merges the counts (`histogram`), it never averages percentiles.
- Noise is handled by design, not by luck: `--compare` interleaves the
  targets round by round and reports medians and ratios (`compare`); every
  run, failed ones included, is in the JSON and the reports.

Map: `config` (a run's settings), `loadmodels` and `pacing` (closed and open
loop), `records` (payloads), `producer`/`consumer` (the generators),
`worker` (one generator process), `tally` (what a worker counted), `runner`
(one run: server, streams, workers), `results`, `compare`, `report`,
`plots`, `output` (JSON), `machine` (facts about the box), `progress` (live
display), `results_md` (the RESULTS.md section), `cli`; `targets/` (the
client side of each system) and `servers/` (the servers the harness starts).
"""
