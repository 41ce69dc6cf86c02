#!/usr/bin/env bash
# Partition scale on one broker (release build, loopback), as recorded in docs/benchmarks.md:
# for each partition count N (default "1 1000 10000"), one topic of N partitions on a fresh
# data directory:
#   - topic creation time (the CreateTopics call, as `strata topic create` sees it);
#   - idle broker CPU (share of one core over IDLE_S seconds), RSS and open descriptors, empty
#     and again after the traffic below;
#   - produce RECORDS records of SIZE bytes (librdkafka's default sticky partitioner) and
#     consume them all as the one member of a new consumer group: client throughput and the
#     broker's CPU seconds per GB (read from its /metrics, `--broker-admin`);
#   - restart time to READY after SIGTERM (clean) and after SIGKILL.
# Then for each count in CLUSTER_COUNTS (default "10000"; empty skips it), a 3-node cluster
# (scripts/cluster.sh, ports 9092/9192/9292) with one topic of N partitions at RF=3:
#   - time until every partition's ISR is full after the create;
#   - idle CPU of the three brokers (replication with no traffic: fetch sessions);
#   - e2e latency (`strata perf e2e --round-robin`, acks=all) at E2E_RATE records/s (5000)
#     spread over all N partitions for E2E_S seconds (60), and the brokers' CPU meanwhile.
# Env: COUNTS ("1 1000 10000"; empty skips the one-broker runs), RECORDS (500000), SIZE (1024), IDLE_S (10), STRATA (a strata
# binary to measure instead of building this checkout's, e.g. an older build for an A/B run).
# BENCH_DIR (where the data directories go, default /tmp: put it on the disk to measure; a
# fresh file system gives repeatable creation and restart times, see docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
COUNTS="${COUNTS-1 1000 10000}"
RECORDS="${RECORDS:-500000}"
SIZE="${SIZE:-1024}"
IDLE_S="${IDLE_S:-10}"
CLUSTER_COUNTS="${CLUSTER_COUNTS-10000}"
E2E_RATE="${E2E_RATE:-5000}"
E2E_S="${E2E_S:-60}"
if [ -n "${STRATA:-}" ]; then
    BIN="$STRATA"
else
    cargo build --release -p strata-cli --bin strata >&2
    BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/strata"
fi
TICKS=$(getconf CLK_TCK)
WORK="$(mktemp -d "${BENCH_DIR:-/tmp}/strata-bench-partitions.XXXXXX")"
PID=
cleanup() {
    [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
    [ -n "${CLUSTER_DIR:-}" ] && scripts/cluster.sh stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

# Starts the broker on $DATA; sets PID, KAFKA, ADMIN and READY_MS (start to READY).
start() {
    local t0 out
    out="$WORK/out.$RANDOM"
    t0=$(date +%s%N)
    "$BIN" serve --data-dir "$DATA" --kafka-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --raft-addr 127.0.0.1:0 >"$out" 2>>"$WORK/broker.log" &
    PID=$!
    for _ in $(seq 1 1200); do grep -q READY "$out" && break; sleep 0.05; done
    grep -q READY "$out" || { echo "broker did not start" >&2; tail -20 "$WORK/broker.log" >&2; exit 1; }
    READY_MS=$(( ($(date +%s%N) - t0) / 1000000 ))
    KAFKA=$(sed -n 's/^READY kafka=\([^ ]*\) .*/\1/p' "$out")
    ADMIN=$(sed -n 's/^READY .*admin=\([^ ]*\) .*/\1/p' "$out")
}
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
resources() {
    local rss fds
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
    fds=$(ls "/proc/$PID/fd" | wc -l)
    echo "  RSS $((rss / 1024)) MB, open descriptors $fds"
}
idle() {
    local before after
    sleep 2
    before=$(cpu)
    sleep "$IDLE_S"
    after=$(cpu)
    awk -v t=$((after - before)) -v hz="$TICKS" -v s="$IDLE_S" \
        'BEGIN { printf "  idle CPU: %.2f%% of a core\n", t / hz / s * 100 }'
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

for n in $COUNTS; do
    echo "== $n partitions"
    DATA="$WORK/data-$n"
    start
    t0=$(date +%s%N)
    "$BIN" topic create scale -b "$KAFKA" --partitions "$n" --request-timeout-ms 120000 -X socket.timeout.ms=120000 >/dev/null
    echo "  topic creation: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    idle
    resources
    line=$("$BIN" perf produce scale -b "$KAFKA" -n "$RECORDS" -s "$SIZE" --broker-admin "$ADMIN" 2>/dev/null)
    echo "  $line"
    line=$("$BIN" perf consume scale -b "$KAFKA" -n "$RECORDS" --group --timeout-ms 30000 --broker-admin "$ADMIN" 2>/dev/null)
    echo "  $line"
    idle
    resources
    kill -TERM "$PID"; wait "$PID" 2>/dev/null || true
    start
    echo "  restart after SIGTERM: $READY_MS ms to READY"
    kill -9 "$PID"; wait "$PID" 2>/dev/null || true
    start
    echo "  restart after SIGKILL: $READY_MS ms to READY"
    resources
    kill -9 "$PID"; wait "$PID" 2>/dev/null || true
    PID=
    rm -rf "$DATA"
done

# The three nodes' CPU ticks together.
cluster_cpu() {
    local t=0 id
    for id in 1 2 3; do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$(cat "$CLUSTER_DIR/node-$id/pid")/stat")))
    done
    echo "$t"
}
cluster_share() {
    awk -v t="$1" -v hz="$TICKS" -v s="$2" 'BEGIN { printf "%.2f%% of a core", t / hz / s * 100 }'
}
under_replicated() {
    local total=0 id v
    for id in 1 2 3; do
        v=$(curl -s "http://127.0.0.1:$((9644 + 100 * (id - 1)))/metrics" |
            awk '/^strata_under_replicated_partitions / {print $2}')
        total=$((total + ${v:-1}))
    done
    echo "$total"
}
for n in $CLUSTER_COUNTS; do
    echo "== 3 nodes, $n partitions, RF=3"
    export CLUSTER_DIR="$WORK/cluster-$n" STRATA_BIN="$BIN"
    scripts/cluster.sh start 3 >/dev/null
    B=127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292
    t0=$(date +%s%N)
    "$BIN" topic create scale -b "$B" --partitions "$n" --replication-factor 3 \
        --config min.insync.replicas=2 --request-timeout-ms 120000 -X socket.timeout.ms=120000 >/dev/null
    echo "  topic creation: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    for _ in $(seq 1 600); do [ "$(under_replicated)" = 0 ] && break; sleep 0.5; done
    echo "  every ISR full: $(( ($(date +%s%N) - t0) / 1000000 )) ms after the create (under-replicated now: $(under_replicated))"
    sleep 5
    before=$(cluster_cpu); sleep "$IDLE_S"; after=$(cluster_cpu)
    echo "  idle CPU, three brokers together: $(cluster_share $((after - before)) "$IDLE_S")"
    before=$(cluster_cpu)
    line=$("$BIN" perf e2e scale -b "$B" -n $((E2E_RATE * E2E_S)) -s 100 --acks all --rate "$E2E_RATE" \
        --round-robin 2>"$WORK/e2e.err") || line="failed: $(grep -m1 -i error "$WORK/e2e.err")"
    after=$(cluster_cpu)
    echo "  e2e at $E2E_RATE records/s over all $n partitions: $line"
    echo "  CPU meanwhile, three brokers together: $(cluster_share $((after - before)) "$E2E_S")"
    echo "  under-replicated after: $(under_replicated)"
    scripts/cluster.sh stop >/dev/null
    unset CLUSTER_DIR
done
