#!/usr/bin/env bash
# Compaction benchmark, as recorded in docs/benchmarks.md: how fast the cleaner compacts a log
# (MB of log cleaned per second) and what it does to the produce latency of another topic
# while it runs.
#
#   scripts/bench-compaction.sh [MB] [IO_LIMIT_BYTES_PER_SEC]
#
# MB (default 1000) of 1 KiB records over MB*100 distinct keys (ten versions of each key) go to
# a topic with cleanup.policy=delete; then the topic is switched to compact, the cleaner starts,
# and `strata perf produce --rate` measures produce latency on a second topic while it runs.
# The same measurement before the switch is the baseline. IO_LIMIT (default 0 = unbounded) sets
# log_cleaner_io_max_bytes_per_second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MB=${1:-1000}
IO_LIMIT=${2:-0}
RATE=${RATE:-50000}
cargo build --release -p strata-cli --bin strata >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/strata"
DATA="$(mktemp -d)"
OUT="$(mktemp)"

STRATA_LOG_CLEANER_BACKOFF_MS=200 STRATA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND=$IO_LIMIT \
    "$BIN" serve --data-dir "$DATA" --kafka-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 >"$OUT" 2>"$DATA.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DATA" "$DATA.log" "$OUT"' EXIT
for _ in $(seq 1 100); do grep -q READY "$OUT" && break; sleep 0.1; done
KAFKA=$(sed -n 's/^READY kafka=\([^ ]*\) .*/\1/p' "$OUT")
ADMIN=$(sed -n 's/^READY .* admin=\([^ ]*\).*/\1/p' "$OUT")
[ -n "$KAFKA" ] || { echo "broker did not start" >&2; cat "$DATA.log" >&2; exit 1; }

records=$((MB * 1000))
keys=$((records / 10))
# Eight closed segments and the active one: the cleaner never touches the active segment.
segment=$((MB * 1000000 / 8))
"$BIN" topic create compacted -b "$KAFKA" --partitions 1 \
    -c segment.bytes=$segment -c cleanup.policy=delete -c retention.ms=-1 >/dev/null
"$BIN" topic create latency -b "$KAFKA" --partitions 1 >/dev/null

echo "== writing $records records of ~1 KiB over $keys keys"
started=$(date +%s.%N)
awk -v n="$records" -v k="$keys" 'BEGIN {
    pad = sprintf("%1000s", ""); gsub(/ /, "x", pad)
    for (i = 0; i < n; i++) printf "key-%d:%d %s\n", i % k, i, pad
}' | "$BIN" produce compacted -b "$KAFKA" --key-separator : -X linger.ms=20 -X batch.size=1048576 >/dev/null
echo "  took $(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
du -sh "$DATA/compacted-0" | sed 's/^/  log size: /'

latency() {
    "$BIN" perf produce latency -b "$KAFKA" --records $((RATE * 20)) --record-size 100 --rate "$RATE" 2>/dev/null
}
echo "== produce latency at $RATE records/s, cleaner idle"
latency

echo "== produce latency at $RATE records/s while the cleaner compacts ${MB} MB (io limit: $IO_LIMIT B/s)"
"$BIN" topic alter compacted -b "$KAFKA" -c cleanup.policy=compact >/dev/null
clean_start=$(date +%s.%N)
latency
echo "  (latency run ended $(awk -v s="$clean_start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s after the switch)"

for _ in $(seq 1 600); do grep -q "compacted log" "$DATA.log" && break; sleep 0.5; done
echo "== cleaner"
grep "compacted log" "$DATA.log" | head -1 | sed 's/\x1b\[[0-9;]*m//g; s/^/  /'
du -sh "$DATA/compacted-0" | sed 's/^/  log size after: /'
curl -s "http://$ADMIN/metrics" | grep -E '^strata_log_cleaner_(read|written)_bytes|^strata_log_cleaner_last_run' | sed 's/^/  /'
