#!/usr/bin/env bash
# The design's scale on one machine, as recorded in docs/benchmarks.md: a 3-broker cluster
# (scripts/cluster.sh, ports 9092/9192/9292, admin 9644/9744/9844) with one topic of
# PARTITIONS (16384) partitions at RF=3 (49,152 replicas), min.insync.replicas=2:
#   - topic creation (the CreateTopics call) and the time until every ISR is full;
#   - idle CPU of the three brokers together, RSS of each, and memory per replica (RSS over
#     the empty cluster's, divided by the replicas a broker holds);
#   - the highest produce rate with acks=all spread over every partition (`strata perf
#     produce --partitions-hint`: record i to partition i mod PARTITIONS), and its latency;
#   - end-to-end latency at E2E_RATE records/s (5000) over every partition for E2E_S seconds;
#   - a broker restarted (SIGTERM, then started): time to READY and until every ISR is full;
#   - a broker killed with SIGKILL and started again: the same two times;
#   - the active controller killed with SIGKILL: time until another node is controller, and
#     until every ISR is full once it is back.
# Env: PARTITIONS (16384), RECORDS (1000000, for the produce), SIZE (100), IDLE_S (20),
# E2E_RATE, E2E_S, STRATA (a strata binary to measure instead of building this checkout's),
# BENCH_DIR (where the data directories go, default /tmp).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PARTITIONS="${PARTITIONS:-16384}"
RECORDS="${RECORDS:-1000000}"
SIZE="${SIZE:-100}"
IDLE_S="${IDLE_S:-20}"
E2E_RATE="${E2E_RATE:-5000}"
E2E_S="${E2E_S:-60}"
if [ -n "${STRATA:-}" ]; then
    BIN="$STRATA"
else
    cargo build --release -p strata-cli --bin strata >&2
    BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/strata"
fi
TICKS=$(getconf CLK_TCK)
WORK="$(mktemp -d "${BENCH_DIR:-/tmp}/strata-bench-scale.XXXXXX")"
export CLUSTER_DIR="$WORK/cluster" STRATA_BIN="$BIN"
# One topic of them all: above the default max_partitions_per_topic (10,000).
export STRATA_MAX_PARTITIONS_PER_TOPIC="$PARTITIONS"
B=127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292
cleanup() {
    scripts/cluster.sh stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }
pid_of() { cat "$CLUSTER_DIR/node-$1/pid"; }
admin() { echo "127.0.0.1:$((9644 + 100 * ($1 - 1)))"; }
metric() { curl -s --max-time 5 "http://$(admin "$1")/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
rss_mb() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$(pid_of "$1")/status"; }
cluster_cpu() {
    local t=0 id
    for id in 1 2 3; do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$(pid_of "$id")/stat")))
    done
    echo "$t"
}
share() { awk -v t="$1" -v hz="$TICKS" -v s="$2" 'BEGIN { printf "%.1f%% of a core", t / hz / s * 100 }'; }
# Under-replicated partitions summed over the live nodes given; "?" when a node does not answer.
under_replicated() {
    local total=0 id v
    for id in "$@"; do
        v=$(metric "$id" strata_under_replicated_partitions)
        [ -n "$v" ] || { echo "?"; return; }
        total=$((total + ${v%.*}))
    done
    echo "$total"
}
# Waits (up to 10 minutes) until nodes 1..3 report no under-replicated partition; prints ms
# since $1.
wait_isr_full() {
    local t0=$1
    for _ in $(seq 1 1200); do
        [ "$(under_replicated 1 2 3)" = 0 ] && { echo $(($(now_ms) - t0)); return; }
        sleep 0.5
    done
    echo "not within 10 minutes (under-replicated: $(under_replicated 1 2 3))"
}
ready_ms() {
    local id=$1 t0=$2
    for _ in $(seq 1 6000); do
        grep -q '^READY' "$CLUSTER_DIR/node-$id/stdout" 2>/dev/null && { echo $(($(now_ms) - t0)); return; }
        sleep 0.1
    done
    echo "not within 10 minutes"
}
# Starts node $1 again (its stdout starts afresh) and reports READY and ISR-full times.
restart_and_time() {
    local id=$1 what=$2 t0
    : >"$CLUSTER_DIR/node-$id/stdout"
    t0=$(now_ms)
    scripts/cluster.sh restart "$id" >/dev/null
    echo "  $what: READY after $(ready_ms "$id" "$t0") ms, every ISR full after $(wait_isr_full "$t0") ms"
}

echo "== 3 brokers, $PARTITIONS partitions, RF=3 ($((PARTITIONS * 3)) replicas)"
scripts/cluster.sh start 3 >/dev/null
sleep 3
declare -A EMPTY_RSS
for id in 1 2 3; do EMPTY_RSS[$id]=$(rss_mb "$id"); done
t0=$(now_ms)
"$BIN" topic create scale -b "$B" --partitions "$PARTITIONS" --replication-factor 3 \
    --config min.insync.replicas=2 --request-timeout-ms 300000 -X socket.timeout.ms=300000 >/dev/null
echo "  topic creation: $(($(now_ms) - t0)) ms; every ISR full after $(wait_isr_full "$t0") ms"
sleep 5
before=$(cluster_cpu); sleep "$IDLE_S"; after=$(cluster_cpu)
echo "  idle CPU, three brokers together: $(share $((after - before)) "$IDLE_S")"
for id in 1 2 3; do
    rss=$(rss_mb "$id")
    echo "  node $id: RSS ${EMPTY_RSS[$id]} MB empty, $rss MB with the topic:" \
        "$(awk -v d=$((rss - EMPTY_RSS[$id])) -v r="$PARTITIONS" 'BEGIN { printf "%.1f KB", d * 1024 / r }') per replica"
done

before=$(cluster_cpu); t0=$(now_ms)
line=$("$BIN" perf produce scale -b "$B" -n "$RECORDS" -s "$SIZE" --acks all \
    --partitions-hint "$PARTITIONS" 2>"$WORK/produce.err") ||
    line="failed: $(grep -m1 -i error "$WORK/produce.err")"
after=$(cluster_cpu); secs=$(awk -v ms=$(($(now_ms) - t0)) 'BEGIN { print ms / 1000 }')
echo "  produce acks=all over every partition: $line"
echo "  CPU meanwhile, three brokers together: $(share $((after - before)) "$secs")"

before=$(cluster_cpu); t0=$(now_ms)
line=$("$BIN" perf e2e scale -b "$B" -n $((E2E_RATE * E2E_S)) -s "$SIZE" --acks all \
    --rate "$E2E_RATE" --round-robin 2>"$WORK/e2e.err") ||
    line="failed: $(grep -m1 -i error "$WORK/e2e.err")"
after=$(cluster_cpu); secs=$(awk -v ms=$(($(now_ms) - t0)) 'BEGIN { print ms / 1000 }')
echo "  e2e at $E2E_RATE records/s over every partition: $line"
echo "  CPU meanwhile (the run, its consumer's assignment included), three brokers together: $(share $((after - before)) "$secs")"

kill -TERM "$(pid_of 3)"
while kill -0 "$(pid_of 3)" 2>/dev/null; do sleep 0.1; done
restart_and_time 3 "broker 3 stopped (SIGTERM) and started"

scripts/cluster.sh kill 2 >/dev/null
sleep 2
restart_and_time 2 "broker 2 killed (SIGKILL) and started"

controller=
for id in 1 2 3; do
    [ "$(metric "$id" strata_active_controller)" = 1 ] && controller=$id
done
if [ -z "$controller" ]; then
    echo "  controller failover: no node reports itself controller"
else
    scripts/cluster.sh kill "$controller" >/dev/null
    t0=$(now_ms)
    elected=
    for _ in $(seq 1 1200); do
        for id in 1 2 3; do
            [ "$id" = "$controller" ] && continue
            [ "$(metric "$id" strata_active_controller)" = 1 ] && elected=$id
        done
        [ -n "$elected" ] && break
        sleep 0.05
    done
    echo "  controller (node $controller) killed: node ${elected:-none} controller after $(($(now_ms) - t0)) ms"
    restart_and_time "$controller" "the old controller started again"
fi
for id in 1 2 3; do
    echo "  node $id after all of it: RSS $(rss_mb "$id") MB, descriptors $(ls "/proc/$(pid_of "$id")/fd" | wc -l)"
done
