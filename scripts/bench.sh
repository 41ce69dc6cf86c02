#!/usr/bin/env bash
# Single-node benchmark on loopback, as recorded in docs/benchmarks.md, in two steps:
#
# - records: produce/consume throughput, produce latency at half the maximum rate, end-to-end
#   latency, the broker's CPU seconds per GB produced and fetched, and the kernel's own loopback
#   cost (iperf3);
# - groups: consumer-group join / scale-out / member-death times (`strata perf group`, 1, 10
#   and 50 members, eager and cooperative) and offset commits per second (`strata perf commit`).
#
#   scripts/bench.sh            both steps (builds the release binary first)
#   scripts/bench.sh records    only the first
#   scripts/bench.sh groups     only the second
#
# Needs iperf3 (apt) for the kernel baseline; skipped with a note when missing.
set -euo pipefail
STEP="${1:-all}"
case "$STEP" in
    all | records | groups) ;;
    *) echo "usage: $0 [records|groups]" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo build --release -p strata-cli --bin strata >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/strata"
DATA="$(mktemp -d)"
OUT="$(mktemp)"
TICKS=$(getconf CLK_TCK)

"$BIN" serve --data-dir "$DATA" --kafka-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 >"$OUT" 2>"$DATA.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DATA" "$DATA.log" "$DATA.time" "$OUT"' EXIT
for _ in $(seq 1 100); do grep -q READY "$OUT" && break; sleep 0.1; done
KAFKA=$(sed -n 's/^READY kafka=\([^ ]*\) .*/\1/p' "$OUT")
[ -n "$KAFKA" ] || { echo "broker did not start" >&2; cat "$DATA.log" >&2; exit 1; }

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Prints CPU seconds per GB for a tick delta and a byte count.
per_gb() { awk -v t="$1" -v b="$2" -v hz="$TICKS" 'BEGIN { printf "%.3f", (t / hz) / (b / 1e9) }'; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

# What the kernel alone spends to put the same bytes into new page-cache pages of a file.
# On this VM a never-touched page costs a host-side fault, which dominates both numbers.
file_write_cost() {
    local mb=$(( $1 / 1000000 ))
    local t
    t=$( { /usr/bin/time -f "%S %U" dd if=/dev/zero of="$DATA/ddbase" bs=1M count="$mb" status=none; } 2>&1 | tail -1)
    rm -f "$DATA/ddbase"
    awk -v s="${t% *}" -v u="${t#* }" -v mb="$mb" 'BEGIN { printf "%.3f", (s + u) / (mb / 1000) }'
}

run_case() {
    local name=$1 n=$2 size=$3
    local before after line bytes
    echo "  kernel file write (dd, same volume) CPU per GB: $(file_write_cost $((n * size))) s"
    "$BIN" topic create "$name" -b "$KAFKA" --partitions 1 >/dev/null
    before=$(cpu $PID)
    line=$("$BIN" perf produce "$name" -b "$KAFKA" --records "$n" --record-size "$size" 2>/dev/null)
    after=$(cpu $PID)
    bytes=$(field bytes "$line")
    echo "$line"
    echo "  broker CPU per GB produced: $(per_gb $((after - before)) "$bytes") s"
    before=$(cpu $PID)
    line=$("$BIN" perf consume "$name" -b "$KAFKA" --records "$n" 2>/dev/null)
    after=$(cpu $PID)
    echo "$line"
    echo "  broker CPU per GB fetched:  $(per_gb $((after - before)) "$(field bytes "$line")") s"
}

# Consumer groups. Each `perf group` run starts N member processes in a new group, then one more,
# then SIGKILLs the oldest; each phase is timed until members and coordinator agree on a stable
# assignment (see `strata perf group --help`). librdkafka defaults: session.timeout.ms=6000 here
# (the tool's default), heartbeat.interval.ms=3000.
groups_step() {
    local strategy n c before after line
    for strategy in range cooperative-sticky; do
        echo "== consumer group, $strategy: join N members, add one, SIGKILL one"
        for n in 1 10 50; do
            "$BIN" perf group -b "$KAFKA" --topic "grp-$strategy-$n" --members "$n" \
                --assignment-strategy "$strategy" 2>/dev/null
        done
    done
    echo "== consumer group, range, heartbeat.interval.ms=100 (the heartbeat wait mostly removed)"
    for n in 1 10 50; do
        "$BIN" perf group -b "$KAFKA" --topic "grp-hb100-$n" --members "$n" \
            --heartbeat-interval-ms 100 2>/dev/null
    done
    echo "== offset commits: C clients of one group, synchronous commits, 10 s"
    for c in 1 8; do
        before=$(cpu $PID)
        line=$(/usr/bin/time -o "$DATA.time" -f "%U %S" "$BIN" perf commit -b "$KAFKA" \
            --group "commits-$c" --topic "commits-$c" --clients "$c" --seconds 10 2>/dev/null)
        after=$(cpu $PID)
        echo "$line"
        awk -v t=$((after - before)) -v hz="$TICKS" -v n="$(field commits "$line")" \
            'BEGIN { printf "  broker CPU per commit (including the join): %.1f us\n", t / hz / n * 1e6 }'
        awk '{ printf "  client CPU (all clients, including the join): %.1f s\n", $1 + $2 }' "$DATA.time"
        rm -f "$DATA.time"
    done
}

if [ "$STEP" = groups ]; then
    groups_step
    exit 0
fi

# ---- records ----
echo "== 2,000,000 records of 100 B (acks=1, linger.ms=5, batch.size=1048576)"
run_case perf100 2000000 100
echo "== 500,000 records of 1 KiB"
run_case perf1k 500000 1024

echo "== produce latency at half the maximum rate (100 B records)"
max=$("$BIN" perf produce lat-max -b "$KAFKA" --records 1000000 --record-size 100 2>/dev/null)
half=$(awk -v r="$(field records_per_sec "$max")" 'BEGIN { printf "%d", r / 2 }')
echo "max: $max"
"$BIN" perf produce lat-half -b "$KAFKA" --records $((half * 10)) --record-size 100 --rate "$half" 2>/dev/null

echo "== end-to-end latency (consumer waiting at the tail, default fetch.wait.max.ms)"
"$BIN" topic create e2e -b "$KAFKA" --partitions 1 >/dev/null
"$BIN" perf e2e e2e -b "$KAFKA" --records 20000 --rate 2000 2>/dev/null

if command -v iperf3 >/dev/null; then
    echo "== kernel loopback cost (iperf3, 20 GB)"
    port=$(( (RANDOM % 20000) + 30000 ))
    iperf3 -s -p $port >/dev/null 2>&1 &
    SPID=$!
    sleep 0.5
    s0=$(cpu $SPID)
    c=$( { /usr/bin/time -f "%U %S" iperf3 -c 127.0.0.1 -p $port -n 20G >/dev/null; } 2>&1 | tail -1)
    s1=$(cpu $SPID)
    kill $SPID; wait $SPID 2>/dev/null || true
    echo "  receiver CPU per GB: $(per_gb $((s1 - s0)) 20000000000) s"
    echo "  sender CPU per GB:   $(awk -v u="${c% *}" -v s="${c#* }" 'BEGIN { printf "%.3f", (u + s) / 20 }') s"
else
    echo "(iperf3 not installed: apt-get install iperf3 for the kernel baseline)"
fi

if [ "$STEP" = all ]; then
    groups_step
fi
