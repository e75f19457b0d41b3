#!/usr/bin/env bash
# Where the time of a batch-1 produce goes: py-spy on the client and on each
# shard of a `laminar-node --cores 2 --flush always` while request_probe.py keeps
# 64 one-record produces in flight. PROBE=consume profiles the fetch path
# instead: consume_probe.py reads 100,000 1 KiB records from the start over and
# over, one fetch of 500 in flight (the partition is filled before profiling).
# Prints, per process, its CPU (cores) and the functions with the most samples
# (self time); the raw collapsed stacks stay in $OUT for flame graphs. Knobs:
# PROBE (produce or consume), PARTITIONS (1), INFLIGHT (64), SECONDS (6), OUT
# (benchmarks/out/profile), PLAIN (unset: idempotent produces, the client's
# default; PLAIN=1: plain ones).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
PYSPY=${PYSPY:-.venv/bin/py-spy}
PROBE=${PROBE:-produce}
PARTITIONS=${PARTITIONS:-1}
INFLIGHT=${INFLIGHT:-64}
SECONDS_=${SECONDS:-6}
OUT=${OUT:-benchmarks/out/profile}
PORT=${PORT:-17270}

rm -rf "$OUT" && mkdir -p "$OUT"
"$PY" -m laminar.cli.node --cores 2 --data-dir "$OUT/data" --port "$PORT" --flush always \
    >"$OUT/node.log" 2>&1 &
node=$!
trap 'kill $node 2>/dev/null; wait $node 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -f "$OUT/data/run/node.json" ]] && break; sleep 0.1; done
shards=$(pgrep -P "$node" | tr '\n' ' ')

if [[ "$PROBE" == consume ]]; then
    "$PY" benchmarks/consume_probe.py "127.0.0.1:$PORT" --passes 0  # fill once
    "$PY" benchmarks/consume_probe.py "127.0.0.1:$PORT" --passes 1 \
        --seconds $((SECONDS_ + 3)) >"$OUT/probe.txt" &
else
    "$PY" benchmarks/request_probe.py "127.0.0.1:$PORT" --partitions "$PARTITIONS" \
        --inflight "$INFLIGHT" --seconds $((SECONDS_ + 3)) ${PLAIN:+--plain} >"$OUT/probe.txt" &
fi
probe=$!
sleep 1.5
spies=()
for pid in $shards $probe; do
    "$PYSPY" record -p "$pid" -d "$SECONDS_" -r 250 -f raw -o "$OUT/$pid.txt" >/dev/null 2>&1 &
    spies+=($!)
done
declare -A before
for pid in $shards $probe; do before[$pid]=$(awk '{print $14+$15}' "/proc/$pid/stat"); done
sleep "$SECONDS_"
for pid in $shards $probe; do
    after=$(awk '{print $14+$15}' "/proc/$pid/stat")
    echo "$pid cpu $(echo "scale=2; ($after-${before[$pid]})/100/$SECONDS_" | bc) cores" >"$OUT/$pid.cpu"
done
wait "${spies[@]}" "$probe"
echo "uptime: $(uptime)"
cat "$OUT/probe.txt"
for pid in $shards $probe; do
    role=shard; [[ $pid == "$probe" ]] && role=client
    echo "== $role $(cat "$OUT/$pid.cpu")"
    "$PY" - "$OUT/$pid.txt" <<'TOP'
import collections, re, sys
counts, total = collections.Counter(), 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
    total += int(n)
    if frames:
        m = re.match(r"(.*) \((.*):\d+\)", frames[-1])
        counts[f"{m[1]} ({m[2].rsplit('/', 1)[-1]})" if m else frames[-1]] += int(n)
for name, n in counts.most_common(15):
    print(f"  {100 * n / max(total, 1):5.1f}%  {name}")
TOP
done
