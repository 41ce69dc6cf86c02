#!/usr/bin/env bash
# Transactions, as recorded in docs/benchmarks.md (release build, loopback):
#   - throughput of one transactional producer (linger.ms=0) with transactions of 1, 100 and 10,000 records
#     spanning 1 and 10 partitions, next to the same records from an idempotent producer
#     without transactions (`strata perf txn --plain`); the EndTxn round's p50/p99;
#   - end-to-end latency of a read_committed consumer at 100 commits/s (10 records each).
# On one broker (a fresh data directory), then on a 3-node cluster (scripts/cluster.sh, RF=3,
# acks=all everywhere) unless CLUSTER=0.
# Env: RECORDS (200000: per row, rounded to whole transactions; one-record transactions send
# RECORDS/100), E2E_S (30: seconds of the e2e run), CLUSTER (1), STRATA (a strata binary to
# measure instead of building this checkout's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RECORDS="${RECORDS:-200000}"
E2E_S="${E2E_S:-30}"
CLUSTER="${CLUSTER:-1}"
if [ -z "${STRATA:-}" ]; then
    cargo build --release -p strata-cli --bin strata >&2
    STRATA="${CARGO_TARGET_DIR:-target}/release/strata"
fi
BIN="$(realpath "$STRATA")"
WORK="$(mktemp -d /tmp/strata-bench-txn.XXXXXX)"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    [ "$CLUSTER" = 1 ] && CLUSTER_DIR="$WORK/cluster" scripts/cluster.sh stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

# One table of rows against bootstrap $1, topics named after $2.
matrix() {
    local bootstrap=$1 name=$2
    for parts in 1 10; do
        "$BIN" perf txn -b "$bootstrap" "$name-plain-$parts" -n "$RECORDS" --records-per-txn 1000 \
            --partitions "$parts" --linger-ms 0 --plain 2>/dev/null
        for per in 1 100 10000; do
            local n=$RECORDS
            [ "$per" = 1 ] && n=$((RECORDS / 100))
            "$BIN" perf txn -b "$bootstrap" "$name-$per-$parts" -n "$n" --records-per-txn "$per" \
                --partitions "$parts" --linger-ms 0 2>/dev/null
        done
    done
    "$BIN" perf txn -b "$bootstrap" "$name-e2e" -n $((E2E_S * 1000)) --records-per-txn 10 \
        --rate 100 --e2e --partitions 1 --linger-ms 0 2>/dev/null
}

echo "# one broker" >&2
mkdir -p "$WORK/single"
(cd "$WORK/single" && exec "$BIN" serve >strata.log 2>&1) &
PID=$!
for _ in $(seq 100); do
    "$BIN" topic list -b 127.0.0.1:9092 >/dev/null 2>&1 && break
    sleep 0.2
done
matrix 127.0.0.1:9092 single
kill "$PID"
wait "$PID" 2>/dev/null || true
PID=""

if [ "$CLUSTER" = 1 ]; then
    echo "# three brokers, RF=3" >&2
    export CLUSTER_DIR="$WORK/cluster" STRATA_BIN="$BIN" STRATA_DEFAULT_REPLICATION_FACTOR=3
    scripts/cluster.sh start 3 >&2
    matrix 127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292 cluster
fi
