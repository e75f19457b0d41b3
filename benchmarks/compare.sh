#!/usr/bin/env bash
# The default peer comparison behind `make bench`: laminar, NATS JetStream and
# Redis Streams on the same workloads, interleaved over rounds, medians and
# ratios. Writes plots and JSON to benchmarks/laminar-bench/<scenario>/ and
# replaces the laminar-bench section of benchmarks/RESULTS.md (between the
# <!-- laminar-bench:begin --> and <!-- laminar-bench:end --> markers; the rest
# of the file is left as it is).
#
# SUITE=replication (issue 15) runs the replicated comparison instead:
# laminar-r3 (three nodes on loopback, replication_factor 3) next to laminar-r1
# (one node) and nats-jetstream-r3 (three clustered nats-servers, R3 streams),
# batch 1 and 64, closed loop and 2,000 records/s, into its own section
# (<!-- replication:begin --> ... <!-- replication:end -->).
#
# SUITE=kafka (issue 27) runs laminar's Kafka door, driven by confluent-kafka
# (`laminar-kafka`: the producer's defaults; `laminar-kafka:linger5`), next to
# laminar's own client, Redis Streams (appendfsync always) and NATS JetStream,
# on the same node and the same workloads: 64 one-record produces in flight,
# 64 produces of 64 records in flight, and a backlog consume; into its own
# section (<!-- kafka:begin --> ... <!-- kafka:end -->), with issue 27's goals.
#
# Needs the peers installed (scripts/setup --bench). Knobs, from the
# environment: SUITE (peers, replication or kafka), ROUNDS (5), DURATION (10 s
# measured), WARMUP (2 s), TARGETS, SCENARIOS (space-separated names below;
# default: every one of the suite), RESULTS (the Markdown file to update),
# RENDER_ONLY=1 (measure nothing: redo tables, plots and the section from the
# saved results.json files).
#
# Every run reports its load generators' and its server's CPU and is flagged
# "generator-bound" when a generator used more than 85% of a core; every
# produce run is checked by identity (each acknowledged record read back once).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SUITE=${SUITE:-peers}
case "$SUITE" in
    peers)
        TARGETS=${TARGETS:-laminar,redis-streams,nats-jetstream}
        SCENARIOS=${SCENARIOS:-produce-b1-closed64 produce-b1-closed64-2p produce-b1-open-2k produce-b1-open-20k consume-100k consume-100k-prefetch produce-closed}
        SECTION=laminar-bench
        ;;
    replication)
        TARGETS=${TARGETS:-laminar-r3,laminar-r1,nats-jetstream-r3}
        SCENARIOS=${SCENARIOS:-r3-produce-b1-closed64 r3-produce-b64-closed64 r3-produce-b1-open-2k r3-produce-b64-open-2k}
        SECTION=replication
        ;;
    kafka)
        TARGETS=${TARGETS:-laminar-kafka,laminar-kafka:linger5,laminar,redis-streams,nats-jetstream}
        SCENARIOS=${SCENARIOS:-kafka-produce-b1-closed64 kafka-produce-b64-closed64 kafka-consume-100k}
        SECTION=kafka
        ;;
    *) echo "compare.sh: SUITE is peers, replication or kafka, not $SUITE" >&2; exit 2 ;;
esac
RESULTS=${RESULTS:-benchmarks/RESULTS.md}
OUT=benchmarks/laminar-bench
FRAGMENTS=benchmarks/out/laminar-bench-fragments

scenario_args() {
    case "$1" in
        # One record per request, 64 requests in flight on one connection
        # (how most applications send events): durable produce throughput.
        produce-b1-closed64) echo "--workload produce --load closed --window 64 --batch 1" ;;
        # The same over two partitions (laminar: one per shard, two connections).
        produce-b1-closed64-2p) echo "--workload produce --load closed --window 64 --batch 1 --partitions 2" ;;
        # p50/p99 at a fixed rate, one record per request (latency from each
        # request's intended send time).
        produce-b1-open-2k) echo "--workload produce --load open --rate 2000 --batch 1 --window 64" ;;
        produce-b1-open-20k) echo "--workload produce --load open --rate 20000 --batch 1 --window 256" ;;
        # Read 100,000 1 KiB records from the start, prefetch off for every
        # target: one fetch request of up to 500 records, one answer.
        consume-100k) echo "--workload consume --from beginning --prefill 100000 --partitions 1 --consumers 1 --duration 60" ;;
        # The same with each client reading ahead as far as it can: laminar 2
        # fetches ahead (AsyncClient.reader), NATS a push consumer, Redis
        # Streams still one XREAD at a time (each needs the previous reply's
        # last id).
        consume-100k-prefetch) echo "--workload consume --from beginning --prefill 100000 --partitions 1 --consumers 1 --duration 60 --prefetch 2" ;;
        # A backlog ten times longer (about 1 s of reading instead of 0.1 s:
        # the first fetches, a cold loop and the scheduler's placement weigh
        # less); not in the default list (Redis's prefill of 1 GiB takes 20 s
        # a round).
        consume-1m) echo "--workload consume --from beginning --prefill 1000000 --partitions 1 --consumers 1 --duration 60" ;;
        consume-1m-prefetch) echo "--workload consume --from beginning --prefill 1000000 --partitions 1 --consumers 1 --duration 60 --prefetch 2" ;;
        # Batches of 10, 32 in flight (the workload of the earlier comparison).
        produce-closed) echo "--workload produce --load closed --window 32 --batch 10" ;;
        produce-open-20k-b10) echo "--workload produce --load open --rate 20000 --batch 10 --window 64" ;;
        e2e-open-2k) echo "--workload e2e --load open --rate 2000 --batch 1 --window 64 --partitions 2 --consumers 2" ;;
        # The Kafka door (SUITE=kafka): the peers' batch-1 produce and backlog
        # consume, and 64 requests of 64 records in flight (4,096 records
        # outstanding): what a Kafka producer needs to form batches of its own
        # (with 64 records in flight, librdkafka sends what one linger.ms
        # gathered of 64).
        kafka-produce-b1-closed64) scenario_args produce-b1-closed64 ;;
        kafka-produce-b64-closed64) echo "--workload produce --load closed --window 64 --batch 64" ;;
        kafka-consume-100k) scenario_args consume-100k ;;
        # Replicated durable produce (SUITE=replication): one partition, one
        # producer with 64 requests in flight, batches of 1 and 64 records;
        # then 2,000 records/s (batch 64: about 31 requests/s).
        r3-produce-b1-closed64) echo "--workload produce --load closed --window 64 --batch 1" ;;
        r3-produce-b64-closed64) echo "--workload produce --load closed --window 64 --batch 64" ;;
        r3-produce-b1-open-2k) echo "--workload produce --load open --rate 2000 --batch 1 --window 64" ;;
        r3-produce-b64-open-2k) echo "--workload produce --load open --rate 2000 --batch 64 --window 64" ;;
        *) echo "compare.sh: unknown scenario $1" >&2; return 1 ;;
    esac
}

for binary in nats-server redis-server; do
    command -v "$binary" >/dev/null || {
        echo "compare.sh: $binary is not installed; run scripts/setup --bench (make bench)" >&2
        exit 1
    }
done

FRAGMENTS=$FRAGMENTS/$SECTION
rm -rf "$FRAGMENTS"
mkdir -p "$FRAGMENTS" "$OUT"
started=$(date -u +%Y-%m-%dT%H:%MZ)
for name in $SCENARIOS; do
    args=$(scenario_args "$name")
    outputs=(--out "$OUT/$name" --markdown "$FRAGMENTS/$name.md" --markdown-base "$(dirname "$RESULTS")")
    if [[ "${RENDER_ONLY:-0}" == 1 ]]; then
        cp "$OUT/$name/results.json" "$FRAGMENTS/$name.json"
        "$PY" -m laminar.bench --from-json "$FRAGMENTS/$name.json" "${outputs[@]}"
        if [[ -z "${measured:-}" ]]; then  # the date of the measurement, not of today
            measured=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["started_at"])' "$FRAGMENTS/$name.json")
            started=$measured
        fi
        continue
    fi
    rm -rf "${OUT:?}/$name"
    # shellcheck disable=SC2086  # the scenario's flags are meant to split
    "$PY" -m laminar.bench --compare "$TARGETS" --rounds "$ROUNDS" \
        --duration "$DURATION" --warmup "$WARMUP" $args "${outputs[@]}" --progress lines
done

if [[ "$SUITE" == kafka ]]; then
    cat > "$FRAGMENTS/0-header.md" <<HEADER
## The Kafka door (issue 27): confluent-kafka against laminar, next to laminar's own client, Redis Streams and NATS JetStream

Generated by \`SUITE=kafka benchmarks/compare.sh\` (\`make bench\`) on $started; every
figure, run and setting is in \`benchmarks/laminar-bench/<scenario>/results.json\`.

The harness of the laminar-bench section (one load-generator process per
role, 1 KiB records, fresh servers on empty directories for every run,
targets rotated round by round, medians over rounds, identity check of every
acknowledged record after every produce run). \`laminar-kafka\` is the very
node of \`laminar\` (\`--flush always\`, two shards) driven through its Kafka
ports by confluent-kafka (librdkafka) with its defaults, acks=all:
\`Producer.produce\` per record, a produce counted once every delivery report
of its batch is in; librdkafka forms the Kafka batches itself (linger.ms 5,
its default since librdkafka 1.5, so \`laminar-kafka:linger5\` sets the same
value explicitly). Its consumer is a \`Consumer\` with \`assign()\` at offset 0,
no group, \`consume(num_messages=500)\`; librdkafka fetches ahead in its own
threads (a Kafka consumer cannot read with prefetch off, unlike the others
here). Ratios are \`laminar-kafka\` divided by the other target; the goals of
issue 27: Kafka-door produce >= 2x Redis-always, consume >= 2x Redis and >=
500,000 records/s, and the server's CPU per record (the "server CPU
us/record" column) <= laminar's own door's. The machine (2 cores) is shared
with other engineers' tests: mind the load average printed with every run.
HEADER
elif [[ "$SUITE" == replication ]]; then
    cat > "$FRAGMENTS/0-header.md" <<HEADER
## Replication (issue 15): laminar R3 next to laminar R1 and NATS JetStream R3

Generated by \`SUITE=replication benchmarks/compare.sh\` on $started; every figure,
run and setting is in \`benchmarks/laminar-bench/<scenario>/results.json\`.

The same harness as the laminar-bench section (one load-generator
process, 1 KiB records, fresh servers on empty directories for every run,
targets rotated round by round, medians over rounds, open-loop latency from
each request's intended send time, identity check of every acknowledged
record after every run). \`laminar-r3\` is three \`laminar-node\` processes on
loopback (one shard each; \`--node-id\`, \`--peers\`; the machine's CPUs dealt
out in turn, so on two cores n1 and n3 share CPU 0 and n2 has CPU 1) and a topic with
\`replication_factor\` 3: the client bootstraps from all three and produces to
the partition's leader as the metadata names it. \`laminar-r1\` is one node as
in the laminar-bench section (two shards; the partition lives on one). \`nats-jetstream-r3\`
is three nats-servers routed as one JetStream cluster, a stream with
\`num_replicas\` 3, nats-py connected to one of them. Durability differs and is
stated: laminar acknowledges after fsync on a majority (each replica's Raft log
fdatasyncs before it acknowledges the entry); nats-server 2.9.10 acknowledges
once a majority holds the message in its page cache (its file store fsyncs on
a timer, about every 2 minutes; \`sync_interval: always\` arrived in 2.10, and
2.9.10 rejects the option). Server CPU is shown per server process (a node
with its shards). Ratios are \`laminar-r3\` divided by the other target. The
goals of issue 15: R3 throughput >= 0.5x R1 and >= 1.0x NATS R3 (closed loop),
R3 p99 at 2,000 records/s <= 2x R1's. The machine (2 cores) is shared with
other engineers' tests: mind the load average printed with every run.
HEADER
else
cat > "$FRAGMENTS/0-header.md" <<HEADER
## laminar-bench: laminar next to NATS JetStream and Redis Streams (issues 6, 13)

Generated by \`benchmarks/compare.sh\` (\`make bench\`) on $started; every figure,
run and setting is in \`benchmarks/laminar-bench/<scenario>/results.json\`.

How to read it: every target runs the same workload (1 KiB records, the same
batches, partitions and load model) from Python load-generator processes,
against a server the harness started on an empty directory on the same disk.
Each target's generator is the fastest honest client we have for it: laminar's
\`AsyncClient\`; for Redis a pipelined RESP client on one connection with
hiredis parsing replies (\`laminar.bench.targets.resp\`: redis-py cannot keep
64 requests in flight on one connection, and its parser bound the earlier
comparison); nats-py's \`publish_async\`. Generator and server CPU are in every
table: a run whose generator used more than 85% of a core is flagged
"generator-bound: not a server comparison". Targets are interleaved and
rotated round by round; tables show medians over rounds; ratios are "first
target divided by the other" (records/s: above 1 means laminar is faster;
latency: below 1 means laminar is quicker). Open-loop latencies count from
each request's intended send time (coordinated omission corrected). Delivery
is checked by identity: after every produce run the stream is read back and
every acknowledged record must be there exactly once. Consumes read with
prefetch off for every target (NATS through a pull consumer), except the
"prefetch 2" table: there laminar's reader keeps 2 fetches ahead, NATS reads
through a push consumer, and Redis Streams still reads one XREAD at a time
(an XREAD's cursor is the previous reply's last id: no client can ask ahead).
Durability
differs and is stated: "ack after fsync" (laminar \`--flush always\`, Redis
\`appendfsync always\`) versus NATS JetStream, which in the Debian package's
version 2.9.10 cannot be configured to fsync before acknowledging. The goal
check compares laminar only with peers that acknowledge after fsync: at least
1.0x the best such peer's throughput (closed loop only) and at most 1.0x its
p99 (fixed rate only). The machine is shared: read ratios within one run, not
absolute numbers across runs, and mind the load average printed with every run.
HEADER
fi

touch "$RESULTS"
"$PY" -m laminar.bench.results_md --into "$RESULTS" --section "$SECTION" \
    --header "$FRAGMENTS/0-header.md" \
    $(for name in $SCENARIOS; do echo "$FRAGMENTS/$name.md"; done)
echo "compare.sh: updated $RESULTS and $OUT/"
