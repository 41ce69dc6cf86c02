#!/usr/bin/env bash
# Cross-zone traffic on a local 3-node cluster whose nodes sit in three zones (az1..az3, their
# racks), RF=3, min.insync.replicas=2, acks=all (release build, loopback):
#   1. one producer and one consumer per zone (librdkafka through `strata perf`; producers name
#      their zone in their client id, `strata_az=azN`, consumers with `client.rack=azN`), every
#      consumer reading the whole topic: the bytes that crossed a zone per GB produced, from
#      the brokers' own reckoning (`cross_zone_bytes` on /v1/process), and their price per TB
#      produced at $0.01/GB each way, with consumers reading from leaders (Kafka's default) and
#      then from the replica in their zone (`replica_selector_class`);
#   2. a topic pinned to az1 (`leaders.preference=racks:az1`) written by a producer in az1:
#      the same, with the produce bytes kept in their zone;
#   3. one partition led by node 1: consumer throughput and end-to-end latency (at E2E_RATE
#      records/s) through the leader (client in az1) and through a follower (client in az2).
# Env: RECORDS (per producer, default 300000), SIZE (1000), E2E_RATE (2000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RECORDS="${RECORDS:-300000}"
SIZE="${SIZE:-1000}"
E2E_RATE="${E2E_RATE:-2000}"
BIN="${CARGO_TARGET_DIR:-target}/release/strata"
cargo build --release -p strata-cli --bin strata
export STRATA_BIN="$BIN" ZONES=az1,az2,az3
CLUSTER_DIR="$(mktemp -d /tmp/strata-bench-zones.XXXXXX)"
export CLUSTER_DIR
cleanup() {
    scripts/cluster.sh stop >/dev/null 2>&1 || true
    rm -rf "$CLUSTER_DIR"
}
trap cleanup EXIT
B=127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292
ADMINS=127.0.0.1:9644,127.0.0.1:9744,127.0.0.1:9844

crossed() {
    local sum=0 a
    for a in ${ADMINS//,/ }; do
        sum=$((sum + $(curl -s "http://$a/v1/process" | grep -o '"cross_zone_bytes":[0-9]*' | cut -d: -f2)))
    done
    echo "$sum"
}

# Runs one producer per zone in $ZONES_PRODUCING (all three by default) and one consumer per
# zone, and prints the cross-zone bytes per GB produced.
traffic() {
    local topic=$1 label=$2 producing=${3:-az1 az2 az3}
    local before after pids=() z n=0
    before="$(crossed)"
    for z in $producing; do
        "$BIN" perf produce "$topic" -b "$B" -n "$RECORDS" -s "$SIZE" --acks all \
            -X "client.id=bench strata_az=$z" >"$CLUSTER_DIR/produce-$z" &
        pids+=($!)
        n=$((n + 1))
    done
    wait "${pids[@]}"
    local total=$((RECORDS * n)) produced=$((RECORDS * n * SIZE))
    pids=()
    for z in az1 az2 az3; do
        "$BIN" perf consume "$topic" -b "$B" -n "$total" --from-beginning \
            -X "client.rack=$z" -X "client.id=bench strata_az=$z" >"$CLUSTER_DIR/consume-$z" &
        pids+=($!)
    done
    wait "${pids[@]}"
    after="$(crossed)"
    awk -v c="$((after - before))" -v p="$produced" -v l="$label" 'BEGIN {
        r = c / p
        printf "%s: produced %.2f GB, read 3 times; crossed zones %.2f GB = %.2f GB per GB produced = $%.2f per TB produced\n",
            l, p / 1e9, c / 1e9, r, r * 0.02 * 1000 }'
}

start() {
    scripts/cluster.sh start 3 >/dev/null
    "$BIN" topic create bench-zones -b "$B" --partitions 3 --replication-factor 3 \
        --config min.insync.replicas=2 >/dev/null
}

echo "== 1. consumers read from leaders (replica_selector_class unset)"
start
traffic bench-zones "leaders"
scripts/cluster.sh stop >/dev/null
rm -rf "$CLUSTER_DIR"/node-*

echo "== 1. consumers read from their zone (replica_selector_class=RackAwareReplicaSelector)"
export STRATA_REPLICA_SELECTOR_CLASS=org.apache.kafka.common.replica.RackAwareReplicaSelector
start
traffic bench-zones "follower fetching"

echo "== 2. leaders pinned to az1, written from az1"
"$BIN" topic create bench-pinned -b "$B" --partitions 3 --replication-factor 3 \
    --config min.insync.replicas=2 --config leaders.preference=racks:az1 >/dev/null
traffic bench-pinned "follower fetching + pinned leaders" az1

echo "== 3. through the leader and through a follower (one partition led by node 1)"
"$BIN" topic create bench-one -b "$B" --partitions 1 --replication-factor 3 \
    --config min.insync.replicas=2 --config leaders.preference=racks:az1 >/dev/null
"$BIN" perf produce bench-one -b "$B" -n "$RECORDS" -s "$SIZE" --acks all >/dev/null
for z in az1 az2; do
    echo "-- consumer in $z"
    "$BIN" perf consume bench-one -b "$B" -n "$RECORDS" --from-beginning -X "client.rack=$z" \
        --broker-admin "$ADMINS"
    "$BIN" perf e2e bench-one -b "$B" -n $((E2E_RATE * 30)) -s "$SIZE" --acks all \
        --rate "$E2E_RATE" -X "client.rack=$z"
done
