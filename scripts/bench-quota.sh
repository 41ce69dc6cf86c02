#!/usr/bin/env bash
# Client-quota cost per request, as recorded in docs/benchmarks.md: small produce requests
# (100-byte records, linger 0, batch.size 200 so one record per request, acks=1) from client id
# "bench" over PLAINTEXT to one broker, with (1) no quota in the cluster, (2) 1,000 quotas on
# other client ids (the connection resolves once that none applies to it), (3) quotas on
# "bench" itself too high to throttle (every request charged: produce bytes and handling time).
# Same binary, back to back, three runs each.
# Env: RECORDS (200000 per run), STRATA (a strata binary instead of this checkout's release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RECORDS="${RECORDS:-200000}"
if [ -z "${STRATA:-}" ]; then
    cargo build --release -p strata-cli --bin strata >&2
    STRATA="${CARGO_TARGET_DIR:-target}/release/strata"
fi
BIN="$(realpath "$STRATA")"
WORK="$(mktemp -d /tmp/strata-bench-quota.XXXXXX)"
PID=""
stop() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    PID=""
}
trap 'stop; rm -rf "$WORK"' EXIT

start() {
    rm -rf "$WORK/data" && mkdir -p "$WORK/data"
    (cd "$WORK/data" && STRATA_RAFT_ADDR=127.0.0.1:9193 exec "$BIN" serve >strata.log 2>&1) &
    PID=$!
    for _ in $(seq 100); do
        "$BIN" topic list >/dev/null 2>&1 && break
        sleep 0.2
    done
}

run() {
    echo "# $1" >&2
    # The first run after start-up pays for warming up.
    for _ in 1 2 3; do
        "$BIN" perf produce "bench-$RANDOM" -n "$RECORDS" --record-size 100 --linger-ms 0 \
            --batch-size 200 --partitions 1 --broker-admin 127.0.0.1:9644 -X client.id=bench 2>/dev/null
    done
}

start
run "no quotas"
seq 0 999 | xargs -P 8 -I{} "$BIN" quota alter --client-id "tenant{}" \
    --add producer_byte_rate=1048576 --add consumer_byte_rate=1048576 >/dev/null 2>&1
run "1,000 quotas on other client ids ($("$BIN" quota describe 2>/dev/null | wc -l) entities)"
"$BIN" quota alter --client-id bench --add producer_byte_rate=1000000000000 \
    --add request_percentage=100000 >/dev/null 2>&1
run "quotas on the measured client (charged, never throttled)"
curl -s 127.0.0.1:9644/metrics | grep 'client_quota_throttled_requests_total{.*bench' >&2 || echo "# bench never throttled" >&2
stop
