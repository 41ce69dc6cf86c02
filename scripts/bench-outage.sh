#!/usr/bin/env bash
# Object-store outage, as recorded in docs/benchmarks.md (issue 38), against moto (the S3
# test server, from the venv scripts/test.sh makes) paused with SIGSTOP: a store that accepts
# connections and never answers, the harder of the two outages (a refused connection fails
# at once).
#
#   scripts/bench-outage.sh
#
# 1. Produce latency at RATE records/s (default 5000, 1 KiB, RECORDS of them) to a tiered
#    topic with 1 MiB segments, with the store up, then with the store paused.
# 2. kill -9 the broker while the store is paused; the time from the restart to READY.
# 3. The store resumes; how long the upload backlog (segments, bytes) takes to drain.
# BIN=path uses that binary (default: the release build, built first).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RATE=${RATE:-5000}
RECORDS=${RECORDS:-100000}
VENV=${STRATA_VENV:-$HOME/.cache/strata-venv}
[ -x "$VENV/bin/moto_server" ] || { echo "moto not found in $VENV (scripts/test.sh installs it)" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
    cargo build --release -p strata-cli --bin strata >&2
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/strata"
fi
WORK="$(mktemp -d /tmp/strata-bench-outage.XXXXXX)"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
S3_PORT=$(free_port)
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >"$WORK/moto.log" 2>&1 &
S3_PID=$!
PID=
cleanup() {
    kill -CONT "$S3_PID" 2>/dev/null || true
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    kill "$S3_PID" 2>/dev/null || true; wait "$S3_PID" 2>/dev/null || true
    cp "$WORK/strata.log" "${TMPDIR:-/tmp}/bench-outage-strata.log" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/" && break; sleep 0.1; done
curl -s -X PUT "http://127.0.0.1:$S3_PORT/bench" >/dev/null

export STRATA_OBJECT_STORE=s3://bench/strata STRATA_OBJECT_STORE_ENDPOINT=http://127.0.0.1:$S3_PORT
export STRATA_OBJECT_STORE_ALLOW_HTTP=true STRATA_OBJECT_STORE_REGION=us-east-1
export STRATA_OBJECT_STORE_ACCESS_KEY_ID=bench STRATA_OBJECT_STORE_SECRET_ACCESS_KEY=bench

KAFKA_PORT=$(free_port)
ADMIN_PORT=$(free_port)
start() {
    : >"$WORK/out"
    "$BIN" serve --data-dir "$WORK/data" --kafka-addr "127.0.0.1:$KAFKA_PORT" \
        --admin-addr "127.0.0.1:$ADMIN_PORT" >"$WORK/out" 2>>"$WORK/strata.log" &
    PID=$!
    for _ in $(seq 1 600); do grep -q READY "$WORK/out" && break; sleep 0.1; done
    grep -q READY "$WORK/out" || { echo "broker did not start" >&2; tail "$WORK/strata.log" >&2; exit 1; }
    export STRATA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT STRATA_ADMIN_ADDR=127.0.0.1:$ADMIN_PORT
}
metric() { curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v p="$1" 'index($0, p) == 1 { s += $NF } END { printf "%.0f", s + 0 }'; }
since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }'; }
drained() { [ "$(metric strata_tier_upload_lag_segments)" = 0 ]; }

start
"$BIN" topic create outage -c segment.bytes=1048576 -c local.retention.ms=1000 >/dev/null
latency() { "$BIN" perf produce outage --records "$RECORDS" --record-size 1024 --rate "$RATE" 2>/dev/null; }
echo "== produce at $RATE records/s of 1 KiB, the store up"
latency
while ! drained; do sleep 0.5; done

echo "== the same, the store paused (SIGSTOP)"
kill -STOP "$S3_PID"
latency
echo "backlog segments=$(metric strata_tier_upload_lag_segments) bytes=$(metric strata_tier_upload_lag_bytes) reachable=$(metric strata_object_store_reachable)"

echo "== kill -9 and restart with the store still paused"
kill -9 "$PID"; wait "$PID" 2>/dev/null || true
t0=$(date +%s.%N)
start
echo "ready_s=$(since "$t0")"
"$BIN" perf produce outage --records 1000 --record-size 1024 2>/dev/null | tail -1
sleep 2
segments=$(metric strata_tier_upload_lag_segments)
bytes=$(metric strata_tier_upload_lag_bytes)

echo "== the store resumes (SIGCONT): the backlog of $segments segments, $bytes bytes"
kill -CONT "$S3_PID"
t1=$(date +%s.%N)
while ! drained; do sleep 0.2; done
secs=$(since "$t1")
echo "drained_s=$secs mb_per_s=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f", b / 1048576 / s }')"
