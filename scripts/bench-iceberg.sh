#!/usr/bin/env bash
# Iceberg topics on one node (release build; the object store is a file:// directory under a
# temp dir unless STRATA_OBJECT_STORE* say otherwise), in MODE (key_value, or value_json: the
# values are JSON objects of SIZE bytes, `strata perf produce --json-values`, read with a
# four-column schema):
#   1. translation throughput: RECORDS records of SIZE bytes produced into a PARTITIONS-partition
#      topic with iceberg.mode unset, then iceberg.mode=key_value: the time until the table
#      holds them all and the broker's CPU seconds meanwhile (/v1/process), as MB/s and CPU·s
#      per GB of record bytes, and the Parquet bytes the table took per GB;
#   2. produce latency (strata perf produce, acks=all, RATE records/s for DURATION seconds) on a plain
#      topic while a second producer writes another topic at the same rate: a plain one, then one
#      translated with iceberg.target.lag.ms=LAG_MS (the same load, translation added);
#   3. table lag at a steady RATE2 records/s (default 50 MB/s at SIZE 1000) for DURATION with
#      iceberg.target.lag.ms=LAG_MS: the largest strata_iceberg_lag_seconds sampled each second,
#      and the object store bytes written per GB produced (tiered segments plus Parquet).
# Env: MODE (key_value), RECORDS (1000000), SIZE (1000), PARTITIONS (4), RATE (5000), RATE2 (50000),
# DURATION (seconds, 30), LAG_MS (10000), SECTIONS ("1 2 3"). Values are distinct pseudo-random letters
# (`strata perf produce --distinct-values`), so Parquet cannot fold them into one dictionary entry.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MODE="${MODE:-key_value}"
RECORDS="${RECORDS:-1000000}"
SIZE="${SIZE:-1000}"
PARTITIONS="${PARTITIONS:-4}"
RATE="${RATE:-5000}"
RATE2="${RATE2:-50000}"
SECONDS_RUN="${DURATION:-30}"
SECTIONS="${SECTIONS:-1 2 3}"
section() { [[ " $SECTIONS " == *" $1 "* ]]; }
LAG_MS="${LAG_MS:-10000}"
SCHEMA='{"type":"struct","fields":[{"id":1,"name":"id","required":true,"type":"long"},{"id":2,"name":"amount","required":false,"type":"double"},{"id":3,"name":"customer","required":false,"type":"string"},{"id":4,"name":"note","required":false,"type":"string"}]}'
case "$MODE" in
key_value) VALUES=(--distinct-values); TABLE=(--config iceberg.mode=key_value) ;;
value_json) VALUES=(--json-values); TABLE=(--config iceberg.mode=value_json --config "iceberg.value.schema=$SCHEMA") ;;
*) echo "MODE must be key_value or value_json" >&2; exit 2 ;;
esac
BIN="${STRATA:-${CARGO_TARGET_DIR:-target}/release/strata}"
[ -n "${STRATA:-}" ] || cargo build --release -p strata-cli --bin strata
WORK="$(mktemp -d /tmp/strata-bench-iceberg.XXXXXX)"
KAFKA=127.0.0.1:19092
ADMIN=127.0.0.1:19644
cleanup() {
    [ -n "${BROKER_PID:-}" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

STRATA_KAFKA_ADDR=$KAFKA STRATA_ADMIN_ADDR=$ADMIN STRATA_RAFT_ADDR=127.0.0.1:19093 \
    "$BIN" serve --data-dir "$WORK/data" >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!
until grep -q READY "$WORK/broker.log"; do sleep 0.2; done

cpu() { curl -s "http://$ADMIN/v1/process" | grep -o '"cpu_seconds":[0-9.]*' | cut -d: -f2; }
records_in_table() {
    curl -s "http://$ADMIN/v1/iceberg/$1" | grep -o '"total_records":[0-9]*' | cut -d: -f2
}
metric() {
    curl -s "http://$ADMIN/metrics" | awk -v m="$1" '$1 ~ "^"m"({|$)" {s += $NF} END {printf "%.0f", s}'
}

if section 1; then
echo "== 1. $MODE translation of $RECORDS records of $SIZE bytes, $PARTITIONS partitions"
"$BIN" topic create -b $KAFKA hist --partitions "$PARTITIONS" >/dev/null
"$BIN" perf produce -b $KAFKA hist -n "$RECORDS" -s "$SIZE" --acks 1 --linger-ms 20 \
    --batch-size 1000000 "${VALUES[@]}" 2>/dev/null | tail -1
c0=$(cpu); t0=$(date +%s.%N)
"$BIN" topic alter -b $KAFKA hist "${TABLE[@]}" -c iceberg.target.lag.ms=1000 >/dev/null
until [ "$(records_in_table hist)" = "$RECORDS" ]; do sleep 0.5; done
t1=$(date +%s.%N); c1=$(cpu)
files=$(curl -s "http://$ADMIN/v1/iceberg/hist" | grep -o '"total_files_size":[0-9]*' | cut -d: -f2)
awk -v r="$RECORDS" -v s="$SIZE" -v t="$(echo "$t1 - $t0" | bc)" -v c="$(echo "$c1 - $c0" | bc)" -v f="$files" \
    'BEGIN { gb = r * s / 1e9; printf "translated %.2f GB in %.1f s: %.0f MB/s, %.2f CPU·s/GB; parquet %.3f GB per GB\n", gb, t, gb * 1000 / t, c / gb, f / 1e9 / gb }'
fi

if section 2; then
echo "== 2. produce latency at $RATE records/s for ${SECONDS_RUN}s beside a plain, then a translated topic"
"$BIN" topic create -b $KAFKA plain --partitions 1 >/dev/null
"$BIN" topic create -b $KAFKA other --partitions "$PARTITIONS" >/dev/null
"$BIN" topic create -b $KAFKA translated --partitions "$PARTITIONS" \
    "${TABLE[@]}" --config "iceberg.target.lag.ms=$LAG_MS" >/dev/null
n=$((RATE * SECONDS_RUN))
beside() {
    "$BIN" perf produce -b $KAFKA -n "$n" -s "$SIZE" --rate "$RATE" --acks all \
        "${VALUES[@]}" "$1" >/dev/null 2>&1 &
    local load=$!
    "$BIN" perf produce -b $KAFKA -n "$n" -s "$SIZE" --rate "$RATE" --acks all --linger-ms 0 \
        --distinct-values plain 2>/dev/null | tail -1
    wait $load
}
echo "beside plain:      $(beside other)"
echo "beside translated: $(beside translated)"
fi

if section 3; then
echo "== 3. table lag at $RATE2 records/s for ${SECONDS_RUN}s, iceberg.target.lag.ms=$LAG_MS"
"$BIN" topic create -b $KAFKA steady --partitions "$PARTITIONS" \
    "${TABLE[@]}" --config "iceberg.target.lag.ms=$LAG_MS" \
    --config remote.storage.enable=true --config segment.bytes=104857600 >/dev/null
w0=$(metric strata_object_store_written_bytes_total)
"$BIN" perf produce -b $KAFKA -n $((RATE2 * SECONDS_RUN)) -s "$SIZE" --rate "$RATE2" --acks all \
    "${VALUES[@]}" steady >"$WORK/steady.txt" 2>/dev/null &
steady=$!
max=0
while kill -0 $steady 2>/dev/null; do
    l=$(metric strata_iceberg_lag_seconds)
    [ "${l:-0}" -gt "$max" ] && max=$l
    sleep 1
done
tail -1 "$WORK/steady.txt"
until [ "$(records_in_table steady)" = "$((RATE2 * SECONDS_RUN))" ]; do sleep 1; done
sleep $((LAG_MS / 1000 + 2))
w1=$(metric strata_object_store_written_bytes_total)
awk -v m="$max" -v w="$((w1 - w0))" -v g="$(echo "$RATE2 * $SECONDS_RUN * $SIZE / 1000000000" | bc -l)" \
    'BEGIN { printf "largest lag sampled: %d s; object store bytes written: %.2f GB per GB produced (segments closed so far + Parquet)\n", m, w / 1e9 / g }'
fi
