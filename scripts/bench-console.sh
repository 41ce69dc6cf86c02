#!/usr/bin/env bash
# The console's speed, as recorded in docs/benchmarks.md (release build, one broker, loopback):
# for each scenario "PARTITIONS:TOPICS" (default "10:1 10000:1 10000:1000"), a fresh broker
# with TOPICS topics of PARTITIONS/TOPICS partitions each, a few records in the first topic and
# a consumer group that committed offsets on it; then scripts/bench-console.py times the
# overview and the first topic's page in headless Chromium (first paint, figures on screen,
# a filter or a messages query answered) and the broker's CPU per page view.
# Env: SCENARIOS, RUNS (browser loads per page, median; 5), VIEWS (page views for CPU; 50),
# STRATA (a strata binary to measure instead of building this checkout's),
# PYTHON (a Python with Playwright; default the test venv's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SCENARIOS="${SCENARIOS:-10:1 10000:1 10000:1000}"
VIEWS="${VIEWS:-50}"
PYTHON="${PYTHON:-${STRATA_VENV_PYTHON:-$HOME/.cache/strata-venv/bin/python}}"
if [ -n "${STRATA:-}" ]; then
    BIN="$STRATA"
else
    cargo build --release -p strata-cli --bin strata >&2
    BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/strata"
fi
WORK="$(mktemp -d "${BENCH_DIR:-/tmp}/strata-bench-console.XXXXXX")"
PID=
cleanup() {
    [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

for scenario in $SCENARIOS; do
    partitions="${scenario%%:*}"
    topics="${scenario##*:}"
    per=$(( partitions / topics ))
    DATA="$WORK/data-$partitions-$topics"
    out="$WORK/out.$RANDOM"
    "$BIN" serve --data-dir "$DATA" --kafka-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 \
        --raft-addr 127.0.0.1:0 >"$out" 2>>"$WORK/broker.log" &
    PID=$!
    for _ in $(seq 1 1200); do grep -q READY "$out" && break; sleep 0.05; done
    KAFKA=$(sed -n 's/^READY kafka=\([^ ]*\) .*/\1/p' "$out")
    ADMIN=$(sed -n 's/^READY .*admin=\([^ ]*\) .*/\1/p' "$out")
    echo "== $partitions partitions in $topics topic(s) of $per" >&2
    t0=$(date +%s)
    for i in $(seq -w 1 "$topics"); do
        "$BIN" topic create "bench-$i" --partitions "$per" -b "$KAFKA" \
            --request-timeout-ms 120000 -X socket.timeout.ms=120000 >/dev/null
        [ $(( 10#$i % 100 )) -eq 0 ] && echo "   $i topics created ($(( $(date +%s) - t0 )) s)" >&2
    done
    first="bench-$(printf "%0${#topics}d" 1)"
    "$BIN" perf produce "$first" --records 2000 --record-size 200 -b "$KAFKA" >/dev/null
    "$BIN" perf consume "$first" --records 1000 --group-id bench-group --from-beginning \
        -b "$KAFKA" >/dev/null
    sleep 6 # a lag sample
    echo "   measuring" >&2
    result=$("$PYTHON" scripts/bench-console.py "http://$ADMIN" "$first" "$PID" "$VIEWS")
    echo "{\"partitions\": $partitions, \"topics\": $topics, \"pages\": $result}"
    kill "$PID"; wait "$PID" 2>/dev/null || true
    PID=
done
