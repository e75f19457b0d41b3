#!/usr/bin/env bash
# A/B of the consume path between two checkouts, each with its own .venv: each
# tree's `laminar-node --cores 2 --flush always` (ports 7401 and 7402) read by
# that tree's own client (benchmarks/consume_probe.py: 100,000 x 1 KiB
# records from the start, 500 per fetch, identity-checked), ROUNDS rounds with
# the order rotated, 3 passes a round. Prints per round the shards' CPU
# (utime+stime ticks over the round's passes) and each pass's line, then the
# medians (records/s, server CPU per record, client CPU per fetch).
#
#     A=/path/to/base B=/path/to/branch PREFETCH=0 ROUNDS=5 benchmarks/ab_consume.sh
set -euo pipefail
A=${A:?the base checkout}; B=${B:?the checkout to compare}
PREFETCH=${PREFETCH:-0}; ROUNDS=${ROUNDS:-5}
WORK=$(mktemp -d /tmp/ab-consume.XXXXXX)
OUT=$WORK/rounds.txt
cleanup() { pkill -f "cli.node.*--data-dir $WORK/" 2>/dev/null || true; }
trap cleanup EXIT

start() {  # dir port
  (cd "$1" && exec .venv/bin/python -m laminar.cli.node --cores 2 --flush always --port "$2" \
    --shard-port-base 0 --admin-port 0 --data-dir "$WORK/$2" >"$WORK/$2.log" 2>&1) &
}
tree_of() { if [ "$1" = 7401 ]; then echo "$A"; else echo "$B"; fi; }
shard_ticks() {  # port: utime+stime of the node's shard processes
  local parent; parent=$(pgrep -f "cli.node.*--port $1 " | head -1)
  for p in $(pgrep -f "laminar.shards.shard_main.*--parent-pid $parent"); do
    awk '{print $14 + $15}' "/proc/$p/stat"
  done | paste -sd+ | bc
}

start "$A" 7401; start "$B" 7402
for port in 7401 7402; do  # fills the partition once the node answers
  until (cd "$(tree_of $port)" && .venv/bin/python benchmarks/consume_probe.py \
    "127.0.0.1:$port" --passes 0 >/dev/null 2>&1); do sleep 0.5; done
done
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 2 )); then order="7401 7402"; else order="7402 7401"; fi
  for port in $order; do
    before=$(shard_ticks $port)
    out=$(cd "$(tree_of $port)" && .venv/bin/python benchmarks/consume_probe.py \
      "127.0.0.1:$port" --passes 3 --prefetch "$PREFETCH" 2>&1 | tail -3 | tr '\n' ' ')
    echo "round $round port $port server_cpu_ticks $(( $(shard_ticks $port) - before ))" \
      "load $(cut -d' ' -f1 /proc/loadavg) :: $out" | tee -a "$OUT"
  done
done
python3 - "$OUT" "$A" "$B" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    port = re.search(r"port (\d+)", line).group(1)
    r = rows.setdefault(port, {"rate": [], "cpu": [], "fetch_us": []})
    r["rate"] += [float(x.replace(",", "")) for x in re.findall(r"([\d,]+) rec/s", line)]
    r["cpu"].append(int(re.search(r"server_cpu_ticks (\d+)", line).group(1)))
    r["fetch_us"] += [int(x) for x in re.findall(r"client_us_per_fetch=(\d+)", line)]
for port, tree in (("7401", sys.argv[2]), ("7402", sys.argv[3])):
    r = rows[port]
    per_record_us = statistics.median(r["cpu"]) * 10_000 / 300_000  # ticks of 10 ms, 3 passes
    print(f"{tree}: median {statistics.median(r['rate']):,.0f} rec/s over {len(r['rate'])} "
          f"passes; server CPU {per_record_us:.2f} us/record; client CPU "
          f"{statistics.median(r['fetch_us'])} us per 500-record fetch")
EOF
