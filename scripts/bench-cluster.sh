#!/usr/bin/env bash
# Replication benchmark on a local 3-node cluster (release build, loopback), one librdkafka
# producer, RF=3, min.insync.replicas=2, acks=all:
#   1. end-to-end latency (produce -> consume) at E2E_RATE records/s for 60 s, first, on a
#      quiet cluster (after the throughput runs the brokers spend a while offloading the
#      gigabyte just written, which shows as a latency tail);
#   2. maximum throughput (RECORDS records of SIZE bytes, 6 partitions);
#   3. produce latency at half that rate;
#   4. leader failover: a producer at 200 records/s to a 1-partition topic while its leader is
#      killed with SIGKILL; the largest produce latency is the time from the kill to the first
#      acks=all write acknowledged by the new leader (within ~5 ms, the send interval);
#   5. controller failover: SIGKILL of the active controller until another node reports itself
#      controller (polled every 50 ms);
#   6. offset commits against a coordinator whose __consumer_offsets partition has 3 replicas
#      (a commit is acknowledged once the ISR holds it): 1 and 8 clients, 10 s each.
# Env: RECORDS (default 2000000), SIZE (100), E2E_RATE (5000), CLUSTER_ENV (extra STRATA_*
# settings for every node, e.g. "STRATA_BROKER_SESSION_TIMEOUT_MS=1500").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RECORDS="${RECORDS:-2000000}"
SIZE="${SIZE:-100}"
E2E_RATE="${E2E_RATE:-5000}"
BIN="${CARGO_TARGET_DIR:-target}/release/strata"
cargo build --release -p strata-cli --bin strata
export STRATA_BIN="$BIN"
CLUSTER_DIR="$(mktemp -d /tmp/strata-bench-cluster.XXXXXX)"
export CLUSTER_DIR
cleanup() {
    scripts/cluster.sh stop >/dev/null 2>&1 || true
    rm -rf "$CLUSTER_DIR"
}
trap cleanup EXIT
if [ -n "${CLUSTER_ENV:-}" ]; then
    # shellcheck disable=SC2086
    export ${CLUSTER_ENV?}
fi
scripts/cluster.sh start 3 >/dev/null
B=127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292
admin_of() { echo "127.0.0.1:$((9644 + 100 * ($1 - 1)))"; }

echo "== 1. end to end at $E2E_RATE records/s for 60 s"
"$BIN" topic create bench-e2e -b "$B" --partitions 6 --replication-factor 3 --config min.insync.replicas=2 >/dev/null
"$BIN" perf e2e bench-e2e -b "$B" -n $((E2E_RATE * 60)) -s "$SIZE" --acks all --rate "$E2E_RATE"

"$BIN" topic create bench -b "$B" --partitions 6 --replication-factor 3 --config min.insync.replicas=2 >/dev/null
echo "== 2. maximum throughput: $RECORDS records of $SIZE B, RF=3, acks=all"
out="$("$BIN" perf produce bench -b "$B" -n "$RECORDS" -s "$SIZE" --acks all)"
echo "$out"
rate="$(echo "$out" | grep -o 'records_per_sec=[0-9]*' | cut -d= -f2)"
half=$((rate / 2))

echo "== 3. latency at half the maximum rate: $half records/s for 20 s"
"$BIN" perf produce bench -b "$B" -n $((half * 20)) -s "$SIZE" --acks all --rate "$half"

echo "== 4. leader failover under acks=all"
"$BIN" topic create failover -b "$B" --partitions 1 --replication-factor 3 --config min.insync.replicas=2 >/dev/null
"$BIN" perf produce failover -b "$B" -n 4000 -s "$SIZE" --acks all --rate 200 \
    -X message.timeout.ms=60000 >"$CLUSTER_DIR/failover.out" &
producer=$!
sleep 5
leader="$("$BIN" topic describe failover -b "$B" 2>/dev/null | grep -o 'partition=0 leader=[0-9]*' | grep -o '[0-9]*$')"
echo "killing node $leader, the leader of failover-0"
scripts/cluster.sh kill "$leader" >/dev/null
wait "$producer"
cat "$CLUSTER_DIR/failover.out"
echo "(max_ms above: SIGKILL of the leader to the first acks=all write acknowledged after it)"
scripts/cluster.sh restart "$leader" >/dev/null

echo "== 5. controller failover"
controller_of() {
    "$BIN" cluster status --admin-addr "$(admin_of "$1")" 2>/dev/null | grep -o '^controller=[0-9]*' | cut -d= -f2 || true
}
controller="$(controller_of 1)"
other=$((controller % 3 + 1))
start=$(date +%s%N)
scripts/cluster.sh kill "$controller" >/dev/null
while :; do
    now_controller="$(controller_of "$other")"
    if [ -n "$now_controller" ] && [ "$now_controller" != "$controller" ]; then break; fi
    sleep 0.05
done
end=$(date +%s%N)
echo "controller $controller killed; node $now_controller took over after $(((end - start) / 1000000)) ms"

echo "== 6. offset commits, __consumer_offsets with 3 replicas"
scripts/cluster.sh restart "$controller" >/dev/null
for c in 1 8; do
    "$BIN" perf commit -b "$B" --group "commits-$c" --topic "commits-$c" --clients "$c" --seconds 10
done
